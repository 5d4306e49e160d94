//! Several tasks in one submit: `POST /api/v1/batch`'s requests, and an imagine prompt's
//! `--repeat N` and `{a, b}` permutations. Every task is checked as a single submit checks it,
//! then all are stored in one transaction or none is (`Store::submit_batch`), at most the
//! account's plan's `batch_max`, under one idempotency key.

use serde_json::Value;
use uuid::Uuid;

use super::draft::Draft;
use super::steps::{confirmed, parse, prepare, refusal, shutting_down, Answer};
use crate::auth::{look_up, PresentedKey};
use crate::domain::{permutations, OpKind};
use crate::refusal::ApiError;
use crate::store::{BatchAnswer, BatchSubmitted, Idempotency, NewBatch, NewTask, Upload};
use crate::tasks::body::JsonObject;
use crate::tasks::Tasks;
use crate::telemetry::request as noted;

/// How many tasks a submit's body makes.
pub(super) enum Drafts {
    /// Boxed: a draft is large beside a vector.
    One(Box<Draft>),
    /// In order: each permutation, its `--repeat` copies together.
    Many(Vec<Draft>),
}

/// Most tasks one batch of `key`'s account may make: its plan's `batch_max`. Looking it up
/// also refuses a key that is not live (401) or an expired account (402).
async fn batch_max(tasks: &Tasks, key: &PresentedKey) -> Result<usize, ApiError> {
    let owner = look_up(tasks.store.as_ref(), &key.0).await?;
    Ok(tasks.plans.get().of(&owner.account.plan).batch_max as usize)
}

/// Whether `prompt` has a permutation group: a `{` that is not escaped.
fn has_group(prompt: &str) -> bool {
    let mut backslashes = 0;
    for c in prompt.chars() {
        match c {
            '{' if backslashes % 2 == 0 => return true,
            '\\' => backslashes += 1,
            _ => backslashes = 0,
        }
    }
    false
}

/// A body of `kind` checked as one submit's, or, for an imagine prompt with `--repeat N` or
/// permutations, as the batch it makes: one draft per task (each prompt's expansion, without
/// `--repeat`), at most the plan's `batch_max` (400 past it, nothing stored).
pub(super) async fn drafts(
    tasks: &Tasks,
    kind: OpKind,
    key: &PresentedKey,
    body: &JsonObject,
) -> Result<Drafts, ApiError> {
    let prompt = match body.0.get("prompt") {
        Some(Value::String(prompt)) if kind == OpKind::Imagine => Some(prompt.as_str()),
        _ => None,
    };
    let grouped = prompt.is_some_and(has_group);
    let mut first = None;
    if !grouped {
        let draft = match parse(tasks, kind, key, body).await {
            Ok(draft) => draft,
            Err(e) => return Err(confirmed(tasks, key, e).await),
        };
        if kind != OpKind::Imagine || draft.extras.parameters.repeat.is_none() {
            return Ok(Drafts::One(Box::new(draft)));
        }
        first = Some(draft);
    }
    let prompt = prompt.expect("only an imagine prompt makes a batch");
    let max = batch_max(tasks, key).await?;
    let over = |n: usize| {
        ApiError::field(
            "prompt",
            "invalid_value",
            format!(
                "--repeat and {{...}} permutations make {n} tasks, more than the plan's \
                 batch_max of {max}"
            ),
        )
    };
    let prompts = if grouped {
        permutations::expand(prompt, max).map_err(|rule| {
            ApiError::field("prompt", "invalid_value", rule.replace("prompts", "tasks"))
        })?
    } else {
        vec![prompt.to_string()]
    };
    let mut drafts = Vec::new();
    for expansion in prompts {
        let mut body = JsonObject(body.0.clone());
        body.0.insert("prompt".into(), Value::String(expansion));
        let mut draft = match first.take() {
            Some(draft) => draft,
            None => parse(tasks, kind, key, &body).await?,
        };
        let repeat = draft.extras.parameters.repeat.take().unwrap_or(1) as usize;
        if drafts.len() + repeat > max {
            return Err(over(drafts.len() + repeat));
        }
        drafts.push(draft);
        for _ in 1..repeat {
            let mut copy = parse(tasks, kind, key, &body).await?;
            copy.extras.parameters.repeat = None;
            drafts.push(copy);
        }
    }
    Ok(Drafts::Many(drafts))
}

