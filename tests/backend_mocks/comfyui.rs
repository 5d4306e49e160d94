//! ComfyUI as easel uses it: `POST /upload/image`, `POST /prompt` (an API-format graph, checked
//! the way ComfyUI validates one: the sampler's text encoder, latent and image loaders),
//! `GET /history/{id}`, `GET /queue`, `POST /queue` (delete), `POST /interrupt`, `GET /view`,
//! `GET /system_stats`, and the WebSocket `/ws?clientId=...` with `progress` and `executing`
//! events for the client that queued the job and, after each `progress`, a binary preview frame
//! as ComfyUI 0.3.64 sends them (../shared/fixtures/comfyui-0.3.64): a big-endian u32 event type
//! (1, a preview), a u32 image type (1, JPEG) and a real JPEG; then frames easel must ignore.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Multipart, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::{common_answer, dropped, flat, Fault, Script};
use easel::generate::raster::{decode_png, encode_png, RgbaImage};

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Running,
    Done,
    Interrupted,
}

pub struct Job {
    client_id: String,
    size: (u32, u32),
    count: usize,
    fault: Fault,
    state: Phase,
}

pub struct ComfyMock {
    pub script: Script,
    /// How long each job runs.
    pub delay: Duration,
    /// `progress` events sent over a job's run.
    pub steps: u32,
    /// Serve the WebSocket (without it, `/ws` answers 404).
    pub socket: bool,
    /// Send binary preview frames after each `progress` event.
    pub previews: bool,
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
    pub events: broadcast::Sender<(String, Frame)>,
}

/// A message for one client's WebSocket.
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

impl Default for ComfyMock {
    fn default() -> ComfyMock {
        ComfyMock {
            script: Script::default(),
            delay: Duration::from_millis(50),
            steps: 4,
            socket: true,
            previews: true,
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
            events: broadcast::channel(1024).0,
        }
    }
}

impl ComfyMock {
    /// Start it; its base URL.
    pub async fn start(self: &Arc<Self>) -> String {
        super::serve(self.router()).await
    }

    /// Start it behind TLS with `tls`; its base URL (`https://localhost:PORT`).
    pub async fn start_tls(self: &Arc<Self>, tls: Arc<rustls::ServerConfig>) -> String {
        super::serve_tls(self.router(), tls).await
    }

    fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/prompt", post(prompt))
            .route("/history/{id}", get(history))
            .route("/queue", get(queue).post(delete))
            .route("/interrupt", post(interrupt))
            .route("/upload/image", post(upload))
            .route("/view", get(view))
            .route(
                "/system_stats",
                get(|| async { Json(json!({"system": {}})) }),
            )
            .route("/ws", get(socket))
            .with_state(self.clone())
    }

    fn send(&self, client_id: &str, event: Value) {
        let _ = self
            .events
            .send((client_id.to_string(), Frame::Text(event.to_string())));
    }

    fn send_binary(&self, client_id: &str, frame: Vec<u8>) {
        let _ = self
            .events
            .send((client_id.to_string(), Frame::Binary(frame)));
    }

    /// The preview of step `step` (a JPEG a shade lighter each step), framed and sent.
    fn send_preview(&self, client_id: &str, size: (u32, u32), step: u32) {
        let image = jpeg(
            size.0.max(8) / 8,
            size.1.max(8) / 8,
            (40 * step).min(255) as u8,
        );
        self.send_binary(client_id, binary_frame(1, 1, &image));
        self.sent_previews.lock().unwrap().push(image);
    }

    /// Frames that are no preview of easel's: too short, another event type (3, text) and an
    /// unknown image type, each with bytes that would decode.
    fn send_junk(&self, client_id: &str) {
        let image = jpeg(8, 8, 255);
        self.send_binary(client_id, vec![0, 0, 0, 1, 0, 0]);
        self.send_binary(client_id, binary_frame(3, 1, &image));
        self.send_binary(client_id, binary_frame(1, 9, &image));
    }

    /// Run a job: `steps` progress events over `delay`, then `executing` with no node. A
    /// hanging job runs until interrupted.
    async fn run(self: Arc<Self>, id: String) {
        let (client, hang, size) = {
            let jobs = self.jobs.lock().unwrap();
            let job = &jobs[&id];
            (job.client_id.clone(), job.fault == Fault::Hang, job.size)
        };
        self.send(
            &client,
            json!({"type": "execution_start", "data": {"prompt_id": id}}),
        );
        self.send(
            &client,
            json!({"type": "executing", "data": {"node": "3", "prompt_id": id}}),
        );
        let steps = self.steps.max(1);
        let mut step = 0;
        loop {
            tokio::time::sleep(self.delay / steps).await;
            if self.jobs.lock().unwrap()[&id].state != Phase::Running {
                return;
            }
            if step < steps {
                step += 1;
                self.send(
                    &client,
                    json!({"type": "progress", "data": {
                        "value": step, "max": steps, "prompt_id": id, "node": "3"}}),
                );
                if self.previews {
                    self.send_preview(&client, size, step);
                    if step == steps {
                        self.send_junk(&client);
                    }
                }
            } else if !hang {
                break;
            }
        }
        self.jobs.lock().unwrap().get_mut(&id).unwrap().state = Phase::Done;
        self.send(
            &client,
            json!({"type": "executing", "data": {"node": null, "prompt_id": id}}),
        );
    }
}

