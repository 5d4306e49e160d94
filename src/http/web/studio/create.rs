//! Create (`/` signed in): a prompt with its settings and image prompts, made into an imagine
//! through the API's use case, and the account's recent tasks as a live feed.

use askama::Template;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::Digest;

use super::submit::{self, refusal_field, submit_as, Keyed};
use crate::domain::{OpKind, Parameters, Prompt};
use crate::http::state::AppState;
use crate::http::web::error_page::{render, render_status, WebError};
use crate::http::web::page::{is_htmx, Layout};
use crate::http::web::session::{multipart, same_origin, same_secret, unreadable, SignedIn};
use crate::http::web::task_list::TaskCard;
use crate::refusal::ApiError;
use crate::store::TaskFilter;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route(CREATE_ROUTE, post(create))
}

/// Where Create posts: a fixed path, read under `mask_body_limit` as it carries files
/// ([`crate::http::body::IMAGE_ROUTES`]).
pub const CREATE_ROUTE: &str = "/studio/create";
/// Tasks the feed shows under the form (the whole list is at `/tasks`).
const FEED_SIZE: u32 = 12;
/// Image prompts one form may add (the contract's most per prompt).
const IMAGES_MAX: usize = 5;
/// The aspect ratios offered; any other is typed as `--ar W:H` in the prompt.
const RATIOS: [&str; 8] = ["1:1", "4:3", "3:2", "16:9", "21:9", "3:4", "2:3", "9:16"];
const MODES: [&str; 3] = ["fast", "relax", "turbo"];

/// What the form holds: as sent, so a refused form comes back as it was.
#[derive(Default, Clone)]
pub struct CreateForm {
    pub prompt: String,
    pub aspect_ratio: String,
    pub model: String,
    pub steps: String,
    pub cfg_scale: String,
    pub sampler: String,
    pub negative_prompt: String,
    pub process_mode: String,
    /// The form's idempotency key: the same form sent twice makes one task.
    pub idempotency: String,
}

pub struct ModelChoice {
    name: String,
    label: String,
    steps: String,
    cfg: String,
    selected: bool,
}

pub struct Choice {
    value: String,
    selected: bool,
}

/// The form, on its page and as htmx's answer.
#[derive(Template)]
#[template(path = "create_form.html")]
pub struct FormView {
    csrf: String,
    form: CreateForm,
    models: Vec<ModelChoice>,
    ratios: Vec<Choice>,
    modes: Vec<Choice>,
    samplers: Vec<Choice>,
    /// The refusal, by the field it names (None: the form as a whole).
    error: Option<(Option<String>, String)>,
    /// htmx's answer: the task just made, to put at the top of the feed.
    created: Option<TaskCard>,
}

impl FormView {
    /// The message for `field`, if the refusal names it.
    fn error_of(&self, field: &str) -> Option<&str> {
        submit::error_of(&self.error, field)
    }

    /// The refusal when it names none of the form's fields.
    fn general_error(&self) -> Option<&str> {
        const FIELDS: [&str; 9] = [
            "prompt",
            "aspect_ratio",
            "model",
            "steps",
            "cfg_scale",
            "sampler",
            "negative_prompt",
            "process_mode",
            "image",
        ];
        submit::general_error(&self.error, &FIELDS)
    }

    /// `aria-invalid` of a field.
    fn invalid(&self, field: &str) -> &'static str {
        if self.error_of(field).is_some() {
            "true"
        } else {
            "false"
        }
    }
}

#[derive(Template)]
#[template(path = "create.html")]
struct CreatePage {
    layout: Layout,
    view: FormView,
    feed: Vec<TaskCard>,
}

fn choices<'a>(values: impl Iterator<Item = &'a str>, chosen: &str) -> Vec<Choice> {
    values
        .map(|v| Choice {
            value: v.to_string(),
            selected: v == chosen,
        })
        .collect()
}

fn new_idempotency_key() -> String {
    let (token, _) = crate::accounts::new_session_token();
    format!("studio-{token}")
}

