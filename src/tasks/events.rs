//! Event streams: a task's, or all of an account's tasks', as Server-Sent Events. A stream says
//! each task's record as it is on connect (or what changed since the caller's `Last-Event-ID`),
//! then its progress, place in line and preview as they change, then its final record. It
//! listens on this node's [`TaskEvents`](crate::store::TaskEvents), which hears every node's
//! changes (PostgreSQL: through the one LISTEN connection), and reads the store only when a
//! task's stored state changed: no stream polls.
//!
//! Event ids are versions (`store::events`): `{version}` for a stored state, `{version}.{n}` for
//! what came after it and is not stored yet. A stream resumed with an id reads what changed at or
//! after that version (on PostgreSQL from a little before, since versions are taken before their
//! transactions commit); an id that is not one, or is from the future, starts from the current
//! state.

mod sent;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;

use super::event_memo::Read;
use super::queue_position::{waiting_for_at, waits};
pub use super::streams::{StreamSlot, Streams};
use super::Tasks;
use crate::domain::wire::{Record, TaskProgress, WaitingFor};
use crate::domain::{OpKind, Retrying, TaskStatus};
use crate::refusal::{query, ApiError};
use crate::store::{Happened, Heard, Listener, StoreResult, Task, TaskEvent, LIST_LIMIT_MAX};

/// A waiting task's place in line as said: its position, and whether its account was at its
/// running limit.
type Place = (u32, bool);

/// How often the place in line of a waiting task is looked at again.
const LINE_EVERY: Duration = Duration::from_secs(1);
/// Tasks read per page while catching up.
const CATCH_UP_PAGE: u32 = 100;

/// One event of a stream: its name, id and JSON data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    pub event: &'static str,
    pub id: String,
    /// Shared by every stream that says the same event (`event_memo`).
    pub data: Arc<str>,
}

/// The filters of an account's stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamFilter {
    pub task_type: Option<OpKind>,
    pub status: Option<TaskStatus>,
}

/// The query of an account's stream as the OpenAPI document describes it
/// ([`StreamFilter::parse`] reads it).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Only tasks of this type (`type` is read the same).
    #[param(value_type = Option<OpKind>)]
    pub task_type: Option<String>,
    /// Only events of tasks in this status.
    #[param(value_type = Option<TaskStatus>)]
    pub status: Option<String>,
}

impl StreamFilter {
    /// Read `task_type` (or `type`) and `status` from a query string; unknown parameters are
    /// ignored, empty values count as absent, and a value that is not one, or a filter given
    /// twice (`task_type` and `type` are one), is a 400 naming it.
    pub fn parse(raw: Option<&str>) -> Result<StreamFilter, ApiError> {
        let mut filter = StreamFilter::default();
        for (name, value) in query::pairs(raw, &["task_type", "type", "status"])? {
            if value.is_empty() {
                continue;
            }
            if name == "status" {
                filter.status = Some(value.parse().map_err(|_| {
                    ApiError::field("status", "invalid_value", "is not a task status")
                })?);
                continue;
            }
            if filter.task_type.is_some() {
                let rule = "must be given once (task_type and type are the same filter)";
                return Err(ApiError::field("task_type", "invalid_value", rule));
            }
            filter.task_type = Some(value.parse().map_err(|_| {
                ApiError::field("task_type", "invalid_value", "is not a task type")
            })?);
        }
        Ok(filter)
    }

    fn passes(&self, task_type: OpKind, status: TaskStatus) -> bool {
        self.task_type.is_none_or(|t| t == task_type) && self.status.is_none_or(|s| s == status)
    }
}

/// Take a place for one more stream of `account_id`: 429 past the account's limit, 503 past the
/// node's.
pub fn open_slot(tasks: &Arc<Tasks>, account_id: &str) -> Result<StreamSlot, ApiError> {
    Streams::open(&tasks.streams, account_id)
}

