//! `GET /api/v1/usage`: the account's usage of ended tasks over a range of UTC days, grouped by
//! day, model or key, as JSON or (`Accept: text/csv`) CSV. An operator's key may name another
//! account (`account=ID`) or leave it out for every account. Read from the stores' rollup
//! (`store::usage`), never from the tasks.

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::doc::Checked;
use crate::auth::Caller;
use crate::http::extract::list_items;
use crate::http::state::AppState;
use crate::refusal::{query, ApiError};
use crate::store::now_ms;
use crate::store::usage::{day_text, parse_day, usage_day, UsageGroup, UsageQuery, UsageRow};

/// The longest range one request may ask for, in days (both ends included).
pub const RANGE_DAYS_MAX: i64 = 366;
/// The range when `from` is left out: this many days up to `to`.
pub const RANGE_DAYS_DEFAULT: i64 = 30;

/// The CSV's columns, in order, after `account_id` (every account) and the group's column
/// (`day`, `model` or `key_id`).
pub const CSV_COLUMNS: &[&str] = &["tasks", "images", "pixels", "backend_seconds", "cost"];

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_usage))
}

/// One group's usage. Exactly one of `day`, `model` and `key_id` is given: the group's.
#[derive(Serialize, ToSchema)]
pub struct UsageLine {
    /// Every account's usage (an operator's request without `account`): whose.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    account_id: Option<String>,
    /// `group=day`: the UTC day the tasks ended, `YYYY-MM-DD`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, format = Date)]
    day: Option<String>,
    /// `group=model`: the model; empty for tasks that ran on none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    model: Option<String>,
    /// `group=key`: the id of the key the tasks were submitted with (as `easel keys list` and
    /// the dashboard's keys show it); empty for tasks submitted before keys were recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<String>,
    /// Tasks that finished or failed.
    #[schema(minimum = 0)]
    tasks: i64,
    #[schema(minimum = 0)]
    images: i64,
    #[schema(minimum = 0)]
    pixels: i64,
    /// Seconds the tasks held backend slots.
    #[schema(minimum = 0)]
    backend_seconds: f64,
    /// Credits charged, net of refunds.
    cost: i64,
}

/// Usage over a range, in the order of the groups (every account's: by account, then group).
#[derive(Serialize, ToSchema)]
pub struct Usage {
    #[schema(format = Date)]
    from: String,
    #[schema(format = Date)]
    to: String,
    /// `day`, `model` or `key`.
    group: &'static str,
    rows: Vec<UsageLine>,
}

/// The query's values, each at most once; unknown names are ignored.
struct Asked {
    from: Option<String>,
    to: Option<String>,
    group: Option<String>,
    account: Option<String>,
}

fn asked(raw: Option<&str>) -> Result<Asked, ApiError> {
    let mut asked = Asked {
        from: None,
        to: None,
        group: None,
        account: None,
    };
    for (name, value) in query::pairs(raw, &["from", "to", "group", "account"])? {
        let slot = match name.as_str() {
            "from" => &mut asked.from,
            "to" => &mut asked.to,
            "group" => &mut asked.group,
            _ => &mut asked.account,
        };
        *slot = Some(value);
    }
    Ok(asked)
}

fn day_of(field: &str, text: &str) -> Result<i64, ApiError> {
    parse_day(text)
        .ok_or_else(|| ApiError::field(field, "invalid_value", "must be a date, YYYY-MM-DD (UTC)"))
}

/// The query `asked` makes for `caller`, checked: the range's ends, its length, the group, and
/// the account an operator names.
async fn query_of(
    state: &AppState,
    caller: &crate::store::Account,
    asked: Asked,
) -> Result<UsageQuery, ApiError> {
    let to = match &asked.to {
        Some(to) => day_of("to", to)?,
        None => usage_day(now_ms()),
    };
    let from = match &asked.from {
        Some(from) => day_of("from", from)?,
        None => to - (RANGE_DAYS_DEFAULT - 1),
    };
    if to < from {
        return Err(ApiError::field(
            "to",
            "invalid_value",
            "must not be before from",
        ));
    }
    if to - from + 1 > RANGE_DAYS_MAX {
        return Err(ApiError::field(
            "from",
            "invalid_value",
            format!("the range is at most {RANGE_DAYS_MAX} days, from and to included"),
        ));
    }
    let group = match asked.group.as_deref() {
        None => UsageGroup::Day,
        Some(g) => UsageGroup::parse(g).ok_or_else(|| {
            ApiError::field("group", "invalid_value", "must be day, model or key")
        })?,
    };
    let account_id = match asked.account {
        None if caller.admin => None,
        None => Some(caller.id.clone()),
        Some(_) if !caller.admin => {
            return Err(ApiError::field(
                "account",
                "invalid_value",
                "only an operator's key may name an account",
            ))
        }
        Some(id) => match state.store.account_by_id(&id).await? {
            Some(account) => Some(account.id),
            None => return Err(ApiError::AccountNotFound),
        },
    };
    Ok(UsageQuery {
        account_id,
        from,
        to,
        group,
    })
}

