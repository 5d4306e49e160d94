//! The decode benchmark: the peak memory of `easel serve` while four blends run at once, each of
//! five 16-bit 5000 x 5000 PNGs fetched by URL (the shape of issue 26's probe), with
//! `decode_memory_budget` at 1 GiB, beside the same run with the budget effectively off (4 TiB)
//! on a fresh server. Goal: the budgeted run's peak stays under its idle memory plus the budget
//! plus a margin for what the blends themselves allocate (their canvases and resampling).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use crate::operations::Client;
use crate::proc::{fresh_dir, Server};
use crate::report::Row;
use crate::Ctx;

/// Each input's side, in pixels: 25 megapixels, the default `input_max_pixels`.
const SIDE: u32 = 5000;
/// Blends at once, and images in each.
const BLENDS: usize = 4;
const INPUTS: usize = 5;
/// The budget of the measured run, in MiB.
const BUDGET_MIB: f64 = 1024.0;
/// Beside the budget: what the blends allocate besides their decoded inputs (a crop of an input
/// while it is scaled to the canvas, the canvases, the encoded images) and the allocator's slack.
const MARGIN_MIB: f64 = 512.0;
/// The same test with the budget out of the way: more than every input there is.
const BUDGET_OFF: &str = "4TiB";

/// A `side` x `side` 16-bit RGBA PNG of smooth gradients, which compress to a small file, written
/// row by row so that the driver never holds the raw image.
fn png16(side: u32) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, side, side);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Sixteen);
    encoder.set_compression(png::Compression::Fast);
    encoder.set_filter(png::FilterType::Sub);
    let mut header = encoder.write_header()?;
    let mut writer = header.stream_writer()?;
    let mut row = vec![0u8; side as usize * 8];
    for y in 0..side {
        for (x, px) in row.chunks_exact_mut(8).enumerate() {
            let samples = [
                (x as u16).wrapping_mul(13),
                (y as u16).wrapping_mul(13),
                0x8000,
                0xffff,
            ];
            for (c, v) in samples.into_iter().enumerate() {
                px[c * 2..c * 2 + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        writer.write_all(&row)?;
    }
    writer.finish()?;
    header.finish()?;
    Ok(out)
}

/// Serve `png` at every path on 127.0.0.1; the base URL.
async fn serve(png: Vec<u8>) -> anyhow::Result<String> {
    let png = bytes::Bytes::from(png);
    let app = axum::Router::new().fallback(move || {
        let png = png.clone();
        async move { ([("content-type", "image/png")], png) }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

/// One measurement: a fresh server with `budget`, its idle memory, then the four blends at once:
/// (idle RSS MiB, peak MiB, seconds for the four).
async fn measure(
    ctx: &Ctx,
    name: &str,
    budget: &str,
    base: &str,
) -> anyhow::Result<(f64, f64, f64)> {
    let data = ctx.work.join(format!("decode-{name}"));
    fresh_dir(&data)?;
    let server = Server::start(
        &ctx.easel,
        &["serve"],
        &[
            ("EASEL_DATA_DIR", data.display().to_string()),
            ("EASEL_LISTEN", "127.0.0.1:0".into()),
            // Four at once whatever the core count, as the probe's node had.
            ("EASEL_WORKERS", "4".into()),
            ("EASEL_DECODE_MEMORY_BUDGET", budget.into()),
            // The inputs come from the driver, on 127.0.0.1 over plain HTTP.
            ("EASEL_WEBHOOK_ALLOW_HTTP", "true".into()),
            ("EASEL_WEBHOOK_ALLOW_PRIVATE", "true".into()),
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = server.mem()?;
    // The high-water mark is reset just before the blends (clear_refs), so it covers them only.
    std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5")
        .context("resetting the server's peak memory (clear_refs)")?;
    let started = Instant::now();
    let mut ids = Vec::new();
    for blend in 0..BLENDS {
        let urls: Vec<String> = (0..INPUTS)
            .map(|i| format!("{base}/{name}-{blend}-{i}.png"))
            .collect();
        ids.push(
            client
                .submit("blend", &json!({ "image_urls": urls }))
                .await?,
        );
    }
    for id in &ids {
        client.finished_within(id, Duration::from_secs(900)).await?;
    }
    let took = started.elapsed().as_secs_f64();
    let peak = server.mem()?.peak_mib;
    println!(
        "   budget {budget}: peak {peak:.0} MiB (idle {:.0} MiB), the four blends in {took:.1} s",
        idle.rss_mib
    );
    server.stop(Duration::from_secs(10)).await?;
    Ok((idle.rss_mib, peak, took))
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Row>, Value)> {
    let started = Instant::now();
    let png = tokio::task::spawn_blocking(|| png16(SIDE)).await??;
    let png_bytes = png.len();
    println!(
        "   input: a {SIDE}x{SIDE} 16-bit RGBA PNG of {} KB, made in {:.1} s",
        png_bytes / 1000,
        started.elapsed().as_secs_f64()
    );
    let base = serve(png).await?;
    let budget = format!("{}MiB", BUDGET_MIB as u64);
    let (idle, peak, took) = measure(ctx, "budget", &budget, &base).await?;
    let (idle_off, peak_off, took_off) = measure(ctx, "off", BUDGET_OFF, &base).await?;

    let bound = idle + BUDGET_MIB + MARGIN_MIB;
    let what = format!("four blends at once, each of {INPUTS} 16-bit {SIDE}x{SIDE} PNGs");
    let rows = vec![
        Row::new(
            "decode",
            format!("peak memory, {what}, decode_memory_budget {budget} (baseline: budget off)"),
            "MiB",
        )
        .value(&[peak])
        .baseline(&[peak_off])
        .goal(
            format!("< idle + budget + {MARGIN_MIB:.0} MiB ({bound:.0})"),
            peak < bound,
        ),
        Row::new(
            "decode",
            format!("time of the {what}, budget {budget} (baseline: budget off)"),
            "s",
        )
        .value(&[took])
        .baseline(&[took_off]),
    ];
    let details = json!({
        "input_png_bytes": png_bytes,
        "side": SIDE,
        "blends": BLENDS,
        "inputs_per_blend": INPUTS,
        "budget": budget,
        "margin_mib": MARGIN_MIB,
        "budget_idle_rss_mib": idle,
        "budget_peak_mib": peak,
        "budget_secs": took,
        "off_idle_rss_mib": idle_off,
        "off_peak_mib": peak_off,
        "off_secs": took_off,
    });
    Ok((rows, details))
}
