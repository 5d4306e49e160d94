//! The search benchmark (issue 50): `GET /api/v1/tasks?q=` and the gallery page
//! (`GET /gallery?q=`, signed in) over 1,000,000 tasks, two accounts of 500,000 each,
//! interleaved, on each store. The figure is the server's own time per request, read from its
//! access log (`latency_ms`), p50 and p99 of sequential requests from one client; the baseline
//! is the plain listing's first page (no search) on the same server. Goal: p99 under 50 ms.
//!
//! The prompts are made so that each case's words have a known share of the measured account's
//! tasks: a colour in every fourth, a subject in every eighth, a rare word in one in 5,000, and
//! a word that only the other account's prompts hold (a search that finds nothing among
//! 500,000 of the account's own while the other account's tasks hold it 62,500 times). The tasks
//! are written straight into the database (one statement, the search index kept by the store's
//! own trigger or generated column) before the server starts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};

use crate::backends::percentile;
use crate::listing::{server_latencies, two_accounts, Db, Seeded};
use crate::proc::{fresh_dir, Server};
use crate::report::{self, Row};
use crate::Ctx;

/// Tasks in the database, half of them the measured account's.
const TASKS: i64 = 1_000_000;
/// The goal for p99 server time, in ms.
const GOAL_MS: f64 = 50.0;
/// Requests per case left out of the figures.
const WARMUP: usize = 10;

/// One measured request: its label, its query (without the cursor), how many of the account's
/// matching tasks come before its page, and how many tasks it answers.
struct Case {
    label: &'static str,
    query: &'static str,
    depth: i64,
    answers: usize,
    /// The dashboard's gallery rather than the API.
    page: bool,
}

fn cases() -> Vec<Case> {
    let api = |label, query, depth, answers| Case {
        label,
        query,
        depth,
        answers,
        page: false,
    };
    vec![
        api("no search (baseline)", "limit=20", 0, 20),
        api("q=red (1 in 4)", "limit=20&q=red", 0, 20),
        api("q=red fox (1 in 32)", "limit=20&q=red+fox", 0, 20),
        api("q=red fox, after 10,000", "limit=20&q=red+fox", 10_000, 20),
        api("q=aurora (1 in 5,000)", "limit=20&q=aurora", 0, 20),
        api(
            "q=neighbourly (none of the account's)",
            "limit=20&q=neighbourly",
            0,
            0,
        ),
        api(
            "q=red fox&status=failed",
            "limit=20&q=red+fox&status=failed",
            0,
            20,
        ),
        api(
            "q=red fox&type=describe",
            "limit=20&q=red+fox&type=describe",
            0,
            20,
        ),
        Case {
            label: "the gallery, q=red fox",
            query: "q=red+fox",
            depth: 0,
            answers: GALLERY_TILES,
            page: true,
        },
    ]
}

/// Tiles on one gallery page (`easel::http::web::gallery::PAGE_SIZE`).
const GALLERY_TILES: usize = 24;

