//! The listing benchmark: `GET /api/v1/tasks` and the dashboard's tasks page (`GET /tasks`, signed
//! in) for an account with 100,000 tasks (beside another account's 100,000, interleaved), at
//! several page depths, with and without filters. The
//! figure is the server's own time for each request, read from its access log (`latency_ms` of
//! the `request done` lines, JSON logs), p50 and p99 of sequential requests from one client; the
//! baseline is the first page. Goal (issue 18): p99 under 20 ms at any depth.
//!
//! The tasks are written straight into the database (one statement) before the server starts,
//! so that filling takes seconds; the server then reads them as any it stored itself.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};

use crate::backends::percentile;
use crate::proc::{fresh_dir, Server};
use crate::report::{self, Row};
use crate::Ctx;

/// Tasks of the measured account (the other account has as many).
const TASKS: i64 = 100_000;
/// The goal for p99 server time at any depth, in ms.
const GOAL_MS: f64 = 20.0;

/// One measured listing: its label, query (without the cursor), and how deep its cursor is (the
/// number of tasks, with the filter, before the page; 0: the first page).
struct Case {
    label: &'static str,
    query: &'static str,
    status: Option<&'static str>,
    task_type: Option<&'static str>,
    depth: i64,
    limit: usize,
}

fn cases() -> Vec<Case> {
    let all = |label, depth, limit: usize, query| Case {
        label,
        query,
        status: None,
        task_type: None,
        depth,
        limit,
    };
    vec![
        all("first page", 0, 20, "limit=20"),
        all("after 1,000 tasks", 1_000, 20, "limit=20"),
        all("after 10,000 tasks", 10_000, 20, "limit=20"),
        all("after 50,000 tasks", 50_000, 20, "limit=20"),
        all("last page (after 99,980)", TASKS - 20, 20, "limit=20"),
        all("100 a page, after 50,000", 50_000, 100, "limit=100"),
        Case {
            label: "status=failed (5,000), after 4,000",
            query: "limit=20&status=failed",
            status: Some("failed"),
            task_type: None,
            depth: 4_000,
            limit: 20,
        },
        Case {
            label: "type=describe (10,000), after 9,000",
            query: "limit=20&type=describe",
            status: None,
            task_type: Some("describe"),
            depth: 9_000,
            limit: 20,
        },
        Case {
            label: "status=failed&type=imagine, after 4,000",
            query: "limit=20&status=failed&type=imagine",
            status: Some("failed"),
            task_type: Some("imagine"),
            depth: 4_000,
            limit: 20,
        },
    ]
}

/// Which store the listing (or the search) is measured on.
pub(crate) enum Db {
    Sqlite,
    Postgres(String),
}

pub async fn run(ctx: &Ctx, postgres_admin: Option<&str>) -> anyhow::Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    let (r, d) = measure(ctx, Db::Sqlite).await?;
    rows.extend(r);
    details.insert("sqlite".into(), d);
    if let Some(admin) = postgres_admin {
        let scratch = crate::postgres::Scratch::create(admin, "listing").await?;
        let result = measure(ctx, Db::Postgres(scratch.url.clone())).await;
        scratch.drop_db().await?;
        let (r, d) = result?;
        rows.extend(r);
        details.insert("postgres".into(), d);
    }
    Ok((rows, Value::Object(details)))
}

