//! ComfyUI as easel uses it, speaking as ComfyUI 0.3.64 does (recorded in
//! ../shared/fixtures/comfyui-0.3.64, derived into tests/fixtures/comfyui/0.3.64, and checked
//! message for message by backends/comfyui_transcript.rs):
//! - `POST /prompt` validates the API-format graph (the sampler's text encoder, latent and image
//!   loaders, an output node) and answers `{prompt_id, number, node_errors}`, or 400 with
//!   `error` and `node_errors`; the client's proposed `prompt_id` is taken;
//! - one job runs at a time, in `number` order: `GET /queue` lists it in `queue_running` as
//!   `[number, prompt_id, graph, extra_data, outputs_to_execute]`, the others in
//!   `queue_pending`; `POST /queue {"delete"}` takes pending ones off (never the running one);
//!   `POST /interrupt` stops the running job (only that prompt when `prompt_id` is given);
//! - `GET /history/{id}` is `{}` until the job is done, then `{id: {prompt, outputs, status,
//!   meta}}`; `GET /view` serves the saved files; `GET /system_stats`; `POST /upload/image`;
//! - the WebSocket `/ws?clientId=...`: `status` with `sid` on connect, `status` to everyone as
//!   the queue changes, and to the job's client `execution_start`, `execution_cached`,
//!   `progress_state` and `executing` per node, `progress` per sampler step with a binary preview
//!   frame (u32 event 1, u32 image type 1, a JPEG fitted into 512 x 512), `executed`,
//!   `execution_success` (or `execution_error` / `execution_interrupted`), and `executing` with
//!   no node once the history entry is written.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, Notify};

use super::{common_answer, dropped, flat, Fault, Script};
use easel::images::{decode_png, encode_png, RgbaImage};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Pending,
    Running,
    /// Asked to stop; the running node notices at its next check.
    Interrupting,
    Done,
}

pub struct Job {
    number: u64,
    client_id: Option<String>,
    /// The graph as queued (FLOAT inputs made floats, as ComfyUI's validation leaves them).
    graph: Value,
    extra_data: Value,
    outputs: Vec<String>,
    size: (u32, u32),
    count: usize,
    fault: Fault,
    phase: Phase,
    /// The `[event, data]` pairs kept for the history entry's `status.messages`.
    messages: Vec<Value>,
    history: Option<Value>,
}

/// Who a WebSocket message goes to: one client, or every socket.
type Target = Option<String>;

pub struct ComfyMock {
    pub script: Script,
    /// How long a job's sampler runs, its steps spread over it.
    pub delay: Duration,
    /// Between a job's last event and its history entry (ComfyUI's `task_done`): the job is still
    /// in `queue_running` and `/history` answers `{}`, as recorded right after an interrupt.
    pub settle: Duration,
    /// Serve the WebSocket (without it, `/ws` answers 404).
    pub socket: bool,
    /// Send a binary preview frame after each `progress` event (`--preview-method auto`).
    pub previews: bool,
    /// After the last preview, also send frames that are no preview of easel's (too short,
    /// another event type, an unknown image type). ComfyUI sends none of these itself.
    pub junk_frames: bool,
    /// The preview frames' images (JPEG), in the order sent.
    pub sent_previews: Mutex<Vec<Vec<u8>>>,
    pub shade: u8,
    pub jobs: Mutex<HashMap<String, Job>>,
    /// The bodies of `POST /prompt`.
    pub prompts: Mutex<Vec<Value>>,
    /// Uploaded files: their name and image.
    pub uploads: Mutex<Vec<(String, RgbaImage)>>,
    /// The text fields of each upload (`type`, `overwrite`).
    pub upload_fields: Mutex<Vec<HashMap<String, String>>>,
    /// Prompt ids deleted from the queue.
    pub deletes: Mutex<Vec<String>>,
    /// Bodies of `POST /interrupt`.
    pub interrupts: Mutex<Vec<Value>>,
    /// Client ids that opened the WebSocket.
    pub sockets: Mutex<Vec<String>>,
    pub views: AtomicUsize,
    pub events: broadcast::Sender<(Target, Frame)>,
    /// Once `Some`, each text frame as it is written to a socket, and when: where the events
    /// benchmark's latency starts (the moment easel can read it, not the moment the job made it).
    pub written: Mutex<Option<Vec<(std::time::Instant, String)>>>,
    // The server's own state; public only so that tests can build the mock with `..default()`.
    /// The server's prompt counter (`number`), counted before validation as ComfyUI does.
    pub number: Mutex<u64>,
    /// Saved files by name: the job and which of its images.
    pub files: Mutex<HashMap<String, (String, usize)>>,
    /// Input signatures of the nodes the last job ran, for `execution_cached`.
    pub cache: Mutex<HashMap<String, String>>,
    pub wake: Notify,
    pub worker: AtomicBool,
}

