//! Moderation lists at submit: every node keeps the lists compiled in memory and reads the
//! store's version of them every [`REFRESH`], so that a list written on any node (or by `easel
//! moderation` against the database) refuses the next submits everywhere within that time; a
//! write on this node applies here at once. A prompt that matches is refused with 400
//! `content_policy` naming the list, before anything is stored.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::{Live, OnError};
use crate::domain::moderation::{check_list_name, Matcher, TermList};
use crate::net::moderation::{ModerationServices, Verdict};
use crate::refusal::ApiError;
use crate::store::{now_ms, NewAudit, SharedStore, StoreResult};

/// How often each node reads the lists' version (a count and a sum: one indexed read).
pub const REFRESH: Duration = Duration::from_secs(2);

/// The lists as this node has them.
pub struct Moderation {
    store: SharedStore,
    matcher: RwLock<Arc<Matcher>>,
    /// The store's version of the lists when they were last read.
    version: Mutex<Option<(i64, i64)>>,
    /// The operator's own checkers (`[moderation]`), if any; a reload replaces them.
    services: Arc<Live<Option<ModerationServices>>>,
}

impl Moderation {
    pub fn new(store: SharedStore) -> Moderation {
        Moderation {
            store,
            matcher: RwLock::default(),
            version: Mutex::new(None),
            services: Arc::default(),
        }
    }

    /// The lists, and the operator's checkers asked after them.
    pub fn with_services(mut self, services: Arc<Live<Option<ModerationServices>>>) -> Moderation {
        self.services = services;
        self
    }

    fn matcher(&self) -> Arc<Matcher> {
        self.matcher
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Read the lists again if their version moved since they were last read.
    pub async fn refresh(&self) -> StoreResult<()> {
        let version = self.store.moderation_version().await?;
        if *self.version.lock().unwrap_or_else(|e| e.into_inner()) == Some(version) {
            return Ok(());
        }
        let lists: Vec<TermList> = self
            .store
            .moderation_lists()
            .await?
            .into_iter()
            .map(|(list, _)| list)
            .collect();
        // Each list was checked when it was written; one that no longer compiles (a newer
        // regex crate's rules) is left out rather than stopping every other list.
        let mut usable = Vec::with_capacity(lists.len());
        for list in lists {
            match Matcher::build(std::slice::from_ref(&list)) {
                Ok(_) => usable.push(list),
                Err(e) => tracing::error!(error = %e, "a moderation list is not applied"),
            }
        }
        let matcher = Matcher::build(&usable).unwrap_or_default();
        *self.matcher.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(matcher);
        *self.version.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        Ok(())
    }

    /// Refresh every [`REFRESH`] until `stop`.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "could not read the moderation lists; the last ones apply");
            }
            tokio::select! {
                _ = tokio::time::sleep(REFRESH) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Whether any list holds one of `text`'s terms, whoever the caller: a text that none holds
    /// passes every plan's lists, so the caller's plan need not be read for it.
    pub fn held_by_any(&self, text: &str) -> bool {
        self.matcher().find(text, |_| true).is_some()
    }

    /// Refuse `text` (the caller's `field`) when a list that `applies` holds one of its terms:
    /// 400 `content_policy` naming the list, not the term (a caller learns what kind of content
    /// was refused, not the list's contents to write around).
    pub fn check(
        &self,
        field: &str,
        text: &str,
        applies: impl Fn(&str) -> bool,
    ) -> Result<(), ApiError> {
        let matcher = self.matcher();
        let Some(found) = matcher.find(text, applies) else {
            return Ok(());
        };
        crate::metrics::moderation_refusal(found.list);
        Err(ApiError::BadRequest {
            code: "content_policy",
            msg: format!(
                "{field}: refused by the content policy (list \"{}\")",
                found.list
            ),
        })
    }

    /// Ask the operator's prompt checker (`[moderation] prompt_url`), when there is one: 400
    /// `content_policy` when it flags `text`; when it cannot be asked, 503 under `on_error =
    /// "closed"` and a pass, logged and counted, under `"open"`.
    pub async fn check_with_service(&self, field: &str, text: &str) -> Result<(), ApiError> {
        let services = self.services.get();
        let Some(services) = services.as_ref().as_ref().filter(|s| s.checks_prompts()) else {
            return Ok(());
        };
        match services.check_prompt(text).await {
            Verdict::Pass => {
                crate::metrics::moderation_check("prompt", "pass");
                Ok(())
            }
            Verdict::Flagged(categories) => {
                crate::metrics::moderation_check("prompt", "flagged");
                crate::metrics::moderation_refusal("prompt_url");
                tracing::info!(?categories, "prompt flagged by the prompt checker");
                Err(ApiError::BadRequest {
                    code: "content_policy",
                    msg: format!("{field}: refused by the content policy (the prompt checker)"),
                })
            }
            Verdict::Unavailable(why) => {
                crate::metrics::moderation_check("prompt", "unavailable");
                tracing::warn!(error = why, on_error = %services.on_error(), "prompt checker unavailable");
                match services.on_error() {
                    OnError::Open => Ok(()),
                    OnError::Closed => Err(ApiError::Unavailable {
                        msg: "the content checker is unavailable; try again shortly".into(),
                        retry_after_secs: 5,
                    }),
                }
            }
        }
    }

    /// Write the list `name` whole for `actor` (as the audit log names operators), checked
    /// first (nothing written when a term cannot be used); the terms it had before, if it
    /// existed.
    pub async fn put(
        &self,
        actor: &str,
        name: &str,
        terms: Vec<String>,
    ) -> Result<Option<Vec<String>>, ApiError> {
        check_list_name(name).map_err(|e| ApiError::field("name", "invalid_value", e))?;
        let list = TermList {
            name: name.to_string(),
            terms,
        };
        Matcher::build(std::slice::from_ref(&list)).map_err(|e| {
            let problem = e.split_once(": ").map_or(e.as_str(), |(_, rest)| rest);
            ApiError::field("terms", "invalid_value", problem)
        })?;
        let before = self.store.moderation_list(name).await?;
        self.store.put_moderation_list(&list, now_ms()).await?;
        self.audit(actor, "moderation.put", name, &before, Some(&list.terms))
            .await?;
        self.refresh().await?;
        Ok(before)
    }

    /// Record a change of the list `name` in the audit log, after it was written (a crash in
    /// between leaves the change unrecorded; the list itself says what it is).
    async fn audit(
        &self,
        actor: &str,
        action: &str,
        name: &str,
        before: &Option<Vec<String>>,
        after: Option<&Vec<String>>,
    ) -> StoreResult<()> {
        let state = |terms: Option<&Vec<String>>| json!({ "list": name, "terms": terms });
        self.store
            .record_audit(&NewAudit {
                actor: actor.to_string(),
                action: action.to_string(),
                account_id: None,
                before: state(before.as_ref()),
                after: state(after),
            })
            .await
    }

    /// Remove the list `name` for `actor`; the terms it had, or None when there was none.
    pub async fn remove(&self, actor: &str, name: &str) -> Result<Option<Vec<String>>, ApiError> {
        let before = self.store.moderation_list(name).await?;
        if before.is_some() {
            self.store.delete_moderation_list(name).await?;
            self.audit(actor, "moderation.remove", name, &before, None)
                .await?;
            self.refresh().await?;
        }
        Ok(before)
    }
}
