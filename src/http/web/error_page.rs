//! The one error type of the views, each error its own page, and rendering (which can fail
//! with it).

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::page::{page_headers, safe_next, Layout, NavUser};
use crate::http::body::BodyError;
use crate::store::StoreError;

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
    /// A form body over the limit that applies to it.
    #[error("the form is larger than {0} bytes")]
    TooLarge(usize),
    /// A form body that did not arrive within `body_timeout`.
    #[error("the form did not arrive in time")]
    TimedOut,
    #[error("the store is unavailable")]
    Unavailable,
    #[error("internal error: {0}")]
    Internal(anyhow::Error),
}

impl From<BodyError> for WebError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge { limit } => WebError::TooLarge(limit),
            BodyError::TimedOut => WebError::TimedOut,
            BodyError::Broken => WebError::BadForm("the form could not be read".into()),
        }
    }
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
            WebError::TooLarge(limit) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("The form is larger than {limit} bytes, the most this site accepts."),
            ),
            WebError::TimedOut => (
                StatusCode::REQUEST_TIMEOUT,
                "The form did not arrive in time. Try again.".to_string(),
            ),
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
            layout: Layout::new(title, "", None::<NavUser>),
            message,
        };
        match render_status(status, &page) {
            Ok(r) => r,
            Err(_) => (status, self.to_string()).into_response(),
        }
    }
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