impl FormView {
    fn new(state: &AppState, user: &SignedIn, form: CreateForm) -> FormView {
        let plans = state.plans.get();
        let catalogue = state.pool.catalogue();
        let allowed: Vec<_> = catalogue
            .models
            .iter()
            .filter(|m| m.allows(plans.resolve(&user.account.plan)))
            .collect();
        let models = allowed
            .iter()
            .map(|m| ModelChoice {
                name: m.name.clone(),
                label: if m.description.is_empty() {
                    m.name.clone()
                } else {
                    format!("{} ({})", m.name, m.description)
                },
                steps: format!("{}-{}", m.steps_range[0], m.steps_range[1]),
                cfg: format!("{}-{}", m.cfg_range[0], m.cfg_range[1]),
                selected: m.name == form.model,
            })
            .collect();
        let mut samplers: Vec<&str> = allowed.iter().flat_map(|m| m.samplers()).collect();
        samplers.sort_unstable();
        samplers.dedup();
        FormView {
            csrf: user.csrf.clone(),
            models,
            ratios: choices(RATIOS.into_iter(), &form.aspect_ratio),
            modes: choices(MODES.into_iter(), &form.process_mode),
            samplers: choices(samplers.into_iter(), &form.sampler),
            form,
            error: None,
            created: None,
        }
    }
}

#[derive(Deserialize, Default)]
pub struct CreateQuery {
    /// An image to start the prompt with (`Use as image prompt` on a task's page).
    #[serde(default)]
    image_prompt: String,
}

/// `GET /` signed in: Create, and the account's recent tasks.
pub async fn create_page(
    state: &AppState,
    user: SignedIn,
    q: CreateQuery,
) -> Result<Response, WebError> {
    let mut form = CreateForm {
        idempotency: new_idempotency_key(),
        ..CreateForm::default()
    };
    // Only a URL: anything else is the person's to type.
    let url = q.image_prompt.trim();
    if (url.starts_with("https://") || url.starts_with("http://") || url.starts_with('/'))
        && !url.contains(char::is_whitespace)
    {
        form.prompt = format!("{url} ");
    }
    let view = FormView::new(state, &user, form);
    page(state, user, view, StatusCode::OK).await
}

async fn page(
    state: &AppState,
    user: SignedIn,
    view: FormView,
    status: StatusCode,
) -> Result<Response, WebError> {
    let feed = state
        .store
        .list_tasks(&user.account.id, &TaskFilter::default(), None, FEED_SIZE)
        .await?
        .map(|p| p.tasks.iter().map(TaskCard::of).collect())
        .unwrap_or_default();
    let page = CreatePage {
        layout: Layout::new("Create", "create", Some(&user)),
        view,
        feed,
    };
    render_status(status, &page)
}

/// A Create form as posted (`multipart/form-data`, for its files), from the dashboard's own
/// pages with the session's CSRF token: 403 otherwise, and nothing done.
struct Posted {
    user: SignedIn,
    form: CreateForm,
    images: Vec<Bytes>,
    htmx: bool,
}

impl FromRequest<AppState> for Posted {
    type Rejection = WebError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, WebError> {
        let (mut parts, body) = req.into_parts();
        if !same_origin(&parts, state) {
            return Err(WebError::Forbidden);
        }
        let user = SignedIn::from_request_parts(&mut parts, state).await?;
        let htmx = is_htmx(&parts.headers);
        let mut multipart = multipart(parts, body, state).await?;
        let (mut csrf, mut form, mut images) = (String::new(), CreateForm::default(), Vec::new());
        while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
            let name = field.name().unwrap_or_default().to_string();
            if name == "image" {
                let data = field.bytes().await.map_err(unreadable)?;
                if !data.is_empty() {
                    images.push(data);
                }
                continue;
            }
            let text = field.text().await.map_err(unreadable)?;
            let slot = match name.as_str() {
                "csrf" => &mut csrf,
                "prompt" => &mut form.prompt,
                "aspect_ratio" => &mut form.aspect_ratio,
                "model" => &mut form.model,
                "steps" => &mut form.steps,
                "cfg_scale" => &mut form.cfg_scale,
                "sampler" => &mut form.sampler,
                "negative_prompt" => &mut form.negative_prompt,
                "process_mode" => &mut form.process_mode,
                "idempotency" => &mut form.idempotency,
                _ => continue,
            };
            *slot = text;
        }
        if !same_secret(&csrf, &user.csrf) {
            return Err(WebError::Forbidden);
        }
        Ok(Posted {
            user,
            form,
            images,
            htmx,
        })
    }
}

/// The imagine body the form stands for (its image prompts not yet added): the fields given,
/// numbers as numbers where they read as one, so that the API's parser judges each.
fn body_of(form: &CreateForm) -> Map<String, Value> {
    let mut body = Map::new();
    let mut put = |name: &str, value: &str, numeric: bool| {
        let value = value.trim();
        if value.is_empty() {
            return;
        }
        let number = numeric
            .then(|| serde_json::from_str::<serde_json::Number>(value).ok())
            .flatten();
        let v = number.map_or_else(|| Value::String(value.to_string()), Value::Number);
        body.insert(name.to_string(), v);
    };
    put("prompt", &form.prompt, false);
    put("aspect_ratio", &form.aspect_ratio, false);
    put("model", &form.model, false);
    put("steps", &form.steps, true);
    put("cfg_scale", &form.cfg_scale, true);
    put("sampler", &form.sampler, false);
    put("negative_prompt", &form.negative_prompt, false);
    put("process_mode", &form.process_mode, false);
    body
}

