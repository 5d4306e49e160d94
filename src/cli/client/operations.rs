//! The bodies of the commands that submit one operation, from their arguments: images given as
//! files become `data:` URLs, `--metadata` a JSON object, `imagine --repeat N` the prompt's own
//! `--repeat N`.

use std::path::Path;

use anyhow::{bail, Context};
use base64::Engine;
use serde_json::{json, Value};

use super::commands::{FollowUp, Making, Request};

/// The operation a command submits, its body and what it makes of the task; None for the
/// commands that submit nothing of their own.
pub(super) fn operation<'a>(
    request: &'a Request,
) -> anyhow::Result<Option<(&'static str, Value, &'a Making)>> {
    // A follow-up's body has its new prompt, when given.
    let follow = |op: &'static str, mut body: Value, follow_up: &'a FollowUp| {
        if let Some(prompt) = &follow_up.prompt {
            body["prompt"] = json!(prompt);
        }
        (op, body, &follow_up.making)
    };
    let (op, mut body, making) = match request {
        Request::Imagine {
            prompt,
            aspect_ratio,
            repeat,
            making,
            ..
        } => {
            let prompt = match repeat {
                Some(n) => format!("{prompt} --repeat {n}"),
                None => prompt.clone(),
            };
            let mut body = json!({ "prompt": prompt });
            if let Some(ar) = aspect_ratio {
                body["aspect_ratio"] = json!(ar);
            }
            ("imagine", body, making)
        }
        Request::Upscale {
            task,
            index,
            making,
            ..
        } => {
            if !(1..=4).contains(index) {
                bail!("the image index must be 1, 2, 3 or 4");
            }
            let body = json!({ "parent_task_id": task, "index": index });
            ("upscale-1x", body, making)
        }
        Request::Variations {
            task,
            index,
            follow_up,
        } => {
            // The API takes 1 to 4 as a number or a string, and strong/subtle as strings.
            let body = json!({ "parent_task_id": task, "index": index });
            follow("variations", body, follow_up)
        }
        Request::Reroll { task, follow_up } => {
            follow("reroll", json!({ "parent_task_id": task }), follow_up)
        }
        Request::Pan {
            task,
            direction,
            follow_up,
        } => {
            let body = json!({ "parent_task_id": task, "direction": direction });
            follow("pan", body, follow_up)
        }
        Request::Zoom {
            task,
            ratio,
            follow_up,
        } => {
            let body = json!({ "parent_task_id": task, "zoom_ratio": ratio });
            follow("outpaint", body, follow_up)
        }
        Request::Inpaint {
            task,
            mask,
            follow_up,
        } => {
            let bytes = read(mask)?;
            if image_type(&bytes) != Some("png") {
                bail!("--mask {}: the mask must be a PNG file", mask.display());
            }
            let body = json!({ "parent_task_id": task, "mask": data_url("png", &bytes) });
            follow("inpaint", body, follow_up)
        }
        Request::Blend {
            images,
            dimension,
            making,
            ..
        } => {
            let urls = images
                .iter()
                .map(|image| image_arg(image))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mut body = json!({ "image_urls": urls });
            if let Some(dimension) = dimension {
                body["dimension"] = json!(dimension);
            }
            ("blend", body, making)
        }
        Request::Describe { image, making, .. } => (
            "describe",
            json!({ "image_url": image_arg(image)? }),
            making,
        ),
        _ => return Ok(None),
    };
    making.generation.add_to(&mut body);
    if let Some(metadata) = &making.metadata {
        body["metadata"] = metadata_arg(metadata)?;
    }
    Ok(Some((op, body, making)))
}

/// `--metadata`: a JSON object.
fn metadata_arg(text: &str) -> anyhow::Result<Value> {
    let value: Value = serde_json::from_str(text)
        .context("--metadata must be a JSON object, like '{\"a\": 1}'")?;
    if !value.is_object() {
        bail!("--metadata must be a JSON object, like '{{\"a\": 1}}'");
    }
    Ok(value)
}

/// An image argument: a URL as it is (http, https, data:), else a file sent as a `data:` URL.
fn image_arg(arg: &str) -> anyhow::Result<String> {
    let lower = arg.to_ascii_lowercase();
    if ["http://", "https://", "data:"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        return Ok(arg.to_string());
    }
    let path = Path::new(arg);
    let bytes = read(path)?;
    let Some(kind) = image_type(&bytes) else {
        bail!("{arg}: not a PNG, JPEG, WebP or GIF file (nor an http(s) URL)");
    };
    Ok(data_url(kind, &bytes))
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The image format `bytes` begin with, as its MIME subtype.
fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("jpeg")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("webp")
    } else if bytes.starts_with(b"GIF8") {
        Some("gif")
    } else {
        None
    }
}

fn data_url(kind: &str, bytes: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:image/{kind};base64,{encoded}")
}

/// `easel batch FILE`'s requests: one JSON object a line, blank lines skipped.
pub(super) fn batch_requests(file: &Path) -> anyhow::Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut requests = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not JSON", file.display(), n + 1))?;
        if !request.is_object() {
            bail!(
                "{} line {}: must be an object {{\"operation\": ..., \"body\": {{...}}}}",
                file.display(),
                n + 1
            );
        }
        requests.push(request);
    }
    if requests.is_empty() {
        bail!("{}: no request in the file", file.display());
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_files_are_told_by_their_first_bytes() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("png"));
        assert_eq!(image_type(&[0xff, 0xd8, 0xff, 0xe0]), Some("jpeg"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("webp"));
        assert_eq!(image_type(b"text"), None);
        assert_eq!(image_arg("https://x/y.png").unwrap(), "https://x/y.png");
        assert!(metadata_arg("[1]").is_err());
        assert_eq!(metadata_arg("{\"a\": 1}").unwrap()["a"], 1);
    }
}
