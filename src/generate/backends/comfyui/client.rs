//! The ComfyUI protocol: its HTTP endpoints and the WebSocket of progress events, and how their
//! answers are read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::StreamExt;
use reqwest::multipart::{Form, Part};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{header::AUTHORIZATION, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::Connector;

use super::workflow::{node_order, Graph, Workflow};
use crate::generate::backends::http::{
    excerpt, http_client, status_error, successful, transport_error,
};
use crate::generate::backends::tls::Trust;
use crate::generate::backends::BackendConfig;
use crate::generate::{GenerateError, Progress};
use crate::images::preview::{PreviewImage, PREVIEW_MAX_BYTES};

pub(super) type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Longest wait for one cancel request: a job past its timeout must not hang on a dead server.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the progress socket to open; without it the job is only polled.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest message (and frame) read from the socket: a preview frame's 8-byte header and the
/// largest preview decoded. A larger one closes the socket, and the job is polled only.
const SOCKET_MAX_MESSAGE: usize = PREVIEW_MAX_BYTES as usize + 8;
/// Binary frame types (ComfyUI's `BinaryEventTypes`): a preview image, and its formats.
const PREVIEW_IMAGE: u32 = 1;
const PREVIEW_JPEG: u32 = 1;
const PREVIEW_PNG: u32 = 2;

/// The HTTP and WebSocket client of one ComfyUI server.
pub(super) struct Client {
    pub(super) name: String,
    base: String,
    http: reqwest::Client,
    /// The TLS configuration of `wss://`, trusting what `http` trusts.
    tls: Arc<rustls::ClientConfig>,
    auth: Auth,
    /// Longest one job may take.
    pub(super) timeout: Duration,
    /// Time between two looks at `/history`.
    poll: Duration,
}

enum Auth {
    None,
    Basic(String, Option<String>),
    Bearer(String),
}

impl Client {
    /// The client of the server `config.url`, with its credentials.
    pub(super) fn new(config: &BackendConfig) -> Result<Client, String> {
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
        let trust = Trust::of(config)?;
        Ok(Client {
            name: name.clone(),
            base: url.trim_end_matches('/').to_string(),
            http: http_client(name, config.timeout, &trust)?,
            tls: trust.websocket().map_err(|e| at("tls_ca_file", &e))?,
            auth,
            timeout: config.timeout,
            poll: Duration::from_millis(500),
        })
    }

    /// `GET /view`: one image a job made.
    pub(super) async fn view(&self, file: &OutputFile) -> Result<bytes::Bytes, GenerateError> {
        let query = [
            ("filename", file.filename.as_str()),
            ("subfolder", file.subfolder.as_str()),
            ("type", file.kind.as_str()),
        ];
        self.send(self.request(Method::GET, "view").query(&query))
            .await
    }

    /// `GET /system_stats`, which any working server answers.
    pub(super) async fn probe(&self) -> Result<(), GenerateError> {
        let request = self
            .request(Method::GET, "system_stats")
            .timeout(Duration::from_secs(10));
        self.send(request).await.map(|_| ())
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.http.request(method, format!("{}/{path}", self.base));
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
        successful(status, &headers, body)
    }

    async fn send_json(&self, builder: RequestBuilder, what: &str) -> Result<Value, GenerateError> {
        let body = self.send(builder).await?;
        serde_json::from_slice(&body).map_err(|e| {
            GenerateError::Failed(format!("the backend's answer to {what} is not JSON: {e}"))
        })
    }

    /// `POST /upload/image`: the file into ComfyUI's input folder; the name to give LoadImage.
    pub(super) async fn upload(
        &self,
        file_name: String,
        png: &[u8],
    ) -> Result<String, GenerateError> {
        let image = Part::bytes(png.to_vec())
            .file_name(file_name)
            .mime_str("image/png")
            .map_err(|e| GenerateError::Failed(format!("cannot build the upload: {e}")))?;
        let form = Form::new()
            .text("overwrite", "true")
            .text("type", "input")
            .part("image", image);
        let request = self.request(Method::POST, "upload/image").multipart(form);
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
    pub(super) async fn submit(
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

    /// Open `/ws?clientId=...` (`wss://` for an https server) with the backend's credentials;
    /// `None` when it cannot be opened (an older or proxied server), and the job is polled only.
    pub(super) async fn open_socket(&self, client_id: &str) -> Option<Socket> {
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
        let limits = WebSocketConfig::default()
            .max_message_size(Some(SOCKET_MAX_MESSAGE))
            .max_frame_size(Some(SOCKET_MAX_MESSAGE));
        let opened = tokio::time::timeout(
            SOCKET_TIMEOUT.min(self.timeout),
            tokio_tungstenite::connect_async_tls_with_config(
                request,
                Some(limits),
                true,
                Some(Connector::Rustls(self.tls.clone())),
            ),
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
    pub(super) async fn wait(
        &self,
        id: &str,
        progress: &Progress,
        socket: Option<Socket>,
    ) -> Result<Value, GenerateError> {
        let done = Notify::new();
        let ended = Mutex::new(None);
        let poll = self.poll_history(id, progress, &done, &ended);
        tokio::pin!(poll);
        if let Some(socket) = socket {
            tokio::select! {
                result = &mut poll => return result,
                () = follow(socket, id, progress, &done, &ended) => {
                    tracing::debug!(backend = %self.name, "the progress socket closed; polling only");
                }
            }
        }
        poll.await
    }

    /// Poll `/history/{id}` until the entry appears (looking again early when `done` is
    /// signalled); in between, `/queue` tells queued from running. A job missing from both on
    /// three looks in a row is lost (the server restarted, or someone deleted it); one the
    /// socket saw `ended` (interrupted or failed) ends as that at the first such look, as its
    /// history entry, which ComfyUI writes a moment after the event, may never come.
    async fn poll_history(
        &self,
        id: &str,
        progress: &Progress,
        done: &Notify,
        ended: &Mutex<Option<Value>>,
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
                    let seen = ended.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(entry) = seen {
                        return Ok(entry);
                    }
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
    pub(super) async fn cancel(&self, id: &str) {
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
/// An error or interrupt is also kept in `ended`, as the history entry it would have made.
/// Everything else ComfyUI 0.3.64 sends (`status`, `execution_cached`, the per-node
/// `progress_state`, `executed`) is passed over.
///
/// Binary preview frames name no prompt: ComfyUI sends them to the client id of the prompt it
/// runs, and this socket's client id is the job's own, so they are this job's. To be safe beyond
/// that, they are taken only between the job's first event (`execution_start`, `executing`,
/// `progress`) and its end.
async fn follow(
    mut socket: Socket,
    id: &str,
    progress: &Progress,
    done: &Notify,
    ended: &Mutex<Option<Value>>,
) {
    let mut running = false;
    while let Some(message) = socket.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Binary(frame)) => {
                if let Some(image) = preview_frame(&frame).filter(|_| running) {
                    progress.preview(PreviewImage::Encoded(image.to_vec()));
                }
                continue;
            }
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
        let kind = event["type"].as_str();
        let ends = matches!(kind, Some("executing") if data["node"].is_null())
            || matches!(
                kind,
                Some("execution_success" | "execution_error" | "execution_interrupted")
            );
        if ends {
            running = false;
        } else if matches!(kind, Some("execution_start" | "executing" | "progress")) {
            running = true;
        }
        match kind {
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
            Some(kind @ ("execution_error" | "execution_interrupted")) => {
                let entry = json!({"outputs": {}, "status": {
                    "status_str": "error", "completed": false, "messages": [[kind, data]]}});
                *ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(entry);
                done.notify_one()
            }
            Some("execution_success") => done.notify_one(),
            _ => {}
        }
    }
}

/// The image of a binary preview frame: a big-endian u32 event type (1, a preview image), a
/// big-endian u32 image type (1 JPEG, 2 PNG), then the image's bytes. `None` for any other event
/// type or a frame too short to hold an image.
pub(super) fn preview_frame(frame: &[u8]) -> Option<&[u8]> {
    let word = |at: usize| -> Option<u32> {
        let bytes: [u8; 4] = frame.get(at..at + 4)?.try_into().ok()?;
        Some(u32::from_be_bytes(bytes))
    };
    let image = frame.get(8..).filter(|image| !image.is_empty())?;
    (word(0)? == PREVIEW_IMAGE && matches!(word(4)?, PREVIEW_JPEG | PREVIEW_PNG)).then_some(image)
}

enum QueueState {
    Running,
    Pending,
    Absent,
}

/// A 400 from `POST /prompt`: ComfyUI's `error` and each node's errors, as one message.
pub(super) fn rejection(body: &str) -> String {
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
pub(super) fn finished(entry: &Value) -> Result<(), GenerateError> {
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
    if let Some(data) = event("execution_interrupted") {
        let data = data.unwrap_or(Value::Null);
        let at = match (
            data.get("node_id"),
            data.get("node_type").and_then(Value::as_str),
        ) {
            (Some(Value::String(node)), Some(class)) => format!(" at node {node} ({class})"),
            _ => String::new(),
        };
        return Err(GenerateError::transient(format!(
            "the job was interrupted on the backend{at}"
        )));
    }
    if status.get("status_str").and_then(Value::as_str) == Some("error") {
        return Err(GenerateError::Failed(
            "the workflow failed on the backend".into(),
        ));
    }
    Ok(())
}

pub(super) struct OutputFile {
    filename: String,
    subfolder: String,
    kind: String,
}

/// The images a finished job made, from its output nodes in id order.
pub(super) fn output_files(entry: &Value, wf: &Workflow) -> Result<Vec<OutputFile>, GenerateError> {
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