/// The prompt's own checks (its length and characters, its parameters), made before any image
/// of the form is kept: the same parser the submit runs again.
fn check_prompt(raw: &str) -> Result<(), ApiError> {
    let invalid = |e: String| ApiError::field("prompt", "invalid_value", e);
    let whole = Prompt::parse(raw).map_err(invalid)?;
    let (text, _) = Parameters::parse(whole.as_str())
        .map_err(|e| ApiError::field("prompt", e.code, e.message))?;
    Prompt::parse(text).map_err(invalid)?;
    Ok(())
}

/// `POST /studio/create`: the form made into an imagine for the signed-in account. Its images
/// are kept as uploads (the API's upload use case) and start the prompt as image prompts; a
/// refused submit removes them again, so a refusal leaves nothing stored. Then to `/` (the new
/// task at the top of the feed), or for htmx, a fresh form and the new task's row.
async fn create(State(state): State<AppState>, posted: Posted) -> Result<Response, WebError> {
    let Posted {
        user,
        form,
        images,
        htmx,
    } = posted;
    let refused = |e: ApiError, form: CreateForm| {
        let mut view = FormView::new(&state, &user, form);
        view.error = Some(refusal_field(&e));
        view
    };
    let outcome = make(&state, &user, &form, images).await?;
    let id = match outcome {
        Ok(id) => id,
        Err(e) => {
            let view = refused(e, form);
            // htmx swaps in only answers of 2xx: the form with its errors is the answer.
            return if htmx {
                render(&view)
            } else {
                page(&state, user, view, StatusCode::BAD_REQUEST).await
            };
        }
    };
    if !htmx {
        return Ok(Redirect::to("/").into_response());
    }
    let task = state
        .store
        .task_for_account(&user.account.id, &id)
        .await?
        .ok_or(WebError::NotFound)?;
    // A fresh form for the next prompt, with the settings kept and a new key.
    let next = CreateForm {
        prompt: String::new(),
        idempotency: new_idempotency_key(),
        ..form
    };
    let mut view = FormView::new(&state, &user, next);
    view.created = Some(TaskCard::of(&task));
    render(&view)
}

async fn make(
    state: &AppState,
    user: &SignedIn,
    form: &CreateForm,
    images: Vec<Bytes>,
) -> Result<Result<uuid::Uuid, ApiError>, WebError> {
    if images.len() > IMAGES_MAX {
        let e = ApiError::field(
            "image",
            "invalid_value",
            format!("at most {IMAGES_MAX} image prompts at a time"),
        );
        return Ok(Err(e));
    }
    let mut body = body_of(form);
    // Two sends of one form are the same request whatever their uploads' URLs: the form's
    // fields and its files' bytes.
    let mut same = body.clone();
    let digests: Vec<Value> = images
        .iter()
        .map(|b| Value::String(hex::encode(sha2::Sha256::digest(b))))
        .collect();
    same.insert("image_sha256".into(), Value::Array(digests));
    let keyed = Keyed::of(&form.idempotency, OpKind::Imagine, &same);
    if images.is_empty() {
        let made = submit_as(state, user, OpKind::Imagine, body, Some(keyed)).await?;
        return Ok(made.map(|m| m.id));
    }
    if let Err(e) = check_prompt(&form.prompt) {
        return Ok(Err(e));
    }
    let mut kept = Vec::new();
    for bytes in images {
        match crate::tasks::upload::store_upload(state, &user.account.id, "image", bytes).await {
            Ok(u) => kept.push(u),
            Err(e) => {
                crate::tasks::upload::discard(state, &kept).await;
                return match e {
                    ApiError::Internal(e) => Err(WebError::Internal(e)),
                    e => Ok(Err(e)),
                };
            }
        }
    }
    let urls: Vec<String> = kept.iter().map(|u| state.blobs.url(&u.key)).collect();
    body.insert(
        "prompt".into(),
        Value::String(format!("{} {}", urls.join(" "), form.prompt.trim())),
    );
    let made = submit_as(state, user, OpKind::Imagine, body, Some(keyed)).await;
    // A refused submit, or a second send answered with the first one's task, keeps none of the
    // images it was given.
    if !matches!(&made, Ok(Ok(m)) if !m.replayed) {
        crate::tasks::upload::discard(state, &kept).await;
    }
    Ok(made?.map(|m| m.id))
}
