//! ComfyUI: the operator's own API-format workflows (exported with "Save (API Format)"), one per
//! operation, run on a ComfyUI server. easel finds where the prompt, seed, size and input images
//! go by following the graph from the sampler (or the `nodes` settings), uploads the inputs
//! (`POST /upload/image`), queues the graph (`POST /prompt`), polls `GET /history/{id}` until the
//! entry appears and fetches the images with `GET /view`.
//!
//! Progress comes from ComfyUI's WebSocket (`/ws?clientId=...`, opened before the job is queued
//! under the same client id): its `progress` events move the task's percentage, and `executing`
//! with no node says the job is done, so that the history is read at once. Polling goes on
//! beside it, so a socket that cannot be opened or drops only costs the fine-grained progress.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use futures::future::BoxFuture;
use futures::StreamExt;
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Map, Value};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header::AUTHORIZATION, HeaderValue};
use tokio_tungstenite::tungstenite::Message;

use super::{decode_output, excerpt, size_for, status_error, transport_error, BackendConfig};
use crate::domain::{OpKind, Operation, Shape};
use crate::generate::ops::{self, Direction};
use crate::generate::raster::{dimensions, encode_png, RgbaImage};
use crate::generate::{GenerateError, Generator, Job, Product, Progress};

/// Class types of the nodes easel finds on its own.
const SAMPLERS: [&str; 2] = ["KSampler", "KSamplerAdvanced"];
const IMAGE_LOADER: &str = "LoadImage";
const MASK_LOADER: &str = "LoadImageMask";
const SAVE_IMAGE: &str = "SaveImage";
/// A core node that repeats a latent batch: how an image-to-image graph (one encoded image)
/// is made to give a grid's four.
const REPEAT_LATENT: &str = "RepeatLatentBatch";
/// Longest wait for one cancel request: a job past its timeout must not hang on a dead server.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the progress socket to open; without it the job is only polled.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

type Graph = Map<String, Value>;

/// A ComfyUI server and the workflows it runs.
pub struct ComfyUi {
    name: String,
    base: String,
    client: reqwest::Client,
    auth: Auth,
    timeout: Duration,
    /// Time between two looks at `/history`.
    poll: Duration,
    config: BackendConfig,
    workflows: HashMap<OpKind, Workflow>,
}

enum Auth {
    None,
    Basic(String, Option<String>),
    Bearer(String),
}

/// One workflow with the nodes easel writes to, found when the backend is built.
#[derive(Debug)]
struct Workflow {
    graph: Graph,
    sampler: Option<String>,
    /// The node and input that take the prompt's text.
    prompt: Vec<(String, String)>,
    /// The node and input that take the seed.
    seed: Option<(String, String)>,
    /// The node the sampler's `latent_image` comes from.
    latent: Option<String>,
    /// Image loaders, in the order the job's inputs fill them.
    images: Vec<String>,
    mask: Option<String>,
    /// Where the results are read from: `nodes.output`, else the SaveImage nodes.
    outputs: Vec<String>,
    /// ImageScaleBy / LatentUpscaleBy nodes, whose factor an upscale sets.
    scalers: Vec<String>,
}

