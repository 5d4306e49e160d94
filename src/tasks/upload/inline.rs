//! `data:` URLs in image fields: `data:image/png|jpeg|webp|gif;base64,...`, decoded at submit
//! and kept as an upload, so that the worker reads them from storage and the record shows a
//! short easel URL rather than the data.

use base64::Engine;

use crate::refusal::ApiError;

/// Whether `raw` is a `data:` URL (of any kind): such a value is never fetched.
pub fn is_data_url(raw: &str) -> bool {
    raw.get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("data:"))
}

/// The image bytes of the `data:` URL `raw`, given as `field`; 400 naming the field and the
/// rule when it is not an image data URL in base64 or its base64 is broken. What the bytes are
/// is checked by their content afterwards, like an upload's.
pub fn decode_data_url(field: &str, raw: &str) -> Result<Vec<u8>, ApiError> {
    let rule = "must be a data URL of a PNG, JPEG, WebP or GIF image in base64 \
                (data:image/png;base64,...)";
    let (head, data) = raw[5..]
        .split_once(',')
        .ok_or_else(|| ApiError::field(field, "invalid_value", rule))?;
    let mut parts = head.split(';').map(str::trim);
    let media = parts.next().unwrap_or_default().to_ascii_lowercase();
    let base64 = parts.any(|p| p.eq_ignore_ascii_case("base64"));
    if !matches!(
        media.as_str(),
        "image/png" | "image/jpeg" | "image/webp" | "image/gif"
    ) || !base64
    {
        return Err(ApiError::field(field, "invalid_value", rule));
    }
    // Line breaks are allowed in base64 that was wrapped; nothing else is.
    let data: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| ApiError::field(field, "invalid_value", format!("is not valid base64 ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_image_data_urls_in_base64_decode() {
        assert!(is_data_url("DATA:image/png;base64,AAAA"));
        assert!(!is_data_url("https://example.com/a.png"));
        assert_eq!(
            decode_data_url("image_url", "data:image/png;base64,iVBO\nRw==").unwrap(),
            vec![0x89, 0x50, 0x4e, 0x47]
        );
        for bad in [
            "data:text/html;base64,PGI+",
            "data:image/svg+xml;base64,PHN2Zz4=",
            "data:image/png,rawbytes",
            "data:image/png;base64",
        ] {
            let err = decode_data_url("image_url", bad).unwrap_err().to_string();
            assert!(
                err.starts_with("image_url: must be a data URL of a PNG"),
                "{bad}: {err}"
            );
        }
        let err = decode_data_url("image_urls[1]", "data:image/gif;base64,!!!")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("image_urls[1]: is not valid base64"),
            "{err}"
        );
    }
}
