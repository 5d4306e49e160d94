//! The driver of `bench/run`: easel's benchmark suite (issue 4). Each figure is measured side by
//! side with a baseline in the same run and reported as a ratio, because the machine may be
//! shared and noisy. See docs/benchmarks.md for what each figure means.
//!
//! ```text
//! bench/run [--quick] [--only submit,e2e,webhooks,retry,scale,postgres,operations,backends,listing,
//!     search,indexing,wait,idempotency,moderation,plans,openai,decode,events,claims,fleet,soak]
//! ```
//!
//! `soak` (30 minutes) runs only when `--only` names it.
//!
//! It needs the release `easel` binary (`--easel`) and `wrk` on the PATH; bench/run provides both.

// The mock ComfyUI of the tests (its WebSocket `progress` frames) is the backend of `events`.
mod alternated;
#[path = "../../tests/it/backend_mocks/mod.rs"]
mod backend_mocks;
mod backends;
mod claims;
mod decode;
mod e2e;
mod events;
mod fleet;
mod idempotency;
mod indexing;
mod listing;
mod moderation;
mod openai;
mod operations;
mod plans;
mod postgres;
mod proc;
mod report;
mod scale;
mod search;
mod soak;
mod store_alone;
mod submit;
mod subscribers;
mod wait;
mod webhooks;
mod wrk;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions};
use sqlx::ConnectOptions;

use report::Row;

const BENCHMARKS: &[&str] = &[
    "submit",
    "e2e",
    "webhooks",
    "retry",
    "scale",
    "postgres",
    "operations",
    "backends",
    "listing",
    "search",
    "indexing",
    "wait",
    "idempotency",
    "moderation",
    "plans",
    "openai",
    "decode",
    "events",
    "claims",
    "fleet",
];

/// Benchmarks that run only when `--only` names them: the soak takes half an hour.
const NAMED_ONLY: &[&str] = &["soak"];

#[derive(Parser)]
#[command(about = "easel's benchmarks (run them through bench/run)")]
struct Args {
    /// The release `easel` binary.
    #[arg(long)]
    easel: PathBuf,
    /// Scratch directory for data dirs and logs.
    #[arg(long)]
    work: PathBuf,
    /// Directory of the wrk Lua scripts.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/wrk"))]
    lua: PathBuf,
    /// Benchmarks to run, comma-separated (default: all): submit, e2e, webhooks, retry, scale,
    /// postgres, operations, backends, listing, search, indexing, wait, idempotency,
    /// moderation, plans, openai, decode, events, claims, fleet; and soak, which runs only when
    /// named here.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Smaller counts and shorter runs (a couple of minutes); figures are rougher.
    #[arg(long)]
    quick: bool,
    /// Write the results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace the "latest results" section of this Markdown file with the table.
    #[arg(long)]
    docs: Option<PathBuf>,
    /// Override the number of tasks of the end-to-end benchmark.
    #[arg(long)]
    e2e_tasks: Option<usize>,
    /// Override the number of due deliveries of the webhook benchmark (per sync mode).
    #[arg(long)]
    webhook_deliveries: Option<usize>,
    /// Override the image size (long side, px) of the end-to-end benchmark.
    #[arg(long)]
    image_size: Option<u32>,
    /// `sqlite_synchronous` of the end-to-end benchmark's server (default: full, easel's default).
    #[arg(long, default_value = "full")]
    e2e_sync: String,
    /// Diagnostic: run the end-to-end benchmark's server with this many workers (the generator
    /// alone keeps one thread per core).
    #[arg(long)]
    service_workers: Option<usize>,
    /// The PostgreSQL server of the `postgres` benchmark (a URL to a database the user may
    /// `CREATE DATABASE` from); it makes a fresh database per measurement and drops it after.
    #[arg(long, env = "EASEL_BENCH_POSTGRES_URL", default_value = postgres::DEFAULT_URL)]
    postgres_url: String,
    /// Override the number of tasks of the `postgres` benchmark's whole-life runs.
    #[arg(long)]
    pg_tasks: Option<usize>,
    /// How long the soak runs, in minutes (at least 3).
    #[arg(long, default_value_t = 30.0)]
    soak_minutes: f64,
    /// The source revision benchmarked, to record with the results (`git describe`).
    #[arg(long, default_value = "unknown")]
    revision: String,
    /// The command line to record with the results.
    #[arg(long, default_value = "bench/run")]
    command_line: String,
}