/// One request of `POST /api/v1/batch`, as given.
pub struct Member {
    pub kind: OpKind,
    pub body: JsonObject,
}

/// `requests[i].` before a refusal that names a field, so that it names the request.
fn of_request(i: usize, e: ApiError) -> ApiError {
    let at = |msg: String| format!("requests[{i}].{msg}");
    match e {
        ApiError::BadRequest { code, msg } => ApiError::BadRequest { code, msg: at(msg) },
        ApiError::UploadNotFound { msg } => ApiError::UploadNotFound { msg: at(msg) },
        e => e,
    }
}

/// `POST /api/v1/batch`'s body: `{"requests": [{"operation", "body"}, ...]}`, each request
/// named by its index when it is refused.
pub fn members(body: &JsonObject) -> Result<Vec<Member>, ApiError> {
    let requests = match body.0.get("requests") {
        None | Some(Value::Null) => {
            return Err(ApiError::field("requests", "missing_field", "is required"))
        }
        Some(Value::Array(requests)) => requests,
        Some(_) => {
            return Err(ApiError::field(
                "requests",
                "invalid_type",
                "must be an array of {\"operation\", \"body\"} objects",
            ))
        }
    };
    if requests.is_empty() {
        return Err(ApiError::field(
            "requests",
            "invalid_value",
            "must hold at least one request",
        ));
    }
    requests
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let field = |name: &str| format!("requests[{i}].{name}");
            let Value::Object(request) = request else {
                return Err(ApiError::field(
                    &format!("requests[{i}]"),
                    "invalid_type",
                    "must be an object with operation and body",
                ));
            };
            let required =
                |name: &str| ApiError::field(&field(name), "missing_field", "is required");
            let wrong_type =
                |name: &str, what: &str| ApiError::field(&field(name), "invalid_type", what);
            let kind = match request.get("operation") {
                Some(Value::String(name)) => name.parse::<OpKind>().map_err(|_| {
                    ApiError::field(
                        &field("operation"),
                        "invalid_value",
                        format!("{name:?} is not an operation"),
                    )
                })?,
                None | Some(Value::Null) => return Err(required("operation")),
                Some(_) => return Err(wrong_type("operation", "must be a string")),
            };
            let body = match request.get("body") {
                Some(Value::Object(body)) => body.clone(),
                None | Some(Value::Null) => return Err(required("body")),
                Some(_) => return Err(wrong_type("body", "must be an object")),
            };
            Ok(Member {
                kind,
                body: JsonObject(body),
            })
        })
        .collect()
}

