//! What a real ComfyUI 0.3.64 said, replayed to easel's comfyui adapter, and the shared mock held
//! to it. The transcripts in tests/fixtures/comfyui/0.3.64 are derived (derive.py there) from
//! recordings of a real server: every HTTP answer and WebSocket message of a 4-step job with
//! previews, and of a 20-step job interrupted after 7 steps.
//!
//! The replay answers with the recorded bodies and sends the recorded messages in their order
//! (their timing scaled down), putting in easel's prompt id, client id and graph where the
//! recording had its own; the binary frames carry a JPEG of the recorded kind. The mock is run
//! with the recorded graphs and what it says is compared with the recording field for field.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{broadcast, Notify};
use tokio_tungstenite::tungstenite;

use crate::backend_mocks::comfyui::{binary_frame, jpeg, ComfyMock};
use crate::backend_mocks::{flat, serve};
use easel::domain::{AspectRatio, Operation};
use easel::generate::backends::comfyui::ComfyUi;
use easel::generate::backends::BackendConfig;
use easel::generate::{GenerateError, Generator, Job, Product, Progress};
use easel::images::encode_png;
use easel::images::preview::PreviewImage;

/// The recorded seconds between messages, scaled: the 11 s job replays in about half a second.
const PACE: f64 = 0.05;

fn transcript(name: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/comfyui/0.3.64/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// What the replay does at the recorded `execution_interrupted`.
#[derive(Clone, Copy, PartialEq)]
enum Interrupt {
    /// Nothing to do: the transcript has none.
    None,
    /// Wait there until easel interrupts this prompt (`POST /interrupt {"prompt_id"}`).
    ByEasel,
    /// Send it on its own, as when someone interrupts the job from ComfyUI's own page.
    Elsewhere,
}

#[derive(Default)]
struct Seen {
    prompt: Option<Value>,
    client: Option<String>,
    /// The WebSocket messages sent so far (indexes into the transcript).
    sent: usize,
    /// The job's last message is out: `/queue` no longer lists it, `/history` has what was
    /// recorded after it.
    over: bool,
    deletes: Vec<Value>,
    interrupts: Vec<Value>,
    views: Vec<String>,
    /// The JPEGs of the binary frames sent.
    previews: Vec<Vec<u8>>,
}

struct Replay {
    lines: Vec<Value>,
    interrupt: Interrupt,
    seen: Mutex<Seen>,
    released: Notify,
    socket: broadcast::Sender<Message>,
}

impl Replay {
    async fn start(name: &str, interrupt: Interrupt) -> (Arc<Replay>, String) {
        let replay = Arc::new(Replay {
            lines: transcript(name),
            interrupt,
            seen: Mutex::default(),
            released: Notify::new(),
            socket: broadcast::channel(1024).0,
        });
        let app = Router::new()
            .route(
                "/system_stats",
                get(|s: State<Arc<Replay>>| async move { s.http("/system_stats") }),
            )
            .route("/prompt", post(replay_prompt))
            .route("/queue", get(replay_queue).post(replay_delete))
            .route("/history/{id}", get(replay_history))
            .route("/interrupt", post(replay_interrupt))
            .route("/view", get(replay_view))
            .route("/ws", get(replay_socket))
            .with_state(replay.clone());
        let url = serve(app).await;
        (replay, url)
    }

    fn line(&self, path: &str) -> &Value {
        self.lines
            .iter()
            .find(|l| l["kind"] == "http" && l["path"] == path)
            .unwrap_or_else(|| panic!("no {path} in the transcript"))
    }

    /// A recorded value with easel's prompt id, client id and graph put in.
    fn fill(&self, value: &Value) -> Value {
        let seen = self.seen.lock().unwrap();
        let id = seen
            .prompt
            .as_ref()
            .map_or(json!(""), |p| p["prompt_id"].clone());
        let graph = seen
            .prompt
            .as_ref()
            .map_or(json!({}), |p| p["prompt"].clone());
        let client = seen.client.clone().unwrap_or_default();
        let text = value
            .to_string()
            .replace("\"$graph\"", &graph.to_string())
            .replace("$prompt_id", id.as_str().unwrap_or(""))
            .replace("$client_id", &client);
        serde_json::from_str(&text).unwrap()
    }

    fn http(&self, path: &str) -> Response {
        let line = self.line(path);
        let status = axum::http::StatusCode::from_u16(line["status"].as_u64().unwrap() as u16);
        (status.unwrap(), Json(self.fill(&line["body"]))).into_response()
    }

    /// The WebSocket lines, after the first (`status` with `sid`, sent when the socket opens).
    fn messages(&self) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|l| l["kind"] != "http")
            .skip(1)
            .collect()
    }

    /// Send the job's messages at the recorded pace.
    async fn play(self: Arc<Self>) {
        let mut last = 0.0;
        for (k, line) in self.messages().into_iter().enumerate() {
            let t = line["t"].as_f64().unwrap();
            tokio::time::sleep(Duration::from_secs_f64((t - last).max(0.0) * PACE)).await;
            last = t;
            let kind = line["message"]["type"].as_str();
            if kind == Some("execution_interrupted") && self.interrupt == Interrupt::ByEasel {
                self.released.notified().await;
            }
            let message = match line["kind"].as_str() {
                Some("ws_text") => Message::Text(self.fill(&line["message"]).to_string().into()),
                _ => {
                    let image = jpeg(512, 512, (k * 7 % 256) as u8);
                    self.seen.lock().unwrap().previews.push(image.clone());
                    let (event, kind) = (line["event_type"].as_u64(), line["image_type"].as_u64());
                    let frame = binary_frame(event.unwrap() as u32, kind.unwrap() as u32, &image);
                    Message::Binary(frame.into())
                }
            };
            let _ = self.socket.send(message);
            let ends = kind == Some("execution_interrupted")
                || (kind == Some("executing") && line["message"]["data"]["node"].is_null());
            let mut seen = self.seen.lock().unwrap();
            seen.sent = k + 1;
            seen.over |= ends;
        }
    }
}

