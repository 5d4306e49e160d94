//! The JSON API under `/api/v1`: a handler per route over the use cases of `crate::tasks`.

pub mod account;
pub mod deliveries;
pub mod events;
pub mod files;
pub mod health;
pub mod models;
pub mod records;
pub mod routes;
pub mod submit;
pub mod upload;

use axum::http::header;
use axum::routing::{get, post};
use axum::Router;

use crate::domain::OpKind;
use crate::http::state::AppState;
use crate::tasks::submit::alias::Alias;
use routes::OPENAPI;

/// The API's routes (`routes::ROUTES` lists them for the OpenAPI document and the metrics).
///
/// Full paths rather than a router nested under `/api/v1`: a nested router rewrites every
/// request's URI to strip its prefix (a parse and an allocation per request).
pub fn routes() -> Router<AppState> {
    let mut api = Router::new();
    for kind in OpKind::ALL {
        api = api.route(&format!("/api/v1/{kind}"), post(submit::submit));
    }
    for (path, _) in Alias::ALL {
        api = api.route(&format!("/api/v1/{path}"), post(submit::submit));
    }
    api.route("/api/v1/fetch", post(records::fetch))
        .route("/api/v1/fetch-many", post(records::fetch_many))
        .route("/api/v1/tasks", get(records::list_tasks))
        .route("/api/v1/tasks/{task_id}", get(records::get_task))
        .route("/api/v1/tasks/{task_id}/cancel", post(records::cancel))
        .route(
            "/api/v1/tasks/{task_id}/redeliver",
            post(deliveries::redeliver),
        )
        .route(
            "/api/v1/tasks/{task_id}/webhook-attempts",
            get(deliveries::webhook_attempts),
        )
        .route("/api/v1/tasks/{task_id}/events", get(events::task_events))
        .route("/api/v1/events", get(events::account_events))
        .route("/api/v1/upload", post(upload::upload))
        .route("/api/v1/account", get(account::get_account))
        .route("/api/v1/models", get(models::list_models))
        .route(
            "/api/v1/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/files/{*key}", get(files::serve))
}
