//! The playground: a form that submits any operation through the same code as
//! `POST /api/v1/{operation}`, with one of the account's own keys, then shows the task's progress
//! and images as they arrive (the script follows the task's event stream).

use askama::Template;
use axum::extract::{FromRequest, Request, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error_page::{render, WebError};
use super::page::Layout;
use super::session::{Posted, SignedIn, Uploaded};
use super::task_page::Progress;
use crate::auth::{hash_key, well_formed, PresentedKey};
use crate::domain::rfc3339;
use crate::domain::OpKind;
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::body::JsonObject;
use crate::tasks::{submit, upload};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/playground", get(page).post(submit))
        .route("/playground/upload", post(upload))
}

#[derive(Template)]
#[template(path = "playground.html")]
struct PlaygroundPage {
    layout: Layout,
    csrf: String,
    operations: Vec<&'static str>,
    /// The image just uploaded, offered for describe, blend and image prompts.
    upload: Option<UploadView>,
    /// Why the upload was refused, in the API's words.
    upload_error: Option<String>,
}

/// An upload as the playground shows it.
pub(super) struct UploadView {
    pub(super) url: String,
    pub(super) content_type: String,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) expires_at: String,
}

impl PlaygroundPage {
    fn new(user: &SignedIn) -> PlaygroundPage {
        PlaygroundPage {
            layout: Layout::new("Playground", "playground", Some(user)),
            csrf: user.csrf.clone(),
            operations: OpKind::ALL.iter().map(|k| k.as_str()).collect(),
            upload: None,
            upload_error: None,
        }
    }

    /// The prompt box's text: an image prompt of the upload, for the caller to finish.
    fn prompt_start(&self) -> String {
        self.upload
            .as_ref()
            .map(|u| format!("{} ", u.url))
            .unwrap_or_default()
    }
}

/// What a submit from the playground shows in place of the form's result.
#[derive(Template)]
#[template(path = "submitted.html")]
struct Submitted {
    error: Option<String>,
    progress: Option<Progress>,
}

/// `GET /playground`.
pub async fn page(State(_): State<AppState>, user: SignedIn) -> Result<Response, WebError> {
    render(&PlaygroundPage::new(&user))
}

/// `POST /playground/upload`: a form with a file (no script needed), stored as one of the
/// signed-in account's uploads through the same use case as `POST /api/v1/upload`; the
/// playground again, offering the upload's URL.
pub async fn upload(State(state): State<AppState>, req: Request) -> Result<Response, WebError> {
    let Uploaded { user, image } = Uploaded::from_request(req, &state).await?;
    let mut page = PlaygroundPage::new(&user);
    let stored = match image {
        Some(bytes) => upload::store_upload(&state, &user.account.id, "image", bytes).await,
        None => Err(ApiError::field("image", "missing_field", "choose a file")),
    };
    match stored {
        Ok(u) => {
            page.upload = Some(UploadView {
                url: state.blobs.url(&u.key),
                content_type: u.content_type,
                width: u.width,
                height: u.height,
                expires_at: rfc3339(u.expires_at),
            })
        }
        Err(ApiError::Internal(e)) => return Err(WebError::Internal(e)),
        Err(e) => page.upload_error = Some(e.to_string()),
    }
    render(&page)
}

#[derive(Deserialize)]
pub struct PlaygroundForm {
    #[serde(default)]
    operation: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    parent_task_id: String,
    #[serde(default)]
    index: String,
    #[serde(default)]
    process_mode: String,
    #[serde(default)]
    webhook_url: String,
    /// Any other fields of the operation, as a JSON object.
    #[serde(default)]
    extra: String,
}

/// The body of the API request the form stands for: the fields given, then `extra`'s.
fn body_of(form: &PlaygroundForm) -> Result<Map<String, Value>, String> {
    let mut body = Map::new();
    for (name, value) in [
        ("prompt", &form.prompt),
        ("parent_task_id", &form.parent_task_id),
        ("index", &form.index),
        ("process_mode", &form.process_mode),
        ("webhook_url", &form.webhook_url),
    ] {
        let value = value.trim();
        if !value.is_empty() {
            body.insert(name.to_string(), Value::String(value.to_string()));
        }
    }
    if !form.extra.trim().is_empty() {
        match serde_json::from_str::<Value>(&form.extra) {
            Ok(Value::Object(extra)) => body.extend(extra),
            _ => {
                return Err(
                    "Other fields: must be a JSON object, such as {\"type\": \"2x\"}.".into(),
                )
            }
        }
    }
    Ok(body)
}

/// `POST /playground`: submit, and answer with the task's progress fragment (or the error, in
/// the API's words).
pub async fn submit(
    State(state): State<AppState>,
    Posted { user, form }: Posted<PlaygroundForm>,
) -> Result<Response, WebError> {
    let refuse = |msg: String| {
        render(&Submitted {
            error: Some(msg),
            progress: None,
        })
    };
    let Ok(kind) = form.operation.parse::<OpKind>() else {
        return refuse("Operation: choose one of the operations.".into());
    };
    let key = form.key.trim();
    // The key must be one of this account's live keys: the playground acts as the account's
    // programs do, and never for another account.
    let owner = if well_formed(key) {
        state.store.key_owner(&hash_key(key)).await?
    } else {
        None
    };
    if owner.is_none_or(|o| o.account.id != user.account.id) {
        return refuse("API key: paste one of this account's live keys.".into());
    }
    let body = match body_of(&form) {
        Ok(body) => body,
        Err(msg) => return refuse(msg),
    };
    let presented = PresentedKey(hash_key(key));
    match submit::submit_operation(&state, kind, &presented, Ok(JsonObject(body))).await {
        Ok(id) => {
            let task = state
                .store
                .task_for_account(&user.account.id, &id)
                .await?
                .ok_or(WebError::NotFound)?;
            render(&Submitted {
                error: None,
                progress: Some(Progress::load(&state, &task).await),
            })
        }
        Err(ApiError::Unauthorized) => refuse("API key: the key is no longer live.".into()),
        Err(ApiError::Internal(e)) => Err(WebError::Internal(e)),
        Err(e) => refuse(e.to_string()),
    }
}
