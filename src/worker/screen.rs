//! The operator's image checker (`[moderation] image_url`), asked with each of a task's result
//! images before they are stored: a flagged one fails the task (nothing of it is kept, and its
//! credits go back as for any failure).

use bytes::Bytes;
use futures::future::join_all;

use super::WorkerContext;
use crate::config::OnError;
use crate::domain::Outcome;
use crate::net::moderation::Verdict;

/// The error of a task whose image the checker flagged (the seed's wording, then why).
pub const FLAGGED: &str =
    "content policy violation: a result image was flagged by the image checker";
/// The error of a task whose images could not be checked under `on_error = "closed"`.
pub const UNCHECKED: &str =
    "content policy check unavailable: the result images could not be checked";

impl WorkerContext {
    /// The failure of a task whose images (`files`, by key) the checker flags, or cannot
    /// check under `on_error = "closed"`; None to keep them. The grid is made of the same
    /// images and is not sent again.
    pub(super) async fn screen(&self, files: &[(String, Bytes)]) -> Option<Outcome> {
        let services = self.moderation.get();
        let services = services.as_ref().as_ref().filter(|s| s.checks_images())?;
        let images = files.iter().filter(|(key, _)| {
            !key.rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with("grid."))
        });
        let verdicts = join_all(
            images.map(|(key, bytes)| services.check_image(bytes.clone(), content_type(key))),
        )
        .await;
        let mut unavailable = None;
        for verdict in verdicts {
            match verdict {
                Verdict::Pass => crate::metrics::moderation_check("image", "pass"),
                Verdict::Flagged(categories) => {
                    crate::metrics::moderation_check("image", "flagged");
                    tracing::info!(
                        ?categories,
                        "a result image was flagged by the image checker"
                    );
                    return Some(Outcome::Failed {
                        error: FLAGGED.into(),
                    });
                }
                Verdict::Unavailable(why) => {
                    crate::metrics::moderation_check("image", "unavailable");
                    unavailable = Some(why);
                }
            }
        }
        let why = unavailable?;
        tracing::warn!(error = why, on_error = %services.on_error(), "image checker unavailable");
        match services.on_error() {
            OnError::Open => None,
            OnError::Closed => Some(Outcome::Failed {
                error: UNCHECKED.into(),
            }),
        }
    }
}

/// The media type of a stored file, by its key's extension.
fn content_type(key: &str) -> &'static str {
    match key.rsplit('.').next() {
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("webp") => "image/webp",
        _ => "image/png",
    }
}