pub async fn run(ctx: &Ctx, postgres_admin: Option<&str>) -> anyhow::Result<(Vec<Row>, Value)> {
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    let (r, d) = measure(ctx, Db::Sqlite).await?;
    rows.extend(r);
    details.insert("sqlite".into(), d);
    if let Some(admin) = postgres_admin {
        let scratch = crate::postgres::Scratch::create(admin, "search").await?;
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
        Db::Sqlite => ("sqlite", ctx.work.join("search-sqlite")),
        Db::Postgres(_) => ("postgres", ctx.work.join("search-postgres")),
    };
    fresh_dir(&data)?;
    let filled = Instant::now();
    let (key, session, cursors) = fill(&db, &data).await?;
    println!(
        "   {name}: {} tasks written and indexed in {:.1} s",
        report::count(TASKS as usize),
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
    let mut order: Vec<usize> = Vec::new();
    let mut client_ms: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for (i, case) in cases.iter().enumerate() {
        let mut url = if case.page {
            server.url(&format!("/gallery?{}", case.query))
        } else {
            server.url(&format!("/api/v1/tasks?{}", case.query))
        };
        if let Some(cursor) = &cursors[i] {
            url.push_str(&format!("&cursor={cursor}"));
        }
        for k in 0..requests + WARMUP {
            let sent = Instant::now();
            if case.page {
                let res = http
                    .get(&url)
                    .header("Cookie", format!("easel_session={session}"))
                    .send()
                    .await?;
                let status = res.status();
                let body = res.text().await?;
                ensure!(status == 200, "{url}: {status}");
                let got = body.matches("href=\"/tasks/").count();
                ensure!(
                    got == case.answers,
                    "{url}: {got} tiles, not {}",
                    case.answers
                );
            } else {
                let res = http.get(&url).header("Authorization", &key).send().await?;
                let status = res.status();
                let body: Value = res.json().await?;
                ensure!(status == 200, "{url}: {status} {body}");
                let got = body["tasks"].as_array().map_or(0, Vec::len);
                ensure!(
                    got == case.answers,
                    "{url}: {got} tasks, not {}",
                    case.answers
                );
            }
            if k >= WARMUP {
                client_ms[i].push(sent.elapsed().as_secs_f64() * 1e3);
            }
            order.push(if k >= WARMUP { i } else { usize::MAX });
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.log.clone();
    server.stop(Duration::from_secs(10)).await?;
    let server_ms = server_latencies(&log, "/gallery")?;
    ensure!(
        server_ms.len() == order.len(),
        "{} request lines in {}, {} requests sent",
        server_ms.len(),
        log.display(),
        order.len()
    );
    let mut by_case: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for (case, ms) in order.iter().zip(server_ms) {
        if *case != usize::MAX {
            by_case[*case].push(ms);
        }
    }
    let mut rows = Vec::new();
    let mut details = serde_json::Map::new();
    let mut baseline = [0.0, 0.0];
    for (i, measured) in by_case.iter().enumerate() {
        let case = &cases[i];
        let server = [percentile(measured, 0.5), percentile(measured, 0.99)];
        let client = [
            percentile(&client_ms[i], 0.5),
            percentile(&client_ms[i], 0.99),
        ];
        if i == 0 {
            baseline = server;
        }
        println!(
            "   {name} {}: server p50 {:.2} ms, p99 {:.2} ms (client {:.2} / {:.2} ms)",
            case.label, server[0], server[1], client[0], client[1]
        );
        details.insert(
            case.label.to_string(),
            json!({ "server_ms": server, "client_ms": client, "requests": requests }),
        );
        let what = if case.page {
            "GET /gallery"
        } else {
            "GET /api/v1/tasks"
        };
        rows.push(
            Row::new(
                "search",
                format!(
                    "{name}, 1,000,000 tasks: {what}, {} (p50 / p99)",
                    case.label
                ),
                "ms",
            )
            .value(&server)
            .baseline(&baseline)
            .goal(format!("p99 < {GOAL_MS:.0} ms"), server[1] < GOAL_MS),
        );
    }
    Ok((rows, Value::Object(details)))
}

/// The two accounts and their tasks (odd `seq`s the measured account's), straight in the
/// database, as `listing` writes them (every tenth of an account's a describe, every twentieth
/// failed), with prompts made of words of known shares. Returns the measured account's key, a
/// dashboard session's token and each case's cursor.
async fn fill(db: &Db, data: &Path) -> anyhow::Result<(String, String, Vec<Option<String>>)> {
    let Seeded {
        store,
        ids,
        key,
        session,
    } = two_accounts(db, data, "search").await?;
    let now = crate::now_ms() - TASKS * 1000;
    let columns = "seq, account_id, task_type, status, priority, prompt, aspect_ratio,
        process_mode, seed, percentage, attempts, created_at, started_at, finished_at, grid_key,
        image_keys, result, error";
    // `k` = i / 2 counts each account's tasks; the colour and subject follow `k`, so that both
    // accounts hold them alike, and `neighbourly` is in every fourth of the other's alone.
    let values = |keys: &str| {
        format!(
            "i, CASE WHEN i % 2 = 1 THEN $1 ELSE $2 END,
             CASE WHEN (i / 2) % 10 = 0 THEN 'describe' ELSE 'imagine' END,
             CASE WHEN (i / 2) % 20 = 4 THEN 'failed' ELSE 'finished' END,
             1,
             'a ' || (CASE (i / 2) % 4 WHEN 0 THEN 'red' WHEN 1 THEN 'blue' WHEN 2 THEN 'green'
                      ELSE 'amber' END)
             || ' ' || (CASE (i / 8) % 8 WHEN 0 THEN 'fox' WHEN 1 THEN 'owl' WHEN 2 THEN 'harbour'
                      WHEN 3 THEN 'lighthouse' WHEN 4 THEN 'forest' WHEN 5 THEN 'city'
                      WHEN 6 THEN 'desert' ELSE 'garden' END)
             || (CASE WHEN (i / 2) % 5000 = 7 THEN ' under an aurora' ELSE ' at dusk' END)
             || (CASE WHEN i % 2 = 0 AND (i / 2) % 4 = 1 THEN ', neighbourly' ELSE '' END)
             || ', painted in oils, number ' || i,
             '1:1', 'fast', i,
             CASE WHEN (i / 2) % 20 = 4 THEN 0 ELSE 100 END, 1, $3 + i * 1000, $3 + i * 1000,
             $3 + i * 1000 + 900,
             CASE WHEN (i / 2) % 10 = 0 OR (i / 2) % 20 = 4 THEN NULL
                  ELSE 'bench/' || i || '/grid.png' END,
             CASE WHEN (i / 2) % 10 = 0 OR (i / 2) % 20 = 4 THEN NULL ELSE {keys} END,
             CASE WHEN (i / 2) % 10 = 0 THEN '{{\"content\":[\"a lighthouse\"]}}'
                  WHEN (i / 2) % 20 = 4 THEN NULL
                  ELSE '{{\"width\":1024,\"height\":1024}}' END,
             CASE WHEN (i / 2) % 20 = 4 THEN 'content policy violation' END"
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
                .bind(TASKS)
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
                .bind(TASKS)
                .execute(&mut conn)
                .await?;
            sqlx::query("SELECT setval('task_seq', $1)")
                .bind(TASKS)
                .execute(&mut conn)
                .await?;
            sqlx::query("VACUUM ANALYZE tasks")
                .execute(&mut conn)
                .await?;
            conn.close().await?;
        }
    }
    // Each case's cursor: the last task before its page, walked to through the store's own
    // search a hundred at a time.
    let mut cursors = Vec::new();
    for case in cases() {
        if case.depth == 0 {
            cursors.push(None);
            continue;
        }
        let words = case
            .query
            .split('&')
            .find_map(|p| p.strip_prefix("q="))
            .unwrap_or("");
        let filter = easel::store::TaskFilter {
            words: easel::store::TaskFilter::words_of(&words.replace('+', " ")),
            ..Default::default()
        };
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
