//! The moderation lists for operators' keys: `GET /api/v1/admin/moderation/lists`, and
//! `PUT`/`DELETE /api/v1/admin/moderation/lists/{name}`. A write applies on this node at once
//! and on every other within `tasks::moderation::REFRESH`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::Operator;
use crate::domain::moderation::TERMS_MAX;
use crate::domain::rfc3339;
use crate::http::extract::Admin;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::body::JsonObject;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(lists))
        .routes(routes!(put_list, delete_list))
}

/// Every list.
#[derive(Serialize, ToSchema)]
pub struct Lists {
    lists: Vec<List>,
}

/// A named list of terms: words, phrases, or `re:` patterns.
#[derive(Serialize, ToSchema)]
pub struct List {
    name: String,
    terms: Vec<String>,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// The whole list, as written.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ListBody {
    /// At most 20,000 terms of at most 256 characters; a pattern starts with `re:`.
    terms: Vec<String>,
}

/// The moderation lists
#[utoipa::path(
    get, path = "/api/v1/admin/moderation/lists", operation_id = "moderationLists",
    responses((status = 200, description = "Every list", body = Lists), Operator)
)]
pub async fn lists(
    State(state): State<AppState>,
    Admin(_): Admin,
) -> Result<Json<Lists>, ApiError> {
    let lists = state
        .store
        .moderation_lists()
        .await?
        .into_iter()
        .map(|(list, at)| List {
            name: list.name,
            terms: list.terms,
            updated_at: rfc3339(at),
        })
        .collect();
    Ok(Json(Lists { lists }))
}

/// Write a moderation list whole
///
/// Every term is checked before anything is written: a term with no letters or digits, over
/// 256 characters, or a pattern that does not compile is 400 naming it, and nothing changes.
#[utoipa::path(
    put, path = "/api/v1/admin/moderation/lists/{name}", operation_id = "putModerationList",
    params(("name" = String, Path, description = "1 to 64 of a-z, 0-9, - and _")),
    request_body = ListBody,
    responses((status = 200, description = "The list as written", body = List), Operator)
)]
pub async fn put_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
    JsonObject(body): JsonObject,
) -> Result<Json<List>, ApiError> {
    if let Some(unknown) = body.keys().find(|k| *k != "terms") {
        return Err(ApiError::field(
            unknown,
            "unknown_field",
            "is not a field of a list",
        ));
    }
    let terms = match body.get("terms") {
        None | Some(Value::Null) => {
            return Err(ApiError::field("terms", "missing_field", "is required"))
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::field(&format!("terms[{i}]"), "invalid_type", "must be a string")
                })
            })
            .collect::<Result<Vec<String>, ApiError>>()?,
        Some(_) => {
            return Err(ApiError::field(
                "terms",
                "invalid_type",
                "must be a list of strings",
            ))
        }
    };
    if terms.len() > TERMS_MAX {
        return Err(ApiError::field(
            "terms",
            "invalid_value",
            format!("at most {TERMS_MAX} terms (got {})", terms.len()),
        ));
    }
    let actor = format!("admin:{}", caller.email);
    state.moderation.put(&actor, &name, terms.clone()).await?;
    Ok(Json(List {
        name,
        terms,
        updated_at: rfc3339(crate::store::now_ms()),
    }))
}

/// Remove a moderation list
#[utoipa::path(
    delete, path = "/api/v1/admin/moderation/lists/{name}", operation_id = "deleteModerationList",
    params(("name" = String, Path)),
    responses((status = 204, description = "Removed"), Operator)
)]
pub async fn delete_list(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let actor = format!("admin:{}", caller.email);
    match state.moderation.remove(&actor, &name).await? {
        Some(_) => Ok(StatusCode::NO_CONTENT),
        None => Err(ApiError::NotFound(format!("no moderation list {name}"))),
    }
}