/// A graph without a sampler (an upscale): one image, the loaded one's size times any
/// ImageScaleBy's factor.
fn image_only(
    nodes: &serde_json::Map<String, Value>,
    uploads: &[(String, RgbaImage)],
) -> Result<((u32, u32), usize), Response> {
    let mut size = None;
    let mut scale = 1.0;
    for node in nodes.values() {
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
    let (w, h) = size.ok_or_else(|| rejected("?", "?", "no sampler and no image"))?;
    let scaled = |v: u32| (f64::from(v) * scale) as u32;
    Ok(((scaled(w), scaled(h)), 1))
}

fn rejected(node: &str, class: &str, message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({
            "error": {"type": "prompt_outputs_failed_validation",
                      "message": "Prompt outputs failed validation", "details": ""},
            "node_errors": {node: {"errors": [{"message": message, "details": ""}],
                                   "class_type": class}},
        })),
    )
        .into_response()
}

fn linked<'g>(graph: &'g Value, node: &str, input: &str) -> Option<(String, &'g Value)> {
    let id = graph[node]["inputs"][input][0].as_str()?.to_string();
    let target = graph.get(&id)?;
    Some((id, target))
}

/// Check the graph as ComfyUI would before queueing it; the size and count of its images.
fn validate(
    graph: &Value,
    uploads: &[(String, RgbaImage)],
) -> Result<((u32, u32), usize), Response> {
    let nodes = graph.as_object().unwrap();
    for (id, node) in nodes {
        let class = node["class_type"].as_str().unwrap_or("");
        if class == "LoadImage" || class == "LoadImageMask" {
            let name = node["inputs"]["image"].as_str().unwrap_or("");
            if !uploads.iter().any(|(n, _)| n == name) {
                return Err(rejected(id, class, &format!("Invalid image file: {name}")));
            }
        }
    }
    let Some(sampler) = nodes
        .iter()
        .find(|(_, n)| n["class_type"] == "KSampler")
        .map(|(id, _)| id.clone())
    else {
        return image_only(nodes, uploads);
    };
    if !graph[&sampler]["inputs"]["seed"].is_u64() {
        return Err(rejected(&sampler, "KSampler", "seed is not a number"));
    }
    match linked(graph, &sampler, "positive") {
        Some((_, n)) if n["inputs"]["text"].as_str().is_some_and(|t| !t.is_empty()) => {}
        _ => return Err(rejected(&sampler, "KSampler", "positive has no text")),
    }
    let mut size = None;
    for (id, node) in nodes {
        if node["class_type"] == "LoadImage" {
            let name = node["inputs"]["image"].as_str().unwrap_or("");
            match uploads.iter().find(|(n, _)| n == name) {
                Some((_, img)) => size = Some((img.width, img.height)),
                None => {
                    return Err(rejected(
                        id,
                        "LoadImage",
                        &format!("Invalid image file: {name}"),
                    ))
                }
            }
        }
    }
    let (latent_id, latent) = linked(graph, &sampler, "latent_image")
        .ok_or_else(|| rejected(&sampler, "KSampler", "latent_image is not linked"))?;
    match latent["class_type"].as_str() {
        Some("EmptyLatentImage") => {
            let w = latent["inputs"]["width"].as_u64().unwrap_or(0) as u32;
            let h = latent["inputs"]["height"].as_u64().unwrap_or(0) as u32;
            let batch = latent["inputs"]["batch_size"].as_u64().unwrap_or(0) as usize;
            if w == 0 || h == 0 || w % 8 != 0 || h % 8 != 0 || !(1..=64).contains(&batch) {
                return Err(rejected(
                    &latent_id,
                    "EmptyLatentImage",
                    "width and height must be multiples of 8, batch_size 1 to 64",
                ));
            }
            Ok(((w, h), batch))
        }
        Some("RepeatLatentBatch") => {
            let amount = latent["inputs"]["amount"].as_u64().unwrap_or(0) as usize;
            let size = size.ok_or_else(|| rejected(&latent_id, "RepeatLatentBatch", "no image"))?;
            Ok((size, amount))
        }
        _ => {
            let size = size.ok_or_else(|| rejected(&latent_id, "?", "no image"))?;
            Ok((size, 1))
        }
    }
}

