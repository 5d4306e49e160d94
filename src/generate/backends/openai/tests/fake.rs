//! A fake of OpenAI's images API for the unit tests: it records each request (its JSON, or its
//! multipart form read by hand, so that the exact fields easel sends are checked) and answers
//! as its [`Mode`] says.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::response::{IntoResponse, Response};
use axum::Router;
use base64::Engine as _;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::generate::raster::{decode_png, encode_png, RgbaImage};

/// The key the tests give the adapter; a server may echo it.
pub(super) const KEY: &str = "sk-secret-123";

/// How the mock server answers the images endpoints.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mode {
    Ok,
    Url,
    Status(u16),
    RateLimited,
    Refuse(&'static str),
    KeyEcho,
    BadJson,
    BadBase64,
    NotImage,
    Count(usize),
    MixedSizes,
    Hang,
}

pub(super) struct Part {
    pub(super) name: String,
    pub(super) filename: Option<String>,
    pub(super) data: Vec<u8>,
}

pub(super) struct Seen {
    pub(super) path: String,
    pub(super) auth: Option<String>,
    pub(super) json: Option<Value>,
    pub(super) form: Vec<Part>,
}

impl Seen {
    pub(super) fn part(&self, name: &str) -> Option<&Part> {
        self.form.iter().find(|p| p.name == name)
    }
    pub(super) fn text(&self, name: &str) -> Option<String> {
        self.part(name)
            .map(|p| String::from_utf8_lossy(&p.data).into_owned())
    }
    pub(super) fn png(&self, name: &str) -> RgbaImage {
        let part = self.part(name).expect("file part");
        assert_eq!(part.filename.as_deref(), Some(&format!("{name}.png")[..]));
        decode_png(&part.data).expect("a PNG file")
    }
}

pub(super) struct Mock {
    pub(super) mode: Mutex<Mode>,
    /// The size of the images it makes; the size asked for when `None`.
    pub(super) made: Mutex<Option<(u32, u32)>>,
    pub(super) seen: Mutex<Vec<Seen>>,
    pub(super) base: Mutex<String>,
    /// A hanging request's handler was dropped: its connection was closed.
    pub(super) dropped: AtomicBool,
}

impl Mock {
    pub(super) fn seen_at(&self, path: &str) -> Vec<Seen> {
        let mut seen = self.seen.lock().unwrap();
        let (at, rest): (Vec<Seen>, Vec<Seen>) = seen.drain(..).partition(|s| s.path == path);
        *seen = rest;
        at
    }
}

