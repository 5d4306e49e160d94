//! The operators' API (admin accounts' keys; 404 for anyone else, as the admin page):
//! `GET /api/v1/admin/accounts[/{id}]`, `PATCH /api/v1/admin/accounts/{id}` (plan, credits,
//! expiry, disabled) and `GET /api/v1/admin/audit`, the audit log. Every change goes through
//! `accounts::operators`, which checks it and records it with the change.

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::{Checked, Posted};
use crate::accounts::operators::{self, credits_json};
use crate::http::extract::Admin;
use crate::http::state::AppState;
use crate::refusal::{query, ApiError};
use crate::store::{Account, AccountChange, AuditEntry};
use crate::tasks::body::JsonObject;

/// Most rows one page holds, and how many unless `limit` says.
const PAGE_MAX: u32 = 200;
const PAGE_DEFAULT: u32 = 50;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_accounts))
        .routes(routes!(get_account, patch_account))
        .routes(routes!(audit_log))
}

/// An account as operators see it.
#[derive(Serialize, ToSchema)]
pub struct AdminAccount {
    id: String,
    email: String,
    plan: String,
    #[schema(value_type = Credits)]
    credits: Value,
    /// RFC 3339, or null: never.
    #[schema(required = true)]
    expires_at: Option<String>,
    disabled: bool,
    admin: bool,
}

impl From<Account> for AdminAccount {
    fn from(a: Account) -> Self {
        AdminAccount {
            credits: credits_json(a.credits),
            expires_at: a.expires_at.map(crate::domain::rfc3339),
            id: a.id,
            email: a.email,
            plan: a.plan,
            disabled: a.disabled,
            admin: a.admin,
        }
    }
}

/// A page of accounts; `next` is the `after` of the next page, absent on the last.
#[derive(Serialize, ToSchema)]
pub struct AccountPage {
    accounts: Vec<AdminAccount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// One operator action.
#[derive(Serialize, ToSchema)]
pub struct AuditRow {
    id: i64,
    /// When, RFC 3339.
    at: String,
    /// Who: `admin:<email>` (the API, the admin page) or `cli:<user>` (the command line).
    actor: String,
    /// What: `account.update`, ...
    action: String,
    #[schema(required = true)]
    account_id: Option<String>,
    /// The changed fields' values before.
    #[schema(value_type = Object)]
    before: Value,
    /// The same fields after.
    #[schema(value_type = Object)]
    after: Value,
}

impl From<AuditEntry> for AuditRow {
    fn from(e: AuditEntry) -> Self {
        AuditRow {
            id: e.id,
            at: crate::domain::rfc3339(e.at),
            actor: e.actor,
            action: e.action,
            account_id: e.account_id,
            before: e.before,
            after: e.after,
        }
    }
}

/// A page of the audit log, newest first; `next` is the `before` of the next page.
#[derive(Serialize, ToSchema)]
pub struct AuditPage {
    entries: Vec<AuditRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<i64>,
}

/// A balance: a whole number of credits, or `"unlimited"`.
pub struct Credits;

impl utoipa::PartialSchema for Credits {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["unlimited"])),
            )
            .description(Some("A whole number of credits, or \"unlimited\"."))
            .into()
    }
}

impl ToSchema for Credits {}

/// What `PATCH /api/v1/admin/accounts/{id}` takes; every field optional.
#[derive(ToSchema)]
#[allow(dead_code)] // the document's schema; the handler reads the object field by field
pub struct AccountPatch {
    /// One of the configured plans.
    plan: Option<String>,
    #[schema(value_type = Option<Credits>)]
    credits: Option<Value>,
    /// RFC 3339 (not in the past), or null: never.
    expires_at: Option<String>,
    disabled: Option<bool>,
}

/// `rows`, read with one more than `limit` to learn whether a page follows, cut to `limit`; and
/// the `next` of the page after, the last row's `key`, or none on the last page.
fn page<T, K>(mut rows: Vec<T>, limit: u32, key: impl Fn(&T) -> K) -> (Vec<T>, Option<K>) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(key) } else { None };
    (rows, next)
}

/// Accounts, in the order they were made
#[utoipa::path(
    get,
    path = "/api/v1/admin/accounts",
    operation_id = "admin_list_accounts",
    params(
        ("email" = Option<String>, Query, description = "Only the account with this email"),
        ("after" = Option<String>, Query, description = "The `next` of the page before"),
        ("limit" = Option<u32>, Query, description = "At most this many (1 to 200; 50)"),
    ),
    responses(
        (status = 200, description = "A page of accounts", body = AccountPage),
        (status = 404, description = "The caller is not an operator"),
        Checked
    )
)]
pub async fn list_accounts(
    State(state): State<AppState>,
    Admin(_): Admin,
    RawQuery(raw): RawQuery,
) -> Result<Json<AccountPage>, ApiError> {
    let (mut email, mut after, mut limit) = (None, None, PAGE_DEFAULT);
    for (name, value) in query::pairs(raw.as_deref(), &["email", "after", "limit"])? {
        match name.as_str() {
            "email" => email = Some(value),
            "after" => after = Some(value),
            _ => limit = query::limit(&value, PAGE_MAX)?,
        }
    }
    let accounts = state
        .store
        .accounts_page(email.as_deref(), after.as_deref(), i64::from(limit) + 1)
        .await?;
    let (accounts, next) = page(accounts, limit, |a| a.id.clone());
    Ok(Json(AccountPage {
        accounts: accounts.into_iter().map(AdminAccount::from).collect(),
        next,
    }))
}

