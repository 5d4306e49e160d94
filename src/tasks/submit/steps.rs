//! The steps a submit is made of, shared by one task's submit and a batch's: the body's checks,
//! the rest once it has passed, and what a submit that stored nothing answers.

use uuid::Uuid;

use super::draft::Draft;
use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::generate::Generator;
use crate::refusal::ApiError;
use crate::store::{NewTask, Submitted, Upload};
use crate::tasks::body::JsonObject;
use crate::tasks::Tasks;
use crate::telemetry::request as noted;

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

/// `e`, once the key is known to be live: only a live key learns what was wrong with its
/// request.
pub(super) async fn confirmed(tasks: &Tasks, key: &PresentedKey, e: ApiError) -> ApiError {
    match key.confirm(&tasks.store).await {
        Ok(()) => e,
        Err(refused) => refused,
    }
}

/// A body of `kind` checked field by field, with the rules across fields, its prompt's
/// moderation and its mask: everything that needs neither the store nor the parent.
pub(super) async fn parse(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: &JsonObject,
) -> Result<Draft, ApiError> {
    if !tasks.pool.supports(kind) {
        return Err(ApiError::BadRequest {
            code: "unsupported_operation",
            msg: format!("{kind}: no configured backend can run this operation"),
        });
    }
    let draft = Draft::parse(kind, tasks, body)?;
    moderate(tasks, key, &draft).await?;
    draft.check_mask().await?;
    Ok(draft)
}

/// Refuse the draft's prompt when a moderation list of the caller's plan holds one of its
/// terms, or the operator's prompt checker flags it. Only when some plan names its lists, and
/// some list holds the prompt, is the key's plan looked up (one indexed read, so a plan change
/// applies to the next submit): a prompt that no list holds passes whatever the plan, and that
/// read cost each submit more than the rest of its checks (docs/benchmarks.md, "Plans on the
/// submit path"). Without lists named by a plan, every list applies to everyone.
async fn moderate(tasks: &Tasks, key: &PresentedKey, draft: &Draft) -> Result<(), ApiError> {
    let Some(prompt) = &draft.prompt else {
        return Ok(());
    };
    let plans = tasks.plans.get();
    let names_lists =
        |plan: &crate::config::Plan| plan.moderation.as_ref().is_some_and(|l| !l.is_empty());
    if plans.plans.values().any(names_lists) && tasks.moderation.held_by_any(prompt.as_str()) {
        let owner = crate::auth::look_up(tasks.store.as_ref(), &key.0).await?;
        match &plans.of(&owner.account.plan).moderation {
            Some(lists) if !lists.is_empty() => {
                tasks.moderation.check("prompt", prompt.as_str(), |list| {
                    lists.iter().any(|named| named == list)
                })?
            }
            // A plan that names no list gets every list (the contract's rule).
            _ => tasks
                .moderation
                .check("prompt", prompt.as_str(), |_| true)?,
        }
    } else {
        tasks
            .moderation
            .check("prompt", prompt.as_str(), |_| true)?;
    }
    tasks
        .moderation
        .check_with_service("prompt", prompt.as_str())
        .await
}

/// The rest of a submit's checks, once its body has passed: its images kept as uploads, its
/// parent checked; the task to store and the uploads kept for it (discarded here if it goes no
/// further, to be discarded by the caller if the task is not stored).
pub(super) async fn prepare(
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
            crate::tasks::upload::discard(tasks, &kept).await;
            Err(e)
        }
    }
}

/// Whether the server is shutting down, as a refusal of new tasks.
pub(super) fn shutting_down(tasks: &Tasks) -> Result<(), ApiError> {
    if tasks.shutdown.is_cancelled() {
        return Err(ApiError::Unavailable {
            msg: "the server is shutting down; try again shortly".into(),
            retry_after_secs: 5,
        });
    }
    Ok(())
}

/// What a submit that stored nothing answers: its key's stored answer, or the refusal
/// (`credits` says what the credits did not cover).
pub(super) fn refusal(
    submitted: Submitted,
    credits: impl FnOnce() -> String,
) -> Result<Answer, ApiError> {
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
