//! The keys page: create (the whole key shown once), list, revoke.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;

use super::error_page::{render, render_status, WebError};
use super::page::{when, Layout};
use super::session::{Posted, SignedIn};
use crate::http::state::AppState;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/keys", get(page).post(create))
        .route("/keys/{key_id}/revoke", post(revoke))
}

pub struct KeyView {
    id: String,
    name: String,
    prefix: String,
    created: String,
    last_used: String,
    revoked: Option<String>,
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    layout: Layout,
    csrf: String,
    keys: Vec<KeyView>,
    /// The key just made, shown this once.
    new_key: Option<String>,
    error: Option<String>,
    name: String,
}

#[derive(Template)]
#[template(path = "revoke.html")]
struct RevokePage {
    layout: Layout,
    csrf: String,
    key: KeyView,
}

async fn keys_of(state: &AppState, account_id: &str) -> Result<Vec<KeyView>, WebError> {
    Ok(state
        .store
        .account_keys(account_id)
        .await?
        .into_iter()
        .map(|k| KeyView {
            id: k.id,
            name: k.name,
            prefix: k.prefix,
            created: when(k.created_at),
            last_used: k.last_used_at.map(when).unwrap_or_else(|| "never".into()),
            revoked: k.revoked_at.map(when),
        })
        .collect())
}

async fn keys_page(
    state: &AppState,
    user: &SignedIn,
    status: StatusCode,
    new_key: Option<String>,
    error: Option<String>,
    name: String,
) -> Result<Response, WebError> {
    let page = KeysPage {
        layout: Layout::new("API keys", "keys", Some(user)),
        csrf: user.csrf.clone(),
        keys: keys_of(state, &user.account.id).await?,
        new_key,
        error,
        name,
    };
    render_status(status, &page)
}

/// `GET /keys`.
pub async fn page(State(state): State<AppState>, user: SignedIn) -> Result<Response, WebError> {
    keys_page(&state, &user, StatusCode::OK, None, None, String::new()).await
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
}

/// `POST /keys`: make a key and show it once.
pub async fn create(
    State(state): State<AppState>,
    Posted { user, form }: Posted<CreateForm>,
) -> Result<Response, WebError> {
    let name = match crate::accounts::key_name_rules(&form.name) {
        Ok(name) => name,
        Err(problem) => {
            return keys_page(
                &state,
                &user,
                StatusCode::BAD_REQUEST,
                None,
                Some(super::auth::sentence(&problem)),
                form.name,
            )
            .await;
        }
    };
    let secret = crate::auth::create_key(state.store.as_ref(), &user.account.id, &name)
        .await
        .map_err(WebError::Internal)?;
    keys_page(
        &state,
        &user,
        StatusCode::OK,
        Some(secret),
        None,
        String::new(),
    )
    .await
}

#[derive(Deserialize)]
pub struct RevokeForm {
    #[serde(default)]
    confirm: String,
}

/// `POST /keys/{key_id}/revoke`: first a confirmation page, then (with `confirm=yes`) the key
/// is revoked, refused by the API from the next request on.
pub async fn revoke(
    State(state): State<AppState>,
    Path(key_id): Path<String>,
    Posted { user, form }: Posted<RevokeForm>,
) -> Result<Response, WebError> {
    let keys = keys_of(&state, &user.account.id).await?;
    let Some(key) = keys
        .into_iter()
        .find(|k| k.id == key_id && k.revoked.is_none())
    else {
        return Err(WebError::NotFound);
    };
    if form.confirm != "yes" {
        let page = RevokePage {
            layout: Layout::new("Revoke a key", "keys", Some(&user)),
            csrf: user.csrf.clone(),
            key,
        };
        return render(&page);
    }
    if !state
        .store
        .revoke_account_key(&user.account.id, &key_id)
        .await?
    {
        return Err(WebError::NotFound);
    }
    Ok(Redirect::to("/keys").into_response())
}
