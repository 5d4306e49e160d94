//! Who is signed in, and the checks every form goes through.
//!
//! - A session is a random 256-bit token in the `easel_session` cookie (`HttpOnly`,
//!   `SameSite=Lax`, `Secure` when `public_url` is https). The store keeps only its SHA-256 hash
//!   and when it expires, so a copy of the database signs no one in.
//! - Every form carries a CSRF token in a hidden field. Signed in, it is an HMAC of the session
//!   token (so it needs no storage and dies with the session); signed out (sign in, sign up), it
//!   is the value of a random `easel_form` cookie that the form page sets (double submit). On
//!   top of that, a POST whose `Origin` (or `Sec-Fetch-Site`) says it came from another site is
//!   refused before anything else is read.
//! - Sign-in failures are counted in the store per client address and per email (whether or
//!   not an account has it), so every node sees them; past the limits sign-in answers 429 for a
//!   while (see `auth`).

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Multipart, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use sha2::Sha256;

use super::error_page::WebError;
use super::page::NavUser;
use crate::http::body::read_body;
use crate::http::client_address::ClientAddress;
use crate::http::state::AppState;
use crate::store::{now_ms, Account, Task};

pub const SESSION_COOKIE: &str = "easel_session";
pub const FORM_COOKIE: &str = "easel_form";
/// The hidden field every form carries.
pub const CSRF_FIELD: &str = "csrf";

