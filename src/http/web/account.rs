//! The account page: the webhook signing secret (revealed on request, rotated), use by day,
//! plan and credits with the latest ledger rows.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use super::auth::Empty;
use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::{Posted, SignedIn};
use crate::http::state::AppState;
use crate::store::{now_ms, DayUsage};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/account", get(page))
        .route("/account/secret", post(reveal_secret))
        .route("/account/secret/rotate", post(rotate_secret))
}

/// Days of use the page shows.
pub const USAGE_DAYS: u32 = 30;
/// Ledger rows the page shows.
pub const LEDGER_ROWS: i64 = 20;

pub struct LedgerView {
    at: String,
    delta: String,
    reason: String,
    task_id: Option<String>,
}

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    layout: Layout,
    csrf: String,
    email: String,
    plan: String,
    credits: String,
    total_images: i64,
    usage: Vec<DayUsage>,
    ledger: Vec<LedgerView>,
}

#[derive(Template)]
#[template(path = "secret.html")]
struct SecretFragment {
    secret: String,
    rotated: bool,
}

/// `GET /account`.
pub async fn page(State(state): State<AppState>, user: SignedIn) -> Result<Response, WebError> {
    let account = &user.account;
    let usage = state
        .store
        .usage_by_day(&account.id, USAGE_DAYS, now_ms())
        .await?;
    let ledger = state
        .store
        .credit_ledger(&account.id, LEDGER_ROWS)
        .await?
        .into_iter()
        .map(|row| LedgerView {
            at: when(row.created_at),
            delta: format!("{:+}", row.delta),
            reason: row.reason,
            task_id: row.task_id,
        })
        .collect();
    let page = AccountPage {
        layout: Layout::new("Account", "account", Some(&user)),
        csrf: user.csrf.clone(),
        email: account.email.clone(),
        plan: account.plan.clone(),
        credits: account
            .credits
            .map(|c| c.to_string())
            .unwrap_or_else(|| "unlimited".into()),
        total_images: account.total_images,
        usage,
        ledger,
    };
    render(&page)
}

/// `POST /account/secret`: the signing secret, shown on request (a POST, so that it is never in
/// a page that a browser keeps or a proxy logs).
pub async fn reveal_secret(Posted { user, .. }: Posted<Empty>) -> Result<Response, WebError> {
    render(&SecretFragment {
        secret: user.account.signing_secret.clone(),
        rotated: false,
    })
}

/// `POST /account/secret/rotate`: a new signing secret; deliveries from now on are signed with
/// it.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Posted { user, .. }: Posted<Empty>,
) -> Result<Response, WebError> {
    let secret = crate::webhooks::signing::generate_secret();
    state
        .store
        .set_signing_secret(&user.account.id, &secret)
        .await?;
    render(&SecretFragment {
        secret,
        rotated: true,
    })
}
