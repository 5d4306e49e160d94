//! The dashboard's stylesheet and scripts, embedded in the binary and served under
//! `/assets/{name}.{hash}.{ext}`: the content hash in the name lets browsers keep them for a
//! year, and a new build's assets get new names.

use crate::http::extract::list_items;
use crate::http::state::AppState;
use axum::routing::get;
use axum::Router;
use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The routes of these pages, beside their handlers.
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/assets/{file}", get(serve))
}

const CACHE_CONTROL: &str = "public, max-age=31536000, immutable";

/// One embedded file.
pub struct Asset {
    /// The name the pages link to, with the hash: `easel.3f2a9c1b.css`.
    pub path: String,
    bytes: &'static [u8],
    /// The same bytes gzipped, sent to browsers that accept gzip.
    gzip: Option<&'static [u8]>,
    content_type: &'static str,
    etag: HeaderValue,
}

impl Asset {
    fn new(
        stem: &str,
        ext: &str,
        bytes: &'static [u8],
        gzip: Option<&'static [u8]>,
        content_type: &'static str,
    ) -> Asset {
        let hash = hex::encode(&Sha256::digest(bytes)[..6]);
        Asset {
            path: format!("/assets/{stem}.{hash}.{ext}"),
            bytes,
            gzip,
            content_type,
            etag: HeaderValue::from_str(&format!("\"{hash}\"")).expect("hex"),
        }
    }

    /// How many bytes a browser that accepts gzip downloads.
    pub fn weight(&self, gzip: bool) -> usize {
        match (gzip, self.gzip) {
            (true, Some(z)) => z.len(),
            _ => self.bytes.len(),
        }
    }
}

/// The assets every page links to.
pub struct Assets {
    pub css: Asset,
    pub js: Asset,
    pub htmx: Asset,
    /// The region editor's script, which only its page loads.
    pub region: Asset,
}

pub static ASSETS: LazyLock<Assets> = LazyLock::new(|| Assets {
    css: Asset::new(
        "easel",
        "css",
        include_bytes!("../../../assets/easel.css"),
        None,
        "text/css; charset=utf-8",
    ),
    js: Asset::new(
        "easel",
        "js",
        include_bytes!("../../../assets/easel.js"),
        None,
        "text/javascript; charset=utf-8",
    ),
    htmx: Asset::new(
        "htmx",
        "js",
        include_bytes!("../../../assets/htmx.min.js"),
        Some(include_bytes!("../../../assets/htmx.min.js.gz")),
        "text/javascript; charset=utf-8",
    ),
    region: Asset::new(
        "region",
        "js",
        include_bytes!("../../../assets/region.js"),
        None,
        "text/javascript; charset=utf-8",
    ),
});

/// `GET /assets/{file}`: an asset by its hashed name; 404 for any other name (an old hash
/// included, so a stale page never gets a mismatched file under a name it trusts forever).
pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let wanted = format!("/assets/{file}");
    let assets = &*ASSETS;
    let Some(asset) = [&assets.css, &assets.js, &assets.htmx, &assets.region]
        .into_iter()
        .find(|a| a.path == wanted)
    else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let common = [
        (
            header::CACHE_CONTROL,
            HeaderValue::from_static(CACHE_CONTROL),
        ),
        (header::ETAG, asset.etag.clone()),
        (header::VARY, HeaderValue::from_static("accept-encoding")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
    ];
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == asset.etag.as_bytes())
    {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    match asset.gzip.filter(|_| accepts_gzip(&headers)) {
        Some(gz) => (
            common,
            [(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))],
            gz,
        )
            .into_response(),
        None => (common, asset.bytes).into_response(),
    }
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    list_items(headers, header::ACCEPT_ENCODING).any(|coding| {
        let mut parts = coding.split(';');
        let name = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q == 0.0))
        });
        name.eq_ignore_ascii_case("gzip") && !refused
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asset_names_carry_their_hash() {
        let a = &*ASSETS;
        assert!(a.css.path.starts_with("/assets/easel.") && a.css.path.ends_with(".css"));
        assert_ne!(a.js.path, a.htmx.path);
        assert!(a.htmx.weight(true) < a.htmx.weight(false));
    }

    #[test]
    fn gzip_is_sent_only_when_accepted() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            "gzip, deflate, br".parse().unwrap(),
        );
        assert!(accepts_gzip(&h));
        h.insert(header::ACCEPT_ENCODING, "br, gzip;q=0".parse().unwrap());
        assert!(!accepts_gzip(&h));
    }
}
