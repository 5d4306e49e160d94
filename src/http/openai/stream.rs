//! `stream: true`: the call's answer as Server-Sent Events in OpenAI's shape. While the first
//! task runs, each new preview it stores (the same previews the event streams and the dashboard
//! show) is sent as a `{prefix}.partial_image` event, up to `partial_images` of them; once every
//! task has ended, one `{prefix}.completed` event per image; a failure is an `error` event. The
//! events come from the store's task events, as `GET /api/v1/tasks/{id}/events` does: nothing
//! polls, and no database connection is held between reads. A client that goes away ends the
//! stream, not its tasks. Each stream counts against the account's and the node's stream limits.
//! Without `stream`, the call's answer is `run::run`'s; [`submit_and_answer`] takes either way.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use uuid::Uuid;

use super::auth::OpenAiCaller;
use super::error::OpenAiError;
use super::fields::Common;
use super::run::{self, Shape, Who};
use crate::auth::PresentedKey;
use crate::domain::OpKind;
use crate::http::api::events::sse_of;
use crate::images::convert::{self, Format};
use crate::store::{Happened, Heard};
use crate::tasks::events::{open_slot, StreamSlot};
use crate::tasks::Tasks;

/// What a stream needs after its handler has returned.
pub struct Streamed {
    pub tasks: Arc<Tasks>,
    pub key: PresentedKey,
    pub account_id: String,
    pub ids: Vec<Uuid>,
    pub shape: Shape,
    pub partial_images: u32,
    /// `image_generation` or `image_edit`.
    pub prefix: &'static str,
    pub until: Instant,
    pub slot: StreamSlot,
}

/// Submit `bodies` as tasks of `kind` and answer their images, or stream them (events named
/// `{prefix}.partial_image` and `{prefix}.completed`).
pub async fn submit_and_answer(
    tasks: &Arc<Tasks>,
    caller: OpenAiCaller,
    common: Common,
    kind: OpKind,
    bodies: Vec<Map<String, Value>>,
    until: Instant,
    prefix: &'static str,
) -> Result<Response, OpenAiError> {
    let who = Who {
        key: &caller.key,
        account_id: &caller.account.id,
    };
    if common.stream {
        // The stream's place first: a refused stream stores no task.
        let slot = open_slot(tasks, &caller.account.id)?;
        let ids = run::submit_all(tasks, &who, kind, bodies).await?;
        return Ok(respond(Streamed {
            tasks: tasks.clone(),
            key: caller.key,
            account_id: caller.account.id,
            ids,
            shape: common.shape,
            partial_images: common.partial_images,
            prefix,
            until,
            slot,
        }));
    }
    let answer = run::run(tasks, &who, kind, bodies, &common.shape, until).await?;
    Ok(Json(answer).into_response())
}

/// The stream's answer; its events are made by a task of their own, which stops when the client
/// has gone (its channel closed) or the last event is sent.
pub fn respond(streamed: Streamed) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(4);
    tokio::spawn(produce(streamed, tx));
    let events = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    sse_of(events)
}

fn event(kind: String, data: Value) -> Event {
    Event::default().event(kind).data(data.to_string())
}

async fn produce(s: Streamed, tx: mpsc::Sender<Event>) {
    let _slot = &s.slot;
    if s.partial_images > 0 {
        if let Some(first) = s.ids.first() {
            if !partials(&s, first, &tx).await {
                return;
            }
        }
    }
    let gathered = run::gather(&s.tasks, &s.key, &s.ids, s.shape.n, s.until).await;
    let (keys, (w, h)) = match gathered {
        Ok(gathered) => gathered,
        Err(e) => {
            let _ = tx.send(failure(e).await).await;
            return;
        }
    };
    for key in keys {
        let bytes = match run::encoded(&s.tasks, &key, &s.shape).await {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = tx.send(failure(e).await).await;
                return;
            }
        };
        let kind = format!("{}.completed", s.prefix);
        let mut data = image_data(&s, &kind, &bytes, (w, h), None);
        let usage = json!({
            "input_tokens": 0,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
            "output_tokens": 0,
            "total_tokens": 0,
        });
        data.insert("usage".into(), usage);
        if tx.send(event(kind, Value::Object(data))).await.is_err() {
            return;
        }
    }
}