/// The version a `Last-Event-ID` names, if it is one.
pub fn read_event_id(id: &str) -> Option<i64> {
    let version = id.split_once('.').map_or(id, |(v, _)| v);
    version.parse().ok().filter(|v: &i64| *v >= 0)
}

/// What one stream has said, and what it still has to say.
struct Memory {
    out: VecDeque<Said>,
    /// The last version sent of each task (by `seq`), and its type.
    sent: sent::Sent,
    /// The waiting tasks, with their status and last said place in line (and whether their
    /// account was at its running limit).
    waiting: HashMap<i64, (TaskStatus, Option<Place>)>,
    /// The progress last said of each running task (its percentage, preview and failed backend
    /// attempt), so that the stored copy of what was said live is not said twice.
    progress: HashMap<i64, (i64, Option<String>, Option<Retrying>)>,
    /// Events after stored states (ids `{version}.{n}`).
    n: u64,
    /// The highest version sent.
    high: i64,
    /// The version from which the account's changed tasks are still to be read, while catching
    /// up: read a page at a time as the caller takes what was said, so that a caller that
    /// resumes from far back and reads slowly (or not at all) holds one page, not its history.
    catching: Option<i64>,
    ended: bool,
}

/// `task` with its record and the record's JSON, as every stream of the node shares it.
async fn read_of(tasks: &Tasks, task: Task) -> Read {
    let record = tasks.record(&task).await;
    let json = serde_json::to_string(&record).expect("a record serializes");
    Read {
        task,
        record,
        json: json.into(),
    }
}

/// A stream of one task or of an account's tasks.
struct EventStream {
    tasks: Arc<Tasks>,
    account_id: String,
    listener: Listener,
    filter: StreamFilter,
    /// The one task streamed (its `seq`), or None for the account's.
    only: Option<i64>,
    said: Memory,
    _slot: StreamSlot,
}

/// The stream of `task` (the caller's, read already). `last_event_id` is the caller's
/// `Last-Event-ID`. Its place among the streams is taken first ([`open_slot`]): a stream past
/// the limits reads nothing.
pub async fn task_stream(
    tasks: Arc<Tasks>,
    account_id: &str,
    task: Task,
    last_event_id: Option<&str>,
) -> Result<impl Stream<Item = Said>, ApiError> {
    let slot = open_slot(&tasks, account_id)?;
    let listener = tasks
        .store
        .wakeups()
        .events
        .listen_task(task.seq, Some(account_id));
    let mut stream = EventStream::new(tasks, slot, account_id, listener, StreamFilter::default());
    stream.only = Some(task.seq);
    // Read again now that it is listened to: a change from here on is heard.
    let task = stream.read(task.seq).await?.unwrap_or(task);
    let last = last_event_id.and_then(read_event_id);
    if last == Some(task.version) && !task.has_ended() {
        // The caller has this state already.
        stream.remember(&task);
    } else if last == Some(task.version) {
        stream.said.ended = true;
    } else {
        stream.say_task(&task).await;
    }
    Ok(stream.into_stream())
}

/// The stream of all the account's tasks that pass `filter`, its place taken first as
/// [`task_stream`]'s is.
pub async fn account_stream(
    tasks: Arc<Tasks>,
    account_id: &str,
    filter: StreamFilter,
    last_event_id: Option<&str>,
) -> Result<impl Stream<Item = Said>, ApiError> {
    let slot = open_slot(&tasks, account_id)?;
    let listener = tasks.store.wakeups().events.listen_account(account_id);
    let mut stream = EventStream::new(tasks, slot, account_id, listener, filter);
    let last = match last_event_id.and_then(read_event_id) {
        Some(last) if last <= stream.tasks.store.latest_version().await? => Some(last),
        _ => None,
    };
    match last {
        Some(last) => {
            stream.catch_up(last);
            // The first page now, so that a store that cannot answer refuses the stream.
            stream.next_page().await?;
        }
        // None asked, or not one we gave: the tasks that have not ended, as they are.
        None => stream.current().await?,
    }
    Ok(stream.into_stream())
}

