//! OpenAI's images API as easel uses it: `GET /v1/models`, `POST /v1/images/generations` (JSON),
//! `POST /v1/images/edits` and `POST /v1/images/variations` (multipart), with a Bearer key. It refuses what the real API
//! refuses (a wrong key: 401 quoting the key it got; a bad size, `n` or prompt: 400) and answers
//! `b64_json`, or `url`s to images it serves itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Multipart, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::{b64, common_answer, dropped, flat, parse_size, png_b64, Fault, Script};
use easel::images::{decode_png, encode_png, RgbaImage};

/// One images request, as the mock received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    /// JSON fields, or the text fields of a multipart form, as strings.
    pub fields: BTreeMap<String, String>,
    /// The JSON body as sent (generations only).
    pub json: Option<Value>,
    /// The files of a multipart form, decoded.
    pub files: BTreeMap<String, RgbaImage>,
    /// The file name each file of a multipart form was sent under.
    pub file_names: BTreeMap<String, String>,
    pub at: Instant,
}

impl Seen {
    /// A JSON field or a text field of the form, as a string.
    pub fn text(&self, name: &str) -> Option<String> {
        self.fields.get(name).cloned()
    }

    /// Whether the request had a field or a file of this name.
    pub fn has(&self, name: &str) -> bool {
        self.fields.contains_key(name) || self.files.contains_key(name)
    }

    /// The PNG file `name`, checked to have been sent as `{name}.png`.
    pub fn png(&self, name: &str) -> RgbaImage {
        assert_eq!(
            self.file_names.get(name).map(String::as_str),
            Some(&format!("{name}.png")[..])
        );
        self.files.get(name).expect("a file part").clone()
    }
}

#[derive(Default)]
pub struct OpenAiMock {
    /// The key it accepts; `None` accepts requests without one.
    pub key: Option<String>,
    pub script: Script,
    /// Answer `url`s (to `/v1/files/{n}`) instead of `b64_json`.
    pub urls: bool,
    /// How long each job takes.
    pub delay: Duration,
    /// The red of its images (easel's output shows which backend made it).
    pub shade: u8,
    pub seen: Mutex<Vec<Seen>>,
    /// Requests to the image files it served by URL, with their Authorization header.
    pub file_fetches: Mutex<Vec<Option<String>>>,
    pub files: Mutex<Vec<Vec<u8>>>,
    pub jobs: AtomicUsize,
    pub running: AtomicUsize,
    pub most: AtomicUsize,
    /// Once set, every connection, open or new, is dropped.
    pub dead: AtomicBool,
    pub died: Notify,
    /// The size of the images it answers with; the size asked for when `None`.
    pub made: Mutex<Option<(u32, u32)>>,
    /// `GET /v1/models` answers this status (with an error body) while set.
    pub models_status: Mutex<Option<u16>>,
    /// The Authorization header of each `GET /v1/models`.
    pub models_seen: Mutex<Vec<Option<String>>>,
    /// A hanging job's handler was dropped: easel closed its connection.
    pub hang_dropped: AtomicBool,
}

