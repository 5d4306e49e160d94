//! Signing up, in and out.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;

use super::error_page::{render_status, WebError};
use super::page::{safe_next, Layout, NavUser};
use super::session::{self, Posted, PublicPosted, FORM_COOKIE, SESSION_COOKIE};
use crate::accounts;
use crate::accounts::throttle::{self, Attempt, Gate, KNOWN_BROWSER_COOKIE};
use crate::http::state::AppState;
use crate::store::{now_ms, NewAccount, Store, StoreResult};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/signin", get(sign_in_page).post(sign_in))
        .route("/signup", get(sign_up_page).post(sign_up))
        .route("/signout", post(sign_out))
}

/// The one message of every failed sign-in: it never says whether the email has an account.
const WRONG: &str = "That email and password do not match an account that can sign in.";
const THROTTLED: &str = "Too many failed sign-in attempts from here. Wait 15 minutes before \
                         trying again, or sign in from a browser you have signed in with before.";

#[derive(Template)]
#[template(path = "signin.html")]
struct SignInPage {
    layout: Layout,
    csrf: String,
    error: Option<String>,
    email: String,
    next: String,
    signup_open: bool,
}

#[derive(Template)]
#[template(path = "signup.html")]
struct SignUpPage {
    layout: Layout,
    csrf: String,
    error: Option<String>,
    email: String,
    open: bool,
    min_len: usize,
}

#[derive(Deserialize, Default)]
pub struct NextQuery {
    #[serde(default)]
    next: String,
}

fn signup_open(state: &AppState) -> bool {
    state.config.signup_open()
}

/// The sign-in page, setting the form cookie when the browser has none.
pub fn sign_in_form(
    state: &AppState,
    jar: CookieJar,
    error: Option<(StatusCode, &str)>,
    email: &str,
    next: &str,
) -> Response {
    let (csrf, fresh) = session::form_token(&jar);
    let page = SignInPage {
        layout: Layout::new("Sign in", "signin", None::<NavUser>),
        csrf,
        error: error.map(|(_, m)| m.to_string()),
        email: email.to_string(),
        next: safe_next(next).to_string(),
        signup_open: signup_open(state),
    };
    let status = error.map(|(s, _)| s).unwrap_or(StatusCode::OK);
    with_form_cookie(state, jar, fresh, render_status(status, &page))
}

fn with_form_cookie(
    state: &AppState,
    jar: CookieJar,
    fresh: Option<String>,
    page: Result<Response, WebError>,
) -> Response {
    match (page, fresh) {
        (Ok(page), Some(token)) => {
            (jar.add(session::cookie(state, FORM_COOKIE, token)), page).into_response()
        }
        (Ok(page), None) => page,
        (Err(e), _) => e.into_response(),
    }
}

/// `GET /signin`.
pub async fn sign_in_page(
    State(state): State<AppState>,
    jar: CookieJar,
    Query(q): Query<NextQuery>,
) -> Response {
    sign_in_form(&state, jar, None, "", &q.next)
}

#[derive(Deserialize)]
pub struct SignInForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    next: String,
}

/// Whether `attempt` may go on, once it has waited as long as the sign-in throttle asks.
async fn let_through(attempt: &Attempt, store: &dyn Store) -> StoreResult<bool> {
    match attempt.gate(store).await? {
        Gate::Go => Ok(true),
        Gate::Wait(wait) => {
            tokio::time::sleep(wait).await;
            Ok(true)
        }
        Gate::Refused => Ok(false),
    }
}

/// `POST /signin`: check the limits, then the password; a session on success.
pub async fn sign_in(
    State(state): State<AppState>,
    jar: CookieJar,
    posted: PublicPosted<SignInForm>,
) -> Result<Response, WebError> {
    let form = posted.form;
    let email = form.email.trim().to_string();
    let store = state.store.as_ref();
    let found = match accounts::normalize_email(&email) {
        Ok(email) => store.account_for_sign_in(&email).await?,
        Err(_) => None,
    };
    // A browser that signed in to this account before is counted apart (accounts::throttle).
    let browser = match (&found, jar.get(KNOWN_BROWSER_COOKIE)) {
        (Some((account, Some(hash))), Some(cookie)) => {
            throttle::known_browser(cookie.value(), &account.email, hash)
        }
        _ => None,
    };
    // The form again, with the email given and why it was refused.
    let again = |jar, status, why| {
        Ok(sign_in_form(
            &state,
            jar,
            Some((status, why)),
            &email,
            &form.next,
        ))
    };
    let attempt = Attempt::new(&posted.client, &email, browser);
    if !let_through(&attempt, store).await? {
        return again(jar, StatusCode::TOO_MANY_REQUESTS, THROTTLED);
    }
    // A password is checked (or as long spent without one) whatever was found, so the time
    // taken does not tell which emails have accounts.
    let account = match found {
        Some((account, Some(hash))) => {
            let matches = accounts::verify_password(form.password.clone(), hash.clone()).await;
            (matches && !account.disabled).then_some((account, hash))
        }
        _ => {
            accounts::verify_nothing(form.password.clone()).await;
            None
        }
    };
    let Some((account, hash)) = account else {
        attempt.failed(store).await?;
        return again(jar, StatusCode::UNAUTHORIZED, WRONG);
    };
    attempt.succeeded(store).await?;
    let jar = remember_browser(&state, jar, &account.email, &hash);
    let jar = start_session(&state, jar, &account.id).await?;
    Ok((jar, Redirect::to(safe_next(&form.next))).into_response())
}