pub(super) struct DropFlag(Arc<Mock>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A small multipart/form-data reader, enough for what the adapter sends.
pub(super) fn parse_form(content_type: &str, body: &[u8]) -> Vec<Part> {
    let boundary = content_type.split("boundary=").nth(1).expect("a boundary");
    let delimiter = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(at) = find(rest, &delimiter) {
        rest = &rest[at + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let end = find(rest, &delimiter).expect("a closing delimiter");
        let segment = &rest[2..end - 2]; // the CRLF after the delimiter and before the next
        let split = find(segment, b"\r\n\r\n").expect("part headers");
        let headers = String::from_utf8_lossy(&segment[..split]).into_owned();
        let attr = |key: &str| {
            headers
                .split(';')
                .map(str::trim)
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")[..]))
                .map(|v| v.split('"').next().unwrap_or("").to_string())
        };
        parts.push(Part {
            name: attr("name").expect("a name"),
            filename: attr("filename"),
            data: segment[split + 4..].to_vec(),
        });
    }
    parts
}

pub(super) fn png_of(w: u32, h: u32) -> Vec<u8> {
    let mut image = RgbaImage::new(w, h);
    for (i, px) in image.data.chunks_exact_mut(4).enumerate() {
        px[0] = (i % 251) as u8;
    }
    encode_png(&image)
}

pub(super) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(super) fn json_response(status: u16, body: Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(super) async fn handle(State(mock): State<Arc<Mock>>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let auth = request
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("").to_string());
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    let body = axum::body::to_bytes(request.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let (json, form) = if content_type.starts_with("multipart/form-data") {
        (None, parse_form(&content_type, &body))
    } else {
        (serde_json::from_slice::<Value>(&body).ok(), Vec::new())
    };
    let seen = Seen {
        path: path.clone(),
        auth,
        json,
        form,
    };
    let (n, size) = match (&seen.json, seen.text("n")) {
        (Some(j), _) => (
            j["n"].as_u64().unwrap_or(1) as usize,
            j["size"].as_str().unwrap_or("").to_string(),
        ),
        (None, n) => (
            n.and_then(|n| n.parse().ok()).unwrap_or(1),
            seen.text("size").unwrap_or_default(),
        ),
    };
    mock.seen.lock().unwrap().push(seen);
    let mode = *mock.mode.lock().unwrap();
    let made = mock.made.lock().unwrap().unwrap_or_else(|| {
        let mut wh = size.split('x').map(|v| v.parse::<u32>().unwrap_or(8));
        (wh.next().unwrap_or(8), wh.next().unwrap_or(8))
    });
    if path == "/v1/models" {
        return match mode {
            Mode::Status(code) => json_response(code, json!({})),
            _ => json_response(200, json!({ "object": "list", "data": [] })),
        };
    }
    if path.starts_with("/files/") {
        return ([(CONTENT_TYPE, "image/png")], png_of(made.0, made.1)).into_response();
    }
    let images = |count: usize| {
        let png = b64(&png_of(made.0, made.1));
        let data: Vec<Value> = (0..count).map(|_| json!({ "b64_json": png })).collect();
        json_response(200, json!({ "created": 1, "data": data }))
    };
    match mode {
        Mode::Ok => images(n),
        Mode::Count(k) => images(k),
        Mode::Url => {
            let base = mock.base.lock().unwrap().clone();
            let data: Vec<Value> = (0..n)
                .map(|i| json!({ "url": format!("{base}/files/{i}.png") }))
                .collect();
            json_response(200, json!({ "data": data }))
        }
        Mode::Status(code) => json_response(
            code,
            json!({ "error": { "message": "boom", "type": "server_error" } }),
        ),
        Mode::RateLimited => (
            StatusCode::TOO_MANY_REQUESTS,
            [(RETRY_AFTER, "7")],
            r#"{"error":{"message":"slow down","type":"requests"}}"#,
        )
            .into_response(),
        Mode::Refuse(code) => json_response(
            400,
            json!({ "error": {
                "message": "Your request was rejected by the safety system.",
                "type": "image_generation_user_error",
                "code": code,
            } }),
        ),
        Mode::KeyEcho => json_response(
            401,
            json!({ "error": {
                "message": format!("Incorrect API key provided: {KEY}."),
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            } }),
        ),
        Mode::BadJson => (
            [(CONTENT_TYPE, "application/json")],
            r#"{"data": [{"b64_json": "#,
        )
            .into_response(),
        Mode::BadBase64 => json_response(
            200,
            json!({ "data": vec![json!({ "b64_json": "%%%" }); n] }),
        ),
        Mode::NotImage => json_response(
            200,
            json!({ "data": vec![json!({ "b64_json": b64(b"hello") }); n] }),
        ),
        Mode::MixedSizes => {
            let a = b64(&png_of(made.0, made.1));
            let b = b64(&png_of(made.0 + 2, made.1));
            json_response(
                200,
                json!({ "data": [{ "b64_json": a }, { "b64_json": b }, { "b64_json": a }, { "b64_json": a }] }),
            )
        }
        Mode::Hang => {
            let _flag = DropFlag(mock.clone());
            tokio::time::sleep(Duration::from_secs(60)).await;
            images(n)
        }
    }
}

pub(super) async fn serve(mode: Mode) -> (Arc<Mock>, String) {
    let mock = Arc::new(Mock {
        mode: Mutex::new(mode),
        made: Mutex::new(None),
        seen: Mutex::new(Vec::new()),
        base: Mutex::new(String::new()),
        dropped: AtomicBool::new(false),
    });
    let app = Router::new().fallback(handle).with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let base = format!("http://{addr}");
    *mock.base.lock().unwrap() = base.clone();
    (mock, format!("{base}/v1"))
}
