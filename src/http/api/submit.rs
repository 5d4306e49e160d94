//! `POST /api/v1/{operation}` for every operation: the submit use case (`crate::tasks::submit`)
//! behind the `Idempotency-Key` and `Prefer: wait` headers. One handler at many paths: each
//! path's route and its document entry (its own body, summary and links) are registered in the
//! same step ([`routes`]).

use axum::extract::{FromRequest, MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde_json::{json, Value};
use utoipa::openapi::link::{Link, LinkBuilder};
use utoipa::openapi::path::{Callback, HttpMethod, Operation, OperationBuilder, PathItem, Paths};
use utoipa::openapi::request_body::{RequestBody, RequestBodyBuilder};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{AnyOfBuilder, Schema};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required};
use utoipa::{PartialSchema, ToSchema};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;
use uuid::Uuid;

use super::doc::{idempotent_replayed, preference_applied, SubmitRefused};
use crate::auth::PresentedKey;
use crate::domain::wire::Record;
use crate::domain::OpKind;
use crate::http::idempotency::{self, IdempotencyKey, KeyHeader};
use crate::http::prefer::{self, PreferWait};
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::body::JsonObject;
use crate::tasks::submit::alias::Alias;
use crate::tasks::submit::schema::{body, Body};
use crate::tasks::submit::{submit_keyed, Answer};
use crate::tasks::wait;
use crate::webhooks::progress::ProgressPayload;

/// Named schemas, for `components/schemas`.
type Named = Vec<(String, RefOr<Schema>)>;

/// The answer to a submit: the new task's id; for an imagine prompt with `--repeat` or `{...}`
/// permutations, the first of its tasks' and all of them in order.
#[derive(serde::Serialize, ToSchema)]
#[schema(as = TaskId)]
pub struct Accepted {
    task_id: Uuid,
    /// Only for a prompt that made several tasks (`--repeat`, permutations): their ids, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    task_ids: Option<Vec<Uuid>>,
}

/// Every submit route: one per operation, then Apiframe's older routes ([`Alias`]). Each is the
/// same handler, documented by [`submit`]'s entry with its own operationId, summary and body.
pub fn routes() -> OpenApiRouter<AppState> {
    let (mut named, template, _) = routes!(submit);
    let mut template = template
        .paths
        .into_values()
        .find_map(|item| item.post)
        .expect("submit is documented as a POST");
    answered(&mut template, &mut named);
    let mut router = OpenApiRouter::new();
    for kind in OpKind::ALL {
        let mut operation = template.clone();
        operation.summary = Some(summary(*kind));
        if *kind == OpKind::Shorten {
            // Shorten names no parent and no image: nothing of the caller's can be missing.
            operation.responses.responses.remove("404");
        }
        if *kind == OpKind::Imagine {
            operation
                .callbacks
                .insert("progress".into(), progress(&mut named).into());
            with_links(&mut operation, follow_ups());
        }
        let path = format!("/api/v1/{kind}");
        router = router.routes(route(
            path,
            operation,
            &format!("{kind:?}"),
            body(*kind),
            &named,
        ));
    }
    for (path, alias) in Alias::ALL {
        let mut operation = template.clone();
        let kind = alias.kind();
        let (_, old) = path.split_once('/').expect("midjourney/...");
        operation.summary = Some(format!(
            "Apiframe v1's older {old} route: {} {kind} task",
            article(kind)
        ));
        let name = format!("Midjourney{alias:?}");
        let path = format!("/api/v1/{path}");
        router = router.routes(route(path, operation, &name, alias.body_schema(), &named));
    }
    router
}

/// The handler at `path` and its document entry, `operation` named `name` (PascalCase: its
/// operationId is `name` in camelCase, its body's schema `{name}Request`).
fn route(
    path: String,
    mut operation: Operation,
    name: &str,
    body: Body,
    named: &Named,
) -> UtoipaMethodRouter<AppState> {
    let mut chars = name.chars();
    let first = chars.next().map(|c| c.to_ascii_lowercase());
    operation.operation_id = Some(first.into_iter().chain(chars).collect());
    let schema = format!("{name}Request");
    operation.request_body = Some(json_body(Ref::from_schema_name(&schema)).into());
    let mut schemas = named.clone();
    schemas.extend(body.refs);
    schemas.push((schema, body.schema.into()));
    let mut paths = Paths::new();
    paths.add_path_operation(&path, vec![HttpMethod::Post], operation);
    (schemas, paths, post(submit))
}

/// A required JSON body of `schema`.
fn json_body(schema: Ref) -> RequestBody {
    RequestBodyBuilder::new()
        .required(Some(Required::True))
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(schema)).build(),
        )
        .build()
}