/// How much work each benchmark does.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub warmup_secs: u64,
    pub run_secs: u64,
    pub concurrencies: Vec<usize>,
    pub e2e_tasks: usize,
    pub e2e_timeout_secs: u64,
    pub image_size: u32,
    pub e2e_sync: String,
    pub workers: usize,
    pub service_workers: Option<usize>,
    pub webhook_deliveries: usize,
    pub webhook_concurrency: usize,
    pub webhook_timeout_secs: u64,
    pub retry_deliveries: usize,
    pub retry_window_secs: u64,
    pub retry_measure_secs: u64,
    pub scale_sizes: Vec<usize>,
    pub fetch_concurrencies: Vec<usize>,
    /// Tasks of each whole-life run of the `postgres` benchmark.
    pub pg_e2e_tasks: usize,
    /// Their image size: the generator's smallest.
    pub pg_image_size: u32,
    /// Requests per case of the listing benchmark.
    pub listing_requests: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .min(4);
        if quick {
            Plan {
                warmup_secs: 1,
                run_secs: 3,
                concurrencies: vec![1, 16, 64],
                e2e_tasks: 300,
                e2e_timeout_secs: 300,
                image_size: 256,
                e2e_sync: "full".into(),
                workers,
                service_workers: None,
                webhook_deliveries: 4_000,
                webhook_concurrency: 64,
                webhook_timeout_secs: 120,
                retry_deliveries: 20_000,
                retry_window_secs: 400,
                retry_measure_secs: 15,
                scale_sizes: vec![1_000, 100_000, 300_000],
                fetch_concurrencies: vec![1, 16],
                pg_e2e_tasks: 1_000,
                pg_image_size: 64,
                listing_requests: 100,
            }
        } else {
            Plan {
                warmup_secs: 2,
                run_secs: 10,
                concurrencies: vec![1, 16, 64],
                e2e_tasks: 2_000,
                e2e_timeout_secs: 600,
                image_size: 512,
                e2e_sync: "full".into(),
                workers,
                service_workers: None,
                webhook_deliveries: 20_000,
                webhook_concurrency: 64,
                webhook_timeout_secs: 300,
                retry_deliveries: 100_000,
                retry_window_secs: 400,
                retry_measure_secs: 60,
                scale_sizes: vec![1_000, 100_000, 1_000_000],
                fetch_concurrencies: vec![1, 16],
                pg_e2e_tasks: 5_000,
                pg_image_size: 64,
                listing_requests: 400,
            }
        }
    }
}

/// What every benchmark gets.
pub struct Ctx {
    pub easel: PathBuf,
    pub work: PathBuf,
    pub plan: Plan,
    pub wrk: wrk::Wrk,
}

/// Current time as Unix milliseconds (easel stores times so).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn sqlite_options(db: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::from_str(&format!("sqlite://{}", db.display()))
        .expect("valid sqlite path")
        .busy_timeout(Duration::from_secs(30))
        .disable_statement_logging()
}

/// A small pool on an easel database (read-only when asked).
pub async fn open_db(db: &Path, read_only: bool) -> anyhow::Result<SqlitePool> {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(sqlite_options(db).read_only(read_only))
        .await
        .with_context(|| format!("opening {}", db.display()))
}

/// Open (creating) the SQLite store in `data` and its first account, as `easel serve` would
/// find them. Returns the store, the account and the database file's path.
async fn open_store_with_account(
    data: &Path,
) -> anyhow::Result<(easel::store::SharedStore, easel::store::Account, PathBuf)> {
    std::fs::create_dir_all(data)?;
    let db_path = data.join("easel.db");
    let store: easel::store::SharedStore = std::sync::Arc::new(
        easel::store::sqlite::SqliteStore::open(&format!("sqlite://{}", db_path.display()), false)
            .await?,
    );
    let account = store
        .ensure_account(
            easel::FIRST_ACCOUNT_EMAIL,
            &easel::webhooks::signing::generate_secret(),
        )
        .await?;
    Ok((store, account, db_path))
}

