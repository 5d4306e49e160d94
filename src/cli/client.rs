//! The command-line client: a command per operation (`easel imagine`, `upscale`, `variations`,
//! `reroll`, `pan`, `zoom`, `inpaint`, `blend`, `describe`), `batch`, `fetch`, `tasks`, `models`,
//! `cancel` and `upload` talk to a running server over its HTTP API, with the key in
//! `EASEL_API_KEY` (docs/cli.md). What each command takes is in [`commands`], the bodies of the
//! operations in [`operations`].

use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

mod commands;
mod operations;

pub use commands::{FollowUp, Generation, Making, Request, Server, Waiting};

/// How often a waiting client reads the task again, on a server without event streams (or
/// with none to spare).
const POLL_EVERY: Duration = Duration::from_millis(500);
/// How many times in a row a broken event stream is opened again before giving up, and the
/// first wait between tries (doubled each time).
const RECONNECTS: u32 = 5;
const RECONNECT_FIRST: Duration = Duration::from_millis(250);
/// A stream that says nothing for this long (the server comments every 15 s) is taken as
/// broken and opened again.
const STREAM_SILENCE: Duration = Duration::from_secs(45);

/// Run a client command.
pub async fn run(request: Request) -> anyhow::Result<()> {
    let server = match &request {
        Request::Variations { follow_up, .. }
        | Request::Reroll { follow_up, .. }
        | Request::Pan { follow_up, .. }
        | Request::Zoom { follow_up, .. }
        | Request::Inpaint { follow_up, .. } => follow_up.server.clone(),
        Request::Imagine { server, .. }
        | Request::Upscale { server, .. }
        | Request::Blend { server, .. }
        | Request::Describe { server, .. }
        | Request::Batch { server, .. }
        | Request::Fetch { server, .. }
        | Request::Tasks { server }
        | Request::Models { server }
        | Request::Cancel { server, .. }
        | Request::Upload { server, .. } => server.clone(),
    };
    // The body is made (files read) before the key is needed.
    if let Some((op, body, making)) = operations::operation(&request)? {
        let client = Client::new(&server)?;
        return client.make(op, body, making, server.json).await;
    }
    let client = Client::new(&server)?;
    match request {
        Request::Batch { file, waiting, .. } => {
            let requests = operations::batch_requests(&file)?;
            let path = "/api/v1/batch";
            let url = format!("{}{path}", client.base);
            let answer = client
                .call(
                    client.http.post(url).json(&json!({ "requests": requests })),
                    &format!("POST {path}"),
                )
                .await?;
            let ids = task_ids(&answer)?;
            client.follow_all(&ids, &waiting, server.json).await
        }
        Request::Fetch { task, output, .. } => {
            let record = client.task(&task).await?;
            client.show(&record, output.as_deref(), server.json).await
        }
        Request::Cancel { task, .. } => {
            let path = format!("/api/v1/tasks/{task}/cancel");
            let url = format!("{}{path}", client.base);
            let record = client
                .call(
                    client.http.post(url).json(&json!({})),
                    &format!("POST {path}"),
                )
                .await?;
            if server.json {
                print_json(&record)?;
            } else {
                println!("{} canceled", record["task_id"].as_str().unwrap_or(&task));
            }
            Ok(())
        }
        Request::Upload { file, .. } => {
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let name = file
                .file_name()
                .map_or("image".into(), |n| n.to_string_lossy().into_owned());
            // The server tells the format from the bytes; the name is only carried along.
            let form = reqwest::multipart::Form::new().part(
                "image",
                reqwest::multipart::Part::bytes(bytes).file_name(name),
            );
            let url = format!("{}/api/v1/upload", client.base);
            let answer = client
                .call(client.http.post(url).multipart(form), "POST /api/v1/upload")
                .await?;
            print_json(&answer)?;
            Ok(())
        }
        Request::Models { .. } => {
            let Some(list) = client.list("/api/v1/models", server.json).await? else {
                return Ok(());
            };
            for m in list["models"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                println!(
                    "{:<20}  {:<4}  {:<7}  {}",
                    m["name"].as_str().unwrap_or("-"),
                    if m["up"] == true { "up" } else { "down" },
                    if m["default"] == true { "default" } else { "" },
                    m["description"].as_str().unwrap_or(""),
                );
            }
            Ok(())
        }
        Request::Tasks { .. } => {
            let Some(list) = client.list("/api/v1/tasks", server.json).await? else {
                return Ok(());
            };
            let tasks = list
                .get("tasks")
                .and_then(Value::as_array)
                .or_else(|| list.as_array())
                .map(Vec::as_slice)
                .unwrap_or_default();
            for t in tasks {
                println!(
                    "{}  {:<16}  {:<10}  {:>3}%  {}",
                    t["task_id"].as_str().unwrap_or("-"),
                    t["task_type"].as_str().unwrap_or("-"),
                    t["status"].as_str().unwrap_or("-"),
                    t["percentage"].as_str().unwrap_or("0"),
                    t["prompt"].as_str().unwrap_or(""),
                );
            }
            Ok(())
        }
        making => unreachable!("a command that submits an operation: {making:?}"),
    }
}

