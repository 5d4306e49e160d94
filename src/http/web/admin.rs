//! The operators' page (accounts marked admin; 404 for anyone else): accounts with their plan,
//! credits, expiry and disabling (each recorded in the audit log, whose newest rows it shows); the queue by status and mode; the backends' health; failing webhook
//! destinations.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::error_page::{render, WebError};
use super::page::{when, Layout};
use super::session::{Admin, Posted};
use crate::accounts::operators;
use crate::generate::pool::BackendHealth;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::store::{now_ms, AccountChange, ClaimRules, QueueRow};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin", get(page))
        .route("/admin/accounts/{account_id}", post(update_account))
}

/// How far back failing destinations are looked for.
pub const FAILING_SINCE_MS: i64 = 24 * 60 * 60 * 1000;

pub struct AccountView {
    id: String,
    email: String,
    plan: String,
    /// Whether its plan is one of the configured ones (else it has the default plan's).
    plan_known: bool,
    credits: String,
    /// When it expires (empty: never), and that day for the date field.
    expires: String,
    expires_day: String,
    total_images: i64,
    admin: bool,
    disabled: bool,
    created: String,
}

/// One row of the audit log.
pub struct AuditView {
    at: String,
    actor: String,
    action: String,
    account: String,
    before: String,
    after: String,
}

/// How many audit rows the page shows.
const AUDIT_SHOWN: i64 = 50;

pub struct DestinationView {
    host: String,
    failures: i64,
    deliveries: i64,
    last: String,
    outcome: String,
}

/// An account's share of the queue, with its running limit ("none" without one).
pub struct BusyView {
    email: String,
    plan: String,
    queued: i64,
    running: i64,
    limit: String,
}

/// How many accounts the operators' page lists by their work.
const BUSIEST_SHOWN: u32 = 20;

/// A model's row: whether any backend serving it is up.
pub struct ModelView {
    name: String,
    up: bool,
    backends: String,
    default: bool,
}

#[derive(Template)]
#[template(path = "admin.html")]
struct AdminPage {
    layout: Layout,
    csrf: String,
    self_id: String,
    accounts: Vec<AccountView>,
    plans: Vec<String>,
    default_plan: String,
    audit: Vec<AuditView>,
    queue: Vec<(QueueRow, String)>,
    busiest: Vec<BusyView>,
    running_limit: Option<u32>,
    backends: Vec<BackendHealth>,
    models: Vec<ModelView>,
    destinations: Vec<DestinationView>,
    notice: Option<String>,
}

/// `GET /admin`.
pub async fn page(State(state): State<AppState>, Admin(user): Admin) -> Result<Response, WebError> {
    admin_page(&state, &user, None).await
}

