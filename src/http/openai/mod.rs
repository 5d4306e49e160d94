//! OpenAI's Images API under `/v1` (not `/api`), so that the `openai` SDKs and every client built
//! on them can use easel with `base_url`: each call becomes ordinary tasks of the caller's
//! account through the same submit use case as easel's own routes, and is answered in OpenAI's
//! shapes. docs/openai.md says what each field becomes.
//!
//! - `generations.rs`: `POST /v1/images/generations`;
//! - `edits.rs`: `POST /v1/images/edits` and `POST /v1/images/variations` (multipart);
//! - `models.rs`: `GET /v1/models`;
//! - `run.rs`: submitting, waiting and answering; `stream.rs`: `stream: true`;
//! - `auth.rs` (Bearer or raw key), `error.rs` (OpenAI's error shape), `fields.rs` (the fields
//!   the routes share), `doc.rs` (the OpenAPI document's schemas).

pub mod auth;
pub mod doc;
pub mod edits;
pub mod error;
pub mod fields;
pub mod generations;
pub mod models;
pub mod run;
pub mod stream;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::state::AppState;

/// Every OpenAI route, each with its document entry.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(generations::generations))
        .routes(routes!(edits::edits))
        .routes(routes!(edits::variations))
        .routes(routes!(models::list_models))
}