/// An `error` event, which the `openai` SDKs raise as an `APIError`.
async fn failure(e: OpenAiError) -> Event {
    let response = axum::response::IntoResponse::into_response(e);
    let status = response.status().as_u16();
    // The body is the error in OpenAI's shape, made by the one place that makes it.
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let mut data: Value = serde_json::from_slice(&body).unwrap_or_else(|_| json!({"error": {}}));
    data["type"] = json!("error");
    data["error"]["status"] = json!(status);
    event("error".into(), data)
}

/// Send the previews of the task `id` as partial images until it ends, the deadline passes, or
/// `partial_images` were sent. False when the client has gone.
async fn partials(s: &Streamed, id: &Uuid, tx: &mpsc::Sender<Event>) -> bool {
    let Ok(task) = s.tasks.of_key(&s.key, *id).await else {
        return true;
    };
    let mut listener = s
        .tasks
        .store
        .wakeups()
        .events
        .listen_task(task.seq, Some(&s.account_id));
    let mut sent = 0u32;
    let mut last: Option<String> = None;
    // Read again now that it is listened to: a preview stored from here on is heard.
    let mut preview = match s.tasks.of_key(&s.key, *id).await {
        Ok(task) if task.has_ended() => return true,
        Ok(task) => task.preview_key,
        Err(_) => return true,
    };
    loop {
        if let Some(key) = preview.take().filter(|k| last.as_ref() != Some(k)) {
            last = Some(key.clone());
            if let Some(event) = partial(s, &key, sent).await {
                if tx.send(event).await.is_err() {
                    return false;
                }
                sent += 1;
                if sent >= s.partial_images {
                    return true;
                }
            }
        }
        let heard = tokio::select! {
            heard = listener.next() => heard,
            _ = tokio::time::sleep_until(s.until) => return true,
            _ = tx.closed() => return false,
            _ = s.tasks.shutdown.cancelled() => return true,
        };
        match heard {
            Heard::Event(e) if e.ended() => return true,
            Heard::Event(e) => {
                if let Happened::Progress { preview_key, .. } = &e.what {
                    preview.clone_from(preview_key);
                }
            }
            Heard::NewTasks { .. } => {}
            Heard::Resync => match s.tasks.of_key(&s.key, *id).await {
                Ok(task) if task.has_ended() => return true,
                Ok(task) => preview = task.preview_key,
                Err(_) => return true,
            },
        }
    }
}

/// The partial image event of the preview at `key`, the `index`th; None when it cannot be read
/// (a preview replaced in between: the next one comes).
async fn partial(s: &Streamed, key: &str, index: u32) -> Option<Event> {
    let bytes = s.tasks.blobs.get(key).await.ok()??;
    let (format, quality) = (s.shape.output_format, s.shape.compression.max(1));
    let converted = tokio::task::spawn_blocking(move || {
        let image = convert::decode(&bytes, 64 << 20).ok()?;
        let (w, h) = (image.width(), image.height());
        let out = if Format::sniff(&bytes) == Some(format) {
            bytes.to_vec()
        } else {
            convert::encode(&image, format, quality).ok()?
        };
        Some((out, w, h))
    })
    .await
    .ok()??;
    let (bytes, w, h) = converted;
    let kind = format!("{}.partial_image", s.prefix);
    let data = image_data(s, &kind, &bytes, (w, h), Some(index));
    Some(event(kind, Value::Object(data)))
}

/// The data of an image event of `kind` (a completed image, or the `index`th partial one), in
/// the order OpenAI gives its fields.
fn image_data(
    s: &Streamed,
    kind: &str,
    bytes: &[u8],
    (w, h): (u32, u32),
    index: Option<u32>,
) -> Map<String, Value> {
    let mut data = Map::new();
    data.insert("type".into(), json!(kind));
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    data.insert("b64_json".into(), json!(b64));
    let background = s.shape.background.as_deref().unwrap_or("auto");
    data.insert("background".into(), json!(background));
    data.insert("created_at".into(), json!(run::unix_now()));
    data.insert("output_format".into(), json!(s.shape.format_name()));
    if let Some(index) = index {
        data.insert("partial_image_index".into(), json!(index));
    }
    data.insert("quality".into(), json!(s.shape.quality));
    data.insert("size".into(), json!(format!("{w}x{h}")));
    data
}