impl ComfyUi {
    pub fn new(config: &BackendConfig) -> Result<ComfyUi, String> {
        let name = &config.name;
        let at = |setting: &str, problem: &str| format!("backends.{name}.{setting}: {problem}");
        let url = config
            .url
            .as_deref()
            .ok_or_else(|| at("url", "is required for a comfyui backend"))?;
        let parsed = url::Url::parse(url).map_err(|_| at("url", "is not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(at("url", "must be an http or https URL"));
        }
        let auth = match (&config.username, config.password()?, config.api_key()?) {
            (Some(user), password, _) => Auth::Basic(user.clone(), password),
            (None, _, Some(key)) => Auth::Bearer(key),
            (None, _, None) => Auth::None,
        };
        let mut workflows = HashMap::new();
        if let Some(path) = &config.workflow {
            let wf = Workflow::load(path, OpKind::Imagine, &config.nodes)
                .map_err(|e| at("workflow", &format!("{}: {e}", path.display())))?;
            workflows.insert(OpKind::Imagine, wf);
        }
        for (op, path) in &config.workflows {
            let setting = format!("workflows.{op}");
            let kind: OpKind = op.parse().map_err(|e: String| at(&setting, &e))?;
            if !super::kind_can(config.kind, kind) {
                return Err(at(&setting, "a comfyui backend cannot run this operation"));
            }
            if kind == OpKind::Imagine && config.workflow.is_some() {
                return Err(at(
                    &setting,
                    "imagine's workflow is already set by `workflow`",
                ));
            }
            let wf = Workflow::load(path, kind, &config.nodes)
                .map_err(|e| at(&setting, &format!("{}: {e}", path.display())))?;
            workflows.insert(kind, wf);
        }
        if workflows.is_empty() {
            return Err(at(
                "workflow",
                "a comfyui backend needs at least one workflow",
            ));
        }
        let client = super::http_client(config)?;
        Ok(ComfyUi {
            name: name.clone(),
            base: url.trim_end_matches('/').to_string(),
            client,
            auth,
            timeout: config.timeout,
            poll: Duration::from_millis(500),
            config: config.clone(),
            workflows,
        })
    }

    /// The workflow for `kind`: reroll runs imagine's unless it has its own.
    fn workflow(&self, kind: OpKind) -> Option<&Workflow> {
        self.workflows.get(&kind).or_else(|| match kind {
            OpKind::Reroll => self.workflows.get(&OpKind::Imagine),
            _ => None,
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.client.request(method, format!("{}/{path}", self.base));
        match &self.auth {
            Auth::None => builder,
            Auth::Basic(user, password) => builder.basic_auth(user, password.as_ref()),
            Auth::Bearer(key) => builder.bearer_auth(key),
        }
    }

    /// Send a request and read a successful answer's body; other statuses are sorted by
    /// [`status_error`].
    async fn send(&self, builder: RequestBuilder) -> Result<bytes::Bytes, GenerateError> {
        let response = builder.send().await.map_err(|e| transport_error(&e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.map_err(|e| transport_error(&e))?;
        if !status.is_success() {
            return Err(status_error(
                status,
                &headers,
                &String::from_utf8_lossy(&body),
            ));
        }
        Ok(body)
    }

    async fn send_json(&self, builder: RequestBuilder, what: &str) -> Result<Value, GenerateError> {
        let body = self.send(builder).await?;
        serde_json::from_slice(&body).map_err(|e| {
            GenerateError::Failed(format!("the backend's answer to {what} is not JSON: {e}"))
        })
    }

    async fn run_job(
        &self,
        job: &Job,
        progress: &Progress,
        queued: &Mutex<Option<String>>,
    ) -> Result<Product, GenerateError> {
        let kind = job.operation.kind();
        let wf = self.workflow(kind).ok_or_else(|| {
            GenerateError::Failed(format!("backend {} has no workflow for {kind}", self.name))
        })?;
        let count = match kind.shape() {
            Shape::Grid => 4,
            Shape::Single => 1,
            _ => {
                return Err(GenerateError::Failed(format!(
                    "a comfyui backend cannot run {kind}"
                )))
            }
        };
        let mut graph = wf.graph.clone();
        let prepared = {
            let job = job.clone();
            tokio::task::spawn_blocking(move || prepare_inputs(&job))
                .await
                .map_err(|e| GenerateError::Failed(format!("preparing the inputs failed: {e}")))??
        };
        // Uploads are named per job, so that jobs running side by side never read each other's.
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let mut names = Vec::new();
        for (k, png) in prepared.images.iter().enumerate() {
            names.push(self.upload(format!("easel-{tag}-{k}.png"), png).await?);
        }
        let mask_name = match (&prepared.mask, &wf.mask) {
            (Some(png), Some(_)) => Some(self.upload(format!("easel-{tag}-mask.png"), png).await?),
            _ => None,
        };
        wf.fill(
            &mut graph,
            job,
            count,
            &prepared,
            &names,
            mask_name.as_deref(),
        )?;

        // ComfyUI takes the id the client proposes (newer versions), so that a job whose
        // submission hangs can still be cancelled by it.
        let proposed = uuid::Uuid::new_v4().to_string();
        // ComfyUI sends a job's events to the client that queued it: the socket is opened
        // first, under the client id the job is queued with, so that no event is missed.
        let client_id = uuid::Uuid::new_v4().to_string();
        let socket = self.open_socket(&client_id).await;
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(proposed.clone());
        let prompt_id = self.submit(&graph, &proposed, &client_id).await?;
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = Some(prompt_id.clone());
        progress.report(5);

        let entry = match self.wait(&prompt_id, progress, socket).await {
            Ok(entry) => entry,
            Err(e) => {
                self.cancel(&prompt_id).await;
                return Err(e);
            }
        };
        *queued.lock().unwrap_or_else(|e| e.into_inner()) = None;
        finished(&entry)?;
        progress.report(80);

        let files = output_files(&entry, wf)?;
        if files.len() != count {
            return Err(GenerateError::Failed(format!(
                "the workflow made {} images; {kind} needs {count}",
                files.len()
            )));
        }
        let mut fetched = Vec::new();
        for (k, file) in files.iter().enumerate() {
            let query = [
                ("filename", file.filename.as_str()),
                ("subfolder", file.subfolder.as_str()),
                ("type", file.kind.as_str()),
            ];
            fetched.push(
                self.send(self.request(Method::GET, "view").query(&query))
                    .await?,
            );
            progress.report(80 + 15 * (k as i64 + 1) / count as i64);
        }
        progress.backend_done();
        tokio::task::spawn_blocking(move || {
            let images = fetched
                .iter()
                .enumerate()
                .map(|(k, bytes)| decode_output(bytes, &format!("image {}", k + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            match <[RgbaImage; 4]>::try_from(images) {
                Ok(four) => {
                    if four
                        .iter()
                        .any(|i| (i.width, i.height) != (four[0].width, four[0].height))
                    {
                        return Err(GenerateError::Failed(
                            "the workflow's four images differ in size".into(),
                        ));
                    }
                    Ok(Product::grid(&four))
                }
                Err(one) => Ok(Product::single(&one[0])),
            }
        })
        .await
        .map_err(|e| GenerateError::Failed(format!("encoding the images failed: {e}")))?
    }

    /// `POST /upload/image`: the file into ComfyUI's input folder; the name to give LoadImage.
    async fn upload(&self, file_name: String, png: &[u8]) -> Result<String, GenerateError> {
        let boundary = format!("easel-{}", uuid::Uuid::new_v4().simple());
        let mut body = Vec::with_capacity(png.len() + 512);
        let field = |body: &mut Vec<u8>, name: &str, value: &str| {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            );
        };
        field(&mut body, "overwrite", "true");
        field(&mut body, "type", "input");
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{file_name}\"\r\nContent-Type: image/png\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(png);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let request = self
            .request(Method::POST, "upload/image")
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(body);
        let answer = self.send_json(request, "POST /upload/image").await?;
        let name = answer.get("name").and_then(Value::as_str).ok_or_else(|| {
            GenerateError::Failed("the backend's answer to the upload has no name".into())
        })?;
        Ok(match answer.get("subfolder").and_then(Value::as_str) {
            Some(sub) if !sub.is_empty() => format!("{sub}/{name}"),
            _ => name.to_string(),
        })
    }

    /// `POST /prompt`: queue the graph; its prompt id. A 400 is ComfyUI rejecting the graph.
    async fn submit(
        &self,
        graph: &Graph,
        proposed: &str,
        client_id: &str,
    ) -> Result<String, GenerateError> {
        let body = json!({
            "prompt": graph,
            "client_id": client_id,
            "prompt_id": proposed,
        });
        let sent = async {
            let response = self
                .request(Method::POST, "prompt")
                .json(&body)
                .send()
                .await
                .map_err(|e| transport_error(&e))?;
            let status = response.status();
            let headers = response.headers().clone();
            let text = response.text().await.map_err(|e| transport_error(&e))?;
            Ok::<_, GenerateError>((status, headers, text))
        };
        // A connection lost mid-request, or an answer that cannot be read, may leave the job
        // queued: take it off by the id easel proposed, so that a retry does not run it twice.
        let (status, headers, text) = match sent.await {
            Ok(answer) => answer,
            Err(e) => {
                self.cancel(proposed).await;
                return Err(e);
            }
        };
        if status == StatusCode::BAD_REQUEST {
            return Err(GenerateError::Failed(rejection(&text)));
        }
        if !status.is_success() {
            return Err(status_error(status, &headers, &text));
        }
        let id = match serde_json::from_str::<Value>(&text) {
            Ok(answer) => match answer.get("prompt_id") {
                Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
                Some(Value::Number(n)) => Ok(n.to_string()),
                _ => Err(format!("has no prompt_id: {}", excerpt(&text))),
            },
            Err(e) => Err(format!("is not JSON: {e}")),
        };
        match id {
            Ok(id) => Ok(id),
            Err(problem) => {
                self.cancel(proposed).await;
                Err(GenerateError::Failed(format!(
                    "the backend's answer to POST /prompt {problem}"
                )))
            }
        }
    }

    /// Open `/ws?clientId=...` with the backend's credentials; `None` when it cannot be opened
    /// (an older or proxied server, `wss://`, which is not built in), and the job is polled only.
    async fn open_socket(&self, client_id: &str) -> Option<Socket> {
        let base = if let Some(rest) = self.base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            format!("wss://{}", self.base.strip_prefix("https://")?)
        };
        let mut request = format!("{base}/ws?clientId={client_id}")
            .into_client_request()
            .ok()?;
        let credentials = match &self.auth {
            Auth::None => None,
            Auth::Basic(user, password) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{user}:{}", password.as_deref().unwrap_or("")))
            )),
            Auth::Bearer(key) => Some(format!("Bearer {key}")),
        };
        if let Some(credentials) = credentials {
            let mut value = HeaderValue::from_str(&credentials).ok()?;
            value.set_sensitive(true);
            request.headers_mut().insert(AUTHORIZATION, value);
        }
        let opened = tokio::time::timeout(
            SOCKET_TIMEOUT.min(self.timeout),
            tokio_tungstenite::connect_async(request),
        )
        .await;
        match opened {
            Ok(Ok((socket, _))) => Some(socket),
            Ok(Err(e)) => {
                tracing::debug!(backend = %self.name, error = %e, "no progress socket; polling only");
                None
            }
            Err(_) => {
                tracing::debug!(backend = %self.name, "the progress socket did not open; polling only");
                None
            }
        }
    }

    /// Wait for the job's history entry: polled, and read at once when the socket (if any)
    /// says the job is done. The socket closing leaves the polling to carry on.
    async fn wait(
        &self,
        id: &str,
        progress: &Progress,
        socket: Option<Socket>,
    ) -> Result<Value, GenerateError> {
        let done = Notify::new();
        let poll = self.poll_history(id, progress, &done);
        tokio::pin!(poll);
        if let Some(socket) = socket {
            tokio::select! {
                result = &mut poll => return result,
                () = follow(socket, id, progress, &done) => {
                    tracing::debug!(backend = %self.name, "the progress socket closed; polling only");
                }
            }
        }
        poll.await
    }

    /// Poll `/history/{id}` until the entry appears (looking again early when `done` is
    /// signalled); in between, `/queue` tells queued from running. A job missing from both on
    /// three looks in a row is lost (the server restarted, or someone deleted it).
    async fn poll_history(
        &self,
        id: &str,
        progress: &Progress,
        done: &Notify,
    ) -> Result<Value, GenerateError> {
        let mut missing = 0;
        loop {
            let history = self
                .send_json(
                    self.request(Method::GET, &format!("history/{id}")),
                    "GET /history",
                )
                .await?;
            if let Some(entry) = history.get(id) {
                return Ok(entry.clone());
            }
            match self.queue_state(id).await {
                Some(QueueState::Running) => {
                    missing = 0;
                    progress.report(15);
                }
                Some(QueueState::Pending) => missing = 0,
                Some(QueueState::Absent) => {
                    missing += 1;
                    if missing >= 3 {
                        return Err(GenerateError::transient(
                            "the backend lost the job: it is neither queued nor in its history",
                        ));
                    }
                }
                None => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(self.poll) => {}
                _ = done.notified() => {}
            }
        }
    }

    /// Where the job is in `/queue`; `None` when the queue cannot be read.
    async fn queue_state(&self, id: &str) -> Option<QueueState> {
        let queue = self
            .send_json(self.request(Method::GET, "queue"), "GET /queue")
            .await
            .ok()?;
        let holds = |list: &str| {
            queue
                .get(list)
                .and_then(Value::as_array)
                .is_some_and(|items| {
                    items
                        .iter()
                        .any(|item| item.get(1).and_then(Value::as_str) == Some(id))
                })
        };
        Some(if holds("queue_running") {
            QueueState::Running
        } else if holds("queue_pending") {
            QueueState::Pending
        } else {
            QueueState::Absent
        })
    }

    /// Take the job off the backend: delete it from the queue, and interrupt it if it runs.
    /// ComfyUI's interrupt stops whatever runs (older versions ignore the prompt id), so it is
    /// sent only when the queue shows this job running, or cannot be read. Best effort: the job
    /// has failed already, whatever this gets.
    async fn cancel(&self, id: &str) {
        let delete = self
            .request(Method::POST, "queue")
            .timeout(CANCEL_TIMEOUT)
            .json(&json!({ "delete": [id] }));
        if let Err(e) = self.send(delete).await {
            tracing::warn!(backend = %self.name, error = %e, "could not delete a job from the queue");
        }
        let state = tokio::time::timeout(CANCEL_TIMEOUT, self.queue_state(id))
            .await
            .ok()
            .flatten();
        if matches!(state, Some(QueueState::Running) | None) {
            let interrupt = self
                .request(Method::POST, "interrupt")
                .timeout(CANCEL_TIMEOUT)
                .json(&json!({ "prompt_id": id }));
            if let Err(e) = self.send(interrupt).await {
                tracing::warn!(backend = %self.name, error = %e, "could not interrupt a job");
            }
        }
    }
}

/// Follow a job's events on the socket until it closes: `progress` for this prompt moves the
/// percentage from 15 to 75 (its share between queued and fetching the images); `executing` with
/// no node (done), or the job's success, error or interrupt, wakes the poller to read the history.
async fn follow(mut socket: Socket, id: &str, progress: &Progress, done: &Notify) {
    while let Some(message) = socket.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Close(_)) | Err(_) => return,
            Ok(_) => continue,
        };
        let Ok(event) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        let data = &event["data"];
        if data.get("prompt_id").and_then(Value::as_str) != Some(id) {
            continue;
        }
        match event["type"].as_str() {
            Some("progress") => {
                let (value, max) = (data["value"].as_f64(), data["max"].as_f64());
                if let (Some(value), Some(max)) = (value, max) {
                    if max > 0.0 {
                        progress.report(15 + (60.0 * (value / max).clamp(0.0, 1.0)) as i64);
                    }
                }
            }
            Some("executing") if data["node"].is_null() => done.notify_one(),
            Some("executing") => progress.report(15),
            Some("execution_success" | "execution_error" | "execution_interrupted") => {
                done.notify_one()
            }
            _ => {}
        }
    }
}

enum QueueState {
    Running,
    Pending,
    Absent,
}

impl Generator for ComfyUi {
    fn name(&self) -> &str {
        &self.name
    }