impl EventStream {
    fn new(
        tasks: Arc<Tasks>,
        slot: StreamSlot,
        account_id: &str,
        listener: Listener,
        filter: StreamFilter,
    ) -> EventStream {
        EventStream {
            tasks,
            account_id: account_id.to_string(),
            listener,
            filter,
            only: None,
            said: Memory {
                out: VecDeque::new(),
                sent: sent::Sent::default(),
                waiting: HashMap::new(),
                progress: HashMap::new(),
                n: 0,
                high: 0,
                catching: None,
                ended: false,
            },
            _slot: slot,
        }
    }

    fn into_stream(self) -> impl Stream<Item = Said> {
        futures::stream::unfold(self, |mut stream| async move {
            loop {
                if let Some(said) = stream.said.out.pop_front() {
                    return Some((said, stream));
                }
                if stream.said.ended {
                    return None;
                }
                if stream.said.catching.is_some() {
                    // Boxed, as the work after an event is: the stream's future, held by every
                    // idle stream for as long as it is open, is then only the size of its wait.
                    if let Err(e) = Box::pin(stream.next_page()).await {
                        tracing::debug!(error = %e, "an event stream could not read the store; ended");
                        return None;
                    }
                    continue;
                }
                if !stream.hear().await {
                    return None;
                }
            }
        })
    }

    /// Wait for what happens next and queue what it says; false when the stream should end
    /// (shutdown, or the listener fell so far behind that the caller should reconnect).
    async fn hear(&mut self) -> bool {
        let line_tick = async {
            if self.said.waiting.is_empty() {
                std::future::pending::<()>().await
            }
            tokio::time::sleep(LINE_EVERY).await
        };
        let heard = tokio::select! {
            heard = self.listener.next() => heard,
            _ = line_tick => {
                Box::pin(self.say_line()).await;
                return true;
            }
            _ = self.tasks.shutdown.cancelled() => return false,
        };
        let result = match heard {
            Heard::Event(event) => Box::pin(self.on_event(&event)).await,
            Heard::NewTasks { from, nth } => {
                let up_to_date = self.said.catching.is_none();
                self.catch_up(from);
                if up_to_date {
                    Box::pin(self.shared_page(nth)).await
                } else {
                    Ok(())
                }
            }
            Heard::Resync => match self.only {
                Some(seq) => Box::pin(self.reread(seq)).await,
                None => {
                    self.catch_up(self.said.high);
                    Ok(())
                }
            },
        };
        if let Err(e) = result {
            // The caller reconnects with its last id and misses nothing.
            tracing::debug!(error = %e, "an event stream could not read the store; ended");
            return false;
        }
        true
    }

    async fn on_event(&mut self, event: &Arc<TaskEvent>) -> StoreResult<()> {
        let known = self.said.sent.get(event.seq);
        if known.is_some_and(|(version, _)| event.version < version) {
            return Ok(());
        }
        match &event.what {
            Happened::Changed { .. } => self.reread_after(event).await,
            Happened::Progress {
                percentage,
                preview_key,
                retrying,
                live,
            } => {
                let Some((_, kind)) = known else {
                    // Not said yet (an account stream that has not seen it): its record first.
                    return self.reread_after(event).await;
                };
                if !self.filter.passes(kind, TaskStatus::Processing) {
                    return Ok(());
                }
                let said = (*percentage, preview_key.clone(), retrying.clone());
                if self.said.progress.get(&event.seq) == Some(&said) {
                    // Stored as it was said: only the version moves on.
                    self.said.sent.note(event.seq, event.version, kind, false);
                    self.said.high = self.said.high.max(event.version);
                    return Ok(());
                }
                self.said.progress.insert(event.seq, said);
                let id = if *live {
                    self.said.n += 1;
                    format!("{}.{}", event.version, self.said.n)
                } else {
                    self.said.sent.note(event.seq, event.version, kind, false);
                    self.said.high = self.said.high.max(event.version);
                    event.version.to_string()
                };
                self.said.waiting.remove(&event.seq);
                let tasks = &self.tasks;
                let data = tasks.streams.memo.progress(event, || {
                    let data = TaskProgress {
                        task_id: tasks.store.task_id(event.seq).to_string(),
                        status: TaskStatus::Processing.as_str(),
                        percentage: percentage.to_string(),
                        queue_position: None,
                        waiting_for: retrying.as_ref().map(|_| WaitingFor::Backend),
                        retrying: retrying.clone(),
                        preview_image_url: preview_key.as_deref().map(|key| tasks.blobs.url(key)),
                    };
                    serde_json::to_string(&data).expect("progress serializes")
                });
                self.said.out.push_back(Said {
                    event: "progress",
                    id,
                    data,
                });
                Ok(())
            }
        }
    }