/// Whether a cookie value has the shape of a token (43 base64url characters).
fn well_formed(token: &str) -> bool {
    token.len() == 43
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The CSRF token of the forms of the session `token`.
pub fn csrf_for(token: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(b"easel dashboard form");
    hex::encode(&mac.finalize().into_bytes()[..20])
}

/// Equality that takes as long whatever the first differing byte.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Whether the session cookie should be `Secure`.
pub fn secure(state: &AppState) -> bool {
    state
        .config
        .server
        .public_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"))
}

/// A cookie as the dashboard sets them: `HttpOnly`, `SameSite=Lax`, whole site.
pub fn cookie(state: &AppState, name: &'static str, value: String) -> Cookie<'static> {
    Cookie::build((name, value))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure(state))
        .path("/")
        .build()
}

/// The same cookie, cleared.
pub fn removal(state: &AppState, name: &'static str) -> Cookie<'static> {
    let mut c = cookie(state, name, String::new());
    c.make_removal();
    c
}

/// Whether a state-changing request comes from the dashboard's own pages: its `Origin`, when
/// sent, is `public_url`'s, or one of the dashboard's hosts at the very host and port the
/// request was sent to ([`crate::http::hosts`]); without one, `Sec-Fetch-Site`, when sent, must
/// not say another site.
pub fn same_origin(parts: &Parts, state: &AppState) -> bool {
    if let Some(origin) = parts.headers.get(header::ORIGIN) {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let host = crate::http::hosts::authority(&parts.uri, &parts.headers);
        return state.hosts.same_origin(origin, host.as_deref());
    }
    match parts
        .headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
    {
        Some(site) => matches!(site, "same-origin" | "none"),
        None => true,
    }
}

/// The signed-in account of a page request; a request without a live session is sent to the
/// sign-in page.
pub struct SignedIn {
    pub account: Account,
    /// The token the session's forms carry.
    pub csrf: String,
    /// The hash of the session's token, to end it.
    pub session: [u8; 32],
}

impl SignedIn {
    /// The account's task, or 404 whether it does not exist or is someone else's.
    pub async fn own_task(&self, state: &AppState, raw: &str) -> Result<Task, WebError> {
        let id = task_id(raw)?;
        state
            .store
            .task_for_account(&self.account.id, &id)
            .await?
            .ok_or(WebError::NotFound)
    }
}

/// A task id from a page's path: one that is not a UUID is simply not there.
pub fn task_id(raw: &str) -> Result<uuid::Uuid, WebError> {
    raw.parse().map_err(|_| WebError::NotFound)
}

impl From<&SignedIn> for NavUser {
    fn from(user: &SignedIn) -> NavUser {
        NavUser {
            email: user.account.email.clone(),
            admin: user.account.admin,
            csrf: user.csrf.clone(),
        }
    }
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, WebError> {
        let jar = CookieJar::from_headers(&parts.headers);
        let htmx = super::page::is_htmx(&parts.headers);
        let back = || {
            if htmx {
                WebError::SignInHx
            } else {
                WebError::SignIn {
                    next: parts
                        .uri
                        .path_and_query()
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_else(|| "/".into()),
                }
            }
        };
        let Some(token) = jar
            .get(SESSION_COOKIE)
            .map(|c| c.value().to_string())
            .filter(|t| well_formed(t))
        else {
            return Err(back());
        };
        let hash = crate::accounts::session_token_hash(&token);
        let Some(account) = state.store.session_account(&hash, now_ms()).await? else {
            return Err(back());
        };
        crate::telemetry::request::note_account(&account.id);
        Ok(SignedIn {
            account,
            csrf: csrf_for(&token),
            session: hash,
        })
    }
}

/// A signed-in account that is an operator; 404 for anyone else, as if the pages did not exist.
pub struct Admin(pub SignedIn);

impl FromRequestParts<AppState> for Admin {
    type Rejection = WebError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, WebError> {
        let user = SignedIn::from_request_parts(parts, state).await?;
        if !user.account.admin {
            return Err(WebError::NotFound);
        }
        Ok(Admin(user))
    }
}

#[derive(Deserialize)]
struct CsrfField {
    #[serde(default)]
    csrf: String,
}

/// The head of a form request, refusing one from another site; its body is read only once the
/// checks that need no more than the head have passed.
fn form_head(req: Request, state: &AppState) -> Result<(Parts, Body), WebError> {
    let (parts, body) = req.into_parts();
    if !same_origin(&parts, state) {
        return Err(WebError::Forbidden);
    }
    Ok((parts, body))
}

fn parse_form<T: DeserializeOwned>(bytes: &[u8]) -> Result<(String, T), WebError> {
    let CsrfField { csrf } = serde_urlencoded::from_bytes(bytes)
        .map_err(|_| WebError::BadForm("the form could not be read".into()))?;
    let form = serde_urlencoded::from_bytes(bytes)
        .map_err(|e| WebError::BadForm(format!("the form could not be read: {e}")))?;
    Ok((csrf, form))
}

/// A form posted by a signed-in account from the dashboard's own pages, with the session's CSRF
/// token: 403 otherwise (and nothing done).
pub struct Posted<T> {
    pub user: SignedIn,
    pub form: T,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for Posted<T> {
    type Rejection = WebError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, WebError> {
        let (mut parts, body) = form_head(req, state)?;
        let user = SignedIn::from_request_parts(&mut parts, state).await?;
        let bytes = read_body(&parts, body).await?;
        let (csrf, form) = parse_form::<T>(&bytes)?;
        if !same_secret(&csrf, &user.csrf) {
            return Err(WebError::Forbidden);
        }
        Ok(Posted { user, form })
    }
}

/// A `multipart/form-data` body, read whole under the route's limit before its parts are.
pub async fn multipart(parts: Parts, body: Body, state: &AppState) -> Result<Multipart, WebError> {
    let bytes = read_body(&parts, body).await?;
    let req = Request::from_parts(parts, Body::from(bytes));
    Multipart::from_request(req, state)
        .await
        .map_err(unreadable)
}

/// A multipart form, or one of its parts, that could not be read: 400.
pub fn unreadable<E>(_: E) -> WebError {
    WebError::BadForm("the form could not be read".into())
}

/// A file form (`multipart/form-data`) posted by a signed-in account from the dashboard's own
/// pages with the session's CSRF token (403 otherwise, and nothing done): the file part
/// `image`, if it has one. The body is read under `mask_body_limit`.
pub struct Uploaded {
    pub user: SignedIn,
    pub image: Option<bytes::Bytes>,
}

impl FromRequest<AppState> for Uploaded {
    type Rejection = WebError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, WebError> {
        let (mut parts, body) = form_head(req, state)?;
        let user = SignedIn::from_request_parts(&mut parts, state).await?;
        let mut form = multipart(parts, body, state).await?;
        let (mut csrf, mut image) = (String::new(), None);
        while let Some(field) = form.next_field().await.map_err(unreadable)? {
            match field.name() {
                Some("csrf") => csrf = field.text().await.map_err(unreadable)?,
                Some("image") => {
                    let data = field.bytes().await.map_err(unreadable)?;
                    image = (!data.is_empty()).then_some(data);
                }
                _ => {}
            }
        }
        if !same_secret(&csrf, &user.csrf) {
            return Err(WebError::Forbidden);
        }
        Ok(Uploaded { user, image })
    }
}

/// A form posted signed out (sign in, sign up) from the dashboard's own pages, its CSRF field
/// equal to the `easel_form` cookie: 403 otherwise.
pub struct PublicPosted<T> {
    pub form: T,
    pub headers: HeaderMap,
    /// The client's address, for the sign-in limits.
    pub client: String,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for PublicPosted<T> {
    type Rejection = WebError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, WebError> {
        let (parts, body) = form_head(req, state)?;
        let jar = CookieJar::from_headers(&parts.headers);
        let cookie = jar.get(FORM_COOKIE).map(|c| c.value()).unwrap_or("");
        if !well_formed(cookie) {
            return Err(WebError::Forbidden);
        }
        let bytes = read_body(&parts, body).await?;
        let (csrf, form) = parse_form::<T>(&bytes)?;
        if !same_secret(&csrf, cookie) {
            return Err(WebError::Forbidden);
        }
        let client = parts
            .extensions
            .get::<ClientAddress>()
            .map(|c| c.0.to_string())
            .unwrap_or_default();
        Ok(PublicPosted {
            form,
            headers: parts.headers,
            client,
        })
    }
}

/// The form token of a signed-out page: the `easel_form` cookie's, or a new one to set.
pub fn form_token(jar: &CookieJar) -> (String, Option<String>) {
    match jar.get(FORM_COOKIE).map(|c| c.value()) {
        Some(t) if well_formed(t) => (t.to_string(), None),
        _ => {
            let (t, _) = crate::accounts::new_session_token();
            (t.clone(), Some(t))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_their_csrf() {
        let (a, _) = crate::accounts::new_session_token();
        let (b, _) = crate::accounts::new_session_token();
        assert!(well_formed(&a));
        assert_eq!(csrf_for(&a), csrf_for(&a));
        assert_ne!(csrf_for(&a), csrf_for(&b));
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
