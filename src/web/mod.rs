//! The dashboard: server-rendered pages at `/` for people (sign up, keys, tasks, the playground,
//! the account, operators' pages), next to the API. Pages are askama templates (`templates/`),
//! partial updates use htmx, and every asset is embedded in the binary ([`assets`]). Who may see
//! what, and how forms are protected, is in [`session`] and docs/dashboard.md.

mod account;
mod admin;
pub mod assets;
pub mod auth;
mod keys;
mod playground;
pub mod session;
mod tasks;

use askama::Template;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_extra::extract::cookie::CookieJar;

use crate::api::AppState;
use crate::store::StoreError;
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

/// What every page's frame shows: the title, the navigation with the current page marked, the
/// signed-in account and its sign-out form.
pub struct Layout {
    pub title: String,
    /// Which navigation entry is this page: `tasks`, `keys`, `playground`, `account`, `admin`.
    pub current: &'static str,
    pub user: Option<NavUser>,
    pub css: &'static str,
    pub js: &'static str,
    pub htmx: &'static str,
}

pub struct NavUser {
    pub email: String,
    pub admin: bool,
    pub csrf: String,
}

impl Layout {
    pub fn new(title: impl Into<String>, current: &'static str, user: Option<&SignedIn>) -> Layout {
        let a = &*assets::ASSETS;
        Layout {
            title: title.into(),
            current,
            user: user.map(|u| NavUser {
                email: u.account.email.clone(),
                admin: u.account.admin,
                csrf: u.csrf.clone(),
            }),
            css: &a.css.path,
            js: &a.js.path,
            htmx: &a.htmx.path,
        }
    }

    /// `aria-current="page"` for the entry of this page.
    pub fn aria(&self, entry: &str) -> &'static str {
        if self.current == entry {
            "page"
        } else {
            "false"
        }
    }
}

/// The headers of every page: none cached (they show an account's data), none framed, scripts
/// and styles only from easel itself.
fn page_headers() -> [(header::HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ]
}

/// A rendered template as an HTML response.
pub fn render(template: &impl Template) -> Result<Response, WebError> {
    render_status(StatusCode::OK, template)
}

pub fn render_status(status: StatusCode, template: &impl Template) -> Result<Response, WebError> {
    let html = template
        .render()
        .map_err(|e| WebError::Internal(anyhow::anyhow!("template: {e}")))?;
    Ok((status, page_headers(), Html(html)).into_response())
}

/// Unix milliseconds as the dashboard shows them: `2026-11-25 07:02:24 UTC`.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// Whether a request was made by htmx (it wants a fragment, and redirects by header).
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

/// Where sign-in may send the browser afterwards: a path on this site only.
pub fn safe_next(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.starts_with("/signin")
        && !next.starts_with("/signup")
        && next.len() <= 512;
    if ok {
        next
    } else {
        "/"
    }
}

/// Everything a page can fail with, each its own page.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// No live session: to the sign-in page, and back to `next` afterwards.
    #[error("not signed in")]
    SignIn { next: String },
    /// The same for a request made by htmx, which is told to load the page itself.
    #[error("not signed in")]
    SignInHx,
    /// Not there, or not the account's: the same answer, so nothing about other accounts leaks.
    #[error("not found")]
    NotFound,
    /// A form without the right CSRF token, or posted from another site.
    #[error("forbidden")]
    Forbidden,
    #[error("{0}")]
    BadForm(String),
    #[error("the store is unavailable")]
    Unavailable,
    #[error("internal error: {0}")]
    Internal(anyhow::Error),
}

impl From<StoreError> for WebError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(e) => {
                tracing::warn!(error = %e, "store unavailable (dashboard)");
                WebError::Unavailable
            }
            other => WebError::Internal(other.into()),
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    layout: Layout,
    message: String,
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let (status, message) = match &self {
            WebError::SignIn { next } => {
                let to = format!(
                    "/signin?next={}",
                    url::form_urlencoded::byte_serialize(safe_next(next).as_bytes())
                        .collect::<String>()
                );
                return Redirect::to(&to).into_response();
            }
            WebError::SignInHx => {
                return (StatusCode::OK, [("hx-redirect", "/signin")]).into_response();
            }
            WebError::NotFound => (StatusCode::NOT_FOUND, "There is nothing here.".to_string()),
            WebError::Forbidden => (
                StatusCode::FORBIDDEN,
                "This form expired or was sent from another site. Go back, reload the page and \
                 try again."
                    .to_string(),
            ),
            WebError::BadForm(msg) => (StatusCode::BAD_REQUEST, msg.clone()),
            WebError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "The store is unavailable right now; try again shortly.".to_string(),
            ),
            WebError::Internal(e) => {
                tracing::error!(error = format!("{e:#}"), "dashboard fault");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong on our side.".to_string(),
                )
            }
        };
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::FORBIDDEN => "Refused",
            StatusCode::BAD_REQUEST => "Cannot do that",
            _ => "Error",
        };
        let page = ErrorPage {
            layout: Layout::new(title, "", None),
            message,
        };
        match render_status(status, &page) {
            Ok(r) => r,
            Err(_) => (status, self.to_string()).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next("/tasks?status=failed"), "/tasks?status=failed");
        assert_eq!(safe_next("//evil.example/"), "/");
        assert_eq!(safe_next("https://evil.example/"), "/");
        assert_eq!(safe_next("/\\evil.example"), "/");
        assert_eq!(safe_next("/signin"), "/");
    }
}