async fn replay_prompt(State(replay): State<Arc<Replay>>, Json(body): Json<Value>) -> Response {
    {
        let mut seen = replay.seen.lock().unwrap();
        assert!(seen.prompt.is_none(), "one job per transcript");
        seen.prompt = Some(body);
    }
    tokio::spawn(replay.clone().play());
    replay.http("/prompt")
}

async fn replay_queue(State(replay): State<Arc<Replay>>) -> Response {
    if replay.seen.lock().unwrap().over {
        return Json(json!({"queue_running": [], "queue_pending": []})).into_response();
    }
    replay.http("/queue")
}

async fn replay_history(State(replay): State<Arc<Replay>>, Path(_): Path<String>) -> Response {
    if replay.seen.lock().unwrap().over {
        return replay.http("/history/{prompt_id}");
    }
    Json(json!({})).into_response()
}

async fn replay_delete(State(replay): State<Arc<Replay>>, Json(body): Json<Value>) -> Response {
    replay.seen.lock().unwrap().deletes.push(body);
    axum::http::StatusCode::OK.into_response()
}

async fn replay_interrupt(State(replay): State<Arc<Replay>>, body: axum::body::Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = replay.fill(&json!("$prompt_id"));
    if body["prompt_id"] == id {
        replay.released.notify_one();
    }
    replay.seen.lock().unwrap().interrupts.push(body);
    axum::http::StatusCode::OK.into_response()
}

async fn replay_view(
    State(replay): State<Arc<Replay>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let line = replay.line("/view");
    let name = query.get("filename").cloned().unwrap_or_default();
    replay.seen.lock().unwrap().views.push(name);
    let png = encode_png(&flat(64, 64, 90));
    let kind = line["content_type"].as_str().unwrap().to_string();
    ([("content-type", kind)], png).into_response()
}

async fn replay_socket(
    State(replay): State<Arc<Replay>>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let client = query.get("clientId").cloned().unwrap_or_default();
    replay.seen.lock().unwrap().client = Some(client);
    let hello = replay.fill(
        &replay
            .lines
            .iter()
            .find(|l| l["kind"] == "ws_text")
            .unwrap()["message"],
    );
    let messages = replay.socket.subscribe();
    upgrade.on_upgrade(move |ws| replay_forward(ws, hello, messages))
}

