//! Reading the WebUI's answers: its progress, the images of a job, an upscale, a caption.

use serde::Deserialize;
use serde_json::Value;

use super::plan::BATCH;
use std::borrow::Cow;

use crate::generate::backends::answers::{keep_each, keep_output, resize_all, Base64Text};
use crate::generate::{Answered, GenerateError, Product};

/// Most images of one answer decoded: the four asked for, and room for the extras a WebUI adds
/// (a grid, an extension's maps) before them.
const MAX_DECODED: usize = 8;

/// The progress answer as a percentage below 100 (the job is done only when it answers);
/// `None` when the WebUI is idle or the answer is not understood.
pub(super) fn progress_percent(body: &[u8]) -> Option<i64> {
    #[derive(Deserialize)]
    struct Answer {
        progress: f64,
        #[serde(default)]
        state: Option<Value>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    let jobs = answer
        .state
        .as_ref()
        .and_then(|s| s.get("job_count"))
        .and_then(Value::as_i64);
    if jobs == Some(0) || !answer.progress.is_finite() {
        return None;
    }
    Some(((answer.progress * 100.0).floor() as i64).clamp(0, 99))
}

/// The progress answer's `current_image` (the WebUI's live preview, base64) as it was sent, to
/// tell a new preview from the last one; `None` when it is null, absent, empty or not text.
pub(super) fn current_image(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        current_image: Option<Value>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    match answer.current_image? {
        Value::String(text) if !text.trim().is_empty() => Some(text),
        _ => None,
    }
}

/// The image bytes of a `current_image`, when it is base64 of something that looks like an
/// image file (its decoding, under limits, is the worker's); `None` for anything else.
pub(super) fn preview_bytes(text: &str) -> Option<Vec<u8>> {
    let bytes = unbase64(text.as_bytes()).ok()?;
    image::guess_format(&bytes).ok().map(|_| bytes)
}

/// Base64, perhaps as a data URL, with or without padding (the forgiving decoding of the web's
/// `atob`, which also passes over whitespace).
fn unbase64(text: &[u8]) -> Result<Vec<u8>, base64_simd::Error> {
    let text = match text.strip_prefix(b"data:") {
        Some(url) => url
            .iter()
            .position(|&b| b == b',')
            .map_or(&[][..], |comma| &url[comma + 1..]),
        None => text,
    };
    base64_simd::forgiving_decode_to_vec(text)
}

pub(super) fn parse<'a, T: Deserialize<'a>>(answer: &'a [u8]) -> Result<T, GenerateError> {
    serde_json::from_slice(answer)
        .map_err(|e| GenerateError::Failed(format!("the backend's answer is malformed: {e}")))
}

/// An image file the WebUI sent: base64, perhaps as a data URL.
fn file_of(text: &[u8], what: &str) -> Result<Vec<u8>, GenerateError> {
    unbase64(text)
        .map_err(|e| GenerateError::Failed(format!("{what} from the backend is not base64: {e}")))
}

/// The grid of a txt2img or img2img answer: the first four images of one size, passing over
/// the extras a WebUI may add (a grid of the batch before them, an extension's images after).
/// The four images of a txt2img or img2img answer, at the `asked` size. stable-diffusion.cpp
/// draws at sides rounded up to what its model works in (64 for Stable Diffusion 1.x), so a
/// 96 x 64 pan comes back 128 x 64: it is resized back, as the caller asked for that shape.
pub(super) fn images_product(
    answer: &[u8],
    asked: (u32, u32),
    backend: &str,
) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(default, borrow)]
        images: Option<Vec<Base64Text<'a>>>,
        #[serde(default)]
        info: Option<Value>,
    }
    let answer: Answer = parse(answer)?;
    let sent = answer.images.unwrap_or_default();
    if sent.len() < BATCH {
        return Err(GenerateError::Failed(format!(
            "the backend sent {} images where {BATCH} were asked for",
            sent.len()
        )));
    }
    // Decoded from base64 side by side when there are enough bytes to gain by it.
    let sent = &sent[..sent.len().min(MAX_DECODED)];
    let mut images = keep_each(
        sent,
        |text| text.0.len(),
        |text, what| file_of(&text.0, what).map(Cow::Owned),
    )?;
    let size = Answered::size;
    let chosen = images
        .iter()
        .map(size)
        .find(|s| images.iter().filter(|i| size(i) == *s).count() >= BATCH);
    let Some(chosen) = chosen else {
        let sizes: Vec<String> = images
            .iter()
            .map(|i| format!("{}x{}", i.width, i.height))
            .collect();
        return Err(GenerateError::Failed(format!(
            "the backend sent no {BATCH} images of one size ({})",
            sizes.join(", ")
        )));
    };
    images.retain(|i| size(i) == chosen);
    images.truncate(BATCH);
    if chosen != asked {
        tracing::debug!(
            backend,
            ?chosen,
            ?asked,
            "the backend drew another size; resized"
        );
        images = resize_all(images, asked)?;
    }
    let four: [Answered; BATCH] = images
        .try_into()
        .map_err(|_| GenerateError::Failed("the backend sent too few images".into()))?;
    if let Some(seeds) = answer.info.as_ref().and_then(seeds_of) {
        tracing::debug!(backend, ?seeds, "the backend's seeds");
    }
    Ok(Product::from_answers(four))
}

