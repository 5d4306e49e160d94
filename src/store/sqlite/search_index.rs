//! The prompts' full-text index on SQLite, filled behind the writer (migration 0025): a submit
//! writes its task alone, and the indexer adds the tasks above `tasks_search_done.seq` to
//! `tasks_search` a batch at a time, in the writer's next transaction. FTS5 costs much less per
//! row in a batch than a row at a time from a trigger in every submit's transaction
//! (docs/benchmarks.md, "Search"). A search first indexes whatever is still above the mark
//! ([`SqliteStore::index_stored_tasks`]), so it finds every task stored before it all the same.

use std::time::Duration;

use rusqlite::Connection;
use tokio_util::sync::CancellationToken;

use super::SqliteStore;
use crate::store::sql::{Durability, SqlStore};
use crate::store::StoreResult;

/// Most tasks indexed in one writer transaction. Submits queued behind a batch wait for it, so
/// it is kept to a few milliseconds: 5,000 held the writer long enough to show in the submits'
/// p99 (docs/benchmarks.md, "The prompts' index and the submits' p99"), and FTS5 costs little
/// more per task in batches of 1,000. A backlog (a restore, a bulk import) is indexed in steps
/// that other writes go between.
const BATCH: i64 = 1000;
/// How often the indexer looks for tasks to index. Seldom enough that a busy writer indexes
/// thousands at once, often enough that a search rarely has more than a moment's to do itself.
const INDEX_EVERY: Duration = Duration::from_millis(500);
/// Most pages of the index one merge step writes. FTS5's own merging (off since migration 0027)
/// ran inside a batch and held the writer tens of milliseconds at a time; steps of this size
/// took a few each, and one after each batch kept up with batches of [`BATCH`] short prompts
/// (docs/benchmarks.md, "The prompts' index: merges in steps").
const MERGE_PAGES: i64 = 16;
/// Most merge steps the indexer takes after a look's batches, each in its own transaction.
const MERGE_STEPS_MAX: usize = 64;

/// Whether tasks are stored above the mark, read on a reader (no writer's turn when idle).
const BEHIND: &str = "SELECT COALESCE((SELECT max(seq) FROM tasks), 0)
    > (SELECT seq FROM tasks_search_done)";