/// The 200 answer of every submit: the id, or with `Prefer: wait` the record (a record has a
/// `task_id` too: either may match, hence `anyOf`), its headers, and the links to the task.
fn answered(template: &mut Operation, named: &mut Named) {
    for (name, schema) in [
        (Accepted::name(), Accepted::schema()),
        (Record::name(), Record::schema()),
    ] {
        named.push((name.into_owned(), schema));
    }
    Accepted::schemas(named);
    Record::schemas(named);
    let Some(RefOr::T(answer)) = template.responses.responses.get_mut("200") else {
        panic!("submit documents its 200 answer");
    };
    let either = AnyOfBuilder::new()
        .item(Ref::from_schema_name(Accepted::name()))
        .item(Ref::from_schema_name(Record::name()));
    answer.content.insert(
        "application/json".into(),
        ContentBuilder::new().schema(Some(either)).build().into(),
    );
    answer
        .headers
        .insert("Preference-Applied".into(), preference_applied().into());
    answer
        .headers
        .insert("Idempotent-Replayed".into(), idempotent_replayed().into());
    with_links(template, of_the_task());
}

/// An operation's summary: what it makes.
fn summary(kind: OpKind) -> String {
    let what = match kind {
        OpKind::Imagine => "",
        OpKind::Upscale1x => ": one image of a grid task, as it is",
        OpKind::UpscaleAlt => ": an upscale-1x image at twice its size",
        OpKind::UpscaleHighres => ": an image at 2 or 4 times its size",
        OpKind::Variations => ": four variations of one image",
        OpKind::Reroll => ": a grid task's prompt again, with a new seed",
        OpKind::Pan => ": an upscaled image extended in one direction",
        OpKind::Outpaint => ": an upscaled image zoomed out, the surroundings drawn",
        OpKind::Inpaint => ": the masked part of an upscaled image redrawn",
        OpKind::Blend => ": a grid mixing 2 to 5 images",
        OpKind::Describe => ": four prompts that could have made an image",
        OpKind::Shorten => ": up to five shorter prompts",
        OpKind::Seed => ": an image task's seed",
        OpKind::Faceswap => " (no configured backend can run it yet: 400 unsupported_operation)",
    };
    format!("Submit {} {kind} task{what}", article(kind))
}

fn article(kind: OpKind) -> &'static str {
    match kind.as_str().as_bytes()[0] {
        b'a' | b'e' | b'i' | b'o' | b'u' => "an",
        _ => "a",
    }
}

/// The id a submit answers, as a link's runtime expression.
const ANSWERED_ID: &str = "$response.body#/task_id";

/// A link to the operation `to`, given the answered task's id as its `{task_id}`.
fn by_path(to: &str, description: &str) -> RefOr<Link> {
    LinkBuilder::new()
        .operation_id(to)
        .parameter("task_id", ANSWERED_ID)
        .description(description)
        .build()
        .into()
}

/// A link to the operation `to`, given `body`.
fn by_body(to: &str, body: Value, description: &str) -> RefOr<Link> {
    LinkBuilder::new()
        .operation_id(to)
        .request_body(Some(body))
        .description(description)
        .build()
        .into()
}

