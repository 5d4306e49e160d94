//! The operations benchmark: the time of one task of each operation at the default image size
//! (1024 px), beside imagine's time measured in the same run, and the peak memory of
//! `easel serve` while four `upscale-highres` 4x tasks run at once (goal: under 512 MiB in all).
//! A task's time is the server's own: from `created_at` (stored) to `finished_at` in its record,
//! so that the client's polling does not count.

use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::proc::{fresh_dir, Server};
use crate::report::Row;
use crate::Ctx;

/// Tasks timed per operation; the median is the figure.
const RUNS: usize = 3;
/// The memory goal of four concurrent 4x upscales, in MiB (the operations issue).
const HIGHRES_GOAL_MIB: f64 = 512.0;

/// An API client of the server under test (also the decode benchmark's).
pub struct Client {
    pub http: reqwest::Client,
    pub server_url: String,
    pub key: String,
}

impl Client {
    /// Submit `body` to `op`; the task id.
    pub async fn submit(&self, op: &str, body: &Value) -> anyhow::Result<String> {
        let res = self
            .http
            .post(format!("{}/api/v1/{op}", self.server_url))
            .header("Authorization", &self.key)
            .json(body)
            .send()
            .await?;
        let status = res.status();
        let answer: Value = res.json().await?;
        if status != 200 {
            bail!("{op} {body}: {status} {answer}");
        }
        Ok(answer["task_id"]
            .as_str()
            .context("no task_id")?
            .to_string())
    }

    /// Wait for the task to end; its record, which must be finished.
    async fn finished(&self, id: &str) -> anyhow::Result<Value> {
        self.finished_within(id, Duration::from_secs(120)).await
    }

    /// [`Client::finished`], waiting up to `within`.
    pub async fn finished_within(&self, id: &str, within: Duration) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            let record: Value = self
                .http
                .get(format!("{}/api/v1/tasks/{id}", self.server_url))
                .header("Authorization", &self.key)
                .send()
                .await?
                .json()
                .await?;
            match record["status"].as_str() {
                Some("finished") => return Ok(record),
                Some("failed") => bail!("task {id} failed: {record}"),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        bail!("task {id} did not finish within {within:?}")
    }

    /// Run `op` with `body` to its end: its record and its time on the server, in ms.
    async fn run(&self, op: &str, body: &Value) -> anyhow::Result<(Value, f64)> {
        let id = self.submit(op, body).await?;
        let record = self.finished(&id).await?;
        let ms = |field: &str| -> anyhow::Result<f64> {
            let at = record[field].as_str().context("a time")?;
            Ok(chrono::DateTime::parse_from_rfc3339(at)?.timestamp_millis() as f64)
        };
        let took = ms("finished_at")? - ms("created_at")?;
        Ok((record, took))
    }

