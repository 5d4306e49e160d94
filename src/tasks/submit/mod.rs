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
mod steps;

use uuid::Uuid;

use super::body::JsonObject;
use super::Tasks;
use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::refusal::ApiError;
use crate::store::{BatchAnswer, Idempotency, NewTask, Submitted};
use crate::telemetry::request as noted;
use steps::{confirmed, prepare, refusal, shutting_down};

pub use draft::{BLEND_INPUTS, FOLLOW_UP_MAX_SIDE, WEBHOOK_SECRET_MAX_CHARS};
pub use steps::Answer;

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
        batch::Drafts::One(draft) => *draft,
        batch::Drafts::Many(drafts) => {
            // Boxed: few submits are batches, and every submit's future would otherwise hold
            // room for this one's.
            return Box::pin(batch::submit_drafts(
                tasks,
                key,
                drafts,
                idempotency,
                BatchAnswer::FirstAndTaskIds,
            ))
            .await
            .map_err(|(_, e)| e);
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

/// Store `task` for `key`'s account and answer with its id, or with the stored answer of its
/// idempotency key.
async fn accept(tasks: &Tasks, key: &PresentedKey, task: &NewTask) -> Result<Answer, ApiError> {
    shutting_down(tasks)?;
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