fn line(group: UsageGroup, row: UsageRow) -> UsageLine {
    let (mut day, mut model, mut key_id) = (None, None, None);
    match group {
        UsageGroup::Day => day = Some(row.group),
        UsageGroup::Model => model = Some(row.group),
        UsageGroup::Key => key_id = Some(row.group),
    }
    UsageLine {
        account_id: row.account_id,
        day,
        model,
        key_id,
        tasks: row.tasks,
        images: row.images,
        pixels: row.pixels,
        backend_seconds: row.backend_ms as f64 / 1000.0,
        cost: row.cost,
    }
}

fn group_name(group: UsageGroup) -> &'static str {
    match group {
        UsageGroup::Day => "day",
        UsageGroup::Model => "model",
        UsageGroup::Key => "key",
    }
}

/// Whether the caller asked for CSV rather than JSON.
fn wants_csv(headers: &HeaderMap) -> bool {
    list_items(headers, header::ACCEPT).any(|media| {
        media
            .split(';')
            .next()
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/csv"))
    })
}

/// A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break.
fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
    }
}

fn csv(usage: &Usage, every_account: bool) -> String {
    let group_column = match usage.group {
        "day" => "day",
        "model" => "model",
        _ => "key_id",
    };
    let mut head: Vec<&str> = Vec::new();
    if every_account {
        head.push("account_id");
    }
    head.push(group_column);
    head.extend_from_slice(CSV_COLUMNS);
    let mut out = head.join(",");
    out.push_str("\r\n");
    for row in &usage.rows {
        let mut fields: Vec<String> = Vec::new();
        if every_account {
            fields.push(csv_field(row.account_id.as_deref().unwrap_or("")));
        }
        let group = row.day.as_deref().or(row.model.as_deref());
        fields.push(csv_field(group.or(row.key_id.as_deref()).unwrap_or("")));
        fields.push(row.tasks.to_string());
        fields.push(row.images.to_string());
        fields.push(row.pixels.to_string());
        fields.push(format!("{:.3}", row.backend_seconds));
        fields.push(row.cost.to_string());
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

/// The account's usage
///
/// Tasks that finished or failed, counted on the UTC day they ended, grouped by `day`, `model`
/// or `key`; `from` and `to` are UTC dates, both included, at most 366 days apart (default: the
/// 30 days up to today). An operator's key may name an account, or leave `account` out for every
/// account (each row then says whose). `Accept: text/csv` answers CSV with the columns
/// `[account_id,] day|model|key_id, tasks, images, pixels, backend_seconds, cost`.
#[utoipa::path(
    get,
    path = "/api/v1/usage",
    operation_id = "usage",
    params(
        ("from" = Option<String>, Query, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, description = "Last UTC day, YYYY-MM-DD (default: today)"),
        ("group" = Option<String>, Query, description = "`day` (default), `model` or `key`"),
        ("account" = Option<String>, Query, description = "Operators only: this account's usage (left out: every account's)"),
    ),
    responses(
        (status = 200, description = "Usage by group", content(
            (Usage = "application/json"),
            (String = "text/csv"),
        )),
        (status = 404, description = "An operator named an account that does not exist"),
        Checked
    )
)]
pub async fn get_usage(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = query_of(&state, &caller, asked(raw.as_deref())?).await?;
    let rows = state.store.usage(&query).await?;
    let usage = Usage {
        from: day_text(query.from),
        to: day_text(query.to),
        group: group_name(query.group),
        rows: rows.into_iter().map(|r| line(query.group, r)).collect(),
    };
    if wants_csv(&headers) {
        let body = csv(&usage, query.account_id.is_none());
        let mut response = body.into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        );
        return Ok(response);
    }
    Ok(Json(usage).into_response())
}