/// What every submit's answer leads to: the task, its deliveries, its cancel.
fn of_the_task() -> [(&'static str, RefOr<Link>); 6] {
    [
        (
            "GetTask",
            by_path("getTask", "The task just submitted, by id."),
        ),
        (
            "Fetch",
            by_body(
                "fetch",
                json!({ "task_id": ANSWERED_ID }),
                "The task just submitted, through the fetch endpoint.",
            ),
        ),
        (
            "FetchMany",
            by_body(
                "fetchMany",
                json!({ "task_ids": [ANSWERED_ID] }),
                "The task just submitted, through fetch-many.",
            ),
        ),
        (
            "WebhookAttempts",
            by_path("webhookAttempts", "The task's webhook delivery attempts."),
        ),
        (
            "Redeliver",
            by_path("redeliver", "A new delivery of the task's result."),
        ),
        (
            "Cancel",
            by_path(
                "cancelTask",
                "Cancel the task just submitted (409 once it has ended).",
            ),
        ),
    ]
}

/// The follow-ups of an imagine task, for stateful testing to reach them: each is refused
/// (400 invalid_parent) until the task has finished.
fn follow_ups() -> [(&'static str, RefOr<Link>); 4] {
    let until = "(400 invalid_parent until it has finished)";
    [
        (
            "Upscale1x",
            by_body(
                "upscale1x",
                json!({ "parent_task_id": ANSWERED_ID, "index": 1 }),
                &format!("Upscale the first image of the task just submitted {until}."),
            ),
        ),
        (
            "Variations",
            by_body(
                "variations",
                json!({ "parent_task_id": ANSWERED_ID, "index": 2 }),
                &format!("Variations of its second image {until}."),
            ),
        ),
        (
            "Reroll",
            by_body(
                "reroll",
                json!({ "parent_task_id": ANSWERED_ID }),
                &format!("Its prompt again, with a new seed {until}."),
            ),
        ),
        (
            "Seed",
            by_body(
                "seed",
                json!({ "task_id": ANSWERED_ID }),
                &format!("Its seed {until}."),
            ),
        ),
    ]
}

/// `links` added to the 200 answer of `operation`.
fn with_links(
    operation: &mut Operation,
    links: impl IntoIterator<Item = (&'static str, RefOr<Link>)>,
) {
    if let Some(RefOr::T(answer)) = operation.responses.responses.get_mut("200") {
        answer.links.extend(
            links
                .into_iter()
                .map(|(name, link)| (name.to_string(), link)),
        );
    }
}

/// The `progress` callback: what a task's webhook is sent while it runs, when it asked.
fn progress(named: &mut Named) -> Callback {
    named.push((
        ProgressPayload::name().into_owned(),
        ProgressPayload::schema(),
    ));
    ProgressPayload::schemas(named);
    let delivery = OperationBuilder::new()
        .summary(Some(
            "Progress of a running task (with `webhook_events` containing `progress`); every \
             submit operation sends the same",
        ))
        .request_body(Some(json_body(Ref::from_schema_name(
            ProgressPayload::name(),
        ))))
        .response(
            "2XX",
            ResponseBuilder::new().description(
                "Received. Anything else, or no answer within the timeout, loses this state: it \
                 is not retried.",
            ),
        )
        .build();
    [(
        "{$request.body#/webhook_url}".to_string(),
        RefOr::T(PathItem::new(HttpMethod::Post, delivery)),
    )]
    .into()
}

/// Submit a task
///
/// The task is stored durably and its id answered; a request whose `Idempotency-Key` has an
/// answer stored is answered that again; with `Prefer: wait`, the answer is the task's record
/// once it has ended or the wait is over.
// The entry of every submit path, which `routes` completes for each with its own body.
#[utoipa::path(
    post,
    path = "/api/v1/{operation}",
    params(IdempotencyKey, PreferWait),
    responses(
        (status = 200, description = "Stored durably: the task's id; with `Prefer: wait`, the \
            task's record once it has ended or the wait is over"),
        SubmitRefused,
    )
)]
pub async fn submit(
    State(state): State<AppState>,
    path: MatchedPath,
    headers: HeaderMap,
    key: PresentedKey,
    idempotency: KeyHeader,
    req: Request,
) -> Result<Response, ApiError> {
    // Nothing of the body is read for a key that is not live.
    key.admit(&state.store, &state.live_keys).await?;
    let name = path.as_str().strip_prefix("/api/v1/");
    let alias = name.and_then(Alias::from_path);
    let kind = alias
        .map(Alias::kind)
        .or_else(|| name.and_then(|name| name.parse::<OpKind>().ok()))
        .expect("submit routes are made from the operations' names and the aliases");
    let wait = prefer::preferred_wait(&headers)?.map(|asked| wait::served(&state, asked));
    // Held until the store has answered, and let go on every way out of this function.
    let held = idempotency.held(&state, &key)?;
    let body = match (alias, JsonObject::from_request(req, &state).await) {
        (Some(alias), Ok(given)) => Box::pin(alias.translate(&state, &key, given)).await,
        (_, body) => body,
    };
    let keyed = idempotency::keyed(&state, held.as_ref(), kind.as_str(), &body);
    let answer = submit_keyed(&state, kind, &key, body, keyed).await;
    // The store has answered: a duplicate may come now, and will be replayed. A wait below
    // does not hold the key.
    drop(held);
    let (task_id, replayed) = match answer? {
        Answer::Accepted(task_id) => (task_id, None),
        // Several tasks are answered at once: `Prefer: wait` does not apply.
        Answer::Batch(task_ids) => {
            let accepted = Accepted {
                task_id: task_ids[0],
                task_ids: Some(task_ids),
            };
            return Ok(Json(accepted).into_response());
        }
        Answer::Replayed {
            task_id,
            status,
            body,
        } => match (task_id, wait) {
            (Some(task_id), Some(_)) if !body.contains("\"task_ids\"") => (task_id, Some(())),
            _ => return Ok(idempotency::replay(status, body)),
        },
    };
    let Some(secs) = wait else {
        return Ok(accepted(task_id));
    };
    // Boxed, as the alias's translation: a path that few submits take leaves the future of
    // every submit (which axum moves whole, more than once) the smaller.
    Ok(Box::pin(waited(&state, &key, task_id, secs, replayed.is_some())).await)
}

/// The answer of a submit without a wait: the task's id.
fn accepted(task_id: Uuid) -> Response {
    let task_ids = None;
    Json(Accepted { task_id, task_ids }).into_response()
}

/// The answer of a submit with `Prefer: wait`, once its task is stored: the task's record once
/// it has ended or the wait is over.
async fn waited(
    state: &AppState,
    key: &PresentedKey,
    task_id: Uuid,
    secs: u64,
    replayed: bool,
) -> Response {
    // The task is stored: whatever happens to the reads, the caller learns its id.
    let task = match state.store.task_for_key(&key.0, &task_id).await {
        Ok(Some((_, Some(task)))) => task,
        _ => return accepted(task_id),
    };
    let task = wait::until_ended(state, key, &task_id, task, secs).await;
    let mut response = ([prefer::applied(secs)], Json(state.record(&task).await)).into_response();
    if replayed {
        // A replay that waits answers the record as a first request would, marked as a replay.
        response.headers_mut().insert(
            idempotency::REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
    }
    response
}