/// Submit `members` as one batch for `key`'s account: at most its plan's `batch_max`, each
/// checked as one submit is (a prompt's `--repeat` and permutations are refused inside a
/// batch: each request is one task), then all stored or none. The tasks' ids in order, or the
/// stored answer of the request's idempotency key.
pub async fn submit_batch(
    tasks: &Tasks,
    key: &PresentedKey,
    members: Result<Vec<Member>, ApiError>,
    idempotency: Option<Idempotency>,
) -> Result<Answer, ApiError> {
    let members = match members {
        Ok(members) => members,
        Err(e) => return Err(confirmed(tasks, key, e).await),
    };
    let max = batch_max(tasks, key).await?;
    if members.len() > max {
        return Err(ApiError::field(
            "requests",
            "invalid_value",
            format!(
                "holds {} requests, more than the plan's batch_max of {max}",
                members.len()
            ),
        ));
    }
    let mut drafts = Vec::with_capacity(members.len());
    for (i, member) in members.iter().enumerate() {
        let grouped = member.kind == OpKind::Imagine
            && member
                .body
                .0
                .get("prompt")
                .and_then(Value::as_str)
                .is_some_and(has_group);
        if grouped {
            return Err(of_request(
                i,
                ApiError::field(
                    "prompt",
                    "invalid_value",
                    "{...} permutations make a batch of their own; inside a batch, send each \
                     task as a request (write \\{ for a brace)",
                ),
            ));
        }
        let draft = parse(tasks, member.kind, key, &member.body)
            .await
            .map_err(|e| of_request(i, e))?;
        if draft.kind == OpKind::Imagine && draft.extras.parameters.repeat.is_some() {
            return Err(of_request(
                i,
                ApiError::field(
                    "prompt",
                    "invalid_value",
                    "--repeat makes a batch of its own; inside a batch, send each task as a \
                     request",
                ),
            ));
        }
        drafts.push(draft);
    }
    submit_drafts(tasks, key, drafts, idempotency, BatchAnswer::TaskIds)
        .await
        .map_err(|(i, e)| match i {
            Some(i) => of_request(i, e),
            None => e,
        })
}

/// The batch of `drafts`: each one's images kept and parent checked, then all stored in one
/// transaction or none. On a refusal, the index of the draft it is about, if it is one's.
pub(super) async fn submit_drafts(
    tasks: &Tasks,
    key: &PresentedKey,
    drafts: Vec<Draft>,
    idempotency: Option<Idempotency>,
    answer: BatchAnswer,
) -> Result<Answer, (Option<usize>, ApiError)> {
    let mut new: Vec<NewTask> = Vec::with_capacity(drafts.len());
    let mut kept: Vec<Upload> = Vec::new();
    for (i, draft) in drafts.into_iter().enumerate() {
        match prepare(tasks, key, draft).await {
            Ok((task, uploads)) => {
                new.push(task);
                kept.extend(uploads);
            }
            Err(e) => {
                super::super::upload::discard(tasks, &kept).await;
                return Err((Some(i), e));
            }
        }
    }
    let answered = store(tasks, key, new, idempotency, answer).await;
    if !matches!(answered, Ok(Answer::Batch(_))) {
        super::super::upload::discard(tasks, &kept).await;
    }
    answered.map_err(|e| (None, e))
}

/// Store the batch's tasks, all or none.
async fn store(
    tasks: &Tasks,
    key: &PresentedKey,
    new: Vec<NewTask>,
    idempotency: Option<Idempotency>,
    answer: BatchAnswer,
) -> Result<Answer, ApiError> {
    shutting_down(tasks)?;
    let cost: i64 = new.iter().map(|t| t.cost).sum();
    let n = new.len();
    let batch = NewBatch {
        tasks: new,
        idempotency,
        answer,
    };
    match tasks
        .store
        .submit_batch(&batch, &key.0, &tasks.pending.get())
        .await?
    {
        BatchSubmitted::Queued { account_id, tasks } => {
            let ids: Vec<Uuid> = tasks.into_iter().map(|(id, _)| id).collect();
            noted::note_task(ids[0]);
            noted::note_account(&account_id);
            tracing::debug!(tasks = ids.len(), "batch accepted");
            Ok(Answer::Batch(ids))
        }
        BatchSubmitted::Refused(refused) => refusal(refused, || {
            format!(
                "the account's credits do not cover this batch of {n} tasks, which costs \
                 {cost}; nothing was stored"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_an_unescaped_brace() {
        assert!(has_group("a {red, blue} bird"));
        assert!(
            has_group("a \\\\{red} bird"),
            "an escaped backslash, then a group"
        );
        assert!(!has_group("a \\{red\\} bird"));
        assert!(!has_group("a bird"));
    }
}
