//! The dashboard: server-rendered pages at `/` for people (sign up, keys, tasks, the playground,
//! the account, operators' pages), next to the API. Pages are askama templates (`templates/`),
//! partial updates use htmx, and every asset is embedded in the binary ([`assets`]). Who may see
//! what, and how forms are protected, is in [`session`] and docs/dashboard.md.

mod account;
mod admin;
pub mod assets;
pub mod auth;
pub mod error_page;
mod gallery;
mod keys;
mod live;
pub mod page;
mod playground;
pub mod session;
mod studio;
mod task_list;
mod task_page;
mod thumbnails;

use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use axum_extra::extract::cookie::CookieJar;

use crate::http::state::AppState;
use error_page::WebError;
use session::SignedIn;

/// The dashboard's routes, for the router of a node with the api role: each page's own, beside
/// its handlers.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .merge(assets::routes())
        .merge(auth::routes())
        .merge(task_list::routes())
        .merge(gallery::routes())
        .merge(task_page::routes())
        .merge(thumbnails::routes())
        .merge(live::routes())
        .merge(keys::routes())
        .merge(playground::routes())
        .merge(studio::routes())
        .merge(account::routes())
        .merge(admin::routes())
}

/// `GET /`: Create and the account's recent tasks when signed in, the sign-in page otherwise.
async fn home(
    State(state): State<AppState>,
    user: Result<SignedIn, WebError>,
    jar: CookieJar,
    query: axum::extract::Query<studio::CreateQuery>,
) -> Result<Response, WebError> {
    match user {
        Ok(user) => studio::create_page(&state, user, query.0).await,
        Err(WebError::SignIn { .. }) => Ok(auth::sign_in_form(&state, jar, None, "", "/")),
        Err(e) => Err(e),
    }
}