/// Index up to `BATCH` tasks above the mark and move it past them, inside the writer's
/// transaction; whether the batch was full (more may wait above it).
fn index_batch(conn: &Connection) -> rusqlite::Result<bool> {
    let mark: i64 = conn
        .prepare_cached("SELECT seq FROM tasks_search_done")?
        .query_row([], |r| r.get(0))?;
    let (last, taken): (Option<i64>, i64) = conn
        .prepare_cached(
            "SELECT max(seq), count(*)
             FROM (SELECT seq FROM tasks WHERE seq > ?1 ORDER BY seq LIMIT ?2)",
        )?
        .query_row([mark, BATCH], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let Some(last) = last else {
        return Ok(false);
    };
    conn.prepare_cached(
        "INSERT INTO tasks_search (rowid, prompt, owner)
         SELECT seq, prompt, replace(account_id, '-', '') FROM tasks
         WHERE seq > ?1 AND seq <= ?2",
    )?
    .execute([mark, last])?;
    conn.prepare_cached("UPDATE tasks_search_done SET seq = ?1")?
        .execute([last])?;
    Ok(taken == BATCH)
}

/// One step of merging the index's segments, of at most [`MERGE_PAGES`] pages; whether it found
/// anything to merge (FTS5 tells by the changes it counts: two or more when it merged).
fn merge_step(conn: &Connection) -> rusqlite::Result<bool> {
    let before = conn.total_changes();
    conn.prepare_cached("INSERT INTO tasks_search (tasks_search, rank) VALUES ('merge', ?1)")?
        .execute([MERGE_PAGES])?;
    Ok(conn.total_changes() - before >= 2)
}

impl SqliteStore {
    /// Index every task stored so far, a batch per writer transaction, each followed by a merge
    /// step in a transaction of its own, so that segments never pile up to the point where FTS5
    /// merges a whole level in one go. Nothing to do (the usual case) costs one read; whether
    /// anything was indexed.
    pub(super) async fn index_stored_tasks(&self) -> StoreResult<bool> {
        let (behind,): (i64,) = self.reader().one(BEHIND, &[]).await?;
        if behind == 0 {
            return Ok(false);
        }
        // The index is a copy of what `tasks` holds: a power loss that forgets a batch forgets
        // the mark's move with it, so there is nothing to fsync.
        loop {
            let more = self
                .writer
                .call(Durability::Committed, |conn| Ok(index_batch(conn)?))
                .await?;
            self.merge_step().await?;
            if !more {
                return Ok(true);
            }
        }
    }

    async fn merge_step(&self) -> StoreResult<bool> {
        self.writer
            .call(Durability::Committed, |conn| Ok(merge_step(conn)?))
            .await
    }

    /// The merging left after a look's batches, a step per transaction, until FTS5 finds nothing
    /// to merge or [`MERGE_STEPS_MAX`] steps are taken (the next look goes on).
    async fn merge_left(&self) -> StoreResult<()> {
        for _ in 0..MERGE_STEPS_MAX {
            if !self.merge_step().await? {
                break;
            }
        }
        Ok(())
    }

    /// Index what submits stored, every [`INDEX_EVERY`], until `stop`; after a look that
    /// indexed something, the merging that is left, a step at a time.
    pub(super) async fn run_indexer(&self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(INDEX_EVERY) => {}
                _ = stop.cancelled() => return,
            }
            let look = match self.index_stored_tasks().await {
                Ok(true) => self.merge_left().await,
                other => other.map(|_| ()),
            };
            if let Err(e) = look {
                crate::metrics::store_error("search_index", e.kind());
                tracing::warn!(error = %e, "could not index the prompts of new tasks yet");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The triggers and the index as the migrations make them, over a bare `tasks` table.
    fn database() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE tasks (seq INTEGER PRIMARY KEY, account_id TEXT, prompt TEXT);",
        )
        .unwrap();
        for migration in [
            include_str!("../../../migrations/sqlite/0024_task_search.sql"),
            include_str!("../../../migrations/sqlite/0025_search_behind_the_writer.sql"),
            include_str!("../../../migrations/sqlite/0027_search_merges_in_steps.sql"),
        ] {
            conn.execute_batch(migration).unwrap();
        }
        conn
    }

    fn insert(conn: &Connection, from: i64, to: i64) {
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
             INSERT INTO tasks (seq, account_id, prompt)
             SELECT i, 'a-b', 'a red fox number ' || i FROM n",
            [from, to],
        )
        .unwrap();
    }

    fn found(conn: &Connection, words: &str) -> Vec<i64> {
        conn.prepare("SELECT rowid FROM tasks_search WHERE tasks_search MATCH ?1 ORDER BY rowid")
            .unwrap()
            .query_map([words], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn tasks_are_indexed_a_batch_at_a_time_up_to_the_last_and_only_once() {
        let conn = database();
        insert(&conn, 1, BATCH + 10);
        assert!(found(&conn, "fox").is_empty(), "a submit indexes nothing");
        assert!(index_batch(&conn).unwrap(), "a full batch: more may wait");
        assert_eq!(found(&conn, "fox").len() as i64, BATCH);
        assert!(!index_batch(&conn).unwrap());
        assert_eq!(found(&conn, "fox").len() as i64, BATCH + 10);
        assert!(
            !index_batch(&conn).unwrap(),
            "nothing left, nothing indexed twice"
        );
        assert_eq!(found(&conn, "fox").len() as i64, BATCH + 10);
        assert_eq!(found(&conn, "\"7\""), vec![7]);
    }

    /// How many segments the index holds: the distinct segment ids of the rows of its `%_data`
    /// table past the two of its own (FTS5 keeps a segment's id above bit 37 of a page's rowid).
    fn segments(conn: &Connection) -> i64 {
        conn.query_row(
            "SELECT count(DISTINCT id >> 37) FROM tasks_search_data WHERE id > 10",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn fts5_merges_only_in_the_indexers_steps_which_end_when_nothing_is_left() {
        let conn = database();
        let automerge: i64 = conn
            .query_row(
                "SELECT v FROM tasks_search_config WHERE k = 'automerge'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(automerge, 0, "the migration turns FTS5's own merging off");
        // Twelve small batches, each its own transaction: twelve segments, none merged.
        for n in 0..12 {
            insert(&conn, n * 100 + 1, n * 100 + 100);
            assert!(!index_batch(&conn).unwrap());
        }
        let unmerged = segments(&conn);
        assert!(unmerged >= 12, "{unmerged} segments");
        // The steps merge them, and say when there is nothing left to merge.
        let mut steps = 0;
        while merge_step(&conn).unwrap() {
            steps += 1;
            assert!(steps < 1000, "merging never ends");
        }
        assert!(steps > 0);
        assert!(segments(&conn) < unmerged, "{} segments", segments(&conn));
        assert!(
            !merge_step(&conn).unwrap(),
            "a step with nothing to do says so"
        );
        assert_eq!(found(&conn, "fox").len(), 1200);
        assert_eq!(found(&conn, "\"1111\""), vec![1111]);
    }

    /// Tasks `from..=to` of `account` in a store's real `tasks` table.
    fn store_tasks(conn: &Connection, account: &str, from: i64, to: i64) -> rusqlite::Result<()> {
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
             INSERT INTO tasks (seq, account_id, task_type, status, priority, prompt,
                 aspect_ratio, process_mode, seed, created_at)
             SELECT i, ?3, 'imagine', 'finished', 1, 'a red fox number ' || i, '1:1', 'fast',
                 i, 0 FROM n",
            rusqlite::params![from, to, account],
        )?;
        Ok(())
    }

    #[tokio::test]
    async fn a_look_that_indexed_merges_what_is_left_until_nothing_is() {
        use crate::store::Accounts;
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("easel.db").display());
        let store = SqliteStore::open(&url, false).await.unwrap();
        let account = store
            .ensure_account("merges@example.com", "whsec_test")
            .await
            .unwrap()
            .id;
        // Twelve batches indexed without the merge steps that follow them: twelve segments.
        for n in 0..12 {
            let account = account.clone();
            let write = move |conn: &Connection| {
                store_tasks(conn, &account, n * BATCH + 1, (n + 1) * BATCH)?;
                Ok(index_batch(conn)?)
            };
            let full = store
                .writer
                .call(Durability::Committed, write)
                .await
                .unwrap();
            assert!(full, "a whole batch says more may wait");
        }
        // And one more batch stored, for the indexer's next look to find.
        let write =
            move |conn: &Connection| Ok(store_tasks(conn, &account, 12 * BATCH + 1, 13 * BATCH)?);
        store
            .writer
            .call(Durability::Committed, write)
            .await
            .unwrap();
        let read = |conn: &Connection| {
            let mark: i64 =
                conn.query_row("SELECT seq FROM tasks_search_done", [], |r| r.get(0))?;
            Ok((mark, segments(conn)))
        };
        let (_, unmerged) = store
            .writer
            .call(Durability::Committed, read)
            .await
            .unwrap();
        assert!(unmerged >= 12, "{unmerged} segments");

        // The indexer's look: the batch, its step, then the steps left. It is over once the
        // mark has moved and the segments stay as they are for a while (a step takes a few ms).
        let stop = CancellationToken::new();
        let look = async {
            let mut last = None;
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let now = store
                    .writer
                    .call(Durability::Committed, read)
                    .await
                    .unwrap();
                if now.0 == 13 * BATCH && last == Some(now) {
                    return now.1;
                }
                last = Some(now);
            }
        };
        let merged = tokio::select! {
            () = store.run_indexer(stop.clone()) => unreachable!("not stopped"),
            merged = tokio::time::timeout(Duration::from_secs(60), look) => {
                merged.expect("the indexer's look ends")
            }
        };
        assert!(merged < unmerged, "{merged} segments of {unmerged}");
        let (left, found) = store
            .writer
            .call(Durability::Committed, |conn: &Connection| {
                let left = merge_step(conn)?;
                let found: Vec<i64> = found(conn, "fox");
                Ok((left, found.len()))
            })
            .await
            .unwrap();
        assert!(!left, "the look left segments to merge");
        assert_eq!(found, 13 * BATCH as usize);
    }

    #[test]
    fn removing_or_changing_a_task_reaches_the_index_only_once_it_is_in_it() {
        let conn = database();
        insert(&conn, 1, 4);
        assert!(!index_batch(&conn).unwrap());
        insert(&conn, 5, 6);
        // Above the mark: the delete trigger must not touch the index (a contentless table's
        // 'delete' of a row it never held would corrupt it), and the change is read later.
        conn.execute("DELETE FROM tasks WHERE seq = 5", []).unwrap();
        conn.execute("UPDATE tasks SET prompt = 'a blue owl' WHERE seq = 6", [])
            .unwrap();
        // At or below it: the index follows at once.
        conn.execute("DELETE FROM tasks WHERE seq = 2", []).unwrap();
        conn.execute("UPDATE tasks SET prompt = 'a blue owl' WHERE seq = 3", [])
            .unwrap();
        assert!(!index_batch(&conn).unwrap());
        assert_eq!(found(&conn, "fox"), vec![1, 4]);
        assert_eq!(found(&conn, "owl"), vec![3, 6]);
        conn.execute_batch("INSERT INTO tasks_search (tasks_search) VALUES ('integrity-check')")
            .unwrap();
    }
}
