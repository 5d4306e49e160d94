//! Benchmark `indexing` (issue 50): what the prompts' full-text index costs a submit. Durable
//! `POST /api/v1/imagine` with workers stopped, with the index kept against the same submits
//! with nothing indexed, alternated run by run. The goal: 0.9x or more.
//!
//! - SQLite: one server and database. The store's indexer adds each new task's prompt to
//!   `tasks_search` behind the writer; the bench's own connection turns the index off by moving
//!   its mark (`tasks_search_done.seq`, the highest `seq` indexed) past any task, and on by
//!   moving it to the last task stored, so the tasks of the runs without stay out of the index
//!   and each run with pays for its own tasks alone. After each run with the index, one search
//!   (which indexes whatever is left first) is made inside the run's CPU window, so the
//!   indexing left to the background is counted.
//! - PostgreSQL, when its server answers: the index is written with each task, in the submit's
//!   transaction, so two servers on two scratch databases, one as migrated and one whose GIN
//!   index the bench dropped, loaded in turn. Both still write each task's lexemes (easel cuts
//!   them, and the column stays for its inserts): the baseline leaves out the index's upkeep,
//!   not the few bytes of lexemes a row holds (docs/benchmarks.md measures those apart).

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::alternated::{self, Side};
use crate::postgres::Scratch;
use crate::proc::fresh_dir;
use crate::report::Row;
use crate::Ctx;

const GOAL_CLIENTS: usize = 64;
const ROUNDS: usize = 2;

/// Turn the index on (its mark at the last task stored: the indexer takes each new one) or off
/// (its mark past any task: the indexer finds nothing to do). easel's connections read the mark
/// at their next look.
fn set_index(db: &Path, with: bool) -> anyhow::Result<()> {
    let conn = rusqlite::Connection::open(db)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    let mark = if with {
        "COALESCE((SELECT max(seq) FROM tasks), 0)"
    } else {
        "9223372036854775807"
    };
    let moved = conn.execute(&format!("UPDATE tasks_search_done SET seq = {mark}"), [])?;
    anyhow::ensure!(moved == 1, "no tasks_search_done row in {}", db.display());
    Ok(())
}

/// Have easel index what is left of the run's tasks now (a search catches the index up first),
/// and check that it did.
async fn catch_up(http: &reqwest::Client, url: &str, key: &str, db: &Path) -> anyhow::Result<()> {
    let res = http.get(url).header("Authorization", key).send().await?;
    anyhow::ensure!(res.status() == 200, "{url}: {}", res.status());
    let conn = rusqlite::Connection::open(db)?;
    let behind: i64 = conn.query_row(
        "SELECT COALESCE((SELECT max(seq) FROM tasks), 0) - (SELECT seq FROM tasks_search_done)",
        [],
        |r| r.get(0),
    )?;
    anyhow::ensure!(
        behind <= 0,
        "the index is {behind} tasks behind after a search"
    );
    Ok(())
}

/// No submit is refused over a run.
const CONFIG: &str = "[plans.self-hosted]\nmax_pending = 4000000000\n";

pub async fn run(ctx: &Ctx, postgres_admin: Option<&str>) -> anyhow::Result<(Vec<Row>, Value)> {
    let dir = ctx.work.join("indexing");
    fresh_dir(&dir)?;
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &clients in ctx.plan.concurrencies.iter().filter(|&&c| c > 1) {
        let runs = sqlite(ctx, &dir.join(format!("c{clients}")), clients).await?;
        rows.extend(runs.rows(
            "indexing",
            "submit with the prompts' full-text index (SQLite FTS5, filled behind the writer), \
             sync=full (baseline: the same submits with nothing indexed, same server)",
            clients,
            (GOAL_CLIENTS, 0.9, ">= 0.9x without the index"),
        ));
        details.push(json!({"store": "sqlite", "runs": runs.details(clients, "indexed", "none")}));
    }
    if let Some(admin) = postgres_admin {
        for &clients in ctx.plan.concurrencies.iter().filter(|&&c| c > 1) {
            let runs = postgres(ctx, &dir, admin, clients).await?;
            rows.extend(runs.rows(
                "indexing",
                "submit with the prompts' full-text index (PostgreSQL GIN index over the \
                 lexemes easel cuts) (baseline: the same submits on a second server whose GIN \
                 index was dropped)",
                clients,
                (GOAL_CLIENTS, 0.9, ">= 0.9x without the index"),
            ));
            details.push(
                json!({"store": "postgres", "runs": runs.details(clients, "indexed", "none")}),
            );
        }
    }
    Ok((rows, Value::Array(details)))
}

async fn sqlite(ctx: &Ctx, data: &Path, clients: usize) -> anyhow::Result<alternated::Alternated> {
    let (server, key) = alternated::submit_server(ctx, data, CONFIG, &[]).await?;
    let url = server.url("/api/v1/imagine");
    let env = [("EASEL_BENCH_KEY", key.clone())];
    let db = data.join("easel.db");
    let http = reqwest::Client::new();
    let search = server.url("/api/v1/tasks?q=bench");
    println!(
        "  sqlite, {clients} clients: without and with the prompts' index, {ROUNDS} runs of each \
         ({} s each)",
        ctx.plan.run_secs
    );
    let runs = alternated::run(
        ctx,
        Side::both(&server, &url, &env),
        clients,
        ROUNDS,
        |with| {
            let db = &db;
            async move { set_index(db, with) }
        },
        |with| {
            let (http, search, key, db) = (&http, &search, &key, &db);
            async move {
                match with {
                    true => catch_up(http, search, key, db).await,
                    false => Ok(()),
                }
            }
        },
    )
    .await?;
    server.stop(Duration::from_secs(60)).await?;
    let _ = std::fs::remove_dir_all(data);
    Ok(runs)
}

async fn postgres(
    ctx: &Ctx,
    dir: &Path,
    admin: &str,
    clients: usize,
) -> anyhow::Result<alternated::Alternated> {
    let with_db = Scratch::create(admin, "indexed").await?;
    let without_db = Scratch::create(admin, "unindexed").await?;
    let start = |name: &str, url: &str| {
        let data = dir.join(format!("pg-{name}-c{clients}"));
        let env = [("EASEL_DATABASE_URL", url.to_string())];
        async move { alternated::submit_server(ctx, &data, CONFIG, &env).await }
    };
    let (with_server, with_key) = start("indexed", &with_db.url).await?;
    let (without_server, without_key) = start("unindexed", &without_db.url).await?;
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&without_db.url).await?;
        sqlx::query("DROP INDEX tasks_search")
            .execute(&mut conn)
            .await?;
        conn.close().await?;
    }
    println!(
        "  postgres, {clients} clients: without and with the prompts' index, {ROUNDS} runs of \
         each ({} s each)",
        ctx.plan.run_secs
    );
    let (with_url, without_url) = (
        with_server.url("/api/v1/imagine"),
        without_server.url("/api/v1/imagine"),
    );
    let with_env = [("EASEL_BENCH_KEY", with_key)];
    let without_env = [("EASEL_BENCH_KEY", without_key)];
    let runs = alternated::run(
        ctx,
        [
            Side {
                server: &with_server,
                url: &with_url,
                env: &with_env,
            },
            Side {
                server: &without_server,
                url: &without_url,
                env: &without_env,
            },
        ],
        clients,
        ROUNDS,
        |_| async { Ok(()) },
        |_| async { Ok(()) },
    )
    .await?;
    with_server.stop(Duration::from_secs(60)).await?;
    without_server.stop(Duration::from_secs(60)).await?;
    with_db.drop_db().await?;
    without_db.drop_db().await?;
    Ok(runs)
}
