use axum::Json;
use serde_json::{json, Value};

use crate::auth::Caller;

/// `GET /api/v1/account`: who the key belongs to and what it has used.
pub async fn get_account(Caller(account): Caller) -> Json<Value> {
    Json(json!({
        "email": account.email,
        "credits": account.credits,
        "total_images": account.total_images,
        "plan": account.plan,
    }))
}
