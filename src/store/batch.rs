//! Batches of submits, the rules both stores share: every task of a batch is stored in one
//! transaction or none is, under one idempotency key whose stored answer names them all.

use uuid::Uuid;

use super::task::{Idempotency, NewTask, Submitted};

/// Tasks submitted together by one key: all stored, or none.
#[derive(Clone, Debug)]
pub struct NewBatch {
    /// In the caller's order; their own `idempotency` is ignored.
    pub tasks: Vec<NewTask>,
    /// The request's `Idempotency-Key`, covering the whole batch.
    pub idempotency: Option<Idempotency>,
    /// The answer the key replays.
    pub answer: BatchAnswer,
}

/// The shape of a batch's answer, as the API sends it and its key replays it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchAnswer {
    /// `POST /api/v1/batch`: `{"task_ids": [...]}`.
    TaskIds,
    /// A prompt's `--repeat` or permutations: `{"task_id": <the first>, "task_ids": [...]}`.
    FirstAndTaskIds,
}

impl BatchAnswer {
    /// The exact body of the answer for `task_ids` (at least one).
    pub fn body(self, task_ids: &[Uuid]) -> String {
        match self {
            BatchAnswer::TaskIds => serde_json::json!({ "task_ids": task_ids }),
            BatchAnswer::FirstAndTaskIds => {
                serde_json::json!({ "task_id": task_ids.first(), "task_ids": task_ids })
            }
        }
        .to_string()
    }
}

/// What became of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchSubmitted {
    /// Every task stored durably, in the batch's order: public id and `seq`.
    Queued {
        account_id: String,
        tasks: Vec<(Uuid, i64)>,
    },
    /// Nothing stored: the first refusal among the batch's tasks in order (its key's stored
    /// answer, a key no longer live, the quota, the credits for the whole batch...).
    Refused(Submitted),
}

impl NewBatch {
    /// The batch's tasks as the stores' grouped submit takes them: the batch's key on the first
    /// (whose answer is then rewritten as the batch's), none on the others.
    pub(crate) fn keyed_tasks(&self) -> Vec<NewTask> {
        self.tasks
            .iter()
            .enumerate()
            .map(|(i, task)| NewTask {
                idempotency: if i == 0 {
                    self.idempotency.clone()
                } else {
                    None
                },
                ..task.clone()
            })
            .collect()
    }
}

impl BatchSubmitted {
    /// The batch's fate from its tasks' outcomes in a grouped submit: queued when all are, else
    /// the first refusal (the caller rolls the transaction back).
    pub(crate) fn of(outcomes: Vec<Submitted>) -> BatchSubmitted {
        let mut account = None;
        let mut tasks = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            match outcome {
                Submitted::Queued {
                    account_id,
                    task_id,
                    seq,
                } => {
                    account.get_or_insert(account_id);
                    tasks.push((task_id, seq));
                }
                refused => return BatchSubmitted::Refused(refused),
            }
        }
        match account {
            Some(account_id) => BatchSubmitted::Queued { account_id, tasks },
            // An empty batch stores nothing and is refused before the store.
            None => BatchSubmitted::Refused(Submitted::KeyNotLive),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_queued_whole_or_refused_by_its_first_refusal() {
        let queued = |n: i64| Submitted::Queued {
            account_id: "a".into(),
            task_id: Uuid::from_u128(n as u128),
            seq: n,
        };
        assert_eq!(
            BatchSubmitted::of(vec![queued(1), queued(2)]),
            BatchSubmitted::Queued {
                account_id: "a".into(),
                tasks: vec![(Uuid::from_u128(1), 1), (Uuid::from_u128(2), 2)],
            }
        );
        assert_eq!(
            BatchSubmitted::of(vec![
                queued(1),
                Submitted::InsufficientCredits,
                Submitted::QuotaFull
            ]),
            BatchSubmitted::Refused(Submitted::InsufficientCredits)
        );
    }

    #[test]
    fn the_answers_are_the_apis() {
        let ids = [Uuid::nil(), Uuid::from_u128(1)];
        let body: serde_json::Value =
            serde_json::from_str(&BatchAnswer::FirstAndTaskIds.body(&ids)).unwrap();
        assert_eq!(body["task_id"], ids[0].to_string());
        assert_eq!(body["task_ids"][1], ids[1].to_string());
        let body: serde_json::Value =
            serde_json::from_str(&BatchAnswer::TaskIds.body(&ids)).unwrap();
        assert!(body.get("task_id").is_none());
        assert_eq!(body["task_ids"].as_array().unwrap().len(), 2);
    }
}
