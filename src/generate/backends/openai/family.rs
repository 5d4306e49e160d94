//! What each model accepts: its sizes, `n` and `response_format`.

use crate::images::dimensions;

/// What a model accepts, by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    DallE2,
    DallE3,
    /// gpt-image-1 and its siblings: always base64, no `response_format`.
    GptImage,
    /// A local server's model (or none named): the job's own size, base64 asked for.
    Other,
}

impl Family {
    pub(super) fn of(model: Option<&str>) -> Family {
        match model {
            Some("dall-e-2") => Family::DallE2,
            Some("dall-e-3") => Family::DallE3,
            Some(m) if m.starts_with("gpt-image") || m.starts_with("chatgpt-image") => {
                Family::GptImage
            }
            _ => Family::Other,
        }
    }

    /// Whether it takes `n` above 1 (dall-e-3 makes one image a request).
    pub(super) fn batches(self) -> bool {
        self != Family::DallE3
    }

    /// Whether it takes `response_format` (gpt-image models reject it and answer base64).
    pub(super) fn takes_response_format(self) -> bool {
        self != Family::GptImage
    }

    /// Whether `/images/edits` serves it (OpenAI's edits take dall-e-2 and gpt-image models).
    pub(super) fn edits(self) -> bool {
        self != Family::DallE3
    }

    /// The size to ask for an image of aspect `aw:ah`: the nearest shape the model accepts, or,
    /// for a local server, that aspect at `image_size` rounded to multiples of 64.
    pub(super) fn size(self, aw: u32, ah: u32, image_size: u32) -> (u32, u32) {
        let nearest = |sizes: &[(u32, u32)]| {
            let want = (f64::from(aw.max(1)) / f64::from(ah.max(1))).ln();
            let off = |&(w, h): &(u32, u32)| (want - (f64::from(w) / f64::from(h)).ln()).abs();
            sizes
                .iter()
                .copied()
                .min_by(|a, b| off(a).total_cmp(&off(b)))
                .unwrap_or((1024, 1024))
        };
        match self {
            // Square only; the smallest that is not smaller than asked.
            Family::DallE2 => match image_size {
                0..=256 => (256, 256),
                257..=512 => (512, 512),
                _ => (1024, 1024),
            },
            Family::DallE3 => nearest(&[(1024, 1024), (1792, 1024), (1024, 1792)]),
            Family::GptImage => nearest(&[(1024, 1024), (1536, 1024), (1024, 1536)]),
            Family::Other => {
                let (w, h) = dimensions(aw, ah, image_size);
                (round64(w), round64(h))
            }
        }
    }
}

/// As `size_for(job, 64)` rounds a side.
fn round64(v: u32) -> u32 {
    (v.saturating_add(32) / 64).max(1) * 64
}
