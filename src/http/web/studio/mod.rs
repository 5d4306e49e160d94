//! The studio: the dashboard as a place to make images. Create at `/` (a prompt with its
//! settings and image prompts, and the account's recent tasks as a live feed), the follow-ups
//! of a finished image task as buttons on its page, and the region editor of `Vary (Region)`.
//!
//! Every submit goes through the API's own use case ([`crate::tasks::submit`]) with the
//! account's studio key ([`crate::accounts::studio`]): the same checks, the same parser and its
//! errors, the same credits, plans, quotas and rate limits, and no key pasted by anyone.

mod create;
mod follow_up;
mod region;
mod submit;

use axum::Router;

use crate::http::state::AppState;

pub use create::{create_page, CreateQuery};
pub use follow_up::ActionsView;

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .merge(create::routes())
        .merge(follow_up::routes())
        .merge(region::routes())
}
