//! Versions of tasks' stored state on SQLite, drawn inside the writer's transaction from the
//! counter that `seq`s come from (`sqlite_sequence`).

use rusqlite::Connection;

/// The next version of a task's stored state, from the counter `seq`s come from, so that a
/// version is higher than every `seq` and version given before it (see `store::events`). Inside
/// the writer's transaction.
pub(super) fn next_version(conn: &Connection) -> rusqlite::Result<i64> {
    let version = peek_version(conn)?;
    take_version(conn, version)?;
    Ok(version)
}

/// The version the next change would take, read only: a write that may change nothing (a claim
/// of an empty queue, a sweep of leases that finds none) takes it only if it changed a row, so
/// that idle polling writes nothing.
pub(super) fn peek_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "SELECT max(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tasks'), 0),
                    COALESCE((SELECT max(seq) FROM tasks), 0)) + 1",
    )?
    .query_row([], |r| r.get(0))
}

/// Record that `version` (from [`peek_version`]) was taken.
pub(super) fn take_version(conn: &Connection, version: i64) -> rusqlite::Result<()> {
    let moved = conn
        .prepare_cached("UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'tasks'")?
        .execute([version])?;
    if moved == 0 {
        // No task was ever stored: the counter starts here.
        conn.prepare_cached("INSERT INTO sqlite_sequence (name, seq) VALUES ('tasks', ?1)")?
            .execute([version])?;
    }
    Ok(())
}