/// One connection for bulk writes: WAL (as easel), no fsync (the data is scratch).
pub async fn open_conn(db: &Path) -> anyhow::Result<SqliteConnection> {
    sqlite_options(db)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Off)
        .connect()
        .await
        .with_context(|| format!("opening {}", db.display()))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("easel_bench: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Run the benchmarks; Ok(false) when one of them failed to produce its figures.
async fn run(args: Args) -> anyhow::Result<bool> {
    let mut selected: Vec<&str> = if args.only.is_empty() {
        BENCHMARKS.to_vec()
    } else {
        for name in &args.only {
            anyhow::ensure!(
                BENCHMARKS.contains(&name.as_str()) || NAMED_ONLY.contains(&name.as_str()),
                "unknown benchmark {name:?}; choose among {}, {}",
                BENCHMARKS.join(", "),
                NAMED_ONLY.join(", ")
            );
        }
        BENCHMARKS
            .iter()
            .chain(NAMED_ONLY)
            .copied()
            .filter(|b| args.only.iter().any(|o| o == b))
            .collect()
    };
    anyhow::ensure!(
        args.easel.is_file(),
        "no easel binary at {}",
        args.easel.display()
    );
    std::fs::create_dir_all(&args.work)?;
    let mut plan = Plan::new(args.quick);
    plan.e2e_tasks = args.e2e_tasks.unwrap_or(plan.e2e_tasks);
    plan.webhook_deliveries = args.webhook_deliveries.unwrap_or(plan.webhook_deliveries);
    plan.image_size = args.image_size.unwrap_or(plan.image_size);
    plan.e2e_sync = args.e2e_sync.clone();
    plan.service_workers = args.service_workers;
    plan.pg_e2e_tasks = args.pg_tasks.unwrap_or(plan.pg_e2e_tasks);
    // Without a PostgreSQL server the `postgres` benchmark is skipped, with a line saying so.
    let mut skipped: Vec<String> = Vec::new();
    if selected.contains(&"postgres") {
        if let Err(e) = postgres::check_reachable(&args.postgres_url).await {
            let line = format!(
                "postgres: skipped, PostgreSQL is unreachable at {} ({e:#}); set \
                 EASEL_BENCH_POSTGRES_URL or --postgres-url",
                redact(&args.postgres_url)
            );
            println!("== {line}");
            skipped.push(line);
            selected.retain(|b| *b != "postgres");
        }
    }
    let ctx = Ctx {
        easel: args.easel.clone(),
        work: args.work.clone(),
        plan,
        wrk: wrk::Wrk {
            lua_dir: args.lua.clone(),
        },
    };

    let started = chrono::Utc::now();
    let load_before = report::loadavg();
    let mut rows: Vec<Row> = Vec::new();
    let mut details = serde_json::Map::new();
    let mut failures = Vec::new();
    for name in &selected {
        println!("== {name}");
        let t = Instant::now();
        let result = match *name {
            "submit" => submit::run(&ctx).await,
            "e2e" => e2e::run(&ctx).await,
            "webhooks" => webhooks::run_throughput(&ctx).await,
            "retry" => webhooks::run_retry(&ctx).await,
            "scale" => scale::run(&ctx).await,
            "postgres" => postgres::run(&ctx, &args.postgres_url).await,
            "operations" => operations::run(&ctx).await,
            "decode" => decode::run(&ctx).await,
            "idempotency" => idempotency::run(&ctx).await,
            "moderation" => moderation::run(&ctx).await,
            "plans" => plans::run(&ctx).await,
            "indexing" => {
                // On PostgreSQL too when its server answers; SQLite alone otherwise.
                let pg = postgres::check_reachable(&args.postgres_url).await.is_ok();
                indexing::run(&ctx, pg.then_some(args.postgres_url.as_str())).await
            }
            "openai" => openai::run(&ctx).await,
            "backends" => backends::run(&ctx).await,
            "listing" => {
                // On PostgreSQL too when its server answers; SQLite alone otherwise.
                let pg = postgres::check_reachable(&args.postgres_url).await.is_ok();
                listing::run(&ctx, pg.then_some(args.postgres_url.as_str())).await
            }
            "search" => {
                // On PostgreSQL too when its server answers; SQLite alone otherwise.
                let pg = postgres::check_reachable(&args.postgres_url).await.is_ok();
                search::run(&ctx, pg.then_some(args.postgres_url.as_str())).await
            }
            "wait" => wait::run(&ctx).await,
            "events" => {
                // Across two PostgreSQL nodes too when its server answers.
                let pg = postgres::check_reachable(&args.postgres_url).await.is_ok();
                events::run(&ctx, pg.then_some(args.postgres_url.as_str())).await
            }
            "fleet" => {
                // Four nodes need PostgreSQL; without its server the row says why it is missing.
                match postgres::check_reachable(&args.postgres_url).await {
                    Ok(()) => fleet::run(&ctx, &args.postgres_url).await,
                    Err(e) => Err(e.context("fleet needs PostgreSQL")),
                }
            }
            "claims" => {
                // On PostgreSQL too when its server answers.
                let pg = postgres::check_reachable(&args.postgres_url).await.is_ok();
                claims::run(&ctx, pg.then_some(args.postgres_url.as_str())).await
            }
            "soak" => soak::run(&ctx, args.soak_minutes).await,
            _ => unreachable!("checked above"),
        };
        match result {
            Ok((r, d)) => {
                println!("{}\n", report::table(&r));
                rows.extend(r);
                details.insert(name.to_string(), d);
            }
            Err(e) => {
                eprintln!("== {name} failed: {e:#}");
                failures.push(json!({ "bench": name, "error": format!("{e:#}") }));
            }
        }
        println!("   ({name}: {:.0} s)", t.elapsed().as_secs_f64());
    }
    let elapsed = (chrono::Utc::now() - started).num_seconds();

    let table = report::table(&rows);
    let skipped_text = skipped.join("\n\n");
    println!("== results ({} s)\n\n{table}\n\n{skipped_text}", elapsed);
    let mut machine = report::machine();
    machine["loadavg_1min_before"] = json!(load_before);
    machine["loadavg_1min_after"] = json!(report::loadavg());
    let results = json!({
        "date": started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "command": args.command_line,
        "revision": args.revision,
        "quick": args.quick,
        "benchmarks": selected,
        "elapsed_secs": elapsed,
        "machine": machine,
        "plan": ctx.plan,
        "rows": rows,
        "details": Value::Object(details),
        "failures": failures,
        "skipped": skipped,
    });
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&results)? + "\n")?;
        println!("\nwrote {}", path.display());
    }
    if let Some(path) = &args.docs {
        if failures.is_empty() {
            let section = format!(
                "Run on {} with `{}` ({} s) at revision `{}`, on {} ({} cores, {} GiB, \
                 Linux {}); \
                 easel and the load generator share these cores. Load average (1 min) before \
                 and after the run: {:.1} and {:.1}.\n\n{table}\n\n{skipped_text}\n",
                started.format("%Y-%m-%d %H:%M UTC"),
                args.command_line,
                elapsed,
                args.revision,
                machine["cpu"].as_str().unwrap_or("?"),
                machine["cores"],
                machine["memory_gib"],
                machine["kernel"].as_str().unwrap_or("?"),
                load_before,
                machine["loadavg_1min_after"].as_f64().unwrap_or(f64::NAN),
            );
            report::update_docs(path, &section)?;
            println!("updated {}", path.display());
        } else {
            println!("not updating {}: some benchmarks failed", path.display());
        }
    }
    Ok(failures.is_empty())
}

/// A database URL without its password, for messages.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}