async fn replay_forward(
    mut ws: WebSocket,
    hello: Value,
    mut messages: broadcast::Receiver<Message>,
) {
    if ws
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            message = messages.recv() => match message {
                Ok(message) => if ws.send(message).await.is_err() { return },
                Err(_) => return,
            },
            incoming = ws.recv() => if !matches!(incoming, Some(Ok(_))) { return },
        }
    }
}

fn config(url: &str, timeout: &str) -> BackendConfig {
    let workflow = format!(
        "{}/tests/fixtures/comfyui/txt2img.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_value(json!({
        "name": "comfy", "kind": "comfyui", "url": url, "timeout": timeout, "workflow": workflow,
    }))
    .unwrap()
}

fn imagine() -> Job {
    Job {
        operation: Operation::Imagine,
        prompt: "masterpiece best quality girl".into(),
        seed: 8566257,
        aspect: AspectRatio {
            width: 1,
            height: 1,
        },
        image_size: 64,
        inputs: Vec::new().into(),
        mask: None,
        references: Vec::<easel::images::RgbaImage>::new().into(),
        reservation: None,
        extras: Default::default(),
    }
}

/// Run the job, taking the percentage and the preview at each change; the result, the
/// percentages seen and the previews taken.
async fn run_watching(
    backend: &ComfyUi,
    progress: &Progress,
) -> (Result<Product, GenerateError>, Vec<i64>, Vec<Vec<u8>>) {
    let job = imagine();
    let run = backend.run(&job, progress);
    tokio::pin!(run);
    let (mut percents, mut previews) = (Vec::new(), Vec::new());
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            () = progress.changed() => {}
        }
        percents.push(progress.get());
        if let Some(PreviewImage::Encoded(bytes)) = progress.take_preview() {
            previews.push(bytes);
        }
    };
    (result, percents, previews)
}

#[tokio::test]
async fn a_recorded_comfyui_job_finishes_with_its_images_progress_and_previews() {
    let (replay, url) = Replay::start("txt2img-with-previews.jsonl", Interrupt::None).await;
    let backend = ComfyUi::new(&config(&url, "20s")).unwrap();
    let progress = Progress::default();
    let (result, percents, previews) = run_watching(&backend, &progress).await;
    let product = result.expect("the recorded job finishes");
    assert!(
        matches!(
            product,
            Product::Grid {
                width: 64,
                height: 64,
                ..
            }
        ),
        "{product:?}"
    );
    let seen = replay.seen.lock().unwrap();
    // The four files of the recorded history, fetched in order.
    let names: Vec<String> = (21..25).map(|n| format!("ComfyUI_{n:05}_.png")).collect();
    assert_eq!(seen.views, names);
    // `progress` 1/4 .. 4/4 moved the percentage through 30, 45, 60 and 75 (a change can be
    // passed over when two come together, so three of the four are asked for); the
    // `progress_state` messages around them, with their own value and max per node, did not
    // move it anywhere else.
    let steps: Vec<i64> = [30, 45, 60, 75]
        .into_iter()
        .filter(|p| percents.contains(p))
        .collect();
    assert!(steps.len() >= 3, "{percents:?}");
    assert!(
        percents
            .iter()
            .all(|p| [5, 15, 30, 45, 60, 75].contains(p) || *p >= 80),
        "{percents:?}"
    );
    assert!(progress.get() >= 95);
    // Previews came from the binary frames, each one as sent.
    assert!(!previews.is_empty(), "previews reach Progress");
    for preview in &previews {
        assert!(seen.previews.contains(preview), "only the frames' JPEGs");
    }
    assert!(seen.deletes.is_empty() && seen.interrupts.is_empty());
    // The graph went out under the socket's client id and the id easel proposed.
    let prompt = seen.prompt.as_ref().unwrap();
    assert_eq!(prompt["client_id"].as_str(), seen.client.as_deref());
    assert_eq!(prompt["prompt"]["5"]["inputs"]["batch_size"], 4);
}

