//! The follow-ups of a finished image task, as buttons on its page: one per entry of the
//! record's `actions` (the one source of what may be done now), each a plain form that makes
//! the follow-up through the API's use case and opens the new task's live page. Beside them,
//! `Vary (Region)` (the region editor), `Copy prompt`, `Use as image prompt` and `Download`.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::Router;
use serde::Deserialize;
use serde_json::Value;

use super::submit::{button_name, submit_as, Keyed};
use crate::domain::{OpKind, Output};
use crate::http::state::AppState;
use crate::http::web::error_page::WebError;
use crate::http::web::session::Posted;
use crate::refusal::ApiError;
use crate::store::Task;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/tasks/{task_id}/follow-up", post(follow_up))
}

pub struct ActionButton {
    /// The action's label, which the form sends back.
    label: String,
    /// What the button is called: the label, or what an arrow label does.
    name: String,
    /// Whether the label is a symbol, shown beside the name rather than as it.
    symbol: bool,
}

/// What may be made from a finished image task, as its page shows it.
#[derive(Template)]
#[template(path = "actions.html")]
pub struct ActionsView {
    id: String,
    csrf: String,
    /// One key per showing of the buttons: a double click makes one task.
    idempotency: String,
    buttons: Vec<ActionButton>,
    region: bool,
    prompt: String,
    /// The image a download or an image prompt takes: the grid, or the single image.
    image_url: String,
    /// `/?image_prompt=...`: Create with the image starting the prompt.
    image_prompt_href: String,
}

impl ActionsView {
    /// The buttons of `task`, when it is a finished image task whose images are kept.
    pub fn of(state: &AppState, task: &Task, csrf: &str) -> Option<ActionsView> {
        let output = task.output.as_ref().filter(|_| !task.data_removed())?;
        let key = match output {
            Output::Grid { grid_key, .. } => grid_key,
            Output::Single { image_key, .. } => image_key,
            Output::Text { .. } | Output::Seed { .. } => return None,
        };
        let record = state.tasks.record_now(task);
        let buttons = record
            .actions
            .unwrap_or_default()
            .iter()
            .map(|a| {
                let name = button_name(a.label);
                ActionButton {
                    label: a.label.to_string(),
                    name: name.to_string(),
                    symbol: name != a.label,
                }
            })
            .collect();
        let region = state.tasks.offer(task, output, |o| o.region());
        let image_url = state.blobs.url(key);
        let image_prompt_href = format!(
            "/?image_prompt={}",
            url::form_urlencoded::byte_serialize(image_url.as_bytes()).collect::<String>()
        );
        let (token, _) = crate::accounts::new_session_token();
        Some(ActionsView {
            id: task.id.clone(),
            csrf: csrf.to_string(),
            idempotency: format!("studio-{token}"),
            buttons,
            region,
            prompt: task.prompt.clone(),
            image_url,
            image_prompt_href,
        })
    }
}

#[derive(Deserialize)]
pub struct FollowUpForm {
    #[serde(default)]
    label: String,
    #[serde(default)]
    idempotency: String,
}

/// `POST /tasks/{task_id}/follow-up`: the action of the task's record with this label, made
/// for the signed-in account through the API's use case; then the new task's page.
async fn follow_up(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Posted { user, form }: Posted<FollowUpForm>,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &raw).await?;
    if task.data_removed() {
        return Err(WebError::BadForm(
            "This task's images are no longer kept (retention), so nothing can be made from \
             them."
                .into(),
        ));
    }
    let actions = state.tasks.record_now(&task).actions.unwrap_or_default();
    let Some((n, action)) = actions
        .iter()
        .enumerate()
        .find(|(_, a)| a.label == form.label)
    else {
        return Err(WebError::BadForm(format!(
            "{}: not one of the follow-ups this task offers now.",
            button_name(&form.label)
        )));
    };
    let kind: OpKind = action
        .operation
        .parse()
        .map_err(|_| WebError::Internal(anyhow::anyhow!("an action of an unknown operation")))?;
    let Value::Object(body) = action.body.clone() else {
        return Err(WebError::Internal(anyhow::anyhow!("an action's body")));
    };
    // One key per button of the page: the same button twice is one task.
    let keyed = (!form.idempotency.is_empty())
        .then(|| Keyed::of(&format!("{}-{n}", form.idempotency), kind, &body));
    match submit_as(&state, &user, kind, body, keyed).await? {
        Ok(made) => Ok(Redirect::to(&format!("/tasks/{}", made.id)).into_response()),
        Err(e) => Err(refused(e)),
    }
}

/// A refused follow-up as a page says it.
pub(super) fn refused(e: ApiError) -> WebError {
    WebError::BadForm(super::submit::refusal_field(&e).1)
}
