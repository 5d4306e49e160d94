//! The operators' page (accounts marked admin; 404 for anyone else): accounts with their
//! credits, disabling; the queue by status and mode; the backends' health; failing webhook
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
use crate::generate::pool::BackendHealth;
use crate::http::state::AppState;
use crate::store::{now_ms, ClaimRules, QueueRow};

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
    credits: String,
    total_images: i64,
    admin: bool,
    disabled: bool,
    created: String,
}

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
    let accounts = state
        .store
        .list_accounts()
        .await?
        .into_iter()
        .map(|a| AccountView {
            id: a.id,
            email: a.email,
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
    let rules = ClaimRules::of(&state.config.limits);
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
}

/// `POST /admin/accounts/{account_id}`: `action` is `disable`, `enable` or `credits` (with
/// `credits`: a whole number, or empty for unlimited).
pub async fn update_account(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    Posted { user, form }: Posted<AccountForm>,
) -> Result<Response, WebError> {
    if !user.account.admin {
        return Err(WebError::NotFound);
    }
    let store = &state.store;
    let done = match form.action.as_str() {
        "disable" if account_id == user.account.id => {
            return admin_page(
                &state,
                &user,
                Some("You cannot disable your own account here.".into()),
            )
            .await;
        }
        "disable" => store.set_disabled(&account_id, true).await?,
        "enable" => store.set_disabled(&account_id, false).await?,
        "credits" => {
            let credits = match form.credits.trim() {
                "" => None,
                n => match n.parse::<i64>() {
                    Ok(n) if n >= 0 => Some(n),
                    _ => {
                        return Err(WebError::BadForm(
                            "Credits: a whole number of 0 or more, or empty for unlimited.".into(),
                        ))
                    }
                },
            };
            store.set_credits(&account_id, credits).await?
        }
        _ => return Err(WebError::BadForm("Unknown action.".into())),
    };
    if !done {
        return Err(WebError::NotFound);
    }
    Ok(Redirect::to("/admin").into_response())
}