/// Wait until the replay has sent the recorded seventh step and its preview, where the
/// recorded job was interrupted.
async fn at_step_seven(replay: &Replay) {
    let before = replay
        .messages()
        .iter()
        .position(|l| l["message"]["type"] == "execution_interrupted")
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while replay.seen.lock().unwrap().sent < before {
        assert!(Instant::now() < deadline, "the replay stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// easel took the job off as ComfyUI 0.3.64 takes it: deleted from the queue (a no-op for a
/// running job) and interrupted by its prompt id; the replay then sent `execution_interrupted`.
fn assert_taken_off(replay: &Replay) {
    let seen = replay.seen.lock().unwrap();
    let id = seen.prompt.as_ref().unwrap()["prompt_id"].clone();
    assert_eq!(seen.deletes, vec![json!({ "delete": [id] })]);
    assert_eq!(seen.interrupts, vec![json!({ "prompt_id": id })]);
}

async fn wait_over(replay: &Replay) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !replay.seen.lock().unwrap().over {
        assert!(
            Instant::now() < deadline,
            "execution_interrupted was not sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_canceled_job_is_interrupted_by_its_prompt_id_as_recorded() {
    let (replay, url) = Replay::start("interrupted.jsonl", Interrupt::ByEasel).await;
    let backend = ComfyUi::new(&config(&url, "20s")).unwrap();
    let progress = Progress::default();
    let job = imagine();
    let run = backend.run(&job, &progress);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => panic!("the job ended on its own: {result:?}"),
        () = at_step_seven(&replay) => {}
    }
    // 7 of 20 steps: 15 + 60 * 7 / 20.
    assert_eq!(progress.get(), 36);
    let started = Instant::now();
    progress.stop();
    let result = run.await;
    assert!(matches!(result, Err(GenerateError::Canceled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert_taken_off(&replay);
    wait_over(&replay).await;
}

#[tokio::test]
async fn a_job_past_its_timeout_is_interrupted_by_its_prompt_id_as_recorded() {
    let (replay, url) = Replay::start("interrupted.jsonl", Interrupt::ByEasel).await;
    let backend = ComfyUi::new(&config(&url, "2s")).unwrap();
    let started = Instant::now();
    let result = backend.run(&imagine(), &Progress::default()).await;
    let Err(GenerateError::Transient { message, .. }) = &result else {
        panic!("a timeout is transient: {result:?}");
    };
    assert!(message.contains("timed out after 2s"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(8), "no hang");
    assert_taken_off(&replay);
    wait_over(&replay).await;
}

#[tokio::test]
async fn a_job_interrupted_on_comfyui_itself_ends_at_once_saying_so() {
    // The recorded interrupt, as when someone stops the job from ComfyUI's own page: the
    // history answers `{}` right after, and the queue no longer holds the job.
    let (replay, url) = Replay::start("interrupted.jsonl", Interrupt::Elsewhere).await;
    let backend = ComfyUi::new(&config(&url, "20s")).unwrap();
    let started = Instant::now();
    let result = backend.run(&imagine(), &Progress::default()).await;
    let Err(GenerateError::Transient { message, .. }) = &result else {
        panic!("someone else's interrupt is transient: {result:?}");
    };
    assert!(
        message.contains("interrupted on the backend at node 3 (KSampler)"),
        "{message}"
    );
    // Not "lost" after three looks a poll apart: it ends on the first look after the event.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let seen = replay.seen.lock().unwrap();
    assert!(seen.interrupts.is_empty(), "nothing left to interrupt");
}

// --- The mock against the recording -------------------------------------------------------

/// A message with what differs from run to run made even: ids, timestamps, file counters.
fn even(value: &Value, id: &str, client: &str) -> Value {
    let text = value
        .to_string()
        .replace(id, "$prompt_id")
        .replace(client, "$client_id");
    let mut value: Value = serde_json::from_str(&text).unwrap();
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if key == "timestamp" {
                        *v = json!(0);
                    } else if key == "filename" {
                        *v = json!("ComfyUI_#####_.png");
                    } else {
                        walk(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

/// The recorded WebSocket lines as the comparison sees them: text messages evened, binary
/// frames by their event and image type.
fn recorded_messages(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["kind"] != "http")
        .map(|l| match l["kind"].as_str() {
            Some("ws_text") => even(&l["message"], "$prompt_id", "$client_id"),
            _ => json!({"binary": [l["event_type"], l["image_type"], "ffd8ff"]}),
        })
        .collect()
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next message on the socket, as `recorded_messages` writes them.
async fn next_message(socket: &mut Socket, id: &str, client: &str) -> Value {
    let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .expect("a message within 10 s")
        .unwrap()
        .unwrap();
    match message {
        tungstenite::Message::Text(text) => even(&serde_json::from_str(&text).unwrap(), id, client),
        tungstenite::Message::Binary(frame) => {
            let word = |at: usize| u32::from_be_bytes(frame[at..at + 4].try_into().unwrap());
            let magic = if frame[8..11] == [0xff, 0xd8, 0xff] {
                "ffd8ff"
            } else {
                "?"
            };
            json!({"binary": [word(0), word(4), magic]})
        }
        other => panic!("{other:?}"),
    }
}

/// Queue `graph` on the mock as the recording's client did (socket first) and check its
/// answers and every message against `lines`'; with `interrupt_after`, interrupt the job by its
/// prompt id once that many steps are in, and check up to `execution_interrupted`. The socket,
/// the prompt id and the client id.
async fn run_like(
    url: &str,
    graph: &Value,
    lines: &[Value],
    interrupt_after: Option<usize>,
) -> (Socket, String, String) {
    let client = uuid::Uuid::new_v4().simple().to_string();
    let ws_url = format!("{}/ws?clientId={client}", url.replacen("http", "ws", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url).await.unwrap();
    let http = reqwest::Client::new();
    let answer: Value = http
        .post(format!("{url}/prompt"))
        .json(&json!({"prompt": graph, "client_id": client}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = answer["prompt_id"].as_str().unwrap().to_string();
    let recorded = |path: &str| {
        let line = lines.iter().find(|l| l["path"] == path).unwrap();
        even(&line["body"], "$prompt_id", "$client_id")
    };
    assert_eq!(even(&answer, &id, &client), recorded("/prompt"));

    let mut progress = 0;
    for (k, expected) in recorded_messages(lines).iter().enumerate() {
        let got = next_message(&mut socket, &id, &client).await;
        assert_eq!(got, *expected, "message {k}");
        if got["type"] == "execution_start" {
            // Running now: the queue lists it as recorded, with the graph as ComfyUI keeps it.
            let queue: Value = http
                .get(format!("{url}/queue"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let mut expected_queue = recorded("/queue");
            expected_queue["queue_running"][0][2] = graph_as_kept(graph);
            assert_eq!(even(&queue, &id, &client), expected_queue);
        }
        if got["type"] == "progress" {
            progress += 1;
            if Some(progress) == interrupt_after {
                // The recording's client interrupted once the step's preview was in.
                let preview = next_message(&mut socket, &id, &client).await;
                assert_eq!(preview, recorded_messages(lines)[k + 1]);
                http.post(format!("{url}/interrupt"))
                    .json(&json!({ "prompt_id": id }))
                    .send()
                    .await
                    .unwrap();
                let rest = &recorded_messages(lines)[k + 2..];
                for (j, expected) in rest.iter().enumerate() {
                    let got = next_message(&mut socket, &id, &client).await;
                    assert_eq!(got, *expected, "message {} after the interrupt", j);
                }
                break;
            }
        }
    }
    (socket, id, client)
}

/// The graph as ComfyUI keeps it: the sampler's FLOAT inputs as floats.
fn graph_as_kept(graph: &Value) -> Value {
    let mut graph = graph.clone();
    for input in ["cfg", "denoise"] {
        let f = graph["3"]["inputs"][input].as_f64().unwrap();
        graph["3"]["inputs"][input] = json!(f);
    }
    graph
}

#[tokio::test]
async fn the_mock_says_what_comfyui_0_3_64_said_message_for_message() {
    // Slow enough steps (200 ms of 20) that the interrupt sent after step 7 lands before step 8.
    let mock = Arc::new(ComfyMock {
        delay: Duration::from_secs(4),
        settle: Duration::from_millis(300),
        ..ComfyMock::default()
    });
    let url = mock.start().await;
    let http = reqwest::Client::new();
    let stats: Value = http
        .get(format!("{url}/system_stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lines = transcript("txt2img-with-previews.jsonl");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let recorded_stats = &lines[0]["body"];
    assert_eq!(keys(&stats["system"]), keys(&recorded_stats["system"]));
    assert_eq!(
        keys(&stats["devices"][0]),
        keys(&recorded_stats["devices"][0])
    );

    // The recorded job: 4 steps, 64 x 64, a batch of 2 (the transcript's 4 files were made
    // from the recording's 2, so the graph asks for 4).
    let path = format!(
        "{}/tests/fixtures/comfyui/0.3.64/graph.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut graph: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    graph["5"]["inputs"]["batch_size"] = json!(4);
    let (_socket, id, client) = run_like(&url, &graph, &lines, None).await;
    let history: Value = http
        .get(format!("{url}/history/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let recorded = lines
        .iter()
        .find(|l| l["path"] == "/history/{prompt_id}")
        .unwrap();
    let mut expected = even(&recorded["body"], "$prompt_id", "$client_id");
    expected["$prompt_id"]["prompt"][2] = graph_as_kept(&graph);
    assert_eq!(even(&history, &id, &client), expected);
    let view = http
        .get(format!("{url}/view"))
        .query(&history[&id]["outputs"]["9"]["images"][0])
        .send()
        .await
        .unwrap();
    assert_eq!(view.headers()["content-type"], "image/png");
    assert_eq!(&view.bytes().await.unwrap()[..8], b"\x89PNG\r\n\x1a\n");

    // The recorded interrupt: the same graph at 20 steps, seed 42, a batch of 1, interrupted
    // after step 7. The checkpoint and both prompts are cached from the first job.
    let lines = transcript("interrupted.jsonl");
    graph["3"]["inputs"]["steps"] = json!(20);
    graph["3"]["inputs"]["seed"] = json!(42);
    graph["5"]["inputs"]["batch_size"] = json!(1);
    let (mut socket, id, client) = run_like(&url, &graph, &lines, Some(7)).await;
    // Right after `execution_interrupted`, as recorded, the history has nothing yet...
    let history: Value = http
        .get(format!("{url}/history/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(history, json!({}));
    // ... and then, as ComfyUI's source writes it (task_done, then `status` and `executing`
    // with no node to the client), an entry that failed with the interrupt among its messages.
    let status = next_message(&mut socket, &id, &client).await;
    assert_eq!(
        status,
        json!({"type": "status", "data": {"status": {"exec_info": {"queue_remaining": 0}}}})
    );
    let done = next_message(&mut socket, &id, &client).await;
    assert_eq!(
        done,
        json!({"type": "executing", "data": {"node": null, "prompt_id": "$prompt_id"}})
    );
    let history: Value = http
        .get(format!("{url}/history/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let status = &history[&id]["status"];
    assert_eq!(status["status_str"], "error");
    assert_eq!(status["completed"], false);
    let kinds: Vec<&str> = status["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[0].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "execution_start",
            "execution_cached",
            "execution_interrupted"
        ]
    );
    assert_eq!(history[&id]["outputs"], json!({}));
    // An unknown id's history is `{}`; a graph without an output node is refused whole.
    let unknown: Value = http
        .get(format!("{url}/history/nope"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(unknown, json!({}));
    let mut no_outputs = graph.clone();
    no_outputs.as_object_mut().unwrap().remove("9");
    let refused = http
        .post(format!("{url}/prompt"))
        .json(&json!({ "prompt": no_outputs }))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "prompt_no_outputs");
    assert_eq!(body["node_errors"], json!({}));
    let _ = socket.close(None).await;
}
