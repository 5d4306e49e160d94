//! `Vary (Region)`: an editor over an upscale's image where the person paints (or marks
//! rectangles over) what to redraw, and the inpaint it makes with that mask. The one page of
//! the dashboard that needs JavaScript: the mask is drawn on a `<canvas>` by `assets/region.js`,
//! at the image's own size, and sent as the inpaint's `mask` (a PNG `data:` URL).

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::submit::{self, refusal_field, submit_as, Keyed};
use crate::domain::{OpKind, Output};
use crate::http::state::AppState;
use crate::http::web::assets::ASSETS;
use crate::http::web::error_page::{render_status, WebError};
use crate::http::web::page::Layout;
use crate::http::web::session::{Posted, SignedIn};
use crate::http::web::task_list::prompt_or_type;
use crate::http::web::thumbnails::EDITOR_WIDTH;
use crate::refusal::ApiError;
use crate::store::Task;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/tasks/{task_id}/region", get(editor))
        .route(REGION_ROUTE, post(submit))
}

/// Where the editor posts: a fixed path, read under `mask_body_limit` as it carries a mask
/// ([`crate::http::body::IMAGE_ROUTES`]).
pub const REGION_ROUTE: &str = "/studio/region";

#[derive(Template)]
#[template(path = "region.html")]
struct RegionPage {
    layout: Layout,
    csrf: String,
    id: String,
    title: String,
    prompt: String,
    idempotency: String,
    /// The image's own size: the mask's.
    width: u32,
    height: u32,
    /// The image as the editor shows it, scaled.
    src: String,
    /// The editor's script, which only this page loads.
    script: &'static str,
    error: Option<(Option<String>, String)>,
}

/// The task's image size when a region may be redrawn on it now; why not otherwise.
fn editable(state: &AppState, task: &Task) -> Result<(u32, u32), WebError> {
    let refuse = |msg: &str| Err(WebError::BadForm(msg.to_string()));
    if task.data_removed() {
        return refuse(
            "This task's images are no longer kept (retention): no region of them can be redrawn.",
        );
    }
    let single = |o: &&Output| matches!(o, Output::Single { .. });
    let Some(output) = task.output.as_ref().filter(single) else {
        return refuse(
            "Vary (Region) redraws part of one image: open an upscale (U1 to U4) of a grid first.",
        );
    };
    let (width, height) = match output {
        Output::Single { width, height, .. } => (*width, *height),
        _ => (0, 0),
    };
    let offered = state.tasks.offer(task, output, |o| o.region());
    if !offered {
        return refuse("Vary (Region) is not offered on this task: no backend here can redraw a region, or it is not an upscale.");
    }
    if width == 0 || height == 0 {
        return refuse("This image was stored before easel recorded image sizes; upscale it again to redraw a region.");
    }
    Ok((width, height))
}

fn page(
    state: &AppState,
    user: &SignedIn,
    task: &Task,
    prompt: String,
    error: Option<(Option<String>, String)>,
) -> Result<Response, WebError> {
    let (width, height) = editable(state, task)?;
    let (token, _) = crate::accounts::new_session_token();
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    let page = RegionPage {
        layout: Layout::new("Vary (Region)", "tasks", Some(user)),
        csrf: user.csrf.clone(),
        id: task.id.clone(),
        title: prompt_or_type(task),
        prompt,
        idempotency: format!("studio-{token}"),
        width,
        height,
        src: format!("/tasks/{}/image/0?w={EDITOR_WIDTH}", task.id),
        script: &ASSETS.region.path,
        error,
    };
    render_status(status, &page)
}

impl RegionPage {
    fn error_of(&self, field: &str) -> Option<&str> {
        submit::error_of(&self.error, field)
    }

    fn general_error(&self) -> Option<&str> {
        submit::general_error(&self.error, &["mask", "prompt"])
    }
}

/// `GET /tasks/{task_id}/region`: the editor over the task's image.
async fn editor(
    State(state): State<AppState>,
    user: SignedIn,
    Path(raw): Path<String>,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &raw).await?;
    page(&state, &user, &task, String::new(), None)
}

#[derive(Deserialize)]
pub struct RegionForm {
    #[serde(default)]
    task: String,
    #[serde(default)]
    mask: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    idempotency: String,
}

/// `POST /studio/region`: an inpaint of the task with the painted mask (and the prompt, when
/// one is given), for the signed-in account through the API's use case; then its page. A
/// refusal (no mask, an empty one, one of another size) is said on the editor, nothing stored.
async fn submit(
    State(state): State<AppState>,
    Posted { user, form }: Posted<RegionForm>,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &form.task).await?;
    editable(&state, &task)?;
    if form.mask.trim().is_empty() {
        let e = ApiError::field(
            "mask",
            "missing_field",
            "paint the region to redraw first (the editor needs JavaScript)",
        );
        return page(&state, &user, &task, form.prompt, Some(refusal_field(&e)));
    }
    let mut body = Map::new();
    body.insert("parent_task_id".into(), Value::String(task.id.clone()));
    body.insert("mask".into(), Value::String(form.mask.clone()));
    if !form.prompt.trim().is_empty() {
        body.insert("prompt".into(), Value::String(form.prompt.clone()));
    }
    let keyed = Keyed::of(&form.idempotency, OpKind::Inpaint, &body);
    match submit_as(&state, &user, OpKind::Inpaint, body, Some(keyed)).await? {
        Ok(made) => Ok(Redirect::to(&format!("/tasks/{}", made.id)).into_response()),
        Err(e) => page(&state, &user, &task, form.prompt, Some(refusal_field(&e))),
    }
}
