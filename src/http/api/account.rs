//! `GET /api/v1/account`: the key's account.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::Keyed;
use crate::auth::Caller;
use crate::http::state::AppState;

/// Who a key belongs to and what it has used.
#[derive(Serialize, ToSchema)]
pub struct Account {
    email: String,
    /// The balance: what submits may still spend; null is unlimited.
    #[schema(required = true)]
    credits: Option<i64>,
    #[schema(minimum = 0)]
    total_images: i64,
    plan: String,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_account))
}

/// The key's account
#[utoipa::path(
    get,
    path = "/api/v1/account",
    operation_id = "account",
    responses((status = 200, description = "The account", body = Account), Keyed)
)]
pub async fn get_account(Caller(account): Caller) -> Json<Account> {
    Json(Account {
        email: account.email,
        credits: account.credits,
        total_images: account.total_images,
        plan: account.plan,
    })
}
