//! What every page shares: the frame ([`Layout`]), rendering with the pages' headers, dates,
//! and the `next` redirect rule.

use axum::http::{header, HeaderMap, HeaderValue};

use super::assets;

/// What every page's frame shows: the title, the navigation with the current page marked, the
/// signed-in account and its sign-out form.
pub struct Layout {
    pub title: String,
    /// Which navigation entry is this page: `tasks`, `gallery`, `keys`, `playground`, `account`,
    /// `admin`.
    pub current: &'static str,
    pub user: Option<NavUser>,
    pub css: &'static str,
    pub js: &'static str,
    pub htmx: &'static str,
}

pub struct NavUser {
    pub email: String,
    pub admin: bool,
    pub csrf: String,
}

impl Layout {
    pub fn new<U: Into<NavUser>>(
        title: impl Into<String>,
        current: &'static str,
        user: Option<U>,
    ) -> Layout {
        let a = &*assets::ASSETS;
        Layout {
            title: title.into(),
            current,
            user: user.map(Into::into),
            css: &a.css.path,
            js: &a.js.path,
            htmx: &a.htmx.path,
        }
    }

    /// `aria-current="page"` for the entry of this page.
    pub fn aria(&self, entry: &str) -> &'static str {
        if self.current == entry {
            "page"
        } else {
            "false"
        }
    }
}

/// The headers of every page: none cached (they show an account's data), none framed, scripts
/// and styles only from easel itself.
pub fn page_headers() -> [(header::HeaderName, HeaderValue); 5] {
    [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
    ]
}

/// Unix milliseconds as the dashboard shows them: `2026-11-25 07:02:24 UTC`.
pub fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M:%S UTC")
        .to_string()
}

/// Whether a request was made by htmx (it wants a fragment, and redirects by header).
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

/// Where sign-in may send the browser afterwards: a path on this site only.
pub fn safe_next(next: &str) -> &str {
    // Visible ASCII only: browsers drop tabs and newlines from a URL (`/\t/evil.example` is read
    // as `//evil.example`, another site), and nothing else can go in a `Location` header.
    let visible = next.bytes().all(|b| b.is_ascii_graphic());
    let ok = visible
        && next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.starts_with("/signin")
        && !next.starts_with("/signup")
        && next.len() <= 512;
    if ok {
        next
    } else {
        "/"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_sign_in() {
        assert_eq!(safe_next("/tasks?status=failed"), "/tasks?status=failed");
        assert_eq!(safe_next("//evil.example/"), "/");
        assert_eq!(safe_next("https://evil.example/"), "/");
        assert_eq!(safe_next("/\\evil.example"), "/");
        assert_eq!(safe_next("/signin"), "/");
        // What a browser's URL parser would make another site of, and what no header can hold.
        assert_eq!(safe_next("/\t/evil.example"), "/");
        assert_eq!(safe_next("/\n/evil.example"), "/");
        assert_eq!(safe_next("/\r\n/x"), "/");
        assert_eq!(safe_next("/ /evil.example"), "/");
        assert_eq!(safe_next("/caf\u{e9}"), "/");
        assert_eq!(safe_next("/tasks/%2F%2Fx"), "/tasks/%2F%2Fx");
    }
}
