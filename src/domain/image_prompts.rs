//! Image prompts: images at the start of an imagine's prompt (`https://.../a.png a red fox`),
//! which the generation starts from (an init image, an edit, a blend), weighed by `--iw`. The
//! prompt's text after them is what is drawn.

use serde::{Deserialize, Serialize};

use super::operation::ImageInput;

/// Most image prompts one prompt may start with.
pub const IMAGE_PROMPTS_MAX: usize = 5;

/// `--iw` when the prompt gives none: the image and the text weigh the same.
pub const IMAGE_WEIGHT_DEFAULT: f64 = 1.0;

/// One image prompt: the URL the record shows (an easel URL for a `data:` URL given inline) and
/// where the worker reads it from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImagePrompt {
    pub url: String,
    pub input: ImageInput,
}

/// Whether `word` is an image prompt: an `http(s)` or `data:` URL.
pub(crate) fn is_image_url(word: &str) -> bool {
    let lower = |n: usize| word.get(..n).map(str::to_ascii_lowercase);
    lower(8).as_deref() == Some("https://")
        || lower(7).as_deref() == Some("http://")
        || lower(5).as_deref() == Some("data:")
}

/// The image URLs a prompt starts with, and the rest of it (trimmed). Only the leading words
/// count: a URL after the text is part of the text, as in Midjourney.
pub fn split_image_prompts(raw: &str) -> (Vec<&str>, &str) {
    let mut urls = Vec::new();
    let mut rest = raw.trim_start();
    while let Some(word) = rest.split_whitespace().next() {
        if !is_image_url(word) {
            break;
        }
        urls.push(word);
        rest = rest[word.len()..].trim_start();
    }
    (urls, rest.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leading_urls_are_image_prompts() {
        assert_eq!(
            split_image_prompts(
                "  https://a.example/1.png\nDATA:image/png;base64,AA==  a fox --iw 2"
            ),
            (
                vec!["https://a.example/1.png", "DATA:image/png;base64,AA=="],
                "a fox --iw 2"
            )
        );
        assert_eq!(
            split_image_prompts("a fox https://a.example/1.png"),
            (vec![], "a fox https://a.example/1.png")
        );
        assert_eq!(
            split_image_prompts("http://a/1.png"),
            (vec!["http://a/1.png"], "")
        );
        assert_eq!(split_image_prompts("httpsfox"), (vec![], "httpsfox"));
    }
}