async fn measure(ctx: &Ctx, db: Db) -> anyhow::Result<(Vec<Row>, Value)> {
    let (name, data) = match &db {
        Db::Sqlite => ("sqlite", ctx.work.join("listing-sqlite")),
        Db::Postgres(_) => ("postgres", ctx.work.join("listing-postgres")),
    };
    fresh_dir(&data)?;
    let filled = Instant::now();
    let (key, session, cursors) = fill(&db, &data).await?;
    println!(
        "   {name}: {} tasks written in {:.1} s",
        report::count(2 * TASKS as usize),
        filled.elapsed().as_secs_f64()
    );
    let mut env = vec![
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ("EASEL_WORKERS", "0".into()),
        ("EASEL_LOG_FORMAT", "json".into()),
    ];
    if let Db::Postgres(url) = &db {
        env.push(("EASEL_DATABASE_URL", url.clone()));
    }
    let server = Server::start(&ctx.easel, &["serve"], &env, &data, "easel").await?;
    let http = reqwest::Client::new();
    let requests = ctx.plan.listing_requests;
    let cases = cases();
    // Series 0..n are the API's cases, n..2n the page's (the same filter and depth; the page
    // always shows PAGE_TASKS, so a case of another limit has no page series).
    let n = cases.len();
    let mut order: Vec<usize> = Vec::new();
    let mut client_ms: Vec<Vec<f64>> = vec![Vec::new(); 2 * n];
    for (i, case) in cases.iter().enumerate() {
        let mut api = server.url(&format!("/api/v1/tasks?{}", case.query));
        let mut page = server.url(&format!(
            "/tasks?status={}&type={}",
            case.status.unwrap_or(""),
            case.task_type.unwrap_or("")
        ));
        if let Some(cursor) = &cursors[i] {
            api.push_str(&format!("&cursor={cursor}"));
            page.push_str(&format!("&cursor={cursor}"));
        }
        let mut series = vec![(i, api)];
        if case.limit == 20 {
            series.push((n + i, page));
        }
        for (s, url) in series {
            // The first requests warm the page cache; they are logged like the rest, so each
            // series is `requests + WARMUP` lines of the log.
            for k in 0..requests + WARMUP {
                let sent = Instant::now();
                if s < n {
                    let res = http.get(&url).header("Authorization", &key).send().await?;
                    let status = res.status();
                    let body: Value = res.json().await?;
                    ensure!(status == 200, "{url}: {status} {body}");
                    let got = body["tasks"].as_array().map_or(0, Vec::len);
                    ensure!(got == case.limit, "{url}: {got} tasks, not {}", case.limit);
                } else {
                    let res = http
                        .get(&url)
                        .header("Cookie", format!("easel_session={session}"))
                        .send()
                        .await?;
                    let status = res.status();
                    let body = res.text().await?;
                    ensure!(status == 200, "{url}: {status}");
                    // Each task on the page links to its own page; the last page of all
                    // holds what is left (every filtered case has more than a page left).
                    let want = if case.status.is_none() && case.task_type.is_none() {
                        PAGE_TASKS.min((TASKS - case.depth) as usize)
                    } else {
                        PAGE_TASKS
                    };
                    let got = body.matches("href=\"/tasks/").count();
                    ensure!(got == want, "{url}: {got} task links, not {want}");
                }
                if k >= WARMUP {
                    client_ms[s].push(sent.elapsed().as_secs_f64() * 1e3);
                }
                order.push(if k >= WARMUP { s } else { usize::MAX });
            }
        }
    }
    // Let the last log lines reach the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.log.clone();
    server.stop(Duration::from_secs(10)).await?;
    let server_ms = server_latencies(&log, "/tasks")?;
    ensure!(
        server_ms.len() == order.len(),
        "{} listing lines in {}, {} requests sent",
        server_ms.len(),
        log.display(),
        order.len()
    );
    let mut by_case: Vec<Vec<f64>> = vec![Vec::new(); 2 * n];
    for (case, ms) in order.iter().zip(server_ms) {
        if *case != usize::MAX {
            by_case[*case].push(ms);
        }
    }
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    // Each series against its first page.
    let mut first = [[0.0, 0.0]; 2];
    for (s, measured) in by_case.iter().enumerate() {
        if measured.is_empty() {
            continue;
        }
        let case = &cases[s % n];
        let what = if s < n {
            "GET /api/v1/tasks"
        } else {
            "the tasks page"
        };
        let server = [percentile(measured, 0.5), percentile(measured, 0.99)];
        let client = [
            percentile(&client_ms[s], 0.5),
            percentile(&client_ms[s], 0.99),
        ];
        if s % n == 0 {
            first[s / n] = server;
        }
        println!(
            "   {name} {what}, {}: server p50 {:.2} ms, p99 {:.2} ms (client {:.2} / {:.2} ms)",
            case.label, server[0], server[1], client[0], client[1]
        );
        details.insert(
            format!("{what}, {}", case.label),
            json!({ "server_ms": server, "client_ms": client, "requests": requests }),
        );
        rows.push(
            Row::new(
                "listing",
                format!("{name}: {what}, {} (p50 / p99)", case.label),
                "ms",
            )
            .value(&server)
            .baseline(&first[s / n])
            .goal(format!("p99 < {GOAL_MS:.0} ms"), server[1] < GOAL_MS),
        );
    }
    Ok((rows, Value::Object(details)))
}