    /// After the change `event` (or progress of a task not said yet): the task's record if it
    /// moved on, read once for every stream of this node that heard the event.
    async fn reread_after(&mut self, event: &Arc<TaskEvent>) -> StoreResult<()> {
        if *event.account_id != *self.account_id {
            return self.reread(event.seq).await;
        }
        let (tasks, account_id, seq) = (self.tasks.clone(), self.account_id.clone(), event.seq);
        let read = self
            .tasks
            .streams
            .memo
            .read(event, || async move {
                let id = tasks.store.task_id(seq);
                let Some(task) = tasks.store.task_for_account(&account_id, &id).await? else {
                    return Ok(None);
                };
                Ok(Some(Arc::new(read_of(&tasks, task).await)))
            })
            .await?;
        let Some(read) = read else {
            return Ok(());
        };
        if !self.is_said(&read.task) {
            self.say_read(&read.task, &read.record, &read.json);
        }
        Ok(())
    }

    /// Read the task at `seq` again and say its record if it moved on.
    async fn reread(&mut self, seq: i64) -> StoreResult<()> {
        let Some(task) = self.read(seq).await? else {
            return Ok(());
        };
        if !self.is_said(&task) {
            self.say_task(&task).await;
        }
        Ok(())
    }

    async fn read(&self, seq: i64) -> StoreResult<Option<Task>> {
        let id = self.tasks.store.task_id(seq);
        self.tasks
            .store
            .task_for_account(&self.account_id, &id)
            .await
    }

    /// Say the records of the account's tasks at version `from` or later (from a little before
    /// on stores whose versions may commit out of order), page by page as they are taken.
    fn catch_up(&mut self, from: i64) {
        let from = (from - self.tasks.store.version_overlap()).max(0);
        self.said.catching = Some(self.said.catching.map_or(from, |c| c.min(from)));
    }

    /// Say the next page of the catch-up, if one is under way.
    async fn next_page(&mut self) -> StoreResult<()> {
        let Some(from) = self.said.catching else {
            return Ok(());
        };
        let page = self
            .tasks
            .store
            .account_changes(&self.account_id, from, CATCH_UP_PAGE)
            .await?;
        for task in &page {
            if !self.is_said(task) {
                self.say_task(task).await;
            }
        }
        self.caught_up_to(from, page.iter());
        Ok(())
    }

    /// The first page of the catch-up the notice of new tasks `nth` began, for a stream that was
    /// up to date when it heard it: read, and its records made, once for every such stream.
    async fn shared_page(&mut self, nth: u64) -> StoreResult<()> {
        let Some(from) = self.said.catching else {
            return Ok(());
        };
        let (tasks, account_id) = (self.tasks.clone(), self.account_id.clone());
        let page = self
            .tasks
            .streams
            .memo
            .page(nth, || async move {
                let page = tasks
                    .store
                    .account_changes(&account_id, from, CATCH_UP_PAGE)
                    .await?;
                let mut read = Vec::with_capacity(page.len());
                for task in page {
                    read.push(Arc::new(read_of(&tasks, task).await));
                }
                Ok(read.into())
            })
            .await?;
        for read in page.iter() {
            if !self.is_said(&read.task) {
                self.say_read(&read.task, &read.record, &read.json);
            }
        }
        self.caught_up_to(from, page.iter().map(|read| &read.task));
        Ok(())
    }

