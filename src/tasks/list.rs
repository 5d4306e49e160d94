//! The query of a task listing (`GET /api/v1/tasks`): `limit`, `cursor`, `status`, `type`,
//! `model` and the search `q`.

use uuid::Uuid;

use crate::domain::{Named, OpKind, TaskStatus};
use crate::refusal::{query, ApiError};
use crate::store::{TaskFilter, LIST_LIMIT_MAX};

/// Tasks on a page of `GET /api/v1/tasks` when `limit` is not given.
pub const LIST_LIMIT_DEFAULT: u32 = 20;
/// Most characters of a search (`q`), as the store bounds the words it indexes.
pub const SEARCH_MAX_CHARS: usize = TaskFilter::SEARCH_MAX_CHARS;
/// Most characters of a `model` filter (models' names are short; see `[[models]]`).
pub const MODEL_MAX_CHARS: usize = 100;

/// The value of filter `field`, one of `T`'s names; a refusal lists them.
fn named<T: Named>(field: &str, value: &str) -> Result<T, ApiError> {
    value.parse().map_err(|_| {
        let rule = format!("must be one of {}", T::listed());
        ApiError::field(field, "invalid_value", rule)
    })
}

/// The query of a listing: `limit`, `cursor`, `status` and `type`, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: u32,
    pub cursor: Option<Uuid>,
    pub filter: TaskFilter,
}

/// The query of a listing as the OpenAPI document describes it ([`ListQuery::parse`] reads it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Tasks per page, 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(value_type = Option<uuid::Uuid>)]
    pub cursor: Option<String>,
    /// Only tasks in this status.
    #[param(value_type = Option<TaskStatus>)]
    pub status: Option<String>,
    /// Only tasks of this operation.
    #[param(rename = "type", value_type = Option<OpKind>)]
    pub kind: Option<String>,
    /// Only tasks on this model (the record's `settings.model`).
    #[param(max_length = 100)]
    pub model: Option<String>,
    /// Only tasks whose prompt holds every word of this text (case-insensitive; words are runs
    /// of letters and digits, whole words only), at most 200 characters.
    #[param(max_length = 200)]
    pub q: Option<String>,
}

impl ListQuery {
    /// Read a query string. Empty values count as absent; unknown parameters are ignored; a
    /// parameter given twice, or a value out of range, is a 400 that names it.
    pub fn parse(raw: Option<&str>) -> Result<ListQuery, ApiError> {
        let mut list = ListQuery {
            limit: LIST_LIMIT_DEFAULT,
            ..ListQuery::default()
        };
        let known = ["limit", "cursor", "status", "type", "model", "q"];
        for (name, value) in query::pairs(raw, &known)? {
            if value.is_empty() {
                continue;
            }
            match name.as_str() {
                "limit" => list.limit = query::limit(&value, LIST_LIMIT_MAX)?,
                "cursor" => {
                    list.cursor = Some(Uuid::parse_str(&value).map_err(|_| invalid_cursor())?);
                }
                "status" => list.filter.status = Some(named(&name, &value)?),
                "type" => list.filter.task_type = Some(named(&name, &value)?),
                "model" => list.filter.model = Some(model(&value)?),
                _ => list.filter.words = search(&value)?,
            }
        }
        Ok(list)
    }
}

/// A `model` filter: any name within the bound (a model no longer configured still names its
/// tasks, so an unknown one lists none rather than being refused).
fn model(value: &str) -> Result<String, ApiError> {
    if value.chars().count() > MODEL_MAX_CHARS {
        let rule = format!("must be at most {MODEL_MAX_CHARS} characters");
        return Err(ApiError::field("model", "invalid_value", rule));
    }
    Ok(value.to_string())
}

/// The words of a search `q`: at most [`SEARCH_MAX_CHARS`] characters, of which some must be
/// letters or digits (a query of only punctuation would match every task, which is no search).
/// Blank is no search.
pub fn search(value: &str) -> Result<Vec<String>, ApiError> {
    if value.chars().count() > SEARCH_MAX_CHARS {
        let rule = format!("must be at most {SEARCH_MAX_CHARS} characters");
        return Err(ApiError::field("q", "invalid_value", rule));
    }
    let words = TaskFilter::words_of(value);
    if words.is_empty() && !value.trim().is_empty() {
        let rule = "must hold a word (letters or digits)";
        return Err(ApiError::field("q", "invalid_value", rule));
    }
    Ok(words)
}

pub fn invalid_cursor() -> ApiError {
    ApiError::field(
        "cursor",
        "invalid_value",
        "must be a next_cursor from an earlier page of this listing",
    )
}
