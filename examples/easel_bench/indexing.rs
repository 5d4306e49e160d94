//! Benchmark `indexing` (issue 50): what the prompts' full-text index costs a submit. Durable
//! `POST /api/v1/imagine` on the SQLite store with workers stopped, with the index's triggers in
//! place (every submit also writes the task's prompt into `tasks_search`) against the same
//! submits with the triggers dropped, on the same server and database: the triggers are dropped
//! and made again from the bench's own connection between runs, alternated. The goal: 0.9x or
//! more.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::alternated;
use crate::proc::fresh_dir;
use crate::report::Row;
use crate::Ctx;

const GOAL_CLIENTS: usize = 64;
const ROUNDS: usize = 2;

/// The index's triggers as the migration made them: their names and statements.
fn triggers(db: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let conn = rusqlite::Connection::open(db)?;
    let mut select = conn.prepare(
        "SELECT name, sql FROM sqlite_master
         WHERE type = 'trigger' AND name LIKE 'tasks_search_%' ORDER BY name",
    )?;
    let found = select
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<(String, String)>, _>>()?;
    anyhow::ensure!(
        !found.is_empty(),
        "no tasks_search triggers in {}",
        db.display()
    );
    Ok(found)
}

/// Put the triggers in place (`with`) or drop them. easel's connections see the schema change
/// at their next statement.
fn set_index(db: &Path, made: &[(String, String)], with: bool) -> anyhow::Result<()> {
    let conn = rusqlite::Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    for (name, sql) in made {
        conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {name};"))?;
        if with {
            conn.execute_batch(sql)?;
        }
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("indexing");
    fresh_dir(&dir)?;
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &clients in ctx.plan.concurrencies.iter().filter(|&&c| c > 1) {
        let data = dir.join(format!("c{clients}"));
        // No submit is refused over a run.
        let (server, key) = alternated::submit_server(
            ctx,
            &data,
            "[plans.self-hosted]\nmax_pending = 4000000000\n",
        )
        .await?;
        let url = server.url("/api/v1/imagine");
        let env = [("EASEL_BENCH_KEY", key.clone())];
        let db = data.join("easel.db");
        let made = triggers(&db)?;
        println!(
            "  {clients} clients: without and with the prompts' index, {ROUNDS} runs of each \
             ({} s each)",
            ctx.plan.run_secs
        );
        let runs = alternated::run(ctx, &server, &url, clients, &env, ROUNDS, |with| {
            let (db, made) = (&db, &made);
            async move { set_index(db, made, with) }
        })
        .await?;
        // As the migration left it, for whatever reads the database after.
        set_index(&db, &made, true)?;
        server.stop(Duration::from_secs(60)).await?;
        let _ = std::fs::remove_dir_all(&data);
        rows.extend(runs.rows(
            "indexing",
            "submit with the prompts' full-text index (SQLite FTS5, kept by triggers), \
             sync=full (baseline: the same submits with the triggers dropped, same server)",
            clients,
            (GOAL_CLIENTS, 0.9, ">= 0.9x without the index"),
        ));
        details.push(runs.details(clients, "indexed", "none"));
    }
    Ok((rows, Value::Array(details)))
}
