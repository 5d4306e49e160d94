//! The follow-ups a finished image task offers, each with the body that makes it: what a client
//! needs to draw Midjourney's buttons without knowing every operation's rules by heart.

use serde_json::{json, Value};

use super::operation::OpKind;
use super::output::Output;
pub use super::wire::Action;

/// What may be asked of a finished task now.
pub struct Offer<'a> {
    pub task_id: &'a str,
    pub kind: OpKind,
    pub output: &'a Output,
    /// Whether a configured backend can run an operation.
    pub can_run: &'a dyn Fn(OpKind) -> bool,
    /// The longest side of an image that variations, pan, outpaint and upscale-highres take.
    pub max_side: u32,
}

const IMAGE_LABELS: [(&str, &str); 4] = [("U1", "V1"), ("U2", "V2"), ("U3", "V3"), ("U4", "V4")];

impl Offer<'_> {
    /// Every follow-up that the operations' rules allow on this task, in the order of
    /// Midjourney's buttons. Inpaint ("Vary (Region)") is left out: its mask is the caller's to
    /// draw, so no body is ready to send.
    pub fn actions(&self) -> Vec<Action> {
        let parent = self.task_id;
        let mut all = Vec::new();
        let mut add = |operation: OpKind, label: &'static str, body: Value| {
            if (self.can_run)(operation) {
                all.push(Action {
                    operation: operation.as_str(),
                    label,
                    body,
                });
            }
        };
        let (width, height) = match self.output {
            Output::Grid { width, height, .. } | Output::Single { width, height, .. } => {
                (*width, *height)
            }
            Output::Text { .. } | Output::Seed { .. } => return all,
        };
        // Images stored before sizes were recorded read as 0 x 0: the submit reads their size.
        let fits = width.max(height) <= self.max_side;
        match self.output {
            Output::Grid { .. } => {
                for (i, (u, _)) in IMAGE_LABELS.iter().enumerate() {
                    let body = json!({"parent_task_id": parent, "index": i + 1});
                    add(OpKind::Upscale1x, u, body);
                }
                add(OpKind::Reroll, "🔄", json!({"parent_task_id": parent}));
                if fits {
                    for (i, (_, v)) in IMAGE_LABELS.iter().enumerate() {
                        let body = json!({"parent_task_id": parent, "index": i + 1});
                        add(OpKind::Variations, v, body);
                    }
                }
            }
            Output::Single { .. } => {
                if self.kind == OpKind::Upscale1x {
                    for (label, kind) in [
                        ("Upscale (Subtle)", "subtle"),
                        ("Upscale (Creative)", "creative"),
                    ] {
                        let body = json!({"parent_task_id": parent, "type": kind});
                        add(OpKind::UpscaleAlt, label, body);
                    }
                }
                if !fits {
                    return all;
                }
                for (label, factor) in [("Upscale (2x)", "2x"), ("Upscale (4x)", "4x")] {
                    let body = json!({"parent_task_id": parent, "type": factor});
                    add(OpKind::UpscaleHighres, label, body);
                }
                // A face swap's result is an image, but no upscale: only upscaled further.
                if !self.kind.is_upscale() {
                    return all;
                }
                for (label, strength) in [("Vary (Strong)", "strong"), ("Vary (Subtle)", "subtle")]
                {
                    let body = json!({"parent_task_id": parent, "index": strength});
                    add(OpKind::Variations, label, body);
                }
                for (label, ratio) in [("Zoom Out 2x", 2.0), ("Zoom Out 1.5x", 1.5)] {
                    let body = json!({"parent_task_id": parent, "zoom_ratio": ratio});
                    add(OpKind::Outpaint, label, body);
                }
                for (label, direction) in [
                    ("⬅️", "left"),
                    ("➡️", "right"),
                    ("⬆️", "up"),
                    ("⬇️", "down"),
                ] {
                    let body = json!({"parent_task_id": parent, "direction": direction});
                    add(OpKind::Pan, label, body);
                }
            }
            Output::Text { .. } | Output::Seed { .. } => {}
        }
        all
    }
}

impl Offer<'_> {
    /// Whether `Vary (Region)` (an inpaint) may be made now: on an upscale's image, where a
    /// backend can inpaint. It is no entry of [`Offer::actions`], having no body until the
    /// caller draws its mask; the dashboard's region editor draws one.
    pub fn region(&self) -> bool {
        matches!(self.output, Output::Single { .. })
            && self.kind.is_upscale()
            && (self.can_run)(OpKind::Inpaint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(side: u32) -> Output {
        Output::Grid {
            grid_key: "g".into(),
            image_keys: vec!["a".into(); 4],
            width: side,
            height: side,
        }
    }

    fn single(side: u32) -> Output {
        Output::Single {
            image_key: "a".into(),
            width: side,
            height: side,
        }
    }

    /// What a task of `kind` with `output` offers, where the backends run what `can_run` says.
    fn offer<'a>(
        kind: OpKind,
        output: &'a Output,
        can_run: &'a dyn Fn(OpKind) -> bool,
    ) -> Offer<'a> {
        Offer {
            task_id: "t",
            kind,
            output,
            can_run,
            max_side: 2048,
        }
    }

    fn labels(
        kind: OpKind,
        output: &Output,
        can_run: &dyn Fn(OpKind) -> bool,
    ) -> Vec<&'static str> {
        offer(kind, output, can_run)
            .actions()
            .iter()
            .map(|a| a.label)
            .collect()
    }

    #[test]
    fn a_grid_offers_midjourneys_buttons() {
        let all = |_| true;
        assert_eq!(
            labels(OpKind::Imagine, &grid(1024), &all),
            ["U1", "U2", "U3", "U4", "🔄", "V1", "V2", "V3", "V4"]
        );
        // Variations take images of at most the follow-ups' size; upscales take any.
        assert_eq!(
            labels(OpKind::Blend, &grid(4096), &all),
            ["U1", "U2", "U3", "U4", "🔄"]
        );
        let no_reroll = |k| k != OpKind::Reroll;
        assert!(!labels(OpKind::Imagine, &grid(64), &no_reroll).contains(&"🔄"));
    }

    #[test]
    fn an_upscale_offers_what_its_kind_allows() {
        let all = |_| true;
        let of_1x = labels(OpKind::Upscale1x, &single(1024), &all);
        assert_eq!(of_1x.len(), 12, "{of_1x:?}");
        assert_eq!(of_1x[..2], ["Upscale (Subtle)", "Upscale (Creative)"]);
        let of_alt = labels(OpKind::UpscaleAlt, &single(1024), &all);
        assert!(!of_alt.contains(&"Upscale (Subtle)") && of_alt.contains(&"Zoom Out 2x"));
        assert_eq!(
            labels(OpKind::UpscaleHighres, &single(4096), &all),
            Vec::<&str>::new()
        );
        assert_eq!(
            labels(OpKind::Faceswap, &single(512), &all),
            ["Upscale (2x)", "Upscale (4x)"]
        );
        let text = Output::Text { content: vec![] };
        assert!(labels(OpKind::Describe, &text, &all).is_empty());
    }

    #[test]
    fn a_region_is_offered_on_upscales_only() {
        let all = |_| true;
        assert!(offer(OpKind::Upscale1x, &single(1024), &all).region());
        assert!(!offer(OpKind::Imagine, &grid(1024), &all).region());
        assert!(!offer(OpKind::Faceswap, &single(1024), &all).region());
        assert!(!offer(OpKind::Upscale1x, &single(1024), &|k| k != OpKind::Inpaint).region());
    }
}