/// Sets its flag when dropped (with the handler future holding it).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl OpenAiMock {
    /// Start it; its API base (`.../v1`, as `url` in the backend's configuration).
    pub async fn start(self: &Arc<Self>) -> String {
        let app = Router::new()
            .route("/v1/models", get(models))
            .route("/v1/images/generations", post(generations))
            .route("/v1/images/edits", post(edits))
            .route("/v1/images/variations", post(variations))
            .route("/v1/files/{n}", get(file))
            .with_state(self.clone());
        format!("{}/v1", super::serve(app).await)
    }

    /// Die: jobs in flight and every later request get their connection dropped.
    pub fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        self.died.notify_waiters();
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests seen at `path` (as `/images/edits`), taken out of the record.
    pub fn seen_at(&self, path: &str) -> Vec<Seen> {
        let mut seen = self.seen.lock().unwrap();
        let (at, rest): (Vec<Seen>, Vec<Seen>) = seen.drain(..).partition(|s| s.path == path);
        *seen = rest;
        at
    }

    /// A 401 the way OpenAI answers one, quoting the key it got.
    fn check_key(&self, headers: &HeaderMap) -> Result<Option<String>, Response> {
        let got = headers
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("").to_string());
        match &self.key {
            None => Ok(got),
            Some(key) if got.as_deref() == Some(&format!("Bearer {key}")) => Ok(got),
            Some(_) => Err((
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": {
                    "message": format!("Incorrect API key provided: {}.", got.unwrap_or_default()),
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }})),
            )
                .into_response()),
        }
    }

    /// Run one job: its time, counted, unless the mock dies meanwhile (`false`).
    async fn work(&self) -> bool {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let died = self.died.notified();
        let finished = tokio::select! {
            _ = tokio::time::sleep(self.delay) => !self.dead.load(Ordering::SeqCst),
            _ = died => false,
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        if finished {
            self.jobs.fetch_add(1, Ordering::SeqCst);
        }
        finished
    }

    /// The images answer: `n` images of `w` x `h`, as the script says.
    async fn answer(&self, fault: Fault, n: usize, size: (u32, u32), edit: bool) -> Response {
        let (w, h) = self.made.lock().unwrap().unwrap_or(size);
        let _dropped = (fault == Fault::Hang).then(|| SetOnDrop(&self.hang_dropped));
        if let Some(response) = common_answer(&fault).await {
            return response;
        }
        if let Fault::Refuse(code) = fault {
            return (
                StatusCode::BAD_REQUEST,
                Json(json!({"error": {
                    "message": "Your request was rejected as a result of our safety system.",
                    "type": "invalid_request_error",
                    "code": code,
                }})),
            )
                .into_response();
        }
        if !self.work().await {
            return dropped();
        }
        let count = match fault {
            Fault::Count(k) => k,
            Fault::MixedSizes => 4,
            _ => n,
        };
        let shade = self.shade + if edit { 50 } else { 0 };
        let data: Vec<Value> = (0..count)
            .map(|k| {
                let wider = if fault == Fault::MixedSizes && k == 1 {
                    2
                } else {
                    0
                };
                let png = encode_png(&flat(w + wider, h, shade + k as u8));
                match fault {
                    Fault::BadBase64 => json!({"b64_json": "%%% not base64 %%%"}),
                    Fault::NotImage => json!({"b64_json": b64(b"GIF89a, or so it says")}),
                    _ if self.urls => {
                        let mut files = self.files.lock().unwrap();
                        files.push(png);
                        json!({"url": format!("/v1/files/{}", files.len() - 1)})
                    }
                    _ => json!({"b64_json": b64(&png)}),
                }
            })
            .collect();
        let answer = json!({"created": 1_700_000_000, "data": data});
        if fault == Fault::Escaped {
            // Outside its strings the answer has no `/`.
            let escaped = answer.to_string().replace('/', "\\/");
            return ([(header::CONTENT_TYPE, "application/json")], escaped).into_response();
        }
        Json(answer).into_response()
    }
}

fn invalid(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": {"message": message, "type": "invalid_request_error"}})),
    )
        .into_response()
}

/// The checks the real API makes on `n` and `size`, by model.
fn check_n_and_size(model: Option<&str>, n: usize, size: &str) -> Result<(u32, u32), String> {
    let (w, h) = parse_size(size).ok_or_else(|| format!("size {size:?} is not WxH"))?;
    match model {
        Some("dall-e-3") => {
            if n != 1 {
                return Err(format!("dall-e-3 takes n = 1 only, not {n}"));
            }
            if !["1024x1024", "1792x1024", "1024x1792"].contains(&size) {
                return Err(format!("dall-e-3 does not make {size}"));
            }
        }
        Some(m) if m.starts_with("gpt-image") => {
            if !["1024x1024", "1536x1024", "1024x1536"].contains(&size) {
                return Err(format!("{m} does not make {size}"));
            }
        }
        _ => {
            if w % 64 != 0 || h % 64 != 0 {
                return Err(format!("size {size} is not in multiples of 64"));
            }
        }
    }
    if !(1..=10).contains(&n) {
        return Err(format!("n = {n} is not between 1 and 10"));
    }
    Ok((w, h))
}

async fn models(State(mock): State<Arc<OpenAiMock>>, headers: HeaderMap) -> Response {
    if mock.dead.load(Ordering::SeqCst) {
        return dropped();
    }
    let authorization = match mock.check_key(&headers) {
        Ok(a) => a,
        Err(refused) => return refused,
    };
    mock.models_seen.lock().unwrap().push(authorization);
    let status = *mock.models_status.lock().unwrap();
    if let Some(code) = status {
        return super::common_answer(&Fault::status(code)).await.unwrap();
    }
    Json(json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}))
        .into_response()
}

