//! The channels of PostgreSQL's LISTEN/NOTIFY that wake other nodes: the commits that notify
//! and the listener share these names, and the payloads they carry.

use std::sync::Arc;

use sqlx::{Postgres, Transaction};

use crate::domain::{Retrying, TaskStatus};
use crate::store::{Happened, StoreResult, TaskEvent};

/// The channel a commit that queues a task notifies. A submit's payload names its accounts and
/// the lowest `seq` it gave each ([`new_tasks_note`]); other payloads are empty.
pub(super) const QUEUE_CHANNEL: &str = "easel_queue";
/// The channel a commit that queues or re-arms a webhook delivery notifies.
pub(super) const OUTBOX_CHANNEL: &str = "easel_outbox";
/// Something happened to a task: the payload is a [`TaskEvent`] ([`event_note`]).
pub(super) const TASK_EVENT_CHANNEL: &str = "easel_task_event";

/// A NOTIFY payload holds less than 8000 bytes; a submit's list of accounts that would not fit
/// is left out (every account's listeners then read what is new).
const NOTE_MAX: usize = 7900;

/// `{account} {seq}` for each account of a submit, `;`-separated; empty when too long.
pub(super) fn new_tasks_note<'a>(firsts: impl Iterator<Item = (&'a str, i64)>) -> String {
    let note: Vec<String> = firsts.map(|(a, seq)| format!("{a} {seq}")).collect();
    let note = note.join(";");
    if note.len() > NOTE_MAX {
        String::new()
    } else {
        note
    }
}

/// The accounts and first `seq`s of a submit's note; None when it names none (every account's
/// listeners should look).
pub(super) fn read_new_tasks(note: &str) -> Option<Vec<(&str, i64)>> {
    let firsts: Vec<(&str, i64)> = note
        .split(';')
        .filter_map(|entry| {
            let (account, seq) = entry.split_once(' ')?;
            Some((account, seq.parse().ok()?))
        })
        .collect();
    (!firsts.is_empty()).then_some(firsts)
}

/// The SQL expression of a status change's note, for the statement that makes the change (its
/// columns `seq`, `event_seq` and `account_id`, and the new status): the form [`read_event`]
/// reads.
pub(super) fn changed_note_sql(status: TaskStatus) -> String {
    format!(
        "pg_notify('{TASK_EVENT_CHANNEL}', concat_ws(' ', 'c', seq, event_seq, '{}', account_id))",
        status.as_str()
    )
}

/// Notify `channel` when the transaction commits.
pub(super) async fn notify(tx: &mut Transaction<'_, Postgres>, channel: &str) -> StoreResult<()> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(channel)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A progress event's note.
pub(super) fn event_note(event: &TaskEvent) -> String {
    match &event.what {
        Happened::Changed { status } => format!(
            "c {} {} {} {}",
            event.seq,
            event.version,
            status.as_str(),
            event.account_id
        ),
        Happened::Progress {
            percentage,
            preview_key,
            retrying,
            live,
        } => {
            let mut note = format!(
                "p {} {} {} {} {} {}",
                event.seq,
                event.version,
                percentage,
                u8::from(*live),
                event.account_id,
                preview_key.as_deref().unwrap_or("")
            );
            // Last, since its error has spaces: a reader takes the rest of the note. A node of an
            // older version reads the note without it.
            if let Some(r) = retrying {
                note.push_str(&format!(" {} {}", r.attempt, r.error));
            }
            note.trim_end().to_string()
        }
    }
}

/// The event a note says; None for one it cannot read (written by a newer version).
pub(super) fn read_event(note: &str) -> Option<TaskEvent> {
    let mut parts = note.split(' ');
    let kind = parts.next()?;
    let seq = parts.next()?.parse().ok()?;
    let version = parts.next()?.parse().ok()?;
    match kind {
        "c" => {
            let status = parts.next()?.parse().ok()?;
            let account_id: Arc<str> = parts.next()?.into();
            Some(TaskEvent {
                seq,
                account_id,
                version,
                what: Happened::Changed { status },
            })
        }
        "p" => {
            let percentage = parts.next()?.parse().ok()?;
            let live = parts.next()? == "1";
            let account_id: Arc<str> = parts.next()?.into();
            let preview_key = parts.next().filter(|k| !k.is_empty()).map(str::to_string);
            let retrying = match parts.next() {
                Some(attempt) => Some(Retrying {
                    attempt: attempt.parse().ok()?,
                    error: parts.collect::<Vec<_>>().join(" "),
                }),
                None => None,
            };
            Some(TaskEvent {
                seq,
                account_id,
                version,
                what: Happened::Progress {
                    percentage,
                    preview_key,
                    retrying,
                    live,
                },
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_read_back_as_written() {
        let events = [
            TaskEvent {
                seq: 7,
                account_id: "acc".into(),
                version: 12,
                what: Happened::Changed {
                    status: TaskStatus::Finished,
                },
            },
            TaskEvent {
                seq: 7,
                account_id: "acc".into(),
                version: 12,
                what: Happened::Progress {
                    percentage: 40,
                    preview_key: Some("t/0123/preview-1.jpg".into()),
                    retrying: None,
                    live: false,
                },
            },
            TaskEvent {
                seq: 7,
                account_id: "acc".into(),
                version: 13,
                what: Happened::Progress {
                    percentage: 40,
                    preview_key: Some("t/0123/preview-1.jpg".into()),
                    retrying: Some(Retrying::new(2, "connection refused (backend one)")),
                    live: false,
                },
            },
            TaskEvent {
                seq: 7,
                account_id: "acc".into(),
                version: 14,
                what: Happened::Progress {
                    percentage: 40,
                    preview_key: None,
                    retrying: Some(Retrying::new(3, "HTTP 503:  loading ")),
                    live: true,
                },
            },
            TaskEvent {
                seq: 7,
                account_id: "acc".into(),
                version: 12,
                what: Happened::Progress {
                    percentage: 41,
                    preview_key: None,
                    retrying: None,
                    live: true,
                },
            },
        ];
        for event in events {
            assert_eq!(read_event(&event_note(&event)), Some(event));
        }
        assert_eq!(read_event("x 1 2"), None);
        assert_eq!(read_event("c 1 2 nosuchstatus a"), None);
        let note = new_tasks_note([("a", 3), ("b", 9)].into_iter());
        assert_eq!(read_new_tasks(&note), Some(vec![("a", 3), ("b", 9)]));
        assert_eq!(read_new_tasks(""), None);
    }
}