async fn prompt(State(mock): State<Arc<ComfyMock>>, Json(body): Json<Value>) -> Response {
    mock.prompts.lock().unwrap().push(body.clone());
    let fault = mock.script.next();
    if let Fault::Status { .. } = fault {
        return common_answer(&fault).await.unwrap();
    }
    if let Fault::Refuse(message) = fault {
        return rejected("4", "CheckpointLoaderSimple", message);
    }
    let uploads = mock.uploads.lock().unwrap().clone();
    let (size, count) = match validate(&body["prompt"], &uploads) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let id = body["prompt_id"]
        .as_str()
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
    let client_id = body["client_id"].as_str().unwrap_or("").to_string();
    mock.jobs.lock().unwrap().insert(
        id.clone(),
        Job {
            client_id,
            size,
            count,
            fault: fault.clone(),
            state: Phase::Running,
        },
    );
    tokio::spawn(mock.clone().run(id.clone()));
    match fault {
        // Queued, but the answer is lost or unreadable.
        Fault::Drop => dropped(),
        Fault::BadJson => common_answer(&fault).await.unwrap(),
        _ => Json(json!({"prompt_id": id, "number": 1, "node_errors": {}})).into_response(),
    }
}

async fn history(State(mock): State<Arc<ComfyMock>>, Path(id): Path<String>) -> Response {
    let jobs = mock.jobs.lock().unwrap();
    let Some(job) = jobs.get(&id) else {
        return Json(json!({})).into_response();
    };
    let entry = match job.state {
        Phase::Running => return Json(json!({})).into_response(),
        Phase::Interrupted => json!({
            "outputs": {},
            "status": {"status_str": "error", "completed": false,
                       "messages": [["execution_interrupted", {"prompt_id": id}]]},
        }),
        Phase::Done if matches!(job.fault, Fault::ExecError(_)) => {
            let Fault::ExecError(exception) = job.fault else {
                unreachable!()
            };
            json!({
                "outputs": {},
                "status": {"status_str": "error", "completed": false, "messages": [
                    ["execution_start", {"prompt_id": id}],
                    ["execution_error", {"prompt_id": id, "node_id": "3", "node_type": "KSampler",
                        "exception_type": exception, "exception_message": "it broke"}]
                ]},
            })
        }
        Phase::Done => {
            let count = match job.fault {
                Fault::Count(k) => k,
                _ => job.count,
            };
            let images: Vec<Value> = (0..count)
                .map(|k| json!({"filename": format!("{id}_{k}.png"), "subfolder": "", "type": "output"}))
                .collect();
            json!({
                "outputs": {"9": {"images": images}},
                "status": {"status_str": "success", "completed": true,
                           "messages": [["execution_start", {}], ["execution_success", {}]]},
            })
        }
    };
    Json(json!({ id: entry })).into_response()
}

async fn queue(State(mock): State<Arc<ComfyMock>>) -> Json<Value> {
    let jobs = mock.jobs.lock().unwrap();
    let running: Vec<Value> = jobs
        .iter()
        .filter(|(_, j)| j.state == Phase::Running)
        .map(|(id, _)| json!([1, id, {}, {}, ["9"]]))
        .collect();
    Json(json!({"queue_running": running, "queue_pending": []}))
}

/// `POST /queue {"delete": [...]}`: recorded; a running job is not touched (as in ComfyUI,
/// where only `/interrupt` stops one).
async fn delete(State(mock): State<Arc<ComfyMock>>, Json(body): Json<Value>) -> StatusCode {
    for id in body["delete"].as_array().into_iter().flatten() {
        mock.deletes
            .lock()
            .unwrap()
            .push(id.as_str().unwrap_or("").to_string());
    }
    StatusCode::OK
}

async fn interrupt(State(mock): State<Arc<ComfyMock>>, body: Option<Json<Value>>) -> StatusCode {
    let body = body.map(|b| b.0).unwrap_or(Value::Null);
    let only = body["prompt_id"].as_str().map(str::to_string);
    for (id, job) in mock.jobs.lock().unwrap().iter_mut() {
        if job.state == Phase::Running && only.as_ref().is_none_or(|o| o == id) {
            job.state = Phase::Interrupted;
        }
    }
    mock.interrupts.lock().unwrap().push(body);
    StatusCode::OK
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
    let Some((id, k)) = filename
        .strip_suffix(".png")
        .and_then(|stem| stem.rsplit_once('_'))
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let jobs = mock.jobs.lock().unwrap();
    let Some(job) = jobs.get(id) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if query.get("type").map(String::as_str) != Some("output") {
        return StatusCode::NOT_FOUND.into_response();
    }
    if job.fault == Fault::NotImage {
        return ([("content-type", "image/png")], "not a png at all").into_response();
    }
    let shade = mock.shade + k.parse::<u8>().unwrap_or(0);
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
    let client = query.get("clientId").cloned().unwrap_or_default();
    mock.sockets.lock().unwrap().push(client.clone());
    let events = mock.events.subscribe();
    upgrade.on_upgrade(move |ws| forward(ws, client, events))
}

/// Send the client its status, then every event meant for it, until it goes.
async fn forward(
    mut ws: WebSocket,
    client: String,
    mut events: broadcast::Receiver<(String, Frame)>,
) {
    let hello = json!({"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}, "sid": client}});
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
                Ok((to, frame)) if to == client => {
                    let message = match frame {
                        Frame::Text(text) => Message::Text(text.into()),
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
