//! The gallery (`/gallery`): the account's images as a grid of thumbnails, newest first, paged
//! by cursor, searched by the words of their prompts (`Search prompts`, the same full-text
//! search as `GET /api/v1/tasks?q=`) and filtered by model, type and status. A plain GET form
//! and links, so it needs no JavaScript, and every search or page is an address to keep.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use uuid::Uuid;

use super::error_page::{render_status, WebError};
use super::page::Layout;
use super::session::SignedIn;
use super::task_list::prompt_or_type;
use super::thumbnails::PREVIEW_WIDTH;
use crate::domain::{OpKind, Shape, TaskStatus};
use crate::http::state::AppState;
use crate::store::{Task, TaskFilter};
use crate::tasks::list::{search, SEARCH_MAX_CHARS};

/// The routes of this page, beside its handler.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/gallery", get(gallery))
}

/// Images on one page: four rows of six at desktop width.
pub const PAGE_SIZE: u32 = 24;

/// What the form sends; every field may be blank.
#[derive(Deserialize, Default)]
pub struct GalleryQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    model: String,
    #[serde(default, rename = "type")]
    task_type: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    cursor: String,
}

/// One image of the grid.
pub struct Tile {
    id: String,
    /// Its prompt: the image's text alternative, and the tile's text where there is no image.
    prompt: String,
    /// The scaled image (the task page's preview size, sharp at twice the tile's size).
    thumb: Option<String>,
    status: String,
    task_type: String,
    model: Option<String>,
}

impl Tile {
    fn of(task: &Task) -> Tile {
        Tile {
            id: task.id.clone(),
            prompt: prompt_or_type(task),
            thumb: task
                .output
                .as_ref()
                .filter(|o| o.images() > 0 && !task.data_removed())
                .map(|_| format!("/tasks/{}/image/0?w={PREVIEW_WIDTH}", task.id)),
            status: task.status.to_string(),
            task_type: task.task_type.to_string(),
            model: task.extras.settings.model.clone(),
        }
    }
}

/// An option of a filter.
pub struct Choice {
    value: String,
    selected: bool,
}

fn choices(values: impl Iterator<Item = String>, chosen: &str) -> Vec<Choice> {
    values
        .map(|value| Choice {
            selected: value == chosen,
            value,
        })
        .collect()
}

#[derive(Template)]
#[template(path = "gallery.html")]
struct GalleryPage {
    layout: Layout,
    tiles: Vec<Tile>,
    q: String,
    q_max: usize,
    models: Vec<Choice>,
    types: Vec<Choice>,
    statuses: Vec<Choice>,
    /// Why the query was refused, shown beside the form; none for a good one.
    error: Option<String>,
    /// The query of this search's first page, and of its next (older) page if any.
    first: String,
    next: Option<String>,
    first_page: bool,
}

/// The form's values as a query string, with `cursor` when given.
fn query_string(q: &GalleryQuery, cursor: Option<&str>) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    out.append_pair("q", &q.q)
        .append_pair("model", &q.model)
        .append_pair("type", &q.task_type)
        .append_pair("status", &q.status);
    if let Some(cursor) = cursor {
        out.append_pair("cursor", cursor);
    }
    out.finish()
}

/// The filter the form asks for, or what is wrong with it, in words for the page.
fn filter_of(q: &GalleryQuery) -> Result<TaskFilter, String> {
    let mut filter = TaskFilter {
        images_only: true,
        ..TaskFilter::default()
    };
    if !q.status.is_empty() {
        filter.status = Some(
            q.status
                .parse()
                .map_err(|_| "Status: not one of the statuses.")?,
        );
    }
    if !q.task_type.is_empty() {
        let kind: OpKind = q
            .task_type
            .parse()
            .map_err(|_| "Type: not one of the types.")?;
        filter.task_type = Some(kind);
    }
    if !q.model.is_empty() {
        filter.model = Some(q.model.clone());
    }
    filter.words = search(&q.q).map_err(|_| {
        format!(
            "Search prompts: give words of letters or digits, at most {SEARCH_MAX_CHARS} \
             characters in all."
        )
    })?;
    Ok(filter)
}

/// The operations whose tasks the gallery shows: those that make images.
fn image_kinds() -> impl Iterator<Item = String> {
    OpKind::ALL
        .iter()
        .filter(|k| matches!(k.shape(), Shape::Grid | Shape::Single))
        .filter(|k| **k != OpKind::Faceswap)
        .map(|k| k.as_str().to_string())
}

/// `GET /gallery`.
pub async fn gallery(
    State(state): State<AppState>,
    user: SignedIn,
    Query(q): Query<GalleryQuery>,
) -> Result<Response, WebError> {
    let cursor = match q.cursor.as_str() {
        "" => None,
        c => Some(c.parse::<Uuid>().map_err(|_| WebError::NotFound)?),
    };
    let (status, tiles, next, error) = match filter_of(&q) {
        Ok(filter) => {
            let page = state
                .store
                .list_tasks(&user.account.id, &filter, cursor.as_ref(), PAGE_SIZE)
                .await?
                .ok_or(WebError::NotFound)?;
            let next = page
                .next_cursor
                .as_deref()
                .map(|c| query_string(&q, Some(c)));
            let tiles = page.tasks.iter().map(Tile::of).collect();
            (StatusCode::OK, tiles, next, None)
        }
        Err(why) => (StatusCode::BAD_REQUEST, Vec::new(), None, Some(why)),
    };
    // The models the account's plan may use, and the one asked for even if it is no longer
    // configured (its tasks keep its name).
    let plans = state.plans.get();
    let plan = plans.resolve(&user.account.plan);
    let mut models: Vec<String> = state
        .pool
        .catalogue()
        .models
        .iter()
        .filter(|m| m.allows(plan))
        .map(|m| m.name.clone())
        .collect();
    if !q.model.is_empty() && !models.contains(&q.model) {
        models.push(q.model.clone());
    }
    let statuses = TaskStatus::ALL.iter().map(|s| s.as_str().to_string());
    let page = GalleryPage {
        layout: Layout::new("Gallery", "gallery", Some(&user)),
        tiles,
        models: choices(models.into_iter(), &q.model),
        types: choices(image_kinds(), &q.task_type),
        statuses: choices(statuses, &q.status),
        error,
        first: query_string(&q, None),
        next,
        first_page: cursor.is_none(),
        q_max: SEARCH_MAX_CHARS,
        q: q.q,
    };
    render_status(status, &page)
}
