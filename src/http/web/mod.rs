//! The dashboard: server-rendered pages at `/` for people (sign up, keys, tasks, the playground,
//! the account, operators' pages), next to the API. Pages are askama templates (`templates/`),
//! partial updates use htmx, and every asset is embedded in the binary ([`assets`]). Who may see
//! what, and how forms are protected, is in [`session`] and docs/dashboard.md.

mod account;
mod admin;
pub mod assets;
pub mod auth;
pub mod error_page;
mod keys;
mod live;
pub mod page;
mod playground;
pub mod session;
mod tasks;

use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use axum_extra::extract::cookie::CookieJar;

use crate::http::state::AppState;
use error_page::WebError;
use session::SignedIn;

/// The dashboard's routes, for the router of a node with the api role.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/assets/{file}", get(assets::serve))
        .route("/signin", get(auth::sign_in_page).post(auth::sign_in))
        .route("/signup", get(auth::sign_up_page).post(auth::sign_up))
        .route("/signout", post(auth::sign_out))
        .route("/tasks", get(tasks::list))
        .route("/tasks/{task_id}", get(tasks::page))
        .route("/tasks/events", get(live::account_events))
        .route("/tasks/{task_id}/events", get(live::task_events))
        .route(
            "/tasks/{task_id}/preview/{folder}/{name}",
            get(live::preview),
        )
        .route("/tasks/{task_id}/progress", get(tasks::progress))
        .route("/tasks/{task_id}/image/{n}", get(tasks::thumbnail))
        .route("/tasks/{task_id}/redeliver", post(tasks::redeliver))
        .route("/tasks/{task_id}/cancel", post(tasks::cancel))
        .route("/keys", get(keys::page).post(keys::create))
        .route("/keys/{key_id}/revoke", post(keys::revoke))
        .route(
            "/playground",
            get(playground::page).post(playground::submit),
        )
        .route(
            "/playground/upload",
            axum::routing::post(playground::upload),
        )
        .route("/account", get(account::page))
        .route("/account/secret", post(account::reveal_secret))
        .route("/account/secret/rotate", post(account::rotate_secret))
        .route("/admin", get(admin::page))
        .route("/admin/accounts/{account_id}", post(admin::update_account))
}

/// `GET /`: the account's tasks when signed in, the sign-in page otherwise.
async fn home(
    State(state): State<AppState>,
    user: Result<SignedIn, WebError>,
    jar: CookieJar,
    query: axum::extract::Query<tasks::ListQuery>,
) -> Result<Response, WebError> {
    match user {
        Ok(user) => tasks::list_page(&state, user, query.0).await,
        Err(WebError::SignIn { .. }) => Ok(auth::sign_in_form(&state, jar, None, "", "/")),
        Err(e) => Err(e),
    }
}