async fn account(state: &AppState, id: &str) -> Result<Account, ApiError> {
    state
        .store
        .account_by_id(id)
        .await?
        .ok_or(ApiError::AccountNotFound)
}

/// One account
#[utoipa::path(
    get,
    path = "/api/v1/admin/accounts/{id}",
    operation_id = "admin_get_account",
    params(("id" = String, Path, description = "The account's id")),
    responses(
        (status = 200, description = "The account", body = AdminAccount),
        (status = 404, description = "No such account, or the caller is not an operator"),
        Checked
    )
)]
pub async fn get_account(
    State(state): State<AppState>,
    Admin(_): Admin,
    Path(id): Path<String>,
) -> Result<Json<AdminAccount>, ApiError> {
    Ok(Json(account(&state, &id).await?.into()))
}

/// Set an account's plan, credits, expiry or disabled flag
///
/// Each field given is checked first; a refusal names the field and changes nothing. The change
/// and its audit row are written together.
#[utoipa::path(
    patch,
    path = "/api/v1/admin/accounts/{id}",
    operation_id = "admin_patch_account",
    params(("id" = String, Path, description = "The account's id")),
    request_body = AccountPatch,
    responses(
        (status = 200, description = "The account after the change", body = AdminAccount),
        (status = 404, description = "No such account, or the caller is not an operator"),
        Posted
    )
)]
pub async fn patch_account(
    State(state): State<AppState>,
    Admin(caller): Admin,
    Path(id): Path<String>,
    body: Result<JsonObject, ApiError>,
) -> Result<Json<AdminAccount>, ApiError> {
    let JsonObject(body) = body?;
    let target = account(&state, &id).await?;
    let plans = state.plans.get();
    let change = patch_of(&body, &plans)?;
    if change.disabled == Some(true) && target.id == caller.id {
        return Err(ApiError::field(
            "disabled",
            "invalid_value",
            "an operator cannot disable their own account",
        ));
    }
    let actor = format!("admin:{}", caller.email);
    let after =
        operators::change_account(state.store.as_ref(), &plans, &actor, &target, &change).await?;
    Ok(Json(after.into()))
}

/// The change a PATCH body asks for; a field that is unknown or of the wrong kind is refused by
/// its name.
fn patch_of(
    body: &serde_json::Map<String, Value>,
    plans: &crate::config::Plans,
) -> Result<AccountChange, ApiError> {
    let mut change = AccountChange::default();
    let wrong = |field: &str, what: &str| ApiError::field(field, "invalid_value", what);
    for (field, value) in body {
        match (field.as_str(), value) {
            ("plan", Value::String(plan)) => {
                operators::check_plan(plans, plan)?;
                change.plan = Some(plan.clone());
            }
            ("plan", _) => return Err(wrong("plan", "must be the name of a plan")),
            ("credits", Value::Number(n)) => {
                let credits = n.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
                    wrong(
                        "credits",
                        "must be a whole number, 0 or more, or \"unlimited\"",
                    )
                })?;
                change.credits = Some(Some(credits));
            }
            ("credits", Value::String(text)) if text == "unlimited" => change.credits = Some(None),
            ("credits", _) => {
                return Err(wrong(
                    "credits",
                    "must be a whole number, 0 or more, or \"unlimited\"",
                ))
            }
            ("expires_at", Value::Null) => change.expires_at = Some(None),
            ("expires_at", Value::String(text)) => {
                let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| {
                    wrong(
                        "expires_at",
                        &format!("`{text}` is not an RFC 3339 time (2027-01-31T00:00:00Z)"),
                    )
                })?;
                let at = operators::future(at.timestamp_millis(), crate::store::now_ms())?;
                change.expires_at = Some(at);
            }
            ("expires_at", _) => {
                return Err(wrong("expires_at", "must be an RFC 3339 time, or null"))
            }
            ("disabled", Value::Bool(disabled)) => change.disabled = Some(*disabled),
            ("disabled", _) => return Err(wrong("disabled", "must be true or false")),
            (other, _) => {
                return Err(ApiError::field(
                    other,
                    "unknown_field",
                    "is not a field of an account's change (plan, credits, expires_at, disabled)",
                ))
            }
        }
    }
    Ok(change)
}

/// The audit log, newest first
#[utoipa::path(
    get,
    path = "/api/v1/admin/audit",
    operation_id = "admin_audit",
    params(
        ("before" = Option<i64>, Query, description = "The `next` of the page before"),
        ("limit" = Option<u32>, Query, description = "At most this many (1 to 200; 50)"),
    ),
    responses(
        (status = 200, description = "A page of the audit log", body = AuditPage),
        (status = 404, description = "The caller is not an operator"),
        Checked
    )
)]
pub async fn audit_log(
    State(state): State<AppState>,
    Admin(_): Admin,
    RawQuery(raw): RawQuery,
) -> Result<Json<AuditPage>, ApiError> {
    let (mut before, mut limit) = (None, PAGE_DEFAULT);
    for (name, value) in query::pairs(raw.as_deref(), &["before", "limit"])? {
        match name.as_str() {
            "before" => {
                before = Some(value.parse::<i64>().map_err(|_| {
                    ApiError::field("before", "invalid_value", "must be a `next` of a page")
                })?)
            }
            _ => limit = query::limit(&value, PAGE_MAX)?,
        }
    }
    let entries = state.store.audit_log(before, i64::from(limit) + 1).await?;
    let (entries, next) = page(entries, limit, |e| e.id);
    Ok(Json(AuditPage {
        entries: entries.into_iter().map(AuditRow::from).collect(),
        next,
    }))
}