/// The ids a submit answered: `task_ids` (a batch, `--repeat`, permutations), else `task_id`.
fn task_ids(answer: &Value) -> anyhow::Result<Vec<String>> {
    if let Some(ids) = answer["task_ids"].as_array() {
        return ids
            .iter()
            .map(|id| id.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .context("the server's task_ids are not strings");
    }
    answer["task_id"]
        .as_str()
        .map(|id| vec![id.to_string()])
        .context("the server's answer has no task_id")
}

/// `value` as indented JSON on stdout (what `--json` prints).
fn print_json(value: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

struct Client {
    http: reqwest::Client,
    /// The same without a time limit on the whole answer, for event streams.
    streams: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    fn new(server: &Server) -> anyhow::Result<Client> {
        let key = std::env::var("EASEL_API_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .context("set EASEL_API_KEY to an API key (see `easel keys create`)")?;
        let base = server.url.trim_end_matches('/').to_string();
        url::Url::parse(&base).with_context(|| format!("--url {base} is not a URL"))?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("easel-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let streams = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(STREAM_SILENCE)
            .user_agent(concat!("easel-cli/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Client {
            http,
            streams,
            base,
            key: key.trim().to_string(),
        })
    }

    /// Send a request and read its JSON answer; an error status becomes an error that says
    /// what the API said.
    async fn call(&self, request: reqwest::RequestBuilder, what: &str) -> anyhow::Result<Value> {
        let response = request
            .header("Authorization", &self.key)
            .send()
            .await
            .with_context(|| format!("{what}: cannot reach {}", self.base))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if status.is_success() {
            return Ok(serde_json::from_str(&text).unwrap_or(Value::Null));
        }
        Err(api_error(what, status, &text))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        self.call(self.http.get(url), &format!("GET {path}")).await
    }

    /// GET the list at `path`: with `--json` printed as it is and `None`, else for a table.
    async fn list(&self, path: &str, json: bool) -> anyhow::Result<Option<Value>> {
        let list = self.get(path).await?;
        if json {
            print_json(&list)?;
            return Ok(None);
        }
        Ok(Some(list))
    }

    /// Submit `op` with `body` (made with the settings of `making`), and follow its task (or
    /// tasks, for a prompt's `--repeat`) as it asks.
    async fn make(&self, op: &str, body: Value, making: &Making, json: bool) -> anyhow::Result<()> {
        let path = format!("/api/v1/{op}");
        let url = format!("{}{path}", self.base);
        let answer = self
            .call(self.http.post(url).json(&body), &format!("POST {path}"))
            .await?;
        let ids = task_ids(&answer)?;
        self.follow_all(&ids, &making.waiting, json).await
    }

    /// [`Client::follow`] each task in turn; the first failure is the answer, once every task
    /// has been shown.
    async fn follow_all(
        &self,
        ids: &[String],
        waiting: &Waiting,
        json: bool,
    ) -> anyhow::Result<()> {
        let mut first_failure = None;
        for id in ids {
            if let Err(e) = self.follow(id, waiting, json).await {
                if ids.len() > 1 {
                    eprintln!("easel: {e:#}");
                }
                first_failure.get_or_insert(e);
            }
        }
        first_failure.map_or(Ok(()), Err)
    }

    async fn task(&self, id: &str) -> anyhow::Result<Value> {
        uuid::Uuid::parse_str(id).with_context(|| format!("{id:?} is not a task id"))?;
        self.get(&format!("/api/v1/tasks/{id}")).await
    }

    /// After a submit: print the id, or wait for the end and show the result.
    async fn follow(&self, id: &str, waiting: &Waiting, json: bool) -> anyhow::Result<()> {
        if !waiting.wait && waiting.output.is_none() {
            if json {
                print_json(&self.task(id).await?)?;
            } else {
                println!("{id}");
            }
            return Ok(());
        }
        let record = self.wait(id, waiting.timeout).await?;
        self.show(&record, waiting.output.as_deref(), json).await
    }

    /// Follow the task until it is final, showing its progress on stderr: its event stream,
    /// or reading it again and again on a server that has none.
    async fn wait(&self, id: &str, timeout: Duration) -> anyhow::Result<Value> {
        uuid::Uuid::parse_str(id).with_context(|| format!("{id:?} is not a task id"))?;
        let mut shown = Shown::new();
        let deadline = Instant::now() + timeout;
        let streamed = tokio::time::timeout_at(deadline.into(), self.stream(id, &mut shown)).await;
        let record = match streamed {
            Ok(Ok(Some(record))) => Ok(record),
            Ok(Ok(None)) => self.poll(id, &mut shown, deadline).await,
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Timeout.into()),
        };
        shown.done(record.is_ok());
        record.map_err(|e| {
            if e.is::<Timeout>() {
                let status = shown.status.as_deref().unwrap_or("waiting");
                anyhow::anyhow!(
                    "task {id} is still {status} after {timeout:?}; `easel fetch {id}` reads it later"
                )
            } else {
                e
            }
        })
    }

    /// Follow `GET /api/v1/tasks/{id}/events` to the final record, opening it again with
    /// `Last-Event-ID` when it breaks first. `None` when the server has no such route (an older
    /// easel: 404 or 405) or no stream to spare (429, 503): the caller reads the task instead.
    async fn stream(&self, id: &str, shown: &mut Shown) -> anyhow::Result<Option<Value>> {
        let path = format!("/api/v1/tasks/{id}/events");
        let url = format!("{}{path}", self.base);
        let mut last_id: Option<String> = None;
        let mut failures = 0u32;
        loop {
            let mut request = self
                .streams
                .get(&url)
                .header("Authorization", &self.key)
                .header("Accept", "text/event-stream");
            if let Some(last) = &last_id {
                request = request.header("Last-Event-ID", last);
            }
            let broke = match request.send().await {
                Ok(response) if response.status().is_success() => {
                    let mut events = response.bytes_stream().eventsource();
                    loop {
                        match events.next().await {
                            Some(Ok(event)) => {
                                failures = 0;
                                if !event.id.is_empty() {
                                    last_id = Some(event.id.clone());
                                }
                                if !matches!(event.event.as_str(), "task" | "progress") {
                                    continue;
                                }
                                let data: Value = serde_json::from_str(&event.data)
                                    .with_context(|| format!("GET {path}: an event is not JSON"))?;
                                shown.show(&data);
                                if event.event == "task" && is_final(&data) {
                                    return Ok(Some(data));
                                }
                            }
                            Some(Err(e)) => break e.to_string(),
                            None => break "the stream ended before the task did".to_string(),
                        }
                    }
                }
                Ok(response) => {
                    use reqwest::StatusCode;
                    let status = response.status();
                    if matches!(
                        status,
                        StatusCode::NOT_FOUND
                            | StatusCode::METHOD_NOT_ALLOWED
                            | StatusCode::TOO_MANY_REQUESTS
                            | StatusCode::SERVICE_UNAVAILABLE
                    ) {
                        return Ok(None);
                    }
                    let text = response.text().await.unwrap_or_default();
                    return Err(api_error(&format!("GET {path}"), status, &text));
                }
                Err(e) => e.to_string(),
            };
            failures += 1;
            if failures > RECONNECTS {
                bail!("GET {path}: the stream broke {RECONNECTS} times in a row: {broke}");
            }
            tokio::time::sleep(RECONNECT_FIRST * 2u32.pow(failures - 1)).await;
        }
    }

    /// Read the task every [`POLL_EVERY`] until it is final or `deadline` passes.
    async fn poll(&self, id: &str, shown: &mut Shown, deadline: Instant) -> anyhow::Result<Value> {
        loop {
            let record = self.task(id).await?;
            shown.show(&record);
            if is_final(&record) {
                return Ok(record);
            }
            if Instant::now() >= deadline {
                return Err(Timeout.into());
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Print a record: as JSON, or its image URLs (downloaded into `output` when given). A
    /// failed task is an error.
    async fn show(&self, record: &Value, output: Option<&Path>, json: bool) -> anyhow::Result<()> {
        let urls = image_urls(record);
        if let Some(dir) = output {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let id = record["task_id"].as_str().unwrap_or("task");
            let mut saved = Vec::new();
            for (name, url) in &urls {
                // A backend's JPEG is served as `.jpg`: the file keeps its extension.
                let ext = if url.ends_with(".jpg") { "jpg" } else { "png" };
                let path = dir.join(format!("{id}-{name}.{ext}"));
                let bytes = self
                    .http
                    .get(url)
                    .send()
                    .await
                    .and_then(|r| r.error_for_status())
                    .with_context(|| format!("downloading {url}"))?
                    .bytes()
                    .await
                    .with_context(|| format!("downloading {url}"))?;
                std::fs::write(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?;
                saved.push(path);
            }
            if !json {
                for path in &saved {
                    println!("{}", path.display());
                }
            }
        }
        if json {
            print_json(record)?;
        } else if output.is_none() {
            if urls.is_empty() {
                if let Some(content) = record["content"].as_array() {
                    for line in content {
                        println!("{}", line.as_str().unwrap_or_default());
                    }
                } else {
                    println!(
                        "{} {}",
                        record["task_id"].as_str().unwrap_or("-"),
                        record["status"].as_str().unwrap_or("-")
                    );
                }
            }
            for (_, url) in &urls {
                println!("{url}");
            }
        }
        if record["status"] == "failed" {
            bail!(
                "task {} failed: {}",
                record["task_id"].as_str().unwrap_or("-"),
                record["error"].as_str().unwrap_or("no reason given")
            );
        }
        if record["status"] == "canceled" {
            bail!(
                "task {} was canceled",
                record["task_id"].as_str().unwrap_or("-")
            );
        }
        Ok(())
    }
}

/// What the API said of a refused request, as an error: its `errors`, or the status alone.
fn api_error(what: &str, status: reqwest::StatusCode, text: &str) -> anyhow::Error {
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return anyhow::anyhow!(
            "{what}: HTTP 401 unauthorized: the server refused the API key in EASEL_API_KEY"
        );
    }
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let errors: Vec<String> = body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|e| {
                    format!(
                        "{} ({})",
                        e["msg"].as_str().unwrap_or("?"),
                        e["code"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if errors.is_empty() {
        return anyhow::anyhow!("{what}: HTTP {status}");
    }
    anyhow::anyhow!("{what}: HTTP {status}: {}", errors.join("; "))
}

/// The waiting time (`--timeout`) ran out.
#[derive(Debug, thiserror::Error)]
#[error("timed out")]
struct Timeout;

fn is_final(record: &Value) -> bool {
    matches!(
        record["status"].as_str(),
        Some("finished" | "failed" | "canceled")
    )
}

/// A waiting task's progress on stderr: a bar on a terminal, otherwise a line each time what
/// it says changes (`queued, 3 ahead`, `[#####     ] 50%`), so that logs show it too.
struct Shown {
    bar: Option<ProgressBar>,
    line: String,
    status: Option<String>,
}

impl Shown {
    fn new() -> Shown {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(100);
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg:<16} [{bar:30}] {pos:>3}% {elapsed}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Shown {
            bar,
            line: String::new(),
            status: None,
        }
    }

    /// Show a record, or a `progress` event's data.
    fn show(&mut self, data: &Value) {
        let status = data["status"].as_str().unwrap_or("").to_string();
        let percentage = data["percentage"]
            .as_str()
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(0)
            .min(100);
        let line = progress_line(&status, percentage, data["queue_position"].as_u64());
        if let Some(bar) = &self.bar {
            bar.set_message(if line.starts_with('[') {
                status.clone()
            } else {
                line.clone()
            });
            bar.set_position(percentage);
        } else if line != self.line {
            eprintln!("{line}");
        }
        self.line = line;
        self.status = Some(status);
    }

    fn done(&self, ok: bool) {
        if let Some(bar) = &self.bar {
            if ok {
                bar.finish_and_clear();
            } else {
                bar.abandon();
            }
        }
    }
}

/// One line of progress: the place in line while the task waits, a bar while it runs, its
/// status once it has ended.
fn progress_line(status: &str, percentage: u64, queue_position: Option<u64>) -> String {
    match (status, queue_position) {
        ("pending" | "starting", Some(ahead)) => format!("queued, {ahead} ahead"),
        ("pending" | "starting", None) => "queued".to_string(),
        ("processing", _) => {
            let filled = (percentage.min(100) / 10) as usize;
            format!(
                "[{}{}] {percentage}%",
                "#".repeat(filled),
                " ".repeat(10 - filled)
            )
        }
        (other, _) => other.to_string(),
    }
}

/// A record's images, named for their files: `grid`, `1` to `4`, or `image`.
fn image_urls(record: &Value) -> Vec<(String, String)> {
    let mut urls = Vec::new();
    if let Some(grid) = record["original_image_url"].as_str() {
        urls.push(("grid".to_string(), grid.to_string()));
    }
    if let Some(list) = record["image_urls"].as_array() {
        // A blend's inputs are `input_image_urls`; `image_urls` is always the result here.
        for (i, url) in list.iter().enumerate() {
            if let Some(url) = url.as_str() {
                urls.push(((i + 1).to_string(), url.to_string()));
            }
        }
    }
    if let Some(single) = record["image_url"].as_str() {
        // describe's input is an `image_url` too; a text result has `content`.
        if record["status"] == "finished" && record.get("content").is_none() {
            urls.push(("image".to_string(), single.to_string()));
        }
    }
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_say_the_place_in_line_then_a_bar() {
        assert_eq!(progress_line("pending", 0, Some(3)), "queued, 3 ahead");
        assert_eq!(progress_line("starting", 0, None), "queued");
        assert_eq!(progress_line("processing", 50, None), "[#####     ] 50%");
        assert_eq!(progress_line("processing", 100, None), "[##########] 100%");
        assert_eq!(progress_line("finished", 100, None), "finished");
    }
}