    fn supports(&self, kind: OpKind) -> bool {
        self.config.runs(kind) && self.workflow(kind).is_some()
    }

    fn run<'a>(
        &'a self,
        job: &'a Job,
        progress: &'a Progress,
    ) -> BoxFuture<'a, Result<Product, GenerateError>> {
        Box::pin(async move {
            // The prompt id of a job that is on the backend, for taking it off past the timeout
            // or when the job is stopped.
            let queued = Mutex::new(None);
            let stopped = tokio::select! {
                timed = tokio::time::timeout(self.timeout, self.run_job(job, progress, &queued)) => {
                    match timed {
                        Ok(result) => return result,
                        Err(_) => GenerateError::transient(format!(
                            "timed out after {}",
                            humantime::format_duration(self.timeout)
                        )),
                    }
                }
                _ = progress.stopped() => GenerateError::Canceled,
            };
            let id = queued.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(id) = id {
                self.cancel(&id).await;
            }
            Err(stopped)
        })
    }

    fn probe(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let request = self
                .request(Method::GET, "system_stats")
                .timeout(Duration::from_secs(10));
            self.send(request)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

/// A 400 from `POST /prompt`: ComfyUI's `error` and each node's errors, as one message.
fn rejection(body: &str) -> String {
    let Ok(answer) = serde_json::from_str::<Value>(body) else {
        return format!("the backend rejected the workflow: {}", excerpt(body));
    };
    let mut parts = Vec::new();
    match answer.get("error") {
        Some(Value::String(s)) => parts.push(s.clone()),
        Some(e) => {
            let message = e.get("message").and_then(Value::as_str).unwrap_or("");
            let details = e.get("details").and_then(Value::as_str).unwrap_or("");
            parts.push(
                [message, details]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(": "),
            );
        }
        None => {}
    }
    if let Some(nodes) = answer.get("node_errors").and_then(Value::as_object) {
        for (id, node) in nodes {
            let class = node
                .get("class_type")
                .and_then(Value::as_str)
                .unwrap_or("?");
            let errors = node.get("errors").and_then(Value::as_array);
            for error in errors.into_iter().flatten() {
                let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                let details = error.get("details").and_then(Value::as_str).unwrap_or("");
                parts.push(
                    format!("node {id} ({class}): {message} {details}")
                        .trim()
                        .to_string(),
                );
            }
        }
    }
    parts.retain(|p| !p.is_empty());
    if parts.is_empty() {
        parts.push(excerpt(body));
    }
    excerpt(&format!(
        "the backend rejected the workflow: {}",
        parts.join("; ")
    ))
}

/// A history entry's status: an execution error fails the job (running out of GPU memory is
/// transient); an interrupt (someone else's, as ComfyUI's interrupt is global) may be retried.
fn finished(entry: &Value) -> Result<(), GenerateError> {
    let Some(status) = entry.get("status") else {
        return Ok(());
    };
    let messages = status.get("messages").and_then(Value::as_array);
    let event = |name: &str| {
        messages.into_iter().flatten().find_map(|m| {
            (m.get(0).and_then(Value::as_str) == Some(name)).then(|| m.get(1).cloned())
        })
    };
    if let Some(data) = event("execution_error") {
        let data = data.unwrap_or(Value::Null);
        let text = |k: &str| {
            data.get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let message = excerpt(&format!(
            "node {} ({}): {} {}",
            match data.get("node_id") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => "?".into(),
            },
            text("node_type"),
            text("exception_type"),
            text("exception_message"),
        ));
        if text("exception_type").contains("OutOfMemory") {
            return Err(GenerateError::transient(format!(
                "the workflow failed: {message}"
            )));
        }
        return Err(GenerateError::Failed(format!(
            "the workflow failed: {message}"
        )));
    }
    if event("execution_interrupted").is_some() {
        return Err(GenerateError::transient(
            "the job was interrupted on the backend",
        ));
    }
    if status.get("status_str").and_then(Value::as_str) == Some("error") {
        return Err(GenerateError::Failed(
            "the workflow failed on the backend".into(),
        ));
    }
    Ok(())
}

struct OutputFile {
    filename: String,
    subfolder: String,
    kind: String,
}

/// The images a finished job made, from its output nodes in id order.
fn output_files(entry: &Value, wf: &Workflow) -> Result<Vec<OutputFile>, GenerateError> {
    let outputs = entry
        .get("outputs")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            GenerateError::Failed("the backend's history entry has no outputs".into())
        })?;
    let mut ids: Vec<&String> = if wf.outputs.is_empty() {
        outputs.keys().collect()
    } else {
        wf.outputs
            .iter()
            .filter(|id| outputs.contains_key(*id))
            .collect()
    };
    ids.sort_by_key(|id| node_order(id));
    let mut files = Vec::new();
    for id in ids {
        let images = outputs[id.as_str()].get("images").and_then(Value::as_array);
        for image in images.into_iter().flatten() {
            let text = |k: &str| image.get(k).and_then(Value::as_str).map(str::to_string);
            let filename = text("filename").ok_or_else(|| {
                GenerateError::Failed(format!("an image of node {id} has no filename"))
            })?;
            files.push(OutputFile {
                filename,
                subfolder: text("subfolder").unwrap_or_default(),
                kind: text("type").unwrap_or_else(|| "output".into()),
            });
        }
    }
    Ok(files)
}