/// A message for the WebSocket.
#[derive(Clone, Debug)]
pub enum Frame {
    Text(String),
    Binary(Vec<u8>),
}

/// A binary frame: `event` and `image` type as big-endian u32s, then `bytes`.
pub fn binary_frame(event: u32, image: u32, bytes: &[u8]) -> Vec<u8> {
    let mut frame = event.to_be_bytes().to_vec();
    frame.extend(image.to_be_bytes());
    frame.extend(bytes);
    frame
}

/// A `w` x `h` JPEG of a flat `shade`, as ComfyUI's previewer encodes one.
pub fn jpeg(w: u32, h: u32, shade: u8) -> Vec<u8> {
    let rgb: Vec<u8> = flat(w, h, shade)
        .data
        .chunks_exact(4)
        .flat_map(|p| [p[0], p[1], p[2]])
        .collect();
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode(&rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

/// The size of a preview of a `w` x `h` image: ComfyUI scales it (up or down) to fit 512 x 512,
/// its default `--preview-size`, keeping the aspect.
pub fn preview_size(w: u32, h: u32) -> (u32, u32) {
    let (w, h) = (w.max(1) as f64, h.max(1) as f64);
    if w >= h {
        (512, (h * 512.0 / w).round().max(1.0) as u32)
    } else {
        ((w * 512.0 / h).round().max(1.0) as u32, 512)
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Node classes whose results are files (SaveImage), and those whose inputs named here are
/// declared FLOAT (ComfyUI stores them as floats when it validates the graph).
const OUTPUT_NODES: &[&str] = &["SaveImage", "PreviewImage"];
const FLOAT_INPUTS: &[(&str, &str)] = &[
    ("KSampler", "cfg"),
    ("KSampler", "denoise"),
    ("KSamplerAdvanced", "cfg"),
    ("ImageScaleBy", "scale_by"),
    ("LatentUpscaleBy", "scale_by"),
];

impl Default for ComfyMock {
    fn default() -> ComfyMock {
        ComfyMock {
            script: Script::default(),
            delay: Duration::from_millis(50),
            settle: Duration::from_millis(5),
            socket: true,
            previews: true,
            junk_frames: false,
            sent_previews: Mutex::default(),
            shade: 0,
            jobs: Mutex::default(),
            prompts: Mutex::default(),
            uploads: Mutex::default(),
            upload_fields: Mutex::default(),
            deletes: Mutex::default(),
            interrupts: Mutex::default(),
            sockets: Mutex::default(),
            views: AtomicUsize::new(0),
            events: broadcast::channel(4096).0,
            written: Mutex::default(),
            number: Mutex::new(0),
            files: Mutex::default(),
            cache: Mutex::default(),
            wake: Notify::new(),
            worker: AtomicBool::new(false),
        }
    }
}

impl ComfyMock {
    /// Start it; its base URL.
    pub async fn start(self: &Arc<Self>) -> String {
        self.start_worker();
        super::serve(self.router()).await
    }

    /// Start it behind TLS with `tls`; its base URL (`https://localhost:PORT`).
    pub async fn start_tls(self: &Arc<Self>, tls: Arc<rustls::ServerConfig>) -> String {
        self.start_worker();
        super::serve_tls(self.router(), tls).await
    }

    fn start_worker(self: &Arc<Self>) {
        if !self.worker.swap(true, Ordering::SeqCst) {
            tokio::spawn(self.clone().work());
        }
    }

    fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/prompt", post(prompt))
            .route("/history/{id}", get(history))
            .route("/queue", get(queue).post(delete))
            .route("/interrupt", post(interrupt))
            .route("/upload/image", post(upload))
            .route("/view", get(view))
            .route("/system_stats", get(system_stats))
            .route("/ws", get(socket))
            .with_state(self.clone())
    }

    fn send(&self, to: &Target, kind: &str, data: Value) {
        let text = json!({"type": kind, "data": data}).to_string();
        let _ = self.events.send((to.clone(), Frame::Text(text)));
    }

    fn send_binary(&self, to: &Target, frame: Vec<u8>) {
        let _ = self.events.send((to.clone(), Frame::Binary(frame)));
    }

    /// ComfyUI's `add_message`: kept for the history entry, and sent to the job's client (to
    /// everyone when it has none, and only if `broadcast`).
    fn add_message(&self, id: &str, to: &Target, kind: &str, data: Value, broadcast: bool) {
        if let Some(job) = self.jobs.lock().unwrap().get_mut(id) {
            job.messages.push(json!([kind, data.clone()]));
        }
        if to.is_some() || broadcast {
            self.send(to, kind, data);
        }
    }

    /// Jobs queued or running, as `status` counts them.
    fn remaining(&self) -> usize {
        self.jobs
            .lock()
            .unwrap()
            .values()
            .filter(|j| j.phase != Phase::Done)
            .count()
    }

    fn queue_updated(&self) {
        let status = json!({"status": {"exec_info": {"queue_remaining": self.remaining()}}});
        self.send(&None, "status", status);
    }

    fn phase(&self, id: &str) -> Phase {
        self.jobs.lock().unwrap()[id].phase
    }

    /// The preview of step `step` (a JPEG a shade lighter each step), framed and sent.
    fn send_preview(&self, to: &Target, size: (u32, u32), step: u32) {
        let (w, h) = preview_size(size.0, size.1);
        let image = jpeg(w, h, (40 * step).min(255) as u8);
        self.send_binary(to, binary_frame(1, 1, &image));
        self.sent_previews.lock().unwrap().push(image);
    }

    fn send_junk(&self, to: &Target) {
        let image = jpeg(8, 8, 255);
        self.send_binary(to, vec![0, 0, 0, 1, 0, 0]);
        self.send_binary(to, binary_frame(3, 1, &image));
        self.send_binary(to, binary_frame(1, 9, &image));
    }

    /// ComfyUI's prompt worker: one job at a time, lowest `number` first.
    async fn work(self: Arc<Self>) {
        loop {
            let next = {
                let mut jobs = self.jobs.lock().unwrap();
                let id = jobs
                    .iter()
                    .filter(|(_, j)| j.phase == Phase::Pending)
                    .min_by_key(|(_, j)| j.number)
                    .map(|(id, _)| id.clone());
                if let Some(id) = &id {
                    jobs.get_mut(id).unwrap().phase = Phase::Running;
                }
                id
            };
            match next {
                Some(id) => {
                    self.queue_updated();
                    self.execute(&id).await;
                }
                None => self.wake.notified().await,
            }
        }
    }

    /// Run one job's nodes in ComfyUI's order, sending what ComfyUI sends; then its history
    /// entry, a `status` and `executing` with no node.
    async fn execute(&self, id: &str) {
        let (to, graph, size, count, fault) = {
            let jobs = self.jobs.lock().unwrap();
            let job = &jobs[id];
            let to = job.client_id.clone();
            (
                to,
                job.graph.clone(),
                job.size,
                job.count,
                job.fault.clone(),
            )
        };
        let stamp = |data: Value| {
            let mut data = data;
            data["timestamp"] = json!(now_ms());
            data
        };
        self.add_message(
            id,
            &to,
            "execution_start",
            stamp(json!({"prompt_id": id})),
            false,
        );
        let signatures = signatures(&graph);
        let cached: Vec<String> = {
            let cache = self.cache.lock().unwrap();
            execution_order(&graph)
                .into_iter()
                .filter(|n| cache.get(n) == signatures.get(n))
                .collect()
        };
        self.add_message(
            id,
            &to,
            "execution_cached",
            stamp(json!({"nodes": cached, "prompt_id": id})),
            false,
        );
        let mut states = Map::new();
        let mut executed: Vec<String> = Vec::new();
        let mut outputs = Map::new();
        let mut meta = Map::new();
        // The node the job stopped at, its class, and whether it was interrupted (or failed).
        let mut ended: Option<(String, String, bool)> = None;
        for node in execution_order(&graph) {
            if cached.contains(&node) {
                continue;
            }
            let class = graph[&node]["class_type"]
                .as_str()
                .unwrap_or("")
                .to_string();
            states.insert(
                node.clone(),
                node_state(id, &node, json!(0.0), json!(1.0), "running"),
            );
            self.send(
                &to,
                "progress_state",
                json!({"prompt_id": id, "nodes": states}),
            );
            self.send(
                &to,
                "executing",
                json!({"node": node, "display_node": node, "prompt_id": id}),
            );
            if self.phase(id) == Phase::Interrupting {
                ended = Some((node, class, true));
                break;
            }
            let mut finished = (json!(1.0), json!(1.0));
            if class == "KSampler" {
                if let Fault::ExecError(_) = fault {
                    ended = Some((node, class, false));
                    break;
                }
                let steps = graph[&node]["inputs"]["steps"].as_u64().unwrap_or(1).max(1) as u32;
                match self
                    .sample(id, &to, &node, steps, size, &mut states, &fault)
                    .await
                {
                    Ok(()) => finished = (json!(steps), json!(steps)),
                    Err(()) => {
                        ended = Some((node, class, true));
                        break;
                    }
                }
            }
            if OUTPUT_NODES.contains(&class.as_str()) {
                let images = self.save(id, &graph[&node], count, &fault);
                let output = json!({"images": images});
                self.send(
                    &to,
                    "executed",
                    json!({"node": node, "display_node": node, "output": output, "prompt_id": id}),
                );
                outputs.insert(node.clone(), output);
                meta.insert(
                    node.clone(),
                    json!({"node_id": node, "display_node": node, "parent_node": null,
                           "real_node_id": node}),
                );
            }
            states.insert(
                node.clone(),
                node_state(id, &node, finished.0, finished.1, "finished"),
            );
            self.send(
                &to,
                "progress_state",
                json!({"prompt_id": id, "nodes": states}),
            );
            executed.push(node);
        }
        // What ran (or was cached) is cached for the next job, as ComfyUI keeps the last
        // prompt's results; output nodes are left out here for simplicity.
        *self.cache.lock().unwrap() = signatures
            .into_iter()
            .filter(|(n, _)| {
                (executed.contains(n) || cached.contains(n))
                    && !OUTPUT_NODES.contains(&graph[n]["class_type"].as_str().unwrap_or(""))
            })
            .collect();
        let success = match ended {
            None => {
                self.add_message(
                    id,
                    &to,
                    "execution_success",
                    stamp(json!({"prompt_id": id})),
                    false,
                );
                true
            }
            Some((node, class, true)) => {
                let data = json!({"prompt_id": id, "node_id": node, "node_type": class,
                                  "executed": executed});
                self.add_message(id, &to, "execution_interrupted", stamp(data), true);
                outputs.clear();
                meta.clear();
                false
            }
            Some((node, class, false)) => {
                let Fault::ExecError(exception) = fault else {
                    unreachable!()
                };
                let data = json!({
                    "prompt_id": id, "node_id": node, "node_type": class, "executed": executed,
                    "exception_message": "it broke", "exception_type": exception,
                    "traceback": ["  File \"execution.py\", line 1, in execute\n"],
                    "current_inputs": {}, "current_outputs": [],
                });
                self.add_message(id, &to, "execution_error", stamp(data), false);
                outputs.clear();
                meta.clear();
                false
            }
        };
        tokio::time::sleep(self.settle).await;
        {
            let mut jobs = self.jobs.lock().unwrap();
            let job = jobs.get_mut(id).unwrap();
            let prompt = json!([job.number, id, job.graph, job.extra_data, job.outputs]);
            let status = json!({
                "status_str": if success { "success" } else { "error" },
                "completed": success,
                "messages": job.messages,
            });
            job.history =
                Some(json!({"prompt": prompt, "outputs": outputs, "status": status, "meta": meta}));
            job.phase = Phase::Done;
        }
        self.queue_updated();
        self.send(&to, "executing", json!({"node": null, "prompt_id": id}));
    }

    /// A sampler's steps over `delay`: `progress_state`, `progress` and a preview each step. A
    /// hanging job stays on its last step. `Err` when interrupted.
    #[allow(clippy::too_many_arguments)]
    async fn sample(
        &self,
        id: &str,
        to: &Target,
        node: &str,
        steps: u32,
        size: (u32, u32),
        states: &mut Map<String, Value>,
        fault: &Fault,
    ) -> Result<(), ()> {
        let tick = self.delay / steps;
        for step in 1..=steps {
            tokio::time::sleep(tick).await;
            if self.phase(id) == Phase::Interrupting {
                return Err(());
            }
            states.insert(
                node.to_string(),
                node_state(id, node, json!(step), json!(steps), "running"),
            );
            self.send(
                to,
                "progress_state",
                json!({"prompt_id": id, "nodes": states}),
            );
            self.send(
                to,
                "progress",
                json!({"value": step, "max": steps, "prompt_id": id, "node": node}),
            );
            if self.previews {
                self.send_preview(to, size, step);
                if step == steps && self.junk_frames {
                    self.send_junk(to);
                }
            }
        }
        if *fault == Fault::Hang {
            loop {
                tokio::time::sleep(tick).await;
                if self.phase(id) == Phase::Interrupting {
                    return Err(());
                }
            }
        }
        Ok(())
    }

    /// SaveImage's files: `{prefix}_{counter:05}_.png`, the counter running over the server's
    /// life as in ComfyUI's output folder.
    fn save(&self, id: &str, node: &Value, count: usize, fault: &Fault) -> Vec<Value> {
        let count = match fault {
            Fault::Count(k) => *k,
            _ => count,
        };
        let prefix = node["inputs"]["filename_prefix"]
            .as_str()
            .unwrap_or("ComfyUI");
        let mut files = self.files.lock().unwrap();
        (0..count)
            .map(|k| {
                let name = format!("{prefix}_{:05}_.png", files.len() + 1);
                files.insert(name.clone(), (id.to_string(), k));
                json!({"filename": name, "subfolder": "", "type": "output"})
            })
            .collect()
    }
}

fn node_state(id: &str, node: &str, value: Value, max: Value, state: &str) -> Value {
    json!({"value": value, "max": max, "state": state, "node_id": node, "prompt_id": id,
           "display_node_id": node, "parent_node_id": null, "real_node_id": node})
}

/// The nodes the output nodes need, in the order ComfyUI runs them: its execution list is a
/// stack, so a node's last linked input is taken first (which gives the recorded 4, 6, 7, 5, 3,
/// 8, 9 for the default graph).
fn execution_order(graph: &Value) -> Vec<String> {
    fn visit(graph: &Value, node: &str, order: &mut Vec<String>) {
        if order.iter().any(|n| n == node) || graph.get(node).is_none() {
            return;
        }
        let inputs = graph[node]["inputs"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for value in inputs.values().rev() {
            if let Some(link) = value[0].as_str().filter(|_| value.is_array()) {
                visit(graph, link, order);
            }
        }
        order.push(node.to_string());
    }
    let mut order = Vec::new();
    for (id, node) in graph.as_object().into_iter().flatten() {
        if OUTPUT_NODES.contains(&node["class_type"].as_str().unwrap_or("")) {
            visit(graph, id, &mut order);
        }
    }
    order
}

/// Each node's input signature: its class and inputs, links replaced by the linked node's
/// signature, so that a node is cached only when nothing upstream changed.
fn signatures(graph: &Value) -> HashMap<String, String> {
    fn of(graph: &Value, node: &str, memo: &mut HashMap<String, String>) -> String {
        if let Some(s) = memo.get(node) {
            return s.clone();
        }
        let mut inputs = graph[node]["inputs"].clone();
        for value in inputs.as_object_mut().into_iter().flatten().map(|(_, v)| v) {
            if let Some(link) = value[0].as_str().filter(|_| value.is_array()) {
                let link = link.to_string();
                *value = json!([of(graph, &link, memo), value[1]]);
            }
        }
        let signature = json!([graph[node]["class_type"], inputs]).to_string();
        memo.insert(node.to_string(), signature.clone());
        signature
    }
    let mut memo = HashMap::new();
    for id in graph.as_object().into_iter().flatten().map(|(id, _)| id) {
        of(graph, id, &mut memo);
    }
    memo
}

/// A 400 as ComfyUI's validation answers it: the error (its `details` one line per node
/// error) and each failing node's errors with the outputs that depend on it.
fn rejected(graph: &Value, node: &str, kind: &str, message: &str, details: &str) -> Response {
    let class = graph[node]["class_type"].as_str().unwrap_or("");
    let outputs: Vec<String> = execution_order(graph)
        .into_iter()
        .filter(|n| OUTPUT_NODES.contains(&graph[n]["class_type"].as_str().unwrap_or("")))
        .collect();
    (
        StatusCode::BAD_REQUEST,
        Json(json!({
            "error": {"type": "prompt_outputs_failed_validation",
                      "message": "Prompt outputs failed validation",
                      "details": format!("{message}: {details}"), "extra_info": {}},
            "node_errors": {node: {
                "errors": [{"type": kind, "message": message, "details": details,
                            "extra_info": {}}],
                "dependent_outputs": outputs, "class_type": class}},
        })),
    )
        .into_response()
}

/// A 400 about the whole prompt (no prompt, no output node): `node_errors` is empty.
fn refused(kind: &str, message: &str, details: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({
            "error": {"type": kind, "message": message, "details": details, "extra_info": {}},
            "node_errors": {},
        })),
    )
        .into_response()
}

fn linked<'g>(graph: &'g Value, node: &str, input: &str) -> Option<(String, &'g Value)> {
    let id = graph[node]["inputs"][input][0].as_str()?.to_string();
    let target = graph.get(&id)?;
    Some((id, target))
}

fn invalid_image(graph: &Value, node: &str, name: &str) -> Response {
    rejected(
        graph,
        node,
        "custom_validation_failed",
        "Custom validation failed for node",
        &format!("image - Invalid image file: {name}"),
    )
}

/// A graph without a sampler (an upscale): one image, the loaded one's size times any
/// ImageScaleBy's factor.
fn image_only(
    graph: &Value,
    uploads: &[(String, RgbaImage)],
) -> Result<((u32, u32), usize), Response> {
    let mut size = None;
    let mut scale = 1.0;
    for node in graph.as_object().unwrap().values() {
        match node["class_type"].as_str() {
            Some("LoadImage") => {
                let name = node["inputs"]["image"].as_str().unwrap_or("");
                let (_, img) = uploads.iter().find(|(n, _)| n == name).unwrap();
                size = Some((img.width, img.height));
            }
            Some("ImageScaleBy") => scale = node["inputs"]["scale_by"].as_f64().unwrap_or(1.0),
            _ => {}
        }
    }
    let (w, h) = size.ok_or_else(|| refused("invalid_prompt", "no sampler and no image", ""))?;
    let scaled = |v: u32| (f64::from(v) * scale) as u32;
    Ok(((scaled(w), scaled(h)), 1))
}

/// Check the graph as ComfyUI would before queueing it; the size and count of its images.
fn validate(
    graph: &Value,
    uploads: &[(String, RgbaImage)],
) -> Result<((u32, u32), usize), Response> {
    let Some(nodes) = graph.as_object() else {
        return Err(refused("invalid_prompt", "Invalid prompt", ""));
    };
    if !nodes
        .values()
        .any(|n| OUTPUT_NODES.contains(&n["class_type"].as_str().unwrap_or("")))
    {
        return Err(refused("prompt_no_outputs", "Prompt has no outputs", ""));
    }
    for (id, node) in nodes {
        let class = node["class_type"].as_str().unwrap_or("");
        if class == "LoadImage" || class == "LoadImageMask" {
            let name = node["inputs"]["image"].as_str().unwrap_or("");
            if !uploads.iter().any(|(n, _)| n == name) {
                return Err(invalid_image(graph, id, name));
            }
        }
    }
    let Some(sampler) = nodes
        .iter()
        .find(|(_, n)| n["class_type"] == "KSampler")
        .map(|(id, _)| id.clone())
    else {
        return image_only(graph, uploads);
    };
    let seed = &graph[&sampler]["inputs"]["seed"];
    if !seed.is_u64() {
        return Err(rejected(
            graph,
            &sampler,
            "invalid_input_type",
            "Failed to convert an input value to a INT value",
            &format!("seed, {seed}"),
        ));
    }
    match linked(graph, &sampler, "positive") {
        Some((_, n)) if n["inputs"]["text"].as_str().is_some_and(|t| !t.is_empty()) => {}
        _ => {
            return Err(rejected(
                graph,
                &sampler,
                "required_input_missing",
                "Required input is missing",
                "positive",
            ))
        }
    }
    let size = nodes
        .values()
        .filter(|n| n["class_type"] == "LoadImage")
        .filter_map(|n| {
            let name = n["inputs"]["image"].as_str()?;
            let (_, img) = uploads.iter().find(|(u, _)| u == name)?;
            Some((img.width, img.height))
        })
        .next();
    let missing = || {
        rejected(
            graph,
            &sampler,
            "required_input_missing",
            "Required input is missing",
            "latent_image",
        )
    };
    let (latent_id, latent) = linked(graph, &sampler, "latent_image").ok_or_else(missing)?;
    match latent["class_type"].as_str() {
        Some("EmptyLatentImage") => {
            let w = latent["inputs"]["width"].as_u64().unwrap_or(0) as u32;
            let h = latent["inputs"]["height"].as_u64().unwrap_or(0) as u32;
            let batch = latent["inputs"]["batch_size"].as_u64().unwrap_or(0) as usize;
            if w < 16 || h < 16 || w % 8 != 0 || h % 8 != 0 || !(1..=4096).contains(&batch) {
                return Err(rejected(
                    graph,
                    &latent_id,
                    "value_smaller_than_min",
                    "Value smaller than min",
                    "width and height at least 16 and multiples of 8, batch_size at least 1",
                ));
            }
            Ok(((w, h), batch))
        }
        Some("RepeatLatentBatch") => {
            let amount = latent["inputs"]["amount"].as_u64().unwrap_or(0) as usize;
            Ok((size.ok_or_else(missing)?, amount))
        }
        _ => Ok((size.ok_or_else(missing)?, 1)),
    }
}

/// FLOAT inputs given as integers become floats, as ComfyUI's validation converts them in the
/// graph it keeps (and echoes in `/queue` and `/history`).
fn floats(graph: &mut Value) {
    for node in graph.as_object_mut().into_iter().flatten().map(|(_, n)| n) {
        let class = node["class_type"].as_str().unwrap_or("").to_string();
        for (name, value) in node["inputs"].as_object_mut().into_iter().flatten() {
            let float = FLOAT_INPUTS.contains(&(class.as_str(), name.as_str()));
            if let (true, Some(f)) = (float && value.is_number(), value.as_f64()) {
                *value = json!(f);
            }
        }
    }
}

async fn prompt(State(mock): State<Arc<ComfyMock>>, Json(body): Json<Value>) -> Response {
    mock.prompts.lock().unwrap().push(body.clone());
    let fault = mock.script.next();
    if let Fault::Status { .. } = fault {
        return common_answer(&fault).await.unwrap();
    }
    let number = {
        let mut counter = mock.number.lock().unwrap();
        *counter += 1;
        *counter - 1
    };
    let Some(graph) = body.get("prompt") else {
        return refused("no_prompt", "No prompt provided", "No prompt provided");
    };
    if let Fault::Refuse(message) = fault {
        let ckpt = &graph["4"]["inputs"]["ckpt_name"];
        return rejected(
            graph,
            "4",
            "value_not_in_list",
            message,
            &format!("ckpt_name: {ckpt} not in []"),
        );
    }
    let uploads = mock.uploads.lock().unwrap().clone();
    let (size, count) = match validate(graph, &uploads) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let mut graph = graph.clone();
    floats(&mut graph);
    let id = match &body["prompt_id"] {
        Value::Null => uuid::Uuid::new_v4().to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut extra_data = body.get("extra_data").cloned().unwrap_or(json!({}));
    let client_id = body["client_id"].as_str().map(str::to_string);
    if let Some(client) = &client_id {
        extra_data["client_id"] = json!(client);
    }
    let outputs = execution_order(&graph)
        .into_iter()
        .filter(|n| OUTPUT_NODES.contains(&graph[n]["class_type"].as_str().unwrap_or("")))
        .collect();
    mock.jobs.lock().unwrap().insert(
        id.clone(),
        Job {
            number,
            client_id,
            graph,
            extra_data,
            outputs,
            size,
            count,
            fault: fault.clone(),
            phase: Phase::Pending,
            messages: Vec::new(),
            history: None,
        },
    );
    mock.queue_updated();
    mock.wake.notify_one();
    match fault {
        // Queued, but the answer is lost or unreadable.
        Fault::Drop => dropped(),
        Fault::BadJson => common_answer(&fault).await.unwrap(),
        _ => Json(json!({"prompt_id": id, "number": number, "node_errors": {}})).into_response(),
    }
}

async fn history(State(mock): State<Arc<ComfyMock>>, Path(id): Path<String>) -> Json<Value> {
    let jobs = mock.jobs.lock().unwrap();
    match jobs.get(&id).and_then(|j| j.history.clone()) {
        Some(entry) => Json(json!({ id: entry })),
        None => Json(json!({})),
    }
}

async fn queue(State(mock): State<Arc<ComfyMock>>) -> Json<Value> {
    let jobs = mock.jobs.lock().unwrap();
    let mut listed: Vec<(&String, &Job)> = jobs.iter().collect();
    listed.sort_by_key(|(_, j)| j.number);
    let entries = |phases: &[Phase]| -> Vec<Value> {
        listed
            .iter()
            .filter(|(_, j)| phases.contains(&j.phase))
            .map(|(id, j)| json!([j.number, id, j.graph, j.extra_data, j.outputs]))
            .collect()
    };
    Json(json!({
        "queue_running": entries(&[Phase::Running, Phase::Interrupting]),
        "queue_pending": entries(&[Phase::Pending]),
    }))
}

/// `POST /queue {"delete": [...]}`: pending jobs are taken off; a running one is not touched
/// (only `/interrupt` stops one).
async fn delete(State(mock): State<Arc<ComfyMock>>, Json(body): Json<Value>) -> StatusCode {
    let mut changed = false;
    for id in body["delete"].as_array().into_iter().flatten() {
        let id = id.as_str().unwrap_or("").to_string();
        let mut jobs = mock.jobs.lock().unwrap();
        if jobs.get(&id).is_some_and(|j| j.phase == Phase::Pending) {
            jobs.remove(&id);
            changed = true;
        }
        mock.deletes.lock().unwrap().push(id);
    }
    if changed {
        mock.queue_updated();
    }
    StatusCode::OK
}

/// `POST /interrupt`: with `{"prompt_id"}`, that job if it is the running one; without (or
/// with a body that is not JSON), whatever runs.
async fn interrupt(State(mock): State<Arc<ComfyMock>>, body: axum::body::Bytes) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let only = body["prompt_id"].as_str().filter(|s| !s.is_empty());
    for (id, job) in mock.jobs.lock().unwrap().iter_mut() {
        if job.phase == Phase::Running && only.is_none_or(|o| o == id) {
            job.phase = Phase::Interrupting;
        }
    }
    mock.interrupts.lock().unwrap().push(body);
    StatusCode::OK
}

async fn system_stats() -> Json<Value> {
    Json(json!({
        "system": {"os": "posix", "ram_total": 25276502016u64, "ram_free": 23761514496u64,
                   "comfyui_version": "0.3.64", "required_frontend_version": "1.27.10",
                   "installed_templates_version": "0.1.95", "required_templates_version": "0.1.95",
                   "python_version": "3.11.7", "pytorch_version": "2.15.0+cpu",
                   "embedded_python": false, "argv": ["main.py", "--cpu"]},
        "devices": [{"name": "cpu", "type": "cpu", "index": null,
                     "vram_total": 25276502016u64, "vram_free": 23761514496u64,
                     "torch_vram_total": 25276502016u64, "torch_vram_free": 23761514496u64}],
    }))
}

async fn upload(State(mock): State<Arc<ComfyMock>>, mut form: Multipart) -> Response {
    let mut image = None;
    let mut kind = String::new();
    let mut fields = HashMap::new();
    while let Some(part) = form.next_field().await.unwrap() {
        match part.name() {
            Some("image") => {
                let name = part.file_name().unwrap_or("").to_string();
                let bytes = part.bytes().await.unwrap();
                match decode_png(&bytes) {
                    Ok(img) => image = Some((name, img)),
                    Err(e) => {
                        return (StatusCode::BAD_REQUEST, format!("not an image: {e}"))
                            .into_response()
                    }
                }
            }
            Some(name) => {
                let name = name.to_string();
                let value = part.text().await.unwrap();
                if name == "type" {
                    kind = value.clone();
                }
                fields.insert(name, value);
            }
            None => {}
        }
    }
    let Some((name, img)) = image else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    // ComfyUI takes `temp` and `output` too; easel must upload into `input`, where LoadImage
    // looks.
    if kind != "input" {
        return (StatusCode::BAD_REQUEST, "type must be input").into_response();
    }
    mock.uploads.lock().unwrap().push((name.clone(), img));
    mock.upload_fields.lock().unwrap().push(fields);
    Json(json!({"name": name, "subfolder": "", "type": "input"})).into_response()
}

async fn view(
    State(mock): State<Arc<ComfyMock>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    mock.views.fetch_add(1, Ordering::SeqCst);
    let filename = query.get("filename").cloned().unwrap_or_default();
    let Some((id, k)) = mock.files.lock().unwrap().get(&filename).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let in_output = query.get("type").map_or("output", String::as_str) == "output"
        && query.get("subfolder").is_none_or(|s| s.is_empty());
    let jobs = mock.jobs.lock().unwrap();
    let Some(job) = jobs.get(&id).filter(|_| in_output) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if job.fault == Fault::NotImage {
        return ([("content-type", "image/png")], "not a png at all").into_response();
    }
    let shade = mock.shade + k as u8;
    let png = encode_png(&flat(job.size.0, job.size.1, shade));
    ([("content-type", "image/png")], png).into_response()
}

async fn socket(
    State(mock): State<Arc<ComfyMock>>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    if !mock.socket {
        return StatusCode::NOT_FOUND.into_response();
    }
    let client = query
        .get("clientId")
        .filter(|c| !c.is_empty())
        .cloned()
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    mock.sockets.lock().unwrap().push(client.clone());
    let events = mock.events.subscribe();
    let remaining = mock.remaining();
    upgrade.on_upgrade(move |ws| forward(ws, client, remaining, events, mock))
}

/// Send the client the queue's state with its `sid`, then every message for it or for all,
/// until it goes.
async fn forward(
    mut ws: WebSocket,
    client: String,
    remaining: usize,
    mut events: broadcast::Receiver<(Target, Frame)>,
    mock: Arc<ComfyMock>,
) {
    let hello = json!({"type": "status", "data": {
        "status": {"exec_info": {"queue_remaining": remaining}}, "sid": client}});
    if ws
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok((to, frame)) if to.as_ref().is_none_or(|to| *to == client) => {
                    let message = match frame {
                        Frame::Text(text) => {
                            if let Some(written) = mock.written.lock().unwrap().as_mut() {
                                written.push((std::time::Instant::now(), text.clone()));
                            }
                            Message::Text(text.into())
                        }
                        Frame::Binary(bytes) => Message::Binary(bytes.into()),
                    };
                    if ws.send(message).await.is_err() {
                        return;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            },
            incoming = ws.recv() => if !matches!(incoming, Some(Ok(_))) { return },
        }
    }
}