    /// Whether this stream has said `task` as it is, or later.
    fn is_said(&self, task: &Task) -> bool {
        self.said
            .sent
            .get(task.seq)
            .is_some_and(|(version, _)| task.version <= version)
    }

    /// After a page of the catch-up from `from`: where the next one starts, if the page was full.
    fn caught_up_to<'a>(&mut self, from: i64, page: impl ExactSizeIterator<Item = &'a Task>) {
        let full = page.len() as u32 == CATCH_UP_PAGE;
        let next = page.map(|task| task.version + 1).fold(from, i64::max);
        self.said.catching = full.then_some(next);
    }

    /// Say the records of the account's tasks that have not ended.
    async fn current(&mut self) -> StoreResult<()> {
        let mut open = Vec::new();
        for status in [
            TaskStatus::Pending,
            TaskStatus::Starting,
            TaskStatus::Processing,
        ] {
            let filter = crate::store::TaskFilter {
                status: Some(status),
                task_type: self.filter.task_type,
                ..crate::store::TaskFilter::default()
            };
            let page = self
                .tasks
                .store
                .list_tasks(&self.account_id, &filter, None, LIST_LIMIT_MAX)
                .await?;
            open.extend(page.map(|p| p.tasks).unwrap_or_default());
        }
        open.sort_by_key(|t| t.version);
        for task in &open {
            self.say_task(task).await;
        }
        Ok(())
    }

    /// Say `task`'s record (if it passes the filter) and remember it.
    async fn say_task(&mut self, task: &Task) {
        if !self.filter.passes(task.task_type, task.status) {
            self.note(task);
            return;
        }
        let record = self.tasks.record(task).await;
        let json = serde_json::to_string(&record).expect("a record serializes");
        self.say_read(task, &record, &json.into());
    }

    /// Remember `task` as said, and end a task's stream with its end.
    fn note(&mut self, task: &Task) {
        self.remember(task);
        if self.only == Some(task.seq) && task.has_ended() {
            self.said.ended = true;
        }
    }

    /// Say `task`'s `record`, serialized as `json` (if it passes the filter), and remember it.
    fn say_read(&mut self, task: &Task, record: &Record, json: &Arc<str>) {
        self.note(task);
        if !self.filter.passes(task.task_type, task.status) {
            return;
        }
        if waits(task) {
            let held = record.waiting_for == Some(WaitingFor::RunningLimit);
            self.said.waiting.insert(
                task.seq,
                (task.status, record.queue_position.map(|p| (p, held))),
            );
        }
        self.said.out.push_back(Said {
            event: "task",
            id: task.version.to_string(),
            data: json.clone(),
        });
    }

    fn remember(&mut self, task: &Task) {
        self.said
            .sent
            .note(task.seq, task.version, task.task_type, task.has_ended());
        self.said.high = self.said.high.max(task.version);
        if task.has_ended() {
            self.said.progress.remove(&task.seq);
        } else if task.status == TaskStatus::Processing {
            // What its record said: live progress that says the same again is not sent (the
            // worker tells the progress it stored with the processing state once more).
            let said = (
                task.percentage,
                task.preview_key.clone(),
                task.retrying.clone(),
            );
            self.said.progress.insert(task.seq, said);
        }
        if !waits(task) {
            self.said.waiting.remove(&task.seq);
        } else {
            self.said
                .waiting
                .entry(task.seq)
                .or_insert((task.status, None));
        }
    }

    /// Say the place in line of each waiting task whose place moved.
    async fn say_line(&mut self) {
        let positions = self.tasks.line.positions().await;
        let moved: Vec<(i64, TaskStatus, Option<Place>)> = self
            .said
            .waiting
            .iter()
            .filter_map(|(seq, (status, said))| {
                let now = positions.get(seq).map(|&p| (p, positions.held(*seq)));
                (now != *said).then_some((*seq, *status, now))
            })
            .collect();
        for (seq, status, place) in moved {
            let Some((position, held)) = place else {
                // Out of the line: taken by a backend, or ended; its record says which.
                self.said.waiting.remove(&seq);
                continue;
            };
            self.said.waiting.insert(seq, (status, place));
            let Some((version, kind)) = self.said.sent.get(seq) else {
                continue;
            };
            if !self.filter.passes(kind, status) {
                continue;
            }
            self.said.n += 1;
            let data = TaskProgress {
                task_id: self.tasks.store.task_id(seq).to_string(),
                status: status.as_str(),
                percentage: "0".into(),
                queue_position: Some(position),
                // The stream keeps no task's model: any backend up for its kind will do here;
                // its record (the `task` event) says it for the model.
                waiting_for: Some(waiting_for_at(
                    status,
                    held,
                    self.tasks.pool.runs_now(kind, None),
                )),
                retrying: None,
                preview_image_url: None,
            };
            self.say_progress(format!("{version}.{}", self.said.n), &data);
        }
    }

    /// Queue an `event: progress` with `data`, under `id`.
    fn say_progress(&mut self, id: String, data: &TaskProgress) {
        self.said.out.push_back(Said {
            event: "progress",
            id,
            data: serde_json::to_string(data)
                .expect("progress serializes")
                .into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_given_once_and_an_empty_one_is_none() {
        let filter = StreamFilter::parse(Some("status=&type=imagine&other=1&other=2")).unwrap();
        assert_eq!(filter.status, None);
        assert_eq!(filter.task_type, Some(OpKind::Imagine));
        let filter = StreamFilter::parse(Some("task_type=upscale-1x&status=failed")).unwrap();
        assert_eq!(filter.task_type, Some(OpKind::Upscale1x));
        assert_eq!(filter.status, Some(TaskStatus::Failed));
        for twice in [
            "status=failed&status=finished",
            "type=imagine&type=imagine",
            "task_type=imagine&type=upscale-1x",
            "type=&task_type=imagine&type=imagine",
        ] {
            assert!(StreamFilter::parse(Some(twice)).is_err(), "{twice}");
        }
        assert!(StreamFilter::parse(Some("status=sleeping")).is_err());
    }

    #[test]
    fn an_event_id_is_a_version_with_or_without_what_came_after() {
        assert_eq!(read_event_id("42"), Some(42));
        assert_eq!(read_event_id("42.7"), Some(42));
        assert_eq!(read_event_id("x"), None);
        assert_eq!(read_event_id("-3"), None);
        assert_eq!(read_event_id(""), None);
    }

    proptest::proptest! {
        #![proptest_config(crate::domain::fuzz_config())]

        /// Any header text (as `Last-Event-ID` gives it: visible ASCII) is a version this stream
        /// can resume from, or none; a version is never negative and is the id's leading number.
        #[test]
        fn any_last_event_id_is_a_version_or_none(id in "[ -~]{0,40}|[0-9]{1,25}(\\.[0-9]{0,25})?") {
            match read_event_id(&id) {
                Some(version) => {
                    proptest::prop_assert!(version >= 0);
                    let head = id.split_once('.').map_or(id.as_str(), |(v, _)| v);
                    proptest::prop_assert_eq!(head.parse::<i64>().ok(), Some(version));
                }
                None => {
                    let head = id.split_once('.').map_or(id.as_str(), |(v, _)| v);
                    proptest::prop_assert!(head.parse::<i64>().map_or(true, |v| v < 0));
                }
            }
        }
    }
}