/// Node ids sort as numbers where they are numbers.
fn node_order(id: &str) -> (u64, String) {
    (id.parse().unwrap_or(u64::MAX), id.to_string())
}

/// The files a job uploads: its input images (pan and outpaint: the parent on its larger
/// canvas; inpaint: the parent), with the area to redraw transparent, and that area as a mask.
struct Prepared {
    images: Vec<Vec<u8>>,
    /// The size of the first image.
    size: Option<(u32, u32)>,
    mask: Option<Vec<u8>>,
}

/// The mask's pixels: white and transparent where the model draws, opaque black where it keeps,
/// so that LoadImage (its mask is the inverted alpha) and LoadImageMask (red channel, or
/// inverted alpha) all read the same area.
const REDRAW: [u8; 4] = [255, 255, 255, 0];
const KEEP: [u8; 4] = [0, 0, 0, 255];

fn prepare_inputs(job: &Job) -> Result<Prepared, GenerateError> {
    let parent = || {
        job.inputs
            .first()
            .ok_or_else(|| GenerateError::Failed("the input image is missing".into()))
    };
    let with_mask = |canvas: RgbaImage, redraw: &dyn Fn(u32, u32) -> bool| {
        let (w, h) = (canvas.width, canvas.height);
        let mut image = canvas;
        let mut mask = RgbaImage::new(w, h);
        for y in 0..h {
            for x in 0..w {
                let i = (y as usize * w as usize + x as usize) * 4;
                let px = if redraw(x, y) {
                    image.data[i + 3] = 0;
                    REDRAW
                } else {
                    KEEP
                };
                mask.data[i..i + 4].copy_from_slice(&px);
            }
        }
        Prepared {
            size: Some((w, h)),
            images: vec![encode_png(&image)],
            mask: Some(encode_png(&mask)),
        }
    };
    let prepared = match &job.operation {
        Operation::Inpaint { .. } => {
            let parent = parent()?;
            let mask = job
                .mask
                .as_ref()
                .ok_or_else(|| GenerateError::Failed("the mask is missing".into()))?;
            if (mask.width, mask.height) != (parent.width, parent.height)
                || mask.data.len() != parent.data.len()
            {
                return Err(GenerateError::Failed(
                    "the mask does not have the image's size".into(),
                ));
            }
            let at = |x: u32, y: u32| {
                let i = (y as usize * mask.width as usize + x as usize) * 4;
                ops::mask_redraws([
                    mask.data[i],
                    mask.data[i + 1],
                    mask.data[i + 2],
                    mask.data[i + 3],
                ])
            };
            with_mask(parent.clone(), &at)
        }
        Operation::Pan { direction, .. } => {
            let parent = parent()?;
            let dir = Direction::from(*direction);
            let (w, h) = ops::pan_size(parent.width, parent.height, dir);
            let (x0, y0) = match dir {
                Direction::Left => (w - parent.width, 0),
                Direction::Up => (0, h - parent.height),
                Direction::Right | Direction::Down => (0, 0),
            };
            let canvas = place(parent, w, h, x0, y0);
            let inside = |x: u32, y: u32| {
                (x0..x0 + parent.width).contains(&x) && (y0..y0 + parent.height).contains(&y)
            };
            with_mask(canvas, &|x, y| !inside(x, y))
        }
        Operation::Outpaint { zoom_ratio, .. } => {
            let parent = parent()?;
            let long = parent.width.max(parent.height);
            let (w, h) = dimensions(job.aspect.width, job.aspect.height, long);
            let (x0, y0, sw, sh) =
                ops::outpaint_placement(parent.width, parent.height, w, h, *zoom_ratio);
            let canvas = place(&ops::resize(parent, sw, sh), w, h, x0, y0);
            let inside = |x: u32, y: u32| (x0..x0 + sw).contains(&x) && (y0..y0 + sh).contains(&y);
            with_mask(canvas, &|x, y| !inside(x, y))
        }
        _ => Prepared {
            size: job.inputs.first().map(|i| (i.width, i.height)),
            images: job.inputs.iter().map(encode_png).collect(),
            mask: None,
        },
    };
    Ok(prepared)
}

/// `image` on a `w` x `h` mid-grey canvas at (x0, y0).
fn place(image: &RgbaImage, w: u32, h: u32, x0: u32, y0: u32) -> RgbaImage {
    let mut canvas = RgbaImage::new(w, h);
    for px in canvas.data.chunks_exact_mut(4) {
        px.copy_from_slice(&[128, 128, 128, 255]);
    }
    let row = image.width as usize * 4;
    for y in 0..image.height.min(h.saturating_sub(y0)) {
        let src = y as usize * row;
        let dst = ((y0 + y) as usize * w as usize + x0 as usize) * 4;
        let len = row.min(w.saturating_sub(x0) as usize * 4);
        canvas.data[dst..dst + len].copy_from_slice(&image.data[src..src + len]);
    }
    canvas
}

/// The node an input links to (`[node_id, output_index]`), if it is a link.
fn link(graph: &Graph, node: &str, input: &str) -> Option<String> {
    let value = graph.get(node)?.get("inputs")?.get(input)?;
    match value.as_array()?.first()? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn class_of<'g>(graph: &'g Graph, node: &str) -> Option<&'g str> {
    graph.get(node)?.get("class_type")?.as_str()
}

fn has_input(graph: &Graph, node: &str, input: &str) -> bool {
    graph
        .get(node)
        .and_then(|n| n.get("inputs"))
        .is_some_and(|i| i.get(input).is_some())
}

fn set_input(graph: &mut Graph, node: &str, input: &str, value: Value) {
    if let Some(inputs) = graph
        .get_mut(node)
        .and_then(|n| n.get_mut("inputs"))
        .and_then(Value::as_object_mut)
    {
        inputs.insert(input.to_string(), value);
    }
}

/// Ids of the nodes of a class, in id order.
fn nodes_of(graph: &Graph, class: &str) -> Vec<String> {
    let mut ids: Vec<String> = graph
        .keys()
        .filter(|id| class_of(graph, id) == Some(class))
        .cloned()
        .collect();
    ids.sort_by_key(|id| node_order(id));
    ids
}

