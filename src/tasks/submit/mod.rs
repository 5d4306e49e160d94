//! Submitting a task of any operation, for the API, the dashboard's playground and the CLI alike:
//! the body checked field by field ([`draft`]), the parent checked against the operation's rules
//! and what the worker needs from it resolved ([`resolve`]), then the task stored durably with
//! the account's quota, credits and idempotency key decided in the same write.

pub mod alias;
pub mod batch;
mod draft;
mod generation;
mod images;
pub mod request;
mod resolve;
pub mod schema;

use uuid::Uuid;

use super::body::JsonObject;
use super::Tasks;
use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::generate::Generator;
use crate::refusal::ApiError;
use crate::store::{BatchAnswer, Idempotency, NewTask, Submitted, Upload};
use crate::telemetry::request as noted;
use draft::Draft;

pub use draft::{BLEND_INPUTS, FOLLOW_UP_MAX_SIDE, WEBHOOK_SECRET_MAX_CHARS};

/// What a submit of `kind` does with its body, for the API and the dashboard's playground
/// alike: validate, resolve the parent, store durably; the new task's id (the first, when the
/// prompt made a batch).
pub async fn submit_operation(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Uuid, ApiError> {
    match submit_keyed(tasks, kind, key, body, None).await? {
        Answer::Accepted(task_id) => Ok(task_id),
        Answer::Batch(task_ids) => Ok(task_ids[0]),
        Answer::Replayed { .. } => Err(ApiError::Internal(anyhow::anyhow!(
            "a submit without an idempotency key was answered with a replay"
        ))),
    }
}

/// How a submit was answered.
pub enum Answer {
    Accepted(Uuid),
    /// Several tasks, in order (at least one): a batch, or a prompt's `--repeat` or
    /// permutations.
    Batch(Vec<Uuid>),
    /// The stored first answer to the same request with the same idempotency key.
    Replayed {
        /// The task the first request made (the first, for a batch).
        task_id: Option<Uuid>,
        status: u16,
        body: String,
    },
}

/// [`submit_operation`], with the request's idempotency key if it has one. An imagine prompt
/// with `--repeat` or `{a, b}` permutations is a batch ([`batch::drafts`]).
pub async fn submit_keyed(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
    idempotency: Option<Idempotency>,
) -> Result<Answer, ApiError> {
    let body = match body {
        Ok(body) => body,
        Err(e) => return Err(confirmed(tasks, key, e).await),
    };
    let draft = match batch::drafts(tasks, kind, key, &body).await? {
        batch::Drafts::One(draft) => draft,
        batch::Drafts::Many(drafts) => {
            return batch::submit_drafts(
                tasks,
                key,
                drafts,
                idempotency,
                BatchAnswer::FirstAndTaskIds,
            )
            .await
            .map_err(|(_, e)| e)
        }
    };
    let (mut task, kept) = prepare(tasks, key, draft).await?;
    task.idempotency = idempotency;
    let answer = accept(tasks, key, &task).await;
    // Images given inline for a submit that stored no task of its own are not kept.
    if !matches!(answer, Ok(Answer::Accepted(_))) {
        super::upload::discard(tasks, &kept).await;
    }
    answer
}

/// `e`, once the key is known to be live: only a live key learns what was wrong with its
/// request.
async fn confirmed(tasks: &Tasks, key: &PresentedKey, e: ApiError) -> ApiError {
    match key.confirm(&tasks.store).await {
        Ok(()) => e,
        Err(refused) => refused,
    }
}

/// A body of `kind` checked field by field, with the rules across fields, its prompt's
/// moderation and its mask: everything that needs neither the store nor the parent.
async fn parse(tasks: &Tasks, kind: OpKind, body: &JsonObject) -> Result<Draft, ApiError> {
    if !tasks.pool.supports(kind) {
        return Err(ApiError::BadRequest {
            code: "unsupported_operation",
            msg: format!("{kind}: no configured backend can run this operation"),
        });
    }
    let draft = Draft::parse(kind, tasks, body)?;
    if let Some(prompt) = &draft.prompt {
        // Every list applies to every account until plans name theirs.
        tasks
            .moderation
            .check("prompt", prompt.as_str(), |_| true)?;
    }
    draft.check_mask().await?;
    Ok(draft)
}

/// The rest of a submit's checks, once its body has passed: its images kept as uploads, its
/// parent checked; the task to store and the uploads kept for it (discarded here if it goes no
/// further, to be discarded by the caller if the task is not stored).
async fn prepare(
    tasks: &Tasks,
    key: &PresentedKey,
    mut draft: Draft,
) -> Result<(NewTask, Vec<Upload>), ApiError> {
    let kept = draft.take_images(tasks, key).await?;
    let parent = match draft.parent {
        None => Ok(None),
        Some((field, id)) => tasks.of_key(key, id).await.map(|t| Some((field, t))),
    };
    let task = match parent {
        Ok(parent) => draft.resolve(tasks, key, parent).await,
        Err(e) => Err(e),
    };
    match task {
        Ok(task) => Ok((task, kept)),
        Err(e) => {
            super::upload::discard(tasks, &kept).await;
            Err(e)
        }
    }
}

/// Whether the server is shutting down, as a refusal of new tasks.
fn shutting_down(tasks: &Tasks) -> Result<(), ApiError> {
    if tasks.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "the server is shutting down; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    Ok(())
}

/// Store `task` for `key`'s account and answer with its id, or with the stored answer of its
/// idempotency key.
async fn accept(tasks: &Tasks, key: &PresentedKey, task: &NewTask) -> Result<Answer, ApiError> {
    shutting_down(tasks)?;
    let id = match tasks.store.submit(task, &key.0, &tasks.pending).await? {
        Submitted::Queued {
            account_id,
            task_id,
            ..
        } => {
            noted::note_task(task_id);
            noted::note_account(&account_id);
            task_id
        }
        refused => {
            return refusal(refused, || {
                format!(
                    "{}: the account's credits do not cover this operation, which costs {}",
                    task.task_type(),
                    task.cost
                )
            })
        }
    };
    // The request's own line ("request done", with the task id) says it was accepted; a second
    // line per submit at `info` cost about as much as the first.
    tracing::debug!(mode = task.process_mode.as_str(), "task accepted");
    Ok(Answer::Accepted(id))
}

/// What a submit that stored nothing answers: its key's stored answer, or the refusal
/// (`credits` says what the credits did not cover).
fn refusal(submitted: Submitted, credits: impl FnOnce() -> String) -> Result<Answer, ApiError> {
    Err(match submitted {
        Submitted::Queued { .. } => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "a stored task was taken for a refusal"
            )))
        }
        Submitted::KeyNotLive => ApiError::Unauthorized,
        Submitted::AccountExpired => ApiError::AccountExpired,
        Submitted::InsufficientCredits => ApiError::InsufficientCredits { msg: credits() },
        Submitted::QuotaFull => ApiError::QuotaExceeded {
            msg: "the account already has its plan's max_pending tasks queued or running; \
                  wait for some to finish"
                .into(),
            retry_after_secs: 10,
        },
        Submitted::Replayed {
            task_id,
            status,
            body,
        } => {
            let task_id = Uuid::try_parse(&task_id).ok();
            if let Some(id) = task_id {
                noted::note_task(id);
            }
            return Ok(Answer::Replayed {
                task_id,
                status,
                body,
            });
        }
        Submitted::IdempotencyKeyReused => ApiError::IdempotencyKeyReused,
        Submitted::IdempotencyKeyInUse => ApiError::IdempotencyKeyInUse,
    })
}