    /// The median time of `RUNS` tasks of `op`.
    async fn time(&self, op: &str, body: &Value) -> anyhow::Result<f64> {
        let mut times = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            times.push(self.run(op, body).await?.1);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[RUNS / 2])
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let data = ctx.work.join("operations");
    fresh_dir(&data)?;
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
            // Four at once, so that the memory figure is four tasks' whatever the core count.
            ("EASEL_WORKERS", "4".into()),
        ],
        &data,
        "easel",
    )
    .await?;
    let client = Client {
        http: reqwest::Client::new(),
        server_url: server.url(""),
        key: server
            .key
            .clone()
            .context("a first key on a fresh data dir")?,
    };
    let prompt = "a lighthouse on a rocky coast at sunset";

    // The parents every follow-up works on.
    let (grid, _) = client.run("imagine", &json!({"prompt": prompt})).await?;
    let grid_id = grid["task_id"].as_str().context("id")?.to_string();
    let (up, _) = client
        .run(
            "upscale-1x",
            &json!({"parent_task_id": grid_id, "index": 1}),
        )
        .await?;
    let up_id = up["task_id"].as_str().context("id")?.to_string();
    let (other, _) = client
        .run(
            "imagine",
            &json!({"prompt": "a field of tulips under a blue sky"}),
        )
        .await?;
    let mask = {
        let (w, h) = (1024u32, 1024u32);
        let mut m = easel::images::RgbaImage::new(w, h);
        for y in h / 4..3 * h / 4 {
            for x in w / 4..3 * w / 4 {
                let i = ((y * w + x) * 4) as usize;
                m.data[i..i + 4].copy_from_slice(&[255, 255, 255, 255]);
            }
        }
        use base64::Engine;
        format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(easel::images::encode_png(&m))
        )
    };

    let imagine = client.time("imagine", &json!({"prompt": prompt})).await?;
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "upscale-1x",
            "",
            json!({"parent_task_id": grid_id, "index": 2}),
        ),
        (
            "upscale-alt",
            " subtle",
            json!({"parent_task_id": up_id, "type": "subtle"}),
        ),
        (
            "upscale-alt",
            " creative",
            json!({"parent_task_id": up_id, "type": "creative"}),
        ),
        (
            "upscale-highres",
            " 2x",
            json!({"parent_task_id": up_id, "type": "2x"}),
        ),
        (
            "upscale-highres",
            " 4x",
            json!({"parent_task_id": up_id, "type": "4x"}),
        ),
        (
            "variations",
            "",
            json!({"parent_task_id": grid_id, "index": 1}),
        ),
        ("reroll", "", json!({"parent_task_id": grid_id})),
        (
            "pan",
            "",
            json!({"parent_task_id": up_id, "direction": "left"}),
        ),
        (
            "outpaint",
            "",
            json!({"parent_task_id": up_id, "zoom_ratio": 1.5}),
        ),
        (
            "inpaint",
            "",
            json!({"parent_task_id": up_id, "mask": mask}),
        ),
        (
            "blend",
            "",
            json!({"image_urls": [grid["image_urls"][0], other["image_urls"][0]]}),
        ),
        ("describe", "", json!({"image_url": other["image_urls"][1]})),
        (
            "shorten",
            "",
            json!({"prompt": "a very detailed painting of a lighthouse on a rocky coast at sunset, 8k --ar 16:9"}),
        ),
        ("seed", "", json!({"task_id": grid_id})),
    ];
    let mut rows = vec![Row::new("operations", "imagine: one task, 1024 px", "ms")
        .value(&[imagine])
        .baseline(&[imagine])];
    let mut details = serde_json::Map::new();
    details.insert("imagine_ms".into(), json!(imagine));
    for (op, variant, body) in &cases {
        let ms = client.time(op, body).await?;
        println!("   {op}{variant}: {ms:.0} ms (imagine {imagine:.0} ms)");
        details.insert(format!("{op}{variant}_ms"), json!(ms));
        rows.push(
            Row::new(
                "operations",
                format!("{op}{variant}: one task, 1024 px"),
                "ms",
            )
            .value(&[ms])
            .baseline(&[imagine]),
        );
    }

    // Peak memory of four 4x upscales at once: the high-water mark is reset just before them
    // (writing 5 to clear_refs), so it covers them and not what ran earlier.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = server.mem()?;
    std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5")
        .context("resetting the server's peak memory (clear_refs)")?;
    let body = json!({"parent_task_id": up_id, "type": "4x"});
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(client.submit("upscale-highres", &body).await?);
    }
    for id in &ids {
        client.finished(id).await?;
    }
    let peak = server.mem()?.peak_mib;
    println!(
        "   four upscale-highres 4x at once: peak {peak:.0} MiB (idle before: {:.0} MiB)",
        idle.rss_mib
    );
    details.insert("highres_idle_rss_mib".into(), json!(idle.rss_mib));
    details.insert("highres_peak_mib".into(), json!(peak));
    rows.push(
        Row::new(
            "operations",
            "peak memory, four upscale-highres 4x at once (baseline: idle)",
            "MiB",
        )
        .value(&[peak])
        .baseline(&[idle.rss_mib])
        .goal(
            format!("< {HIGHRES_GOAL_MIB:.0} MiB"),
            peak < HIGHRES_GOAL_MIB,
        ),
    );
    server.stop(Duration::from_secs(10)).await?;
    Ok((rows, Value::Object(details)))
}
