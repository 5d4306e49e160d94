//! `PUT`/`GET`/`DELETE /api/v1/account/webhook`: the key's account's webhook
//! (`accounts::webhook`), with its latest account-event deliveries.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::{Keyed, Posted};
use crate::accounts::webhook::{put, Given};
use crate::auth::Caller;
use crate::domain::account_webhook::{AccountEvent, AccountWebhook as Stored};
use crate::domain::rfc3339;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::AccountDelivery;
use crate::tasks::body::JsonObject;

/// How many of the latest account-event deliveries the answer lists.
pub const DELIVERIES_SHOWN: i64 = 20;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_webhook, put_webhook, delete_webhook))
}

/// The account's webhook: where its events go and which.
#[derive(Serialize, ToSchema)]
pub struct AccountWebhook {
    url: String,
    /// Of `credits.low`, `task.finished`, `task.failed`.
    events: Vec<&'static str>,
    /// Whether a `secret` was set (it is sent as `x-webhook-secret`, never shown).
    has_secret: bool,
    /// The balance under which `credits.low` is sent; only with that event.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 0)]
    credits_low_threshold: Option<i64>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
    /// The latest deliveries of `credits.low`, newest first (a task's own events are listed
    /// with the task, `GET /api/v1/tasks/{task_id}/webhook-attempts`).
    deliveries: Vec<Delivery>,
}

/// One `credits.low` delivery.
#[derive(Serialize, ToSchema)]
pub struct Delivery {
    /// Its `webhook-id`.
    id: String,
    event: String,
    /// `pending`, `delivered` or `undeliverable`.
    status: String,
    #[schema(minimum = 0)]
    attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    last_status_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = DateTime)]
    next_attempt_at: Option<String>,
    #[schema(format = DateTime)]
    created_at: String,
}

/// The fields of an account webhook.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct WebhookBody {
    /// Where the events are POSTed: https and a public address, as a task's `webhook_url`.
    url: String,
    /// At least one of `credits.low`, `task.finished`, `task.failed`.
    events: Vec<String>,
    /// Sent back as `x-webhook-secret`: printable ASCII, at most 256 characters.
    secret: Option<String>,
    /// With `credits.low`: the balance under which it is sent (default the configured
    /// `credits_low_threshold`).
    #[schema(minimum = 0)]
    credits_low_threshold: Option<i64>,
}

/// The answer for `hook`, the account's, with its latest deliveries.
async fn answer(
    state: &AppState,
    account_id: &str,
    hook: Stored,
) -> Result<AccountWebhook, ApiError> {
    let deliveries = state
        .store
        .account_deliveries(account_id, DELIVERIES_SHOWN)
        .await?;
    Ok(shown(hook, deliveries))
}

fn shown(hook: Stored, deliveries: Vec<AccountDelivery>) -> AccountWebhook {
    AccountWebhook {
        url: hook.url,
        events: hook.events.each().map(AccountEvent::as_str).collect(),
        has_secret: hook.secret.is_some(),
        credits_low_threshold: hook.credits_low_threshold,
        created_at: rfc3339(hook.created_at),
        updated_at: rfc3339(hook.updated_at),
        deliveries: deliveries
            .into_iter()
            .map(|d| Delivery {
                id: d.id,
                event: d.event,
                status: d.status,
                attempts: d.attempts,
                last_status_code: d.last_status_code,
                last_error: d.last_error,
                next_attempt_at: d.next_attempt_at.map(rfc3339),
                created_at: rfc3339(d.created_at),
            })
            .collect(),
    }
}

/// The account's webhook
///
/// 404 when none is set.
#[utoipa::path(
    get, path = "/api/v1/account/webhook", operation_id = "accountWebhook",
    responses(
        (status = 200, description = "The account's webhook", body = AccountWebhook),
        (status = 404, description = "None is set"),
        Keyed,
    )
)]
pub async fn get_webhook(
    State(state): State<AppState>,
    Caller(account): Caller,
) -> Result<Json<AccountWebhook>, ApiError> {
    let Some(hook) = state.store.account_webhook(&account.id).await? else {
        return Err(ApiError::NotFound("no account webhook is set".into()));
    };
    Ok(Json(answer(&state, &account.id, hook).await?))
}

/// Set the account's webhook
///
/// Replaces the one set before. Its events are Standard Webhooks messages `{"type",
/// "timestamp", "data"}` signed with the account's signing secret and retried as a task's
/// webhook: `credits.low` when a charge takes the balance from `credits_low_threshold` or over
/// to under it (once per crossing), and `task.finished` / `task.failed` (`data` is the task's
/// webhook payload) for tasks submitted without a `webhook_url` of their own.
#[utoipa::path(
    put, path = "/api/v1/account/webhook", operation_id = "putAccountWebhook",
    request_body = WebhookBody,
    responses((status = 200, description = "The webhook as set", body = AccountWebhook), Posted)
)]
pub async fn put_webhook(
    State(state): State<AppState>,
    Caller(account): Caller,
    JsonObject(body): JsonObject,
) -> Result<Json<AccountWebhook>, ApiError> {
    let given = Given::from_json(&body)?;
    let threshold = state.tasks.config.accounts.credits_low_threshold;
    let hook = put(
        state.store.as_ref(),
        &state.tasks.destinations,
        threshold,
        &account.id,
        given,
    )
    .await?;
    Ok(Json(answer(&state, &account.id, hook).await?))
}

/// Remove the account's webhook
///
/// Events already queued are still sent.
#[utoipa::path(
    delete, path = "/api/v1/account/webhook", operation_id = "deleteAccountWebhook",
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "None was set"),
        Keyed,
    )
)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    Caller(account): Caller,
) -> Result<StatusCode, ApiError> {
    if state.store.delete_account_webhook(&account.id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("no account webhook is set".into()))
    }
}