/// The seeds in an answer's `info` (a JSON document in a string): `all_seeds`, or `seed`.
pub(super) fn seeds_of(info: &Value) -> Option<Vec<i64>> {
    let info: Value = match info {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    if let Some(all) = info.get("all_seeds").and_then(Value::as_array) {
        return Some(all.iter().filter_map(Value::as_i64).collect());
    }
    info.get("seed").and_then(Value::as_i64).map(|s| vec![s])
}

pub(super) fn upscale_product(answer: &[u8]) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(default, borrow)]
        image: Option<Base64Text<'a>>,
    }
    let answer: Answer = parse(answer)?;
    match answer.image.filter(|i| !i.0.is_empty()) {
        Some(Base64Text(text)) => {
            let what = "the upscaled image";
            Ok(Product::from_answer(keep_output(
                Cow::Owned(file_of(&text, what)?),
                what,
            )?))
        }
        None => Err(GenerateError::Failed(
            "the backend's answer holds no image".into(),
        )),
    }
}

/// Four prompts from the WebUI's caption: as it is, with the image's aspect ratio, its subject
/// (the caption's first clause) alone, and with more detail asked for.
pub(super) fn describe_product(
    answer: &[u8],
    width: u32,
    height: u32,
) -> Result<Product, GenerateError> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        caption: Option<String>,
    }
    let answer: Answer = parse(answer)?;
    let caption = answer
        .caption
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let caption = caption.trim_matches(|c: char| c == ',' || c.is_whitespace());
    if caption.is_empty() {
        return Err(GenerateError::Failed(
            "the backend's caption is empty".into(),
        ));
    }
    let (a, b) = simple_ratio(width, height);
    let ar = format!("--ar {a}:{b}");
    let subject = caption.split(',').next().unwrap_or_default().trim();
    let third = if subject.is_empty() || subject == caption {
        format!("{caption}, detailed {ar}")
    } else {
        format!("{subject} {ar}")
    };
    Ok(Product::Text(vec![
        caption.to_string(),
        format!("{caption} {ar}"),
        third,
        format!("{caption}, highly detailed, sharp focus {ar}"),
    ]))
}

/// `w`:`h` in small terms: exact when it reduces to terms up to 21, else the nearest ratio with
/// a second term up to 16.
pub(super) fn simple_ratio(w: u32, h: u32) -> (u32, u32) {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let (w, h) = (w.max(1), h.max(1));
    let g = gcd(w, h);
    let (a, b) = (w / g, h / g);
    if a <= 21 && b <= 21 {
        return (a, b);
    }
    let r = f64::from(w) / f64::from(h);
    let (mut best, mut error) = ((1, 1), f64::MAX);
    for d in 1..=16u32 {
        let n = (r * f64::from(d)).round().max(1.0) as u32;
        let e = (f64::from(n) / f64::from(d) - r).abs();
        if e < error - 1e-9 {
            (best, error) = ((n, d), e);
        }
    }
    let g = gcd(best.0, best.1);
    (best.0 / g, best.1 / g)
}