/// Requests per case left out of the figures.
const WARMUP: usize = 10;
/// Tasks on one dashboard tasks page (`easel::http::web::tasks::PAGE_SIZE`).
const PAGE_TASKS: usize = 24;

/// `latency_ms` of every `GET /api/v1/tasks` and `GET {page}` (the dashboard's page) in the
/// server's JSON access log, in order.
pub(crate) fn server_latencies(log: &Path, page: &str) -> anyhow::Result<Vec<f64>> {
    let text = std::fs::read_to_string(log)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let f = &v["fields"];
        if f["message"] == "request done" && (f["path"] == "/api/v1/tasks" || f["path"] == page) {
            out.push(f["latency_ms"].as_f64().context("latency_ms")?);
        }
    }
    Ok(out)
}

/// The store the tasks go into, its two accounts (the measured one first), a key and a
/// dashboard session's token of the measured one.
pub(crate) struct Seeded {
    pub store: easel::store::SharedStore,
    pub ids: Vec<String>,
    pub key: String,
    pub session: String,
}

/// Open `db` (SQLite in `data`) and make the two accounts, the key (named `key_name`) and the
/// session that `listing` and `search` fill and measure.
pub(crate) async fn two_accounts(db: &Db, data: &Path, key_name: &str) -> anyhow::Result<Seeded> {
    let store: easel::store::SharedStore = match db {
        Db::Sqlite => std::sync::Arc::new(
            easel::store::sqlite::SqliteStore::open(
                &format!("sqlite://{}", data.join("easel.db").display()),
                false,
            )
            .await?,
        ),
        Db::Postgres(url) => std::sync::Arc::new(
            easel::store::postgres::PgStore::open(
                url,
                &easel::store::postgres::PgOptions {
                    max_connections: 2,
                    acquire_timeout: Duration::from_secs(10),
                },
            )
            .await?,
        ),
    };
    let mut ids = Vec::new();
    for email in [easel::FIRST_ACCOUNT_EMAIL, "neighbour@example.com"] {
        let account = store
            .ensure_account(email, &easel::webhooks::signing::generate_secret())
            .await?;
        ids.push(account.id);
    }
    let key = easel::auth::create_key(store.as_ref(), &ids[0], key_name).await?;
    let (session, hash) = easel::accounts::new_session_token();
    store
        .create_session(&ids[0], &hash, crate::now_ms() + 86_400_000)
        .await?;
    Ok(Seeded {
        store,
        ids,
        key,
        session,
    })
}

