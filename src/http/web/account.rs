//! The account page: the webhook signing secret (revealed on request, rotated), the account
//! webhook (set through `accounts::webhook`, as the API sets it), use by day, plan and credits
//! with the latest ledger rows.

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::auth::Empty;
use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::{Posted, SignedIn};
use crate::accounts::webhook::{put, Given};
use crate::domain::account_webhook::{AccountEvent, AccountWebhook};
use crate::http::state::AppState;
use crate::store::{now_ms, AccountDelivery, DayUsage};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/account", get(page))
        .route("/account/secret", post(reveal_secret))
        .route("/account/secret/rotate", post(rotate_secret))
        .route("/account/webhook", post(set_webhook))
        .route("/account/webhook/delete", post(delete_webhook))
}

/// Days of use the page shows.
pub const USAGE_DAYS: u32 = 30;
/// Ledger rows the page shows.
pub const LEDGER_ROWS: i64 = 20;
/// Account-event deliveries the page shows.
pub const WEBHOOK_DELIVERIES: i64 = 10;

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
    hook: HookView,
    /// What the last webhook form did, or why it was refused.
    notice: Option<String>,
}

/// The account webhook as the form shows it (empty fields when none is set).
#[derive(Default)]
struct HookView {
    set: bool,
    url: String,
    has_secret: bool,
    credits_low: bool,
    task_finished: bool,
    task_failed: bool,
    threshold: String,
    deliveries: Vec<AccountDelivery>,
}

impl HookView {
    fn of(
        hook: Option<AccountWebhook>,
        default_threshold: i64,
        deliveries: Vec<AccountDelivery>,
    ) -> Self {
        let Some(hook) = hook else {
            return HookView {
                threshold: default_threshold.to_string(),
                deliveries,
                ..Default::default()
            };
        };
        HookView {
            set: true,
            url: hook.url,
            has_secret: hook.secret.is_some(),
            credits_low: hook.events.has(AccountEvent::CreditsLow),
            task_finished: hook.events.has(AccountEvent::TaskFinished),
            task_failed: hook.events.has(AccountEvent::TaskFailed),
            threshold: hook
                .credits_low_threshold
                .unwrap_or(default_threshold)
                .to_string(),
            deliveries,
        }
    }
}

/// The webhook form: a checkbox per event, sent only when ticked.
#[derive(Deserialize)]
pub struct WebhookForm {
    #[serde(default)]
    url: String,
    #[serde(default)]
    secret: String,
    #[serde(default)]
    credits_low: Option<String>,
    #[serde(default)]
    task_finished: Option<String>,
    #[serde(default)]
    task_failed: Option<String>,
    #[serde(default)]
    credits_low_threshold: String,
}

#[derive(Template)]
#[template(path = "secret.html")]
struct SecretFragment {
    secret: String,
    rotated: bool,
}

/// `GET /account`.
pub async fn page(State(state): State<AppState>, user: SignedIn) -> Result<Response, WebError> {
    account_page(&state, &user, None).await
}

async fn account_page(
    state: &AppState,
    user: &SignedIn,
    notice: Option<String>,
) -> Result<Response, WebError> {
    let account = &user.account;
    let hook = HookView::of(
        state.store.account_webhook(&account.id).await?,
        state.tasks.config.accounts.credits_low_threshold,
        state
            .store
            .account_deliveries(&account.id, WEBHOOK_DELIVERIES)
            .await?,
    );
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
        layout: Layout::new("Account", "account", Some(user)),
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
        hook,
        notice,
    };
    render(&page)
}

/// `POST /account/webhook`: set the account webhook from the form, checked as the API checks
/// it; the page again, saying what was done or what is wrong.
pub async fn set_webhook(
    State(state): State<AppState>,
    Posted { user, form }: Posted<WebhookForm>,
) -> Result<Response, WebError> {
    let ticked = [
        (form.credits_low, AccountEvent::CreditsLow),
        (form.task_finished, AccountEvent::TaskFinished),
        (form.task_failed, AccountEvent::TaskFailed),
    ];
    let threshold = form.credits_low_threshold.trim();
    let threshold = match threshold {
        "" => None,
        n => match n.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                let notice = "credits_low_threshold: must be a whole number".to_string();
                return account_page(&state, &user, Some(notice)).await;
            }
        },
    };
    let given = Given {
        url: Some(form.url),
        // An empty field keeps no secret.
        secret: Some(form.secret),
        events: Some(
            ticked
                .into_iter()
                .filter(|(on, _)| on.is_some())
                .map(|(_, event)| event.as_str().to_string())
                .collect(),
        ),
        credits_low_threshold: threshold,
    };
    let done = put(
        state.store.as_ref(),
        &state.tasks.destinations,
        state.tasks.config.accounts.credits_low_threshold,
        &user.account.id,
        given,
    )
    .await;
    let notice = match done {
        Ok(_) => "Webhook saved.".to_string(),
        Err(crate::refusal::ApiError::BadRequest { msg, .. }) => msg,
        Err(e) => return Err(WebError::Internal(e.into())),
    };
    account_page(&state, &user, Some(notice)).await
}

/// `POST /account/webhook/delete`: remove the account webhook.
pub async fn delete_webhook(
    State(state): State<AppState>,
    Posted { user, .. }: Posted<Empty>,
) -> Result<Response, WebError> {
    state.store.delete_account_webhook(&user.account.id).await?;
    account_page(&state, &user, Some("Webhook removed.".into())).await
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
