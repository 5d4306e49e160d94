//! `POST /api/v1/admin/reload`: an operator's request to read the settings again on this node
//! (`deploy::reload`). On many nodes each reloads itself: send it to each (or SIGHUP each).

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::{Conflict, Operator};
use crate::deploy::reload::{Refused, Reloaded};
use crate::http::extract::Admin;
use crate::http::state::AppState;
use crate::refusal::ApiError;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(reload))
}

/// Reload the settings on this node
///
/// Reads the configuration file and the environment again and puts in place what changed of
/// the backends, models, plans and `[moderation]`: running tasks finish on the backends they
/// started on, a removed backend gets no new task. A configuration that does not validate is
/// refused with its reasons (409 `invalid_configuration`), as is one that changes a setting only
/// a restart applies (409 `restart_required`, naming it); the running settings stay.
#[utoipa::path(
    post, path = "/api/v1/admin/reload", operation_id = "reload",
    responses(
        (status = 200, description = "Reloaded: what changed", body = Reloaded),
        Conflict,
        Operator,
    )
)]
pub async fn reload(
    State(state): State<AppState>,
    Admin(caller): Admin,
) -> Result<Json<Reloaded>, ApiError> {
    let actor = format!("admin:{}", caller.email);
    state
        .reloader
        .reload(&actor)
        .await
        .map(Json)
        .map_err(|refused| {
            let code = match &refused {
                Refused::NoSource => "no_configuration_source",
                Refused::Invalid(_) => "invalid_configuration",
                Refused::RestartOnly(_) => "restart_required",
            };
            ApiError::Conflict {
                code,
                msg: refused.to_string(),
            }
        })
}