impl Workflow {
    /// Read `path` and find its nodes for operation `kind`.
    fn load(
        path: &Path,
        kind: OpKind,
        names: &std::collections::BTreeMap<String, String>,
    ) -> Result<Workflow, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| format!("is not valid JSON: {e}"))?;
        let Value::Object(graph) = value else {
            return Err("is not a JSON object of nodes".into());
        };
        if graph.contains_key("nodes") && graph.contains_key("links") {
            return Err(
                "is a UI-format workflow; export it with \"Save (API Format)\" instead".into(),
            );
        }
        for (id, node) in &graph {
            if node.get("class_type").and_then(Value::as_str).is_none()
                || !node.get("inputs").is_some_and(Value::is_object)
            {
                return Err(format!("node {id} has no class_type or inputs"));
            }
        }
        Workflow::resolve(graph, kind, names)
    }

    fn resolve(
        graph: Graph,
        kind: OpKind,
        names: &std::collections::BTreeMap<String, String>,
    ) -> Result<Workflow, String> {
        let named = |key: &str| -> Result<Option<String>, String> {
            match names.get(key) {
                Some(id) if graph.contains_key(id) => Ok(Some(id.clone())),
                Some(id) => Err(format!(
                    "nodes.{key} names node {id}, which it does not have"
                )),
                None => Ok(None),
            }
        };
        let from_text = kind == OpKind::Imagine || kind == OpKind::Reroll;
        let grid = kind.shape() == Shape::Grid;

        let sampler = match named("sampler")? {
            Some(id) => Some(id),
            None => {
                let mut all: Vec<String> =
                    SAMPLERS.iter().flat_map(|c| nodes_of(&graph, c)).collect();
                all.sort_by_key(|id| node_order(id));
                // With several (a two-pass graph), the one that starts from an empty latent.
                all.iter()
                    .find(|id| {
                        link(&graph, id, "latent_image")
                            .and_then(|l| class_of(&graph, &l).map(|c| c.starts_with("Empty")))
                            .unwrap_or(false)
                    })
                    .or(all.first())
                    .cloned()
            }
        };
        if sampler.is_none() && (grid || from_text) {
            return Err(
                "has no sampler (KSampler or KSamplerAdvanced); name it with nodes.sampler".into(),
            );
        }

        let prompt_node = match named("prompt")? {
            Some(id) => Some(id),
            None => sampler.as_ref().and_then(|s| link(&graph, s, "positive")),
        };
        let mut prompt = Vec::new();
        if let Some(node) = &prompt_node {
            for input in ["text", "text_g", "text_l"] {
                match link(&graph, node, input) {
                    // The text comes from another node (a primitive): write it there.
                    Some(source) => {
                        for field in ["text", "value", "string"] {
                            if has_input(&graph, &source, field) {
                                prompt.push((source.clone(), field.to_string()));
                                break;
                            }
                        }
                    }
                    None if has_input(&graph, node, input) => {
                        prompt.push((node.clone(), input.to_string()))
                    }
                    None => {}
                }
            }
        }
        if prompt.is_empty() && from_text {
            return Err(
                "the sampler's positive input leads to no text encoder (CLIPTextEncode); name it with nodes.prompt"
                    .into(),
            );
        }

        let seed_fields = ["noise_seed", "seed", "value"];
        let seed = match named("seed")? {
            Some(id) => {
                let field = seed_fields
                    .iter()
                    .find(|f| has_input(&graph, &id, f))
                    .ok_or_else(|| format!("node {id} (nodes.seed) has no seed input"))?;
                Some((id, field.to_string()))
            }
            None => sampler.as_ref().and_then(|s| {
                let field = ["noise_seed", "seed"]
                    .into_iter()
                    .find(|f| has_input(&graph, s, f))?;
                match link(&graph, s, field) {
                    Some(source) => seed_fields
                        .iter()
                        .find(|f| has_input(&graph, &source, f))
                        .map(|f| (source.clone(), f.to_string())),
                    None => Some((s.clone(), field.to_string())),
                }
            }),
        };

        let latent = match named("latent")? {
            Some(id) => Some(id),
            None => sampler
                .as_ref()
                .and_then(|s| link(&graph, s, "latent_image")),
        };
        if from_text {
            let ok = latent.as_ref().is_some_and(|l| {
                ["width", "height", "batch_size"]
                    .iter()
                    .all(|f| has_input(&graph, l, f))
            });
            if !ok {
                return Err(
                    "the sampler's latent_image leads to no empty latent (EmptyLatentImage); name it with nodes.latent"
                        .into(),
                );
            }
        }

        let mask = match named("mask")? {
            Some(id) => Some(id),
            None => nodes_of(&graph, MASK_LOADER).into_iter().next(),
        };
        let images: Vec<String> = match names.get("image") {
            Some(list) => {
                let ids: Vec<String> = list.split(',').map(|s| s.trim().to_string()).collect();
                for id in &ids {
                    if !graph.contains_key(id) {
                        return Err(format!(
                            "nodes.image names node {id}, which it does not have"
                        ));
                    }
                }
                ids
            }
            None => nodes_of(&graph, IMAGE_LOADER)
                .into_iter()
                .filter(|id| Some(id) != mask.as_ref())
                .collect(),
        };
        let reads_images = !from_text;
        if reads_images && images.is_empty() {
            return Err("has no image loader (LoadImage); name it with nodes.image".into());
        }

        let outputs = match named("output")? {
            Some(id) => vec![id],
            None => nodes_of(&graph, SAVE_IMAGE),
        };
        let mut scalers: Vec<String> = ["ImageScaleBy", "LatentUpscaleBy"]
            .iter()
            .flat_map(|c| nodes_of(&graph, c))
            .collect();
        scalers.sort_by_key(|id| node_order(id));

        Ok(Workflow {
            graph,
            sampler,
            prompt,
            seed,
            latent,
            images,
            mask: if reads_images { mask } else { None },
            outputs,
            scalers,
        })
    }

    /// Write the job into `graph`: the prompt, the seed, the size and batch, the uploaded files.
    fn fill(
        &self,
        graph: &mut Graph,
        job: &Job,
        count: usize,
        prepared: &Prepared,
        uploaded: &[String],
        mask: Option<&str>,
    ) -> Result<(), GenerateError> {
        for (node, input) in &self.prompt {
            set_input(graph, node, input, json!(job.prompt));
        }
        if let Some((node, input)) = &self.seed {
            set_input(graph, node, input, json!(job.seed));
        }
        if let Some(latent) = &self.latent {
            if has_input(graph, latent, "width") && has_input(graph, latent, "height") {
                // A new image's size; an edit's comes from its input.
                let (w, h) = match (&job.operation, prepared.size) {
                    (Operation::Imagine | Operation::Reroll | Operation::Blend { .. }, _)
                    | (_, None) => size_for(job, 8),
                    (_, Some((w, h))) => (w.div_ceil(8).max(1) * 8, h.div_ceil(8).max(1) * 8),
                };
                set_input(graph, latent, "width", json!(w));
                set_input(graph, latent, "height", json!(h));
            }
            if has_input(graph, latent, "batch_size") {
                set_input(graph, latent, "batch_size", json!(count));
            } else if class_of(graph, latent) == Some(REPEAT_LATENT) {
                set_input(graph, latent, "amount", json!(count));
            } else if count > 1 {
                // An encoded image is one latent: repeat it for the grid's four.
                if let Some(sampler) = &self.sampler {
                    let next = graph
                        .keys()
                        .filter_map(|id| id.parse::<u64>().ok())
                        .max()
                        .unwrap_or(0)
                        + 1;
                    let id = next.to_string();
                    let source = graph
                        .get(sampler)
                        .and_then(|n| n.get("inputs"))
                        .and_then(|i| i.get("latent_image"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    graph.insert(
                        id.clone(),
                        json!({
                            "class_type": REPEAT_LATENT,
                            "inputs": { "samples": source, "amount": count },
                        }),
                    );
                    set_input(graph, sampler, "latent_image", json!([id, 0]));
                }
            }
        }
        let factor = match &job.operation {
            Operation::UpscaleHighres { factor, .. } => Some(f64::from(*factor)),
            Operation::UpscaleAlt { .. } => Some(2.0),
            _ => None,
        };
        if let Some(factor) = factor {
            for node in &self.scalers {
                set_input(graph, node, "scale_by", json!(factor));
            }
        }
        if !uploaded.is_empty() {
            if uploaded.len() > self.images.len() {
                return Err(GenerateError::Failed(format!(
                    "the workflow has {} image loaders; this job has {} images",
                    self.images.len(),
                    uploaded.len()
                )));
            }
            // Fewer images than loaders: they are used again in turn.
            for (k, node) in self.images.iter().enumerate() {
                set_input(graph, node, "image", json!(uploaded[k % uploaded.len()]));
            }
        }
        if let (Some(node), Some(name)) = (&self.mask, mask) {
            set_input(graph, node, "image", json!(name));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Arc;

    use axum::body::Bytes;
    use axum::extract::{Path as UrlPath, Query, State};
    use axum::http::{HeaderMap, StatusCode};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use axum::{Json, Router};

    use super::*;
    use crate::domain::operation::PanDirection;
    use crate::domain::operation::StoredImage;
    use crate::domain::AspectRatio;
    use crate::generate::backends::BackendKind;
    use crate::generate::raster::decode_png;

    /// How the fake ComfyUI behaves.
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Ok,
        /// `POST /prompt` answers this status (with `Retry-After: 7`).
        Status(u16),
        /// `POST /prompt` answers 400 with node errors.
        Rejected,
        /// `POST /prompt` answers 200 with a body that is not JSON.
        BadJson,
        /// The job stays running forever.
        Hang,
        /// `/view` answers bytes that are not an image.
        NotImage,
        /// The job makes this many images, whatever the batch.
        Count(usize),
        /// The job fails with this exception type.
        ExecError(&'static str),
    }

    struct Upload {
        fields: BTreeMap<String, String>,
        filename: String,
        png: Vec<u8>,
    }

    #[derive(Default)]
    struct Seen {
        uploads: Vec<Upload>,
        prompts: Vec<Value>,
        deletes: Vec<Value>,
        interrupts: Vec<Value>,
        polls: usize,
        size: (u32, u32),
        batch: usize,
    }

    struct Fake {
        mode: Mode,
        seen: Mutex<Seen>,
    }

    impl Fake {
        fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
            self.seen.lock().unwrap()
        }
    }

    /// A minimal multipart reader: the fields and the one file, from what easel sends.
    fn multipart(headers: &HeaderMap, body: &[u8]) -> Upload {
        let ct = headers["content-type"].to_str().unwrap();
        let boundary = ct
            .split("boundary=")
            .nth(1)
            .expect("a boundary")
            .to_string();
        let delimiter = format!("--{boundary}");
        let mut upload = Upload {
            fields: BTreeMap::new(),
            filename: String::new(),
            png: Vec::new(),
        };
        let mut rest = body;
        while let Some(start) = find(rest, delimiter.as_bytes()) {
            rest = &rest[start + delimiter.len()..];
            if rest.starts_with(b"--") {
                break;
            }
            let head_end = find(rest, b"\r\n\r\n").expect("part headers");
            let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
            let content = &rest[head_end + 4..];
            let end = find(content, delimiter.as_bytes()).expect("part end");
            let value = &content[..end - 2];
            let name = head
                .split("name=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            if let Some(file) = head.split("filename=\"").nth(1) {
                upload.filename = file.split('"').next().unwrap().to_string();
                upload.png = value.to_vec();
            } else {
                upload
                    .fields
                    .insert(name.to_string(), String::from_utf8_lossy(value).to_string());
            }
            rest = &content[end..];
        }
        upload
    }

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    async fn upload(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
        let upload = multipart(&headers, &body);
        let name = upload.filename.clone();
        fake.seen().uploads.push(upload);
        Json(json!({ "name": name, "subfolder": "", "type": "input" })).into_response()
    }

    async fn prompt(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> Response {
        match fake.mode {
            Mode::Status(code) => {
                let status = StatusCode::from_u16(code).unwrap();
                return (status, [("retry-after", "7")], "busy").into_response();
            }
            Mode::Rejected => {
                let answer = json!({
                    "error": { "type": "prompt_outputs_failed_validation",
                               "message": "Prompt outputs failed validation", "details": "" },
                    "node_errors": { "4": { "class_type": "CheckpointLoaderSimple",
                        "errors": [{ "message": "Value not in list",
                                     "details": "ckpt_name: 'x.safetensors' not in []" }] } }
                });
                return (StatusCode::BAD_REQUEST, Json(answer)).into_response();
            }
            Mode::BadJson => return "{\"prompt_id\": ".into_response(),
            _ => {}
        }
        let graph = body["prompt"].as_object().cloned().expect("a graph");
        // What the job makes: the empty latent's size and batch, or the uploaded image's size
        // (times an ImageScaleBy) and a repeat node's amount.
        let mut seen = fake.seen();
        let mut size = (0, 0);
        let mut batch = 1;
        let mut scale = 1.0;
        for node in graph.values() {
            let inputs = &node["inputs"];
            match node["class_type"].as_str().unwrap() {
                "EmptyLatentImage" => {
                    size = (
                        inputs["width"].as_u64().unwrap() as u32,
                        inputs["height"].as_u64().unwrap() as u32,
                    );
                    batch = inputs["batch_size"].as_u64().unwrap() as usize;
                }
                "RepeatLatentBatch" => batch = inputs["amount"].as_u64().unwrap() as usize,
                "ImageScaleBy" => scale = inputs["scale_by"].as_f64().unwrap(),
                _ => {}
            }
        }
        if size == (0, 0) {
            let first = &seen.uploads[0];
            let image = decode_png(&first.png).unwrap();
            size = (image.width, image.height);
        }
        seen.size = (
            (f64::from(size.0) * scale) as u32,
            (f64::from(size.1) * scale) as u32,
        );
        seen.batch = batch;
        seen.prompts.push(body.clone());
        let id = body["prompt_id"].as_str().unwrap_or("p-1").to_string();
        Json(json!({ "prompt_id": id, "number": 1, "node_errors": {} })).into_response()
    }

    async fn history(State(fake): State<Arc<Fake>>, UrlPath(id): UrlPath<String>) -> Response {
        let mut seen = fake.seen();
        seen.polls += 1;
        // The first look finds the job still running, as a real one would be.
        if fake.mode == Mode::Hang || seen.polls < 2 {
            return Json(json!({})).into_response();
        }
        let count = match fake.mode {
            Mode::Count(n) => n,
            _ => seen.batch,
        };
        let images: Vec<Value> = (0..count)
            .map(|k| json!({ "filename": format!("ComfyUI_{k:05}_.png"), "subfolder": "", "type": "output" }))
            .collect();
        let status = match fake.mode {
            Mode::ExecError(kind) => {
                json!({ "status_str": "error", "completed": false, "messages": [
                    ["execution_start", { "prompt_id": id }],
                    ["execution_error", { "prompt_id": id, "node_id": "3", "node_type": "KSampler",
                        "exception_type": kind, "exception_message": "it broke" }]
                ]})
            }
            _ => json!({ "status_str": "success", "completed": true, "messages": [] }),
        };
        let outputs = if matches!(fake.mode, Mode::ExecError(_)) {
            json!({})
        } else {
            json!({ "9": { "images": images } })
        };
        let mut answer = Map::new();
        answer.insert(
            id,
            json!({ "prompt": [], "outputs": outputs, "status": status }),
        );
        Json(Value::Object(answer)).into_response()
    }

    async fn queue(State(fake): State<Arc<Fake>>) -> Response {
        let seen = fake.seen();
        let running: Vec<Value> = seen
            .prompts
            .last()
            .filter(|_| fake.mode == Mode::Hang)
            .map(|p| json!([1, p["prompt_id"], {}, {}, []]))
            .into_iter()
            .collect();
        Json(json!({ "queue_running": running, "queue_pending": [] })).into_response()
    }

    async fn view(
        State(fake): State<Arc<Fake>>,
        Query(q): Query<BTreeMap<String, String>>,
    ) -> Response {
        assert_eq!(q.get("type").map(String::as_str), Some("output"));
        assert!(q["filename"].starts_with("ComfyUI_"));
        if fake.mode == Mode::NotImage {
            return "<html>not an image</html>".into_response();
        }
        let (w, h) = fake.seen().size;
        encode_png(&RgbaImage::new(w, h)).into_response()
    }

    async fn delete(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> StatusCode {
        fake.seen().deletes.push(body);
        StatusCode::OK
    }

    async fn interrupt(State(fake): State<Arc<Fake>>, Json(body): Json<Value>) -> StatusCode {
        fake.seen().interrupts.push(body);
        StatusCode::OK
    }

    async fn serve(mode: Mode) -> (Arc<Fake>, String) {
        let fake = Arc::new(Fake {
            mode,
            seen: Mutex::new(Seen::default()),
        });
        let app = Router::new()
            .route("/upload/image", post(upload))
            .route("/prompt", post(prompt))
            .route("/history/{id}", get(history))
            .route("/queue", get(queue).post(delete))
            .route("/view", get(view))
            .route("/interrupt", post(interrupt))
            .route(
                "/system_stats",
                get(|| async { Json(json!({ "system": {}, "devices": [] })) }),
            )
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (fake, url)
    }

    fn fixture() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/comfyui/txt2img.json")
    }

    fn config(url: &str) -> BackendConfig {
        BackendConfig {
            name: "comfy".into(),
            kind: BackendKind::Comfyui,
            url: Some(url.into()),
            concurrency: 1,
            timeout: Duration::from_secs(20),
            api_key_env: None,
            api_key: None,
            model: None,
            username: None,
            password_env: None,
            password: None,
            workflow: Some(fixture()),
            workflows: BTreeMap::new(),
            nodes: BTreeMap::new(),
            operations: None,
        }
    }

    fn backend(config: &BackendConfig) -> ComfyUi {
        let mut backend = ComfyUi::new(config).unwrap();
        backend.poll = Duration::from_millis(20);
        backend
    }

    fn job(operation: Operation, inputs: Vec<RgbaImage>) -> Job {
        Job {
            operation,
            prompt: "a red fox in the snow".into(),
            seed: 12345,
            aspect: AspectRatio {
                width: 3,
                height: 2,
            },
            image_size: 64,
            inputs,
            mask: None,
        }
    }

    fn source() -> StoredImage {
        StoredImage {
            key: "k".into(),
            width: 48,
            height: 32,
        }
    }

    /// A workflow file in a temporary folder.
    fn write_workflow(dir: &tempfile::TempDir, name: &str, graph: Value) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&graph).unwrap()).unwrap();
        path
    }

    /// An image-to-image graph: LoadImage -> VAEEncode -> KSampler (denoise 0.6) -> SaveImage.
    fn img2img() -> Value {
        let mut graph: Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
        graph["10"] = json!({ "class_type": "LoadImage", "inputs": { "image": "example.png" } });
        graph["11"] = json!({ "class_type": "VAEEncode", "inputs": { "pixels": ["10", 0], "vae": ["4", 2] } });
        graph["3"]["inputs"]["latent_image"] = json!(["11", 0]);
        graph["3"]["inputs"]["denoise"] = json!(0.6);
        graph.as_object_mut().unwrap().remove("5");
        graph
    }

    #[tokio::test]
    async fn imagine_fills_the_graph_and_makes_a_grid() {
        let (fake, url) = serve(Mode::Ok).await;
        let backend = backend(&config(&url));
        let progress = Progress::default();
        let job = job(Operation::Imagine, vec![]);
        let product = backend.run(&job, &progress).await.unwrap();
        let (w, h) = size_for(&job, 8);
        assert_eq!((w % 8, h % 8), (0, 0));
        match product {
            Product::Grid {
                images,
                width,
                height,
                ..
            } => {
                assert_eq!((width, height), (w, h));
                for png in &images {
                    let image = decode_png(png).unwrap();
                    assert_eq!((image.width, image.height), (w, h));
                }
            }
            other => panic!("expected a grid, got {other:?}"),
        }
        assert!(progress.get() >= 95);
        let seen = fake.seen();
        let body = &seen.prompts[0];
        assert!(body["client_id"].as_str().is_some_and(|c| !c.is_empty()));
        let graph = &body["prompt"];
        assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
        assert_eq!(
            graph["7"]["inputs"]["text"], "bad hands",
            "the negative stays"
        );
        assert_eq!(graph["3"]["inputs"]["seed"], 12345);
        assert_eq!(graph["5"]["inputs"]["width"], w);
        assert_eq!(graph["5"]["inputs"]["height"], h);
        assert_eq!(graph["5"]["inputs"]["batch_size"], 4);
        assert!(seen.uploads.is_empty());
        assert!(seen.deletes.is_empty() && seen.interrupts.is_empty());
    }

    #[tokio::test]
    async fn reroll_runs_imagines_workflow() {
        let (fake, url) = serve(Mode::Ok).await;
        let backend = backend(&config(&url));
        assert!(backend.supports(OpKind::Reroll));
        assert!(!backend.supports(OpKind::Variations), "no workflow for it");
        let product = backend
            .run(&job(Operation::Reroll, vec![]), &Progress::default())
            .await
            .unwrap();
        assert!(matches!(product, Product::Grid { .. }));
        assert_eq!(fake.seen().prompts.len(), 1);
    }

    #[tokio::test]
    async fn variations_upload_the_parent_and_repeat_its_latent() {
        let (fake, url) = serve(Mode::Ok).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(&url);
        config.workflows.insert(
            "variations".into(),
            write_workflow(&dir, "var.json", img2img()),
        );
        let backend = backend(&config);
        assert!(backend.supports(OpKind::Variations));
        let parent = RgbaImage::new(48, 32);
        let op = Operation::Variations {
            of: crate::domain::operation::VariationOf::Index(2),
            source: source(),
        };
        let product = backend
            .run(&job(op, vec![parent]), &Progress::default())
            .await
            .unwrap();
        match product {
            Product::Grid { width, height, .. } => assert_eq!((width, height), (48, 32)),
            other => panic!("expected a grid, got {other:?}"),
        }
        let seen = fake.seen();
        assert_eq!(seen.uploads.len(), 1);
        let upload = &seen.uploads[0];
        assert_eq!(upload.fields["overwrite"], "true");
        assert_eq!(upload.fields["type"], "input");
        let sent = decode_png(&upload.png).unwrap();
        assert_eq!((sent.width, sent.height), (48, 32));
        let graph = &seen.prompts[0]["prompt"];
        assert_eq!(graph["10"]["inputs"]["image"], upload.filename.as_str());
        // The sampler now reads a RepeatLatentBatch of four over the encoded image.
        let repeat = graph["3"]["inputs"]["latent_image"][0].as_str().unwrap();
        assert_eq!(graph[repeat]["class_type"], "RepeatLatentBatch");
        assert_eq!(graph[repeat]["inputs"]["amount"], 4);
        assert_eq!(graph[repeat]["inputs"]["samples"], json!(["11", 0]));
        assert_eq!(graph["6"]["inputs"]["text"], "a red fox in the snow");
    }

    #[tokio::test]
    async fn inpaint_sends_the_masked_area_transparent_and_a_mask() {
        let (fake, url) = serve(Mode::Ok).await;
        let dir = tempfile::tempdir().unwrap();
        let mut graph = img2img();
        graph["12"] = json!({ "class_type": "LoadImageMask", "inputs": { "image": "mask.png", "channel": "red" } });
        let mut config = config(&url);
        config.workflows.insert(
            "inpaint".into(),
            write_workflow(&dir, "inpaint.json", graph),
        );
        let backend = backend(&config);
        let parent = RgbaImage::new(48, 32);
        // The left half is redrawn.
        let mut mask = RgbaImage::new(48, 32);
        for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
            if i % 48 < 24 {
                px.copy_from_slice(&[255, 255, 255, 255]);
            }
        }
        let mut job = job(
            Operation::Inpaint {
                source: source(),
                mask: String::new(),
            },
            vec![parent],
        );
        job.mask = Some(mask);
        backend.run(&job, &Progress::default()).await.unwrap();
        let seen = fake.seen();
        assert_eq!(seen.uploads.len(), 2);
        let image = decode_png(&seen.uploads[0].png).unwrap();
        let mask = decode_png(&seen.uploads[1].png).unwrap();
        assert_eq!(image.data[3], 0, "a redrawn pixel is transparent");
        assert_eq!(image.data[47 * 4 + 3], 255, "a kept pixel is opaque");
        assert_eq!(&mask.data[0..4], &REDRAW);
        assert_eq!(&mask.data[47 * 4..48 * 4], &KEEP);
        let graph = &seen.prompts[0]["prompt"];
        assert_eq!(
            graph["10"]["inputs"]["image"],
            seen.uploads[0].filename.as_str()
        );
        assert_eq!(
            graph["12"]["inputs"]["image"],
            seen.uploads[1].filename.as_str()
        );
    }

    #[tokio::test]
    async fn pan_sends_a_larger_canvas() {
        let (fake, url) = serve(Mode::Ok).await;
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(&url);
        config
            .workflows
            .insert("pan".into(), write_workflow(&dir, "pan.json", img2img()));
        let backend = backend(&config);
        let op = Operation::Pan {
            direction: PanDirection::Left,
            source: source(),
        };
        let product = backend
            .run(&job(op, vec![RgbaImage::new(48, 32)]), &Progress::default())
            .await
            .unwrap();
        let sent = decode_png(&fake.seen().uploads[0].png).unwrap();
        assert_eq!((sent.width, sent.height), (72, 32));
        assert_eq!(sent.data[3], 0, "the new strip on the left is to be drawn");
        assert_eq!(sent.data[(71) * 4 + 3], 255, "the parent sits on the right");
        assert!(matches!(
            product,
            Product::Grid {
                width: 72,
                height: 32,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn upscale_without_a_sampler_sets_the_factor() {
        let (fake, url) = serve(Mode::Ok).await;
        let dir = tempfile::tempdir().unwrap();
        let graph = json!({
            "1": { "class_type": "LoadImage", "inputs": { "image": "in.png" } },
            "2": { "class_type": "ImageScaleBy", "inputs": { "image": ["1", 0], "upscale_method": "lanczos", "scale_by": 1.5 } },
            "9": { "class_type": "SaveImage", "inputs": { "images": ["2", 0], "filename_prefix": "up" } }
        });
        let mut config = config(&url);
        config.workflows.insert(
            "upscale-highres".into(),
            write_workflow(&dir, "up.json", graph),
        );
        let backend = backend(&config);
        let op = Operation::UpscaleHighres {
            factor: 2,
            index: Some(1),
            image_url: None,
            source: crate::domain::operation::ImageInput::Stored(source()),
        };
        let product = backend
            .run(&job(op, vec![RgbaImage::new(48, 32)]), &Progress::default())
            .await
            .unwrap();
        assert!(matches!(
            product,
            Product::Single {
                width: 96,
                height: 64,
                ..
            }
        ));
        assert_eq!(
            fake.seen().prompts[0]["prompt"]["2"]["inputs"]["scale_by"],
            2.0
        );
    }

    #[tokio::test]
    async fn a_hung_job_is_cancelled_on_the_backend_past_the_timeout() {
        let (fake, url) = serve(Mode::Hang).await;
        let mut config = config(&url);
        config.timeout = Duration::from_millis(400);
        let backend = backend(&config);
        let progress = Progress::default();
        let err = backend
            .run(&job(Operation::Imagine, vec![]), &progress)
            .await
            .unwrap_err();
        match &err {
            GenerateError::Transient { message, .. } => {
                assert!(message.contains("timed out after"), "{message}")
            }
            other => panic!("expected transient, got {other:?}"),
        }
        assert_eq!(progress.get(), 15, "seen running");
        let seen = fake.seen();
        let id = seen.prompts[0]["prompt_id"].clone();
        assert_eq!(seen.deletes, vec![json!({ "delete": [id.clone()] })]);
        assert_eq!(seen.interrupts, vec![json!({ "prompt_id": id })]);
    }

    #[tokio::test]
    async fn statuses_are_sorted() {
        for (code, transient) in [(429, true), (503, true), (500, true), (403, false)] {
            let (_, url) = serve(Mode::Status(code)).await;
            let err = backend(&config(&url))
                .run(&job(Operation::Imagine, vec![]), &Progress::default())
                .await
                .unwrap_err();
            match err {
                GenerateError::Transient { retry_after, .. } if transient => {
                    assert_eq!(retry_after, Some(Duration::from_secs(7)), "{code}")
                }
                GenerateError::Failed(m) if !transient => assert!(m.contains("403"), "{m}"),
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_rejected_workflow_fails_with_the_node_errors() {
        let (_, url) = serve(Mode::Rejected).await;
        let err = backend(&config(&url))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        let GenerateError::Failed(message) = err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains("Prompt outputs failed validation"),
            "{message}"
        );
        assert!(
            message.contains("node 4 (CheckpointLoaderSimple): Value not in list"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn unusable_answers_fail() {
        for (mode, expect) in [
            (Mode::BadJson, "not JSON"),
            (Mode::NotImage, "image 1 from the backend"),
            (Mode::Count(3), "made 3 images; imagine needs 4"),
            (Mode::Count(0), "made 0 images"),
            (
                Mode::ExecError("RuntimeError"),
                "node 3 (KSampler): RuntimeError it broke",
            ),
        ] {
            let (_, url) = serve(mode).await;
            let err = backend(&config(&url))
                .run(&job(Operation::Imagine, vec![]), &Progress::default())
                .await
                .unwrap_err();
            match err {
                GenerateError::Failed(m) => assert!(m.contains(expect), "{m}"),
                other => panic!("{expect}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn an_unreadable_submit_answer_takes_the_proposed_job_off_the_queue() {
        let (fake, url) = serve(Mode::BadJson).await;
        backend(&config(&url))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        let seen = fake.seen();
        assert_eq!(seen.deletes.len(), 1);
        assert!(seen.deletes[0]["delete"][0]
            .as_str()
            .is_some_and(|id| id.len() == 36));
    }

    #[tokio::test]
    async fn running_out_of_gpu_memory_is_transient() {
        let (_, url) = serve(Mode::ExecError("torch.OutOfMemoryError")).await;
        let err = backend(&config(&url))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn refused_and_dropped_connections_are_transient() {
        // Nothing listens: refused.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let refused = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let backend_refused = backend(&config(&refused));
        let err = backend_refused
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
        assert!(backend_refused.probe().await.is_err());

        // A server that accepts and hangs up at once.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dropped = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let err = backend(&config(&dropped))
            .run(&job(Operation::Imagine, vec![]), &Progress::default())
            .await
            .unwrap_err();
        assert!(matches!(err, GenerateError::Transient { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn probe_asks_for_system_stats() {
        let (_, url) = serve(Mode::Ok).await;
        assert_eq!(backend(&config(&url)).probe().await, Ok(()));
    }

    #[test]
    fn broken_workflows_are_named_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config("http://127.0.0.1:8188");
        let expect = |config: &BackendConfig, what: &str| {
            let err = ComfyUi::new(config).err().expect("an error");
            assert!(err.starts_with("backends.comfy.workflow"), "{err}");
            assert!(err.contains(what), "{err}");
        };
        config.workflow = Some(dir.path().join("missing.json"));
        expect(&config, "missing.json: cannot read it");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{ not json").unwrap();
        config.workflow = Some(bad);
        expect(&config, "bad.json: is not valid JSON");
        config.workflow = Some(write_workflow(
            &dir,
            "ui.json",
            json!({ "nodes": [], "links": [] }),
        ));
        expect(&config, "Save (API Format)");
        let mut graph = img2img();
        graph.as_object_mut().unwrap().remove("3");
        config.workflow = Some(write_workflow(&dir, "nosampler.json", graph));
        expect(&config, "has no sampler");
        config.workflow = Some(write_workflow(&dir, "img2img.json", img2img()));
        expect(&config, "no empty latent");

        let mut config = self::config("http://127.0.0.1:8188");
        config.workflows.insert("describe".into(), fixture());
        let err = ComfyUi::new(&config).err().unwrap();
        assert!(
            err.starts_with("backends.comfy.workflows.describe"),
            "{err}"
        );
        let mut config = self::config("http://127.0.0.1:8188");
        config.nodes.insert("prompt".into(), "99".into());
        let err = ComfyUi::new(&config).err().unwrap();
        assert!(err.contains("nodes.prompt names node 99"), "{err}");
        let mut config = self::config("http://127.0.0.1:8188");
        config.workflows.insert("upscale-1x".into(), fixture());
        let err = ComfyUi::new(&config).err().unwrap();
        assert!(
            err.contains("workflows.upscale-1x") && err.contains("no image loader"),
            "{err}"
        );
    }

    #[test]
    fn operations_limit_what_it_supports() {
        let mut config = config("http://127.0.0.1:8188");
        config.operations = Some(vec!["reroll".into()]);
        let backend = ComfyUi::new(&config).unwrap();
        assert!(!backend.supports(OpKind::Imagine));
        assert!(backend.supports(OpKind::Reroll));
        assert_eq!(backend.name(), "comfy");
    }
}