async fn admin_page(
    state: &AppState,
    user: &super::session::SignedIn,
    notice: Option<String>,
) -> Result<Response, WebError> {
    let plans = &*state.plans.get();
    let accounts: Vec<AccountView> = state
        .store
        .list_accounts()
        .await?
        .into_iter()
        .map(|a| AccountView {
            plan_known: plans.knows(&a.plan),
            expires: a.expires_at.map(when).unwrap_or_default(),
            expires_day: a
                .expires_at
                .map(|at| crate::domain::rfc3339(at)[..10].to_string())
                .unwrap_or_default(),
            id: a.id,
            email: a.email,
            plan: a.plan,
            credits: a
                .credits
                .map(|c| c.to_string())
                .unwrap_or_else(|| "unlimited".into()),
            total_images: a.total_images,
            admin: a.admin,
            disabled: a.disabled,
            created: when(a.created_at),
        })
        .collect();
    let queue = state
        .store
        .queue_by_status_and_mode()
        .await?
        .into_iter()
        .map(|q| {
            let oldest = when(q.oldest_created_at);
            (q, oldest)
        })
        .collect();
    let emails: std::collections::HashMap<&str, &str> = accounts
        .iter()
        .map(|a| (a.id.as_str(), a.email.as_str()))
        .collect();
    let audit = state
        .store
        .audit_log(None, AUDIT_SHOWN)
        .await?
        .into_iter()
        .map(|e| AuditView {
            at: when(e.at),
            actor: e.actor,
            action: e.action,
            account: e
                .account_id
                .as_deref()
                .map(|id| emails.get(id).copied().unwrap_or(id).to_string())
                .unwrap_or_default(),
            before: e.before.to_string(),
            after: e.after.to_string(),
        })
        .collect();
    let rules = ClaimRules::of(&state.plans.get());
    let busiest = state
        .store
        .busiest_accounts(BUSIEST_SHOWN)
        .await?
        .into_iter()
        .map(|a| BusyView {
            limit: rules
                .limit_of(&a.plan)
                .map_or_else(|| "none".into(), |n| n.to_string()),
            email: a.email,
            plan: a.plan,
            queued: a.queued,
            running: a.running,
        })
        .collect();
    let destinations = state
        .store
        .failing_destinations(now_ms() - FAILING_SINCE_MS)
        .await?
        .into_iter()
        .map(|d| DestinationView {
            host: d.host,
            failures: d.failures,
            deliveries: d.deliveries,
            last: when(d.last_failed_at),
            outcome: match (d.last_status_code, d.last_error) {
                // The recorded error names the status already when there was one.
                (Some(c), Some(e)) if !e.contains(&c.to_string()) => format!("HTTP {c}: {e}"),
                (_, Some(e)) => e,
                (Some(c), None) => format!("HTTP {c}"),
                (None, None) => String::new(),
            },
        })
        .collect();
    let page = AdminPage {
        layout: Layout::new("Operators", "admin", Some(user)),
        csrf: user.csrf.clone(),
        self_id: user.account.id.clone(),
        accounts,
        plans: plans.names().into_iter().map(String::from).collect(),
        default_plan: plans.default_plan.clone(),
        audit,
        queue,
        busiest,
        running_limit: rules.limit_of(""),
        backends: state.pool.health(),
        models: state
            .pool
            .catalogue()
            .models
            .iter()
            .map(|m| ModelView {
                name: m.name.clone(),
                up: state.pool.model_up(&m.name),
                backends: m.backends.join(", "),
                default: m.default,
            })
            .collect(),
        destinations,
        notice,
    };
    render(&page)
}

#[derive(Deserialize)]
pub struct AccountForm {
    #[serde(default)]
    action: String,
    #[serde(default)]
    credits: String,
    #[serde(default)]
    plan: String,
    #[serde(default)]
    expires_at: String,
}

/// `POST /admin/accounts/{account_id}`: `action` is `disable`, `enable`, `credits` (with
/// `credits`: a whole number, or empty for unlimited), `plan` (with `plan`) or `expiry` (with
/// `expires_at`: a date, or empty for never). Each is recorded in the audit log.
pub async fn update_account(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    Posted { user, form }: Posted<AccountForm>,
) -> Result<Response, WebError> {
    if !user.account.admin {
        return Err(WebError::NotFound);
    }
    let refused = |e: ApiError| WebError::BadForm(format!("{e}."));
    let change = match form.action.as_str() {
        "disable" if account_id == user.account.id => {
            return admin_page(
                &state,
                &user,
                Some("You cannot disable your own account here.".into()),
            )
            .await;
        }
        "disable" | "enable" => AccountChange {
            disabled: Some(form.action == "disable"),
            ..Default::default()
        },
        "credits" => AccountChange {
            credits: Some(match form.credits.trim() {
                "" => None,
                n => operators::parse_credits(n).map_err(refused)?,
            }),
            ..Default::default()
        },
        "plan" => AccountChange {
            plan: Some(form.plan.trim().to_string()),
            ..Default::default()
        },
        "expiry" => AccountChange {
            expires_at: Some(match form.expires_at.trim() {
                "" => None,
                day => operators::parse_expiry(day, now_ms()).map_err(refused)?,
            }),
            ..Default::default()
        },
        _ => return Err(WebError::BadForm("Unknown action.".into())),
    };
    let Some(account) = state.store.account_by_id(&account_id).await? else {
        return Err(WebError::NotFound);
    };
    let actor = format!("admin:{}", user.account.email);
    match operators::change_account(
        state.store.as_ref(),
        &state.plans.get(),
        &actor,
        &account,
        &change,
    )
    .await
    {
        Ok(_) => Ok(Redirect::to("/admin").into_response()),
        Err(ApiError::AccountNotFound) => Err(WebError::NotFound),
        Err(e @ ApiError::BadRequest { .. }) => Err(refused(e)),
        Err(ApiError::Store {
            unavailable: true, ..
        }) => Err(WebError::Unavailable),
        Err(e) => Err(WebError::Internal(e.into())),
    }
}
