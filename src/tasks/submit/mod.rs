//! Submitting a task of any operation, for the API, the dashboard's playground and the CLI alike:
//! the body checked field by field ([`draft`]), the parent checked against the operation's rules
//! and what the worker needs from it resolved ([`resolve`]), then the task stored durably with
//! the account's quota, credits and idempotency key decided in the same write.

pub mod alias;
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
use crate::store::{Idempotency, NewTask, Submitted};
use crate::telemetry::request as noted;
use draft::Draft;

pub use draft::{BLEND_INPUTS, FOLLOW_UP_MAX_SIDE, WEBHOOK_SECRET_MAX_CHARS};

/// What a submit of `kind` does with its body, for the API and the dashboard's playground
/// alike: validate, resolve the parent, store durably; the new task's id.
pub async fn submit_operation(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
) -> Result<Uuid, ApiError> {
    match submit_keyed(tasks, kind, key, body, None).await? {
        Answer::Accepted(task_id) => Ok(task_id),
        Answer::Replayed { .. } => Err(ApiError::Internal(anyhow::anyhow!(
            "a submit without an idempotency key was answered with a replay"
        ))),
    }
}

/// How a submit was answered.
pub enum Answer {
    Accepted(Uuid),
    /// The stored first answer to the same request with the same idempotency key.
    Replayed {
        /// The task the first request made.
        task_id: Option<Uuid>,
        status: u16,
        body: String,
    },
}

/// [`submit_operation`], with the request's idempotency key if it has one.
pub async fn submit_keyed(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: Result<JsonObject, ApiError>,
    idempotency: Option<Idempotency>,
) -> Result<Answer, ApiError> {
    let draft = body.and_then(|body| {
        if !tasks.pool.supports(kind) {
            return Err(ApiError::BadRequest {
                code: "unsupported_operation",
                msg: format!("{kind}: no configured backend can run this operation"),
            });
        }
        Draft::parse(kind, tasks, &body)
    });
    let draft = match draft {
        Ok(draft) => match moderate(tasks, key, &draft).await {
            Ok(()) => draft.check_mask().await.map(|()| draft),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let mut draft = match draft {
        Ok(draft) => draft,
        Err(e) => {
            // Only a live key learns what was wrong with its request.
            key.confirm(&tasks.store).await?;
            return Err(e);
        }
    };
    let kept = draft.take_images(tasks, key).await?;
    let answer = submit_draft(tasks, key, draft, idempotency).await;
    // Images given inline for a submit that stored no task of its own are not kept.
    if !matches!(answer, Ok(Answer::Accepted(_))) {
        super::upload::discard(tasks, &kept).await;
    }
    answer
}

/// Refuse the draft's prompt when a moderation list of the caller's plan holds one of its
/// terms, or the operator's prompt checker flags it. Only when some plan names its lists is the key's plan looked up (one indexed read,
/// so a plan change applies to the next submit); otherwise every list applies to everyone.
async fn moderate(tasks: &Tasks, key: &PresentedKey, draft: &Draft) -> Result<(), ApiError> {
    let Some(prompt) = &draft.prompt else {
        return Ok(());
    };
    let plans = tasks.plans.get();
    let names_lists =
        |plan: &crate::config::Plan| plan.moderation.as_ref().is_some_and(|l| !l.is_empty());
    if !plans.plans.values().any(names_lists) {
        tasks
            .moderation
            .check("prompt", prompt.as_str(), |_| true)?;
        return tasks
            .moderation
            .check_with_service("prompt", prompt.as_str())
            .await;
    }
    let owner = crate::auth::look_up(tasks.store.as_ref(), &key.0).await?;
    let listed = match &plans.of(&owner.account.plan).moderation {
        Some(lists) if !lists.is_empty() => {
            tasks.moderation.check("prompt", prompt.as_str(), |list| {
                lists.iter().any(|named| named == list)
            })
        }
        // A plan that names no list gets every list (the contract's rule).
        _ => tasks.moderation.check("prompt", prompt.as_str(), |_| true),
    };
    listed?;
    tasks
        .moderation
        .check_with_service("prompt", prompt.as_str())
        .await
}

/// The rest of a submit, once its body has passed: the parent, the task, the store.
async fn submit_draft(
    tasks: &Tasks,
    key: &PresentedKey,
    draft: Draft,
    idempotency: Option<Idempotency>,
) -> Result<Answer, ApiError> {
    let parent = match draft.parent {
        None => None,
        Some((field, id)) => Some((field, tasks.of_key(key, id).await?)),
    };
    let mut task = draft.resolve(tasks, key, parent).await?;
    task.idempotency = idempotency;
    accept(tasks, key, &task).await
}

/// Store `task` for `key`'s account and answer with its id, or with the stored answer of its
/// idempotency key.
async fn accept(tasks: &Tasks, key: &PresentedKey, task: &NewTask) -> Result<Answer, ApiError> {
    if tasks.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "the server is shutting down; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    let id = match tasks
        .store
        .submit(task, &key.0, &tasks.pending.get())
        .await?
    {
        Submitted::Queued {
            account_id,
            task_id,
            ..
        } => {
            noted::note_task(task_id);
            noted::note_account(&account_id);
            task_id
        }
        Submitted::KeyNotLive => return Err(ApiError::Unauthorized),
        Submitted::AccountExpired => return Err(ApiError::AccountExpired),
        Submitted::InsufficientCredits => {
            return Err(ApiError::InsufficientCredits {
                msg: format!(
                    "{}: the account's credits do not cover this operation, which costs {}",
                    task.task_type(),
                    task.cost
                ),
            })
        }
        Submitted::QuotaFull => {
            return Err(ApiError::QuotaExceeded {
                msg: "the account already has its plan's max_pending tasks queued or running; \
                      wait for some to finish"
                    .into(),
                retry_after_secs: 10,
            })
        }
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
        Submitted::IdempotencyKeyReused => return Err(ApiError::IdempotencyKeyReused),
        Submitted::IdempotencyKeyInUse => return Err(ApiError::IdempotencyKeyInUse),
    };
    // The request's own line ("request done", with the task id) says it was accepted; a second
    // line per submit at `info` cost about as much as the first.
    tracing::debug!(mode = task.process_mode.as_str(), "task accepted");
    Ok(Answer::Accepted(id))
}
