//! The clients of the events benchmark: many Server-Sent Events streams read in this one
//! runtime (each a reqwest streaming body, its lines parsed as they come), which note when each
//! `progress` event arrives; and the moments the mock ComfyUI sends its `progress` frames.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::backend_mocks::comfyui::ComfyMock;

/// One `progress` event as a subscriber got it: the task, the percentage, when.
pub type Arrival = (String, i64, Instant);

/// Streams open on one server, each noting its `progress` events until stopped.
pub struct Subscribers {
    /// How many have had their 200 (the stream is open on the server).
    pub open: Arc<AtomicUsize>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<anyhow::Result<Vec<Arrival>>>,
}

impl Subscribers {
    /// Open `n` streams of `url` with `key`, all at once.
    pub fn start(http: &reqwest::Client, url: &str, key: &str, n: usize) -> Subscribers {
        let open = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for _ in 0..n {
            let (http, url, key, open, stopped) = (
                http.clone(),
                url.to_string(),
                key.to_string(),
                open.clone(),
                stopped.clone(),
            );
            tasks.spawn(subscribe(http, url, key, open, stopped));
        }
        Subscribers { open, stop, tasks }
    }

    /// Wait until every stream is open; an error naming how many are after `limit`.
    pub async fn wait_open(&mut self, n: usize, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        while self.open.load(Ordering::Relaxed) < n {
            // A subscriber that ended already failed (a refusal, a closed stream): say why.
            if let Some(done) = self.tasks.try_join_next() {
                done??;
                bail!("a stream ended before the benchmark stopped it");
            }
            if Instant::now() > deadline {
                bail!(
                    "only {} of {n} streams were open after {limit:?}",
                    self.open.load(Ordering::Relaxed)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Close every stream; what each got.
    pub async fn finish(mut self) -> anyhow::Result<Vec<Vec<Arrival>>> {
        let _ = self.stop.send(true);
        let mut all = Vec::new();
        while let Some(done) = self.tasks.join_next().await {
            all.push(done??);
        }
        Ok(all)
    }
}

async fn subscribe(
    http: reqwest::Client,
    url: String,
    key: String,
    open: Arc<AtomicUsize>,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<Vec<Arrival>> {
    let answer = http
        .get(&url)
        .header("Authorization", key)
        .header("Accept", "text/event-stream")
        .send()
        .await?;
    let status = answer.status();
    if !status.is_success() {
        let body = answer.text().await.unwrap_or_default();
        bail!("GET {url} answered {status}: {body}");
    }
    open.fetch_add(1, Ordering::Relaxed);
    let mut body = answer.bytes_stream();
    let mut arrivals = Vec::new();
    let mut parser = Parser::default();
    loop {
        let chunk = tokio::select! {
            chunk = body.next() => chunk,
            _ = stopped.changed() => return Ok(arrivals),
        };
        let Some(chunk) = chunk else {
            bail!("a stream ended before the benchmark stopped it");
        };
        // Timed as the chunk is read, before parsing: the events in it arrived now.
        let at = Instant::now();
        for (event, data) in parser.feed(&chunk?) {
            if event != "progress" {
                continue;
            }
            let data: Value = serde_json::from_str(&data).context("progress data")?;
            let task = data["task_id"].as_str().unwrap_or_default().to_string();
            let percentage = data["percentage"]
                .as_str()
                .and_then(|p| p.parse().ok())
                .unwrap_or(-1);
            arrivals.push((task, percentage, at));
        }
    }
}

/// A `text/event-stream` reader: lines in, whole events (name and data) out.
#[derive(Default)]
struct Parser {
    line: Vec<u8>,
    event: String,
    data: String,
}

impl Parser {
    fn feed(&mut self, bytes: &[u8]) -> Vec<(String, String)> {
        let mut events = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let line = String::from_utf8_lossy(&self.line)
                .trim_end_matches('\r')
                .to_string();
            self.line.clear();
            if line.is_empty() {
                if !self.data.is_empty() || !self.event.is_empty() {
                    events.push((
                        std::mem::take(&mut self.event),
                        std::mem::take(&mut self.data),
                    ));
                }
            } else if let Some(v) = line.strip_prefix("event:") {
                self.event = v.trim_start().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
            // `id:` lines are per stream (live events are `{version}.{n}`, n counted by each
            // stream), so events are matched across streams by task and percentage instead;
            // comments (keep-alives) are skipped.
        }
        events
    }
}

/// The `progress` frames the mock ComfyUI writes to easel's socket: its prompt id, the
/// percentage easel makes of it (15 + 60 x value / max, as src/generate/backends/comfyui/client.rs
/// does) and when. Timed by the mock as it writes each frame, so that the latency measured starts
/// when easel can read the frame, however late this process's other tasks run.
pub struct Frames {
    mock: Arc<ComfyMock>,
}

impl Frames {
    /// Note every frame `mock` writes from now on.
    pub fn record(mock: &Arc<ComfyMock>) -> Frames {
        *mock.written.lock().unwrap() = Some(Vec::new());
        Frames { mock: mock.clone() }
    }

    /// The frames so far by (task id, percentage): the i-th prompt the mock ran is the i-th task
    /// in `tasks` (the benchmark runs them one at a time).
    pub fn by_task(&self, tasks: &[String]) -> anyhow::Result<HashMap<(String, i64), Instant>> {
        let written = self.mock.written.lock().unwrap().take().unwrap_or_default();
        let mut prompts: Vec<String> = Vec::new();
        let mut out = HashMap::new();
        for (at, text) in written {
            let Some((prompt, percentage)) = progress_of(&text) else {
                continue;
            };
            let i = match prompts.iter().position(|p| *p == prompt) {
                Some(i) => i,
                None => {
                    prompts.push(prompt);
                    prompts.len() - 1
                }
            };
            let task = tasks.get(i).with_context(|| {
                format!("the mock ran {} prompts for {} tasks", i + 1, tasks.len())
            })?;
            out.insert((task.clone(), percentage), at);
        }
        Ok(out)
    }
}

/// The prompt and the percentage easel makes of a `progress` frame's text; None for another.
fn progress_of(text: &str) -> Option<(String, i64)> {
    let event: Value = serde_json::from_str(text).ok()?;
    if event["type"] != "progress" {
        return None;
    }
    let data = &event["data"];
    let (value, max) = (data["value"].as_f64()?, data["max"].as_f64()?);
    let percentage = 15 + (60.0 * (value / max).clamp(0.0, 1.0)) as i64;
    Some((data["prompt_id"].as_str()?.to_string(), percentage))
}

#[cfg(test)]
mod tests {
    use super::Parser;

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let mut p = Parser::default();
        assert!(p
            .feed(b": keep-alive\n\nevent: progress\nid: 4.1\nda")
            .is_empty());
        let got = p.feed(b"ta: {\"a\":1}\r\n\r\nevent: task\ndata: x\n\n");
        assert_eq!(
            got,
            vec![
                ("progress".to_string(), "{\"a\":1}".to_string()),
                ("task".to_string(), "x".to_string())
            ]
        );
    }
}