async fn generations(
    State(mock): State<Arc<OpenAiMock>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if mock.dead.load(Ordering::SeqCst) {
        return dropped();
    }
    let authorization = match mock.check_key(&headers) {
        Ok(a) => a,
        Err(refused) => return refused,
    };
    let fields: BTreeMap<String, String> = body
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
        .collect();
    mock.seen.lock().unwrap().push(Seen {
        path: "/images/generations".into(),
        authorization,
        fields: fields.clone(),
        json: Some(body.clone()),
        files: BTreeMap::new(),
        file_names: BTreeMap::new(),
        at: Instant::now(),
    });
    if body["prompt"].as_str().is_none_or(|p| p.trim().is_empty()) {
        return invalid("prompt is required".into());
    }
    let n = body["n"].as_u64().unwrap_or(1) as usize;
    let size = body["size"].as_str().unwrap_or("1024x1024");
    let size = match check_n_and_size(body["model"].as_str(), n, size) {
        Ok(size) => size,
        Err(e) => return invalid(e),
    };
    if let Some(format) = body.get("response_format") {
        if format != "b64_json" && format != "url" {
            return invalid(format!("response_format {format} is unknown"));
        }
    }
    let fault = mock.script.next();
    mock.answer(fault, n, size, false).await
}

async fn edits(
    State(mock): State<Arc<OpenAiMock>>,
    headers: HeaderMap,
    form: Multipart,
) -> Response {
    multipart(mock, headers, form, "/images/edits").await
}

/// `POST /v1/images/variations` (dall-e-2): a square image, no prompt and no mask.
async fn variations(
    State(mock): State<Arc<OpenAiMock>>,
    headers: HeaderMap,
    form: Multipart,
) -> Response {
    multipart(mock, headers, form, "/images/variations").await
}

/// The edits and the variations endpoints: a multipart form with an `image`.
async fn multipart(
    mock: Arc<OpenAiMock>,
    headers: HeaderMap,
    mut form: Multipart,
    path: &str,
) -> Response {
    if mock.dead.load(Ordering::SeqCst) {
        return dropped();
    }
    let authorization = match mock.check_key(&headers) {
        Ok(a) => a,
        Err(refused) => return refused,
    };
    let mut fields = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut file_names = BTreeMap::new();
    while let Some(part) = form.next_field().await.unwrap() {
        let name = part.name().unwrap_or("").to_string();
        if let Some(file_name) = part.file_name() {
            file_names.insert(name.clone(), file_name.to_string());
            let bytes = part.bytes().await.unwrap();
            match decode_png(&bytes) {
                Ok(img) => {
                    files.insert(name, img);
                }
                Err(e) => return invalid(format!("{name} is not a PNG: {e}")),
            }
        } else {
            fields.insert(name, part.text().await.unwrap());
        }
    }
    mock.seen.lock().unwrap().push(Seen {
        path: path.into(),
        authorization,
        fields: fields.clone(),
        json: None,
        files: files.clone(),
        file_names,
        at: Instant::now(),
    });
    let n: usize = fields.get("n").and_then(|n| n.parse().ok()).unwrap_or(1);
    let size = fields.get("size").map_or("1024x1024", String::as_str);
    let (w, h) = match check_n_and_size(fields.get("model").map(String::as_str), n, size) {
        Ok(size) => size,
        Err(e) => return invalid(e),
    };
    let Some(image) = files.get("image") else {
        return invalid("image is required".into());
    };
    if path == "/images/variations" {
        if fields.contains_key("prompt") || files.contains_key("mask") {
            return invalid("variations take neither a prompt nor a mask".into());
        }
        if image.width != image.height {
            return invalid("the image to vary must be square".into());
        }
    }
    if (image.width, image.height) != (w, h) {
        return invalid(format!(
            "image is {}x{}, size says {w}x{h}",
            image.width, image.height
        ));
    }
    if let Some(mask) = files.get("mask") {
        if (mask.width, mask.height) != (image.width, image.height) {
            return invalid("mask and image differ in size".into());
        }
        if !mask.data.chunks_exact(4).any(|px| px[3] == 0) {
            return invalid("the mask has no fully transparent pixel to edit".into());
        }
    }
    let fault = mock.script.next();
    mock.answer(fault, n, (w, h), true).await
}

async fn file(
    State(mock): State<Arc<OpenAiMock>>,
    headers: HeaderMap,
    Path(n): Path<usize>,
) -> Response {
    mock.file_fetches.lock().unwrap().push(
        headers
            .get("authorization")
            .map(|v| v.to_str().unwrap_or("").to_string()),
    );
    match mock.files.lock().unwrap().get(n) {
        Some(png) => ([("content-type", "image/png")], png.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// An image of a seen request, as base64 PNG (for comparing with what easel stored).
pub fn file_b64(seen: &Seen, name: &str) -> String {
    png_b64(&seen.files[name])
}