/// Make this browser known to the account: a new `easel_browser` cookie that outlives the
/// session, as it is meant to be there the next time the owner signs in.
fn remember_browser(
    state: &AppState,
    jar: CookieJar,
    email: &str,
    password_hash: &str,
) -> CookieJar {
    let token = throttle::known_browser_token(email, password_hash);
    let mut cookie = session::cookie(state, KNOWN_BROWSER_COOKIE, token);
    cookie.set_max_age(time::Duration::days(throttle::KNOWN_BROWSER_DAYS));
    jar.add(cookie)
}

/// Store a new session for the account and set its cookie.
async fn start_session(
    state: &AppState,
    jar: CookieJar,
    account_id: &str,
) -> Result<CookieJar, WebError> {
    let (token, hash) = accounts::new_session_token();
    let ttl = state.config.accounts.session_ttl;
    let expires_at = now_ms() + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2);
    state
        .store
        .create_session(account_id, &hash, expires_at)
        .await?;
    // No Max-Age: the cookie ends with the browser session, the session itself at
    // `expires_at`, whichever comes first.
    let cookie = session::cookie(state, SESSION_COOKIE, token);
    Ok(jar.add(cookie).remove(session::removal(state, FORM_COOKIE)))
}

/// `GET /signup`.
pub async fn sign_up_page(State(state): State<AppState>, jar: CookieJar) -> Response {
    sign_up_form(&state, jar, None, "")
}

fn sign_up_form(
    state: &AppState,
    jar: CookieJar,
    error: Option<(StatusCode, String)>,
    email: &str,
) -> Response {
    let (csrf, fresh) = session::form_token(&jar);
    let open = signup_open(state);
    let page = SignUpPage {
        layout: Layout::new("Sign up", "signup", None::<NavUser>),
        csrf,
        error: error.as_ref().map(|(_, m)| m.clone()),
        email: email.to_string(),
        open,
        min_len: *accounts::PASSWORD_CHARS.start(),
    };
    let status = match (&error, open) {
        (Some((s, _)), _) => *s,
        (None, false) => StatusCode::FORBIDDEN,
        (None, true) => StatusCode::OK,
    };
    with_form_cookie(state, jar, fresh, render_status(status, &page))
}

#[derive(Deserialize)]
pub struct SignUpForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
}

/// `POST /signup`: a new account (when sign-up is open and this address has not made too many
/// lately), signed in at once.
pub async fn sign_up(
    State(state): State<AppState>,
    jar: CookieJar,
    posted: PublicPosted<SignUpForm>,
) -> Result<Response, WebError> {
    if !signup_open(&state) {
        return Ok(sign_up_form(&state, jar, None, ""));
    }
    let form = posted.form;
    let store = state.store.as_ref();
    let per_hour = state.config.accounts.signups_per_hour;
    if !throttle::signup_allowed(store, &posted.client, per_hour).await? {
        let msg = format!(
            "Too many accounts were made from this address in the last hour (at most {per_hour}). \
             Try again later, or ask the operator for an account."
        );
        return Ok(sign_up_form(
            &state,
            jar,
            Some((StatusCode::TOO_MANY_REQUESTS, msg)),
            form.email.trim(),
        ));
    }
    let refuse = |jar, email: &str, msg: String| {
        Ok(sign_up_form(
            &state,
            jar,
            Some((StatusCode::BAD_REQUEST, msg)),
            email,
        ))
    };
    let email = match accounts::normalize_email(&form.email) {
        Ok(email) => email,
        Err(problem) => return refuse(jar, form.email.trim(), sentence(&problem)),
    };
    // zxcvbn takes milliseconds of CPU on a long password: off the async workers.
    let (password, for_email) = (form.password.clone(), email.clone());
    let rules =
        tokio::task::spawn_blocking(move || accounts::password_rules(&password, &for_email))
            .await
            .map_err(|e| WebError::Internal(e.into()))?;
    if let Err(problem) = rules {
        return refuse(jar, &email, sentence(&problem));
    }
    // A sign-up with an email that has an account counts as a failed sign-in of it from this
    // address, so that trying emails here is no faster than at sign-in.
    let attempt = Attempt::new(&posted.client, &email, None);
    if !let_through(&attempt, store).await? {
        return Ok(sign_up_form(
            &state,
            jar,
            Some((StatusCode::TOO_MANY_REQUESTS, THROTTLED.to_string())),
            &email,
        ));
    }
    let password_hash = accounts::hash_password(form.password.clone())
        .await
        .map_err(WebError::Internal)?;
    let new = NewAccount {
        email: email.clone(),
        password_hash: Some(password_hash.clone()),
        signing_secret: crate::webhooks::signing::generate_secret(),
        admin: false,
        credits: state.config.accounts.signup_credits,
    };
    let Some(account) = store.create_user(&new).await? else {
        attempt.failed(store).await?;
        return refuse(
            jar,
            &email,
            "No account could be made with that email. If it is yours, sign in instead.".into(),
        );
    };
    throttle::signed_up(store, &posted.client).await?;
    let jar = remember_browser(&state, jar, &account.email, &password_hash);
    let jar = start_session(&state, jar, &account.id).await?;
    Ok((jar, Redirect::to("/keys")).into_response())
}

/// `password: must have...` as the page says it: `Password: must have...`.
pub(super) fn sentence(problem: &str) -> String {
    let mut chars = problem.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect::<String>() + ".",
        None => String::new(),
    }
}

#[derive(Deserialize)]
pub struct Empty {}

/// `POST /signout`: forget the session here and in the store.
pub async fn sign_out(
    State(state): State<AppState>,
    jar: CookieJar,
    posted: Posted<Empty>,
) -> Result<Response, WebError> {
    state.store.delete_session(&posted.user.session).await?;
    let jar = jar.remove(session::removal(&state, SESSION_COOKIE));
    Ok((jar, Redirect::to("/signin")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_sentences() {
        assert_eq!(
            sentence("password: must have at least 10 characters"),
            "Password: must have at least 10 characters."
        );
    }
}
