//! The command-line client: `easel imagine`, `upscale`, `fetch`, `tasks`, `models` and `upload`
//! talk to a running server over its HTTP API, with the key in `EASEL_API_KEY` (docs/cli.md).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

/// How often a waiting client reads the task again.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// What every client command takes.
#[derive(clap::Args, Clone, Debug)]
pub struct Server {
    /// The server's base URL (EASEL_URL).
    #[arg(long, env = "EASEL_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Print the task record (or list) as JSON instead of image URLs.
    #[arg(long)]
    pub json: bool,
}

/// The model and generation settings of a command that makes images; each left out is the
/// server's default (the model's, or the parent's model for `upscale`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Generation {
    /// The model to run on (`easel models` lists them).
    #[arg(long)]
    pub model: Option<String>,
    /// What must not be drawn.
    #[arg(long = "negative-prompt", value_name = "TEXT")]
    pub negative_prompt: Option<String>,
    /// Sampling steps, within the model's limits.
    #[arg(long)]
    pub steps: Option<u32>,
    /// Guidance, within the model's limits.
    #[arg(long = "cfg-scale", value_name = "NUMBER")]
    pub cfg_scale: Option<f64>,
    /// A sampler the model's backends know (euler_a, dpmpp_2m_karras, ...).
    #[arg(long)]
    pub sampler: Option<String>,
}

impl Generation {
    /// The settings given, added to a submit's body.
    fn add_to(&self, body: &mut Value) {
        let fields = [
            ("model", self.model.as_ref().map(|v| json!(v))),
            (
                "negative_prompt",
                self.negative_prompt.as_ref().map(|v| json!(v)),
            ),
            ("steps", self.steps.map(|v| json!(v))),
            ("cfg_scale", self.cfg_scale.map(|v| json!(v))),
            ("sampler", self.sampler.as_ref().map(|v| json!(v))),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                body[name] = value;
            }
        }
    }
}

/// How a command that makes a task ends.
#[derive(clap::Args, Clone, Debug)]
pub struct Waiting {
    /// Wait until the task is finished or failed, showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// Download the images into this folder (implies --wait).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Give up waiting after this long.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::config::duration::parse(text)
}

/// A client command.
#[derive(Clone, Debug)]
pub enum Request {
    Imagine {
        prompt: String,
        aspect_ratio: Option<String>,
        generation: Generation,
        waiting: Waiting,
    },
    Upscale {
        task: String,
        index: u8,
        generation: Generation,
        waiting: Waiting,
    },
    Models,
    Fetch {
        task: String,
        output: Option<PathBuf>,
    },
    Tasks,
    Cancel {
        task: String,
    },
    /// Upload an image file (`POST /api/v1/upload`) and print the answer.
    Upload {
        file: PathBuf,
    },
}

/// Run a client command against `server`.
pub async fn run(server: Server, request: Request) -> anyhow::Result<()> {
    let client = Client::new(&server)?;
    match request {
        Request::Imagine {
            prompt,
            aspect_ratio,
            generation,
            waiting,
        } => {
            let mut body = json!({ "prompt": prompt });
            if let Some(ar) = aspect_ratio {
                body["aspect_ratio"] = json!(ar);
            }
            generation.add_to(&mut body);
            let id = client.submit("imagine", &body).await?;
            client.follow(&id, &waiting, server.json).await
        }
        Request::Upscale {
            task,
            index,
            generation,
            waiting,
        } => {
            if !(1..=4).contains(&index) {
                bail!("the image index must be 1, 2, 3 or 4");
            }
            let mut body = json!({ "parent_task_id": task, "index": index });
            generation.add_to(&mut body);
            let id = client.submit("upscale-1x", &body).await?;
            client.follow(&id, &waiting, server.json).await
        }
        Request::Fetch { task, output } => {
            let record = client.task(&task).await?;
            client.show(&record, output.as_deref(), server.json).await
        }
        Request::Cancel { task } => {
            let path = format!("/api/v1/tasks/{task}/cancel");
            let url = format!("{}{path}", client.base);
            let record = client
                .call(
                    client.http.post(url).json(&json!({})),
                    &format!("POST {path}"),
                )
                .await?;
            if server.json {
                println!("{}", serde_json::to_string_pretty(&record)?);
            } else {
                println!("{} canceled", record["task_id"].as_str().unwrap_or(&task));
            }
            Ok(())
        }
        Request::Upload { file } => {
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
            println!("{}", serde_json::to_string_pretty(&answer)?);
            Ok(())
        }
        Request::Models => {
            let list = client.get("/api/v1/models").await?;
            if server.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            let empty = Vec::new();
            for m in list["models"].as_array().unwrap_or(&empty) {
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
        Request::Tasks => {
            let list = client.get("/api/v1/tasks").await?;
            if server.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            let empty = Vec::new();
            let tasks = list
                .get("tasks")
                .and_then(Value::as_array)
                .or_else(|| list.as_array())
                .unwrap_or(&empty);
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
    }
}

struct Client {
    http: reqwest::Client,
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
        Ok(Client {
            http,
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
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            bail!("{what}: HTTP 401 unauthorized: the server refused the API key in EASEL_API_KEY");
        }
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
            bail!("{what}: HTTP {status}");
        }
        bail!("{what}: HTTP {status}: {}", errors.join("; "))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        self.call(self.http.get(url), &format!("GET {path}")).await
    }

    async fn submit(&self, op: &str, body: &Value) -> anyhow::Result<String> {
        let path = format!("/api/v1/{op}");
        let url = format!("{}{path}", self.base);
        let answer = self
            .call(self.http.post(url).json(body), &format!("POST {path}"))
            .await?;
        answer["task_id"]
            .as_str()
            .map(str::to_string)
            .context("the server's answer has no task_id")
    }

    async fn task(&self, id: &str) -> anyhow::Result<Value> {
        uuid::Uuid::parse_str(id).with_context(|| format!("{id:?} is not a task id"))?;
        self.get(&format!("/api/v1/tasks/{id}")).await
    }

    /// After a submit: print the id, or wait for the end and show the result.
    async fn follow(&self, id: &str, waiting: &Waiting, json: bool) -> anyhow::Result<()> {
        if !waiting.wait && waiting.output.is_none() {
            if json {
                println!("{}", serde_json::to_string_pretty(&self.task(id).await?)?);
            } else {
                println!("{id}");
            }
            return Ok(());
        }
        let record = self.wait(id, waiting.timeout).await?;
        self.show(&record, waiting.output.as_deref(), json).await
    }

    /// Read the task until it is final, with a progress bar on a terminal.
    async fn wait(&self, id: &str, timeout: Duration) -> anyhow::Result<Value> {
        let bar = ProgressBar::new(100);
        if std::io::stdout().is_terminal() && std::io::stderr().is_terminal() {
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg:<10} [{bar:30}] {pos:>3}% {elapsed}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
        } else {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        let deadline = Instant::now() + timeout;
        loop {
            let record = self.task(id).await?;
            let status = record["status"].as_str().unwrap_or("");
            let percentage = record["percentage"]
                .as_str()
                .and_then(|p| p.parse::<u64>().ok())
                .unwrap_or(0);
            bar.set_message(status.to_string());
            bar.set_position(percentage.min(100));
            if matches!(status, "finished" | "failed" | "canceled") {
                bar.finish_and_clear();
                return Ok(record);
            }
            if Instant::now() >= deadline {
                bar.abandon();
                bail!("task {id} is still {status} after {timeout:?}; `easel fetch {id}` reads it later");
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
                let path = dir.join(format!("{id}-{name}.png"));
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
            println!("{}", serde_json::to_string_pretty(record)?);
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