/// Make the two accounts and their 2 x `TASKS` tasks, interleaved, straight in the database:
/// the measured account's are mostly finished imagine tasks with four images, every tenth a
/// describe, every twentieth failed. Returns the measured account's key, a dashboard session's
/// token for it, and each case's cursor.
async fn fill(db: &Db, data: &Path) -> anyhow::Result<(String, String, Vec<Option<String>>)> {
    let Seeded {
        store,
        ids,
        key,
        session,
    } = two_accounts(db, data, "listing").await?;
    let now = crate::now_ms() - 2 * TASKS * 1000;
    // Odd `seq`s are the measured account's; `k` counts its tasks (and the other's) from 0.
    let columns = "seq, account_id, task_type, status, priority, prompt, aspect_ratio,
        process_mode, seed, percentage, attempts, created_at, started_at, finished_at, grid_key,
        image_keys, result, error";
    let values = |keys: &str| {
        format!(
            "i, CASE WHEN i % 2 = 1 THEN $1 ELSE $2 END,
             CASE WHEN (i / 2) % 10 = 0 THEN 'describe' ELSE 'imagine' END,
             CASE WHEN (i / 2) % 20 = 3 THEN 'failed' ELSE 'finished' END,
             1, 'a lighthouse on a rocky coast at dusk, number ' || i, '1:1', 'fast', i,
             CASE WHEN (i / 2) % 20 = 3 THEN 0 ELSE 100 END, 1, $3 + i * 1000, $3 + i * 1000,
             $3 + i * 1000 + 900,
             CASE WHEN (i / 2) % 10 = 0 OR (i / 2) % 20 = 3 THEN NULL
                  ELSE 'bench/' || i || '/grid.png' END,
             CASE WHEN (i / 2) % 10 = 0 OR (i / 2) % 20 = 3 THEN NULL ELSE {keys} END,
             CASE WHEN (i / 2) % 10 = 0 THEN '{{\"content\":[\"a lighthouse\"]}}'
                  WHEN (i / 2) % 20 = 3 THEN NULL
                  ELSE '{{\"width\":1024,\"height\":1024}}' END,
             CASE WHEN (i / 2) % 20 = 3 THEN 'content policy violation' END"
        )
    };
    let image = |n: u8| format!("'bench/' || i || '/{n}.png'");
    let images: Vec<String> = (0..4).map(image).collect();
    match db {
        Db::Sqlite => {
            let mut conn = crate::open_conn(&data.join("easel.db")).await?;
            let sql = format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $4)
                 INSERT INTO tasks ({columns}) SELECT {} FROM n",
                values(&format!("json_array({})", images.join(", ")))
            );
            sqlx::query(&sql)
                .bind(&ids[0])
                .bind(&ids[1])
                .bind(now)
                .bind(2 * TASKS)
                .execute(&mut conn)
                .await?;
            sqlx::query("ANALYZE").execute(&mut conn).await?;
            sqlx::Connection::close(conn).await?;
        }
        Db::Postgres(url) => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await?;
            let sql = format!(
                "INSERT INTO tasks ({columns})
                 SELECT {} FROM generate_series(1::bigint, $4::bigint) AS i",
                values(&format!("ARRAY[{}]", images.join(", ")))
            );
            sqlx::query(&sql)
                .bind(&ids[0])
                .bind(&ids[1])
                .bind(now)
                .bind(2 * TASKS)
                .execute(&mut conn)
                .await?;
            sqlx::query("SELECT setval('task_seq', $1)")
                .bind(2 * TASKS)
                .execute(&mut conn)
                .await?;
            sqlx::query("ANALYZE tasks").execute(&mut conn).await?;
            conn.close().await?;
        }
    }
    // Each case's cursor: the public id of the last task before its page.
    let mut cursors = Vec::new();
    for case in cases() {
        if case.depth == 0 {
            cursors.push(None);
            continue;
        }
        let filter = easel::store::TaskFilter {
            status: case.status.map(|s| s.parse().expect("a status")),
            task_type: case.task_type.map(|t| t.parse().expect("a task type")),
            ..Default::default()
        };
        // Walk there a hundred at a time, through the store's own listing.
        let mut cursor: Option<uuid::Uuid> = None;
        let mut seen = 0;
        while seen < case.depth {
            let page = store
                .list_tasks(&ids[0], &filter, cursor.as_ref(), 100)
                .await?
                .context("a cursor of the account")?;
            let take = ((case.depth - seen) as usize).min(page.tasks.len());
            if take == 0 {
                bail!("{}: only {seen} tasks", case.label);
            }
            cursor = Some(page.tasks[take - 1].id.parse()?);
            seen += take as i64;
        }
        cursors.push(cursor.map(|c| c.to_string()));
    }
    store.close().await;
    Ok((key, session, cursors))
}
