//! Benchmark 2, end to end: `imagine` tasks submitted over HTTP to a release `easel serve` until
//! every one is `finished`, against the generator alone (render the four variants, compose the
//! grid, encode the five PNGs) on as many threads as the service has workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::{json, Value};

use easel::generate::procedural::render;
use easel::generate::Product;
use easel::images::dimensions;

use crate::proc::{cpu_secs, fresh_dir, Server};
use crate::report::{count, Row};
use crate::{now_ms, open_db, Ctx};

/// Prompts that exercise different parts of the procedural vocabulary.
pub const PROMPTS: &[&str] = &[
    "a red sunset over the ocean",
    "snowy mountains under a blue sky",
    "a green forest with tall trees at dawn",
    "cyberpunk city at night with neon lights",
    "a calm lake reflecting golden hills",
    "stars over the desert dunes, purple and orange",
    "a lighthouse on a stormy sea",
    "a quiet village in autumn, warm and cosy",
    "abstract geometric shapes in pastel colours",
    "a synthwave sunset grid with a pink sun",
    "people walking in the rain in a grey city",
    "a field of sunflowers under a summer sky",
];

/// Run `count` generations on `threads` threads, exactly as a worker does them minus the store:
/// four renders, the grid, five PNG encodings. Returns the wall time.
pub fn generator_alone(first: usize, count: usize, threads: usize, size: u32) -> Duration {
    let next = AtomicUsize::new(first);
    let end = first + count;
    let (width, height) = dimensions(1, 1, size);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                let mut bytes = 0usize;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        break;
                    }
                    let prompt = PROMPTS[i % PROMPTS.len()];
                    let seed = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
                    let images = [0, 1, 2, 3].map(|v| render(prompt, seed, v, width, height));
                    if let Product::Grid { images, grid, .. } = Product::grid(&images) {
                        bytes += images.iter().chain(&grid).map(|i| i.len()).sum::<usize>();
                    }
                }
                std::hint::black_box(bytes);
            });
        }
    });
    started.elapsed()
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let n = ctx.plan.e2e_tasks;
    let workers = ctx.plan.workers;
    let service_workers = ctx.plan.service_workers.unwrap_or(workers);
    let size = ctx.plan.image_size;
    let dir = ctx.work.join("e2e");
    fresh_dir(&dir)?;

    // The baseline runs in two halves, before and after the service, so that a change in the
    // machine's speed during the run affects both sides alike.
    println!("  generator alone: {} tasks on {workers} threads", n / 2);
    let cpu_before = cpu_secs(None)?;
    let first_half =
        tokio::task::spawn_blocking(move || generator_alone(0, n / 2, workers, size)).await?;
    let mut generator_cpu = cpu_secs(None)? - cpu_before;

    println!("  service: {n} tasks through easel serve ({service_workers} workers)");
    let data = dir.join("data");
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
            ("EASEL_WORKERS", service_workers.to_string()),
            ("EASEL_IMAGE_SIZE", size.to_string()),
            ("EASEL_SQLITE_SYNCHRONOUS", ctx.plan.e2e_sync.clone()),
            (
                "EASEL_PLANS__SELF-HOSTED__MAX_PENDING",
                (n + 100).to_string(),
            ),
        ],
        &data,
        "easel",
    )
    .await?;
    let key = server.key.clone().context("easel printed no first key")?;
    let client = reqwest::Client::new();
    let url = server.url("/api/v1/imagine");
    let started_ms = now_ms();
    let started = Instant::now();
    let submitted: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, url, key) = (&client, &url, &key);
            async move {
                let res = client
                    .post(url)
                    .header("Authorization", key)
                    .json(&json!({ "prompt": PROMPTS[i % PROMPTS.len()] }))
                    .send()
                    .await?;
                if !res.status().is_success() {
                    bail!("imagine answered {}: {}", res.status(), res.text().await?);
                }
                Ok(())
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    submitted.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    let submit_secs = started.elapsed().as_secs_f64();

    // Watch the database (cheaper than polling the API, and it does not load the server).
    let db = open_db(&data.join("easel.db"), true).await?;
    let limit = Duration::from_secs(ctx.plan.e2e_timeout_secs);
    let ended = loop {
        let done: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE status IN ('finished', 'failed')")
                .fetch_one(&db)
                .await?;
        if done as usize >= n {
            break true;
        }
        if started.elapsed() > limit {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let (last_ms, failed): (Option<i64>, i64) = sqlx::query_as(
        "SELECT MAX(finished_at), COALESCE(SUM(status = 'failed'), 0) FROM tasks
         WHERE status IN ('finished', 'failed')",
    )
    .fetch_one(&db)
    .await?;
    db.close().await;
    let service_cpu = cpu_secs(Some(server.pid()))?;
    server.stop(Duration::from_secs(60)).await?;
    if !ended {
        bail!("not every task ended within {limit:?}");
    }
    let service_secs = (last_ms.unwrap_or(started_ms) - started_ms) as f64 / 1000.0;

    println!(
        "  generator alone: {} tasks on {workers} threads",
        n - n / 2
    );
    let cpu_before = cpu_secs(None)?;
    let second_half =
        tokio::task::spawn_blocking(move || generator_alone(n / 2, n - n / 2, workers, size))
            .await?;
    generator_cpu += cpu_secs(None)? - cpu_before;
    let baseline_secs = (first_half + second_half).as_secs_f64();
    // Free the disk: thousands of PNG files.
    let _ = std::fs::remove_dir_all(data.join("files"));

    let service_rate = n as f64 / service_secs;
    let baseline_rate = n as f64 / baseline_secs;
    let overhead = baseline_rate / service_rate - 1.0;
    let mut settings = format!("{size} px, {workers} workers");
    if service_workers != workers {
        settings = format!("{size} px, {service_workers} workers vs {workers} threads");
    }
    if ctx.plan.e2e_sync != "full" {
        settings += &format!(", sync={}", ctx.plan.e2e_sync);
    }
    let rows = vec![
        Row::new(
            "e2e",
            format!(
                "end to end: {} imagine tasks to finished, {settings}",
                count(n)
            ),
            "tasks/s",
        )
        .value(&[service_rate])
        .baseline(&[baseline_rate])
        .goal(
            "service costs < 20% (ratio > 0.83x)",
            overhead < 0.2 && failed == 0,
        ),
        Row::new("e2e", "end to end: CPU time per task (all threads)", "ms")
            .value(&[service_cpu * 1000.0 / n as f64])
            .baseline(&[generator_cpu * 1000.0 / n as f64]),
    ];
    let details = json!({
        "tasks": n,
        "workers": workers,
        "image_size": size,
        "sqlite_synchronous": ctx.plan.e2e_sync,
        "failed": failed,
        "submit_secs": submit_secs,
        "service_secs": service_secs,
        "service_tasks_per_sec": service_rate,
        "generator_secs": [first_half.as_secs_f64(), second_half.as_secs_f64()],
        "generator_tasks_per_sec": baseline_rate,
        "service_overhead": overhead,
        "service_workers": service_workers,
        "service_cpu_ms_per_task": service_cpu * 1000.0 / n as f64,
        "generator_cpu_ms_per_task": generator_cpu * 1000.0 / n as f64,
    });
    Ok((rows, details))
}
