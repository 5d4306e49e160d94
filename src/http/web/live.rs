//! The dashboard's event streams: `GET /tasks/{task_id}/events` (one task, for its page and the
//! playground) and `GET /tasks/events` (every task of the account, for the list), the API's
//! Server-Sent Events opened with the session instead of a key, under the same limits. The
//! script in `assets/easel.js` follows them; without it the pages show the state as of a
//! refresh. Previews are shown through `GET /tasks/{task_id}/preview/{..}`, on this site, so
//! that the pages' `img-src 'self'` holds wherever the images are stored.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::{Stream, StreamExt};

use super::error_page::WebError;
use super::session::SignedIn;
use super::thumbnails::{is_preview, preview_path, private_jpeg, stored};
use crate::blobs::Blobs;
use crate::http::api::events::{last_event_id, sse};
use crate::http::state::AppState;
use crate::refusal::ApiError;
use crate::tasks::events::{account_stream, task_stream, Said, StreamFilter};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/tasks/events", get(account_events))
        .route("/tasks/{task_id}/events", get(task_events))
        .route("/tasks/{task_id}/preview/{folder}/{name}", get(preview))
}

/// `GET /tasks/{task_id}/events`: the task's stream, as `GET /api/v1/tasks/{id}/events` says
/// it, with the preview's address on this site.
pub async fn task_events(
    State(state): State<AppState>,
    user: SignedIn,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    let task = user.own_task(&state, &raw).await?;
    let last = last_event_id(&headers);
    let stream = task_stream(state.tasks.clone(), &user.account.id, task, last).await;
    Ok(served(&state, stream))
}

/// `GET /tasks/events`: every task of the account, as `GET /api/v1/events` says them.
pub async fn account_events(
    State(state): State<AppState>,
    user: SignedIn,
    headers: HeaderMap,
) -> Result<Response, WebError> {
    let (last, all) = (last_event_id(&headers), StreamFilter::default());
    let stream = account_stream(state.tasks.clone(), &user.account.id, all, last).await;
    Ok(served(&state, stream))
}

/// A stream as the dashboard serves it, previews on this site; or the API's answer when it
/// could not be opened (past the limits: 429 or 503, which the script answers by reading the
/// page's state now and then instead).
fn served(
    state: &AppState,
    stream: Result<impl Stream<Item = Said> + Send + 'static, ApiError>,
) -> Response {
    match stream {
        Ok(stream) => {
            let blobs = state.blobs.clone();
            sse(stream.map(move |said| on_this_site(&blobs, said)))
        }
        Err(e) => e.into_response(),
    }
}

/// `said` with its `preview_image_url` (the storage's address) turned into the dashboard's own
/// [`preview`] address; everything else as the API says it.
fn on_this_site(blobs: &Blobs, mut said: Said) -> Said {
    if !said.data.contains("\"preview_image_url\"") {
        return said;
    }
    let Ok(mut data) = serde_json::from_str::<serde_json::Value>(&said.data) else {
        return said;
    };
    let local = data["preview_image_url"]
        .as_str()
        .and_then(|url| blobs.key_of_url(url))
        .and_then(|key| preview_path(&key));
    if let Some(path) = local {
        data["preview_image_url"] = path.into();
        said.data = data.to_string().into();
    }
    said
}

/// `GET /tasks/{task_id}/preview/{folder}/{name}`: a preview of the account's task, read from
/// storage. A preview's key never holds other bytes, so browsers may keep it; it is removed
/// when the task ends (404 then).
pub async fn preview(
    State(state): State<AppState>,
    user: SignedIn,
    Path((raw, folder, name)): Path<(String, String, String)>,
) -> Result<Response, WebError> {
    let rest = format!("{folder}/{name}");
    if !is_preview(&rest) {
        return Err(WebError::NotFound);
    }
    let task = user.own_task(&state, &raw).await?;
    let jpeg = stored(&state, &format!("{}/{rest}", task.id)).await?;
    Ok(private_jpeg(jpeg, "private, max-age=3600, immutable"))
}
