//! The host names the dashboard answers to. A page on another site can make a browser send it
//! requests under that site's own name (DNS rebinding: `evil.example` resolved to the easel's
//! address), and then the browser treats easel's answers as that site's. Such a request names
//! the other site in `Host`, so the dashboard answers only requests that name one of its own
//! hosts, and takes a form's `Origin` as its own only when it is one of them too.
//!
//! Its own hosts: `public_url`'s, those in `allowed_hosts`, and `localhost` when no `public_url`
//! is set. An IP address is always accepted: a rebinding page needs a name that it controls, and
//! an address is no such name.

use std::net::IpAddr;

use axum::http::header;

/// The dashboard's own hosts (see the module's documentation).
#[derive(Clone, Debug)]
pub struct DashboardHosts {
    /// Lowercase host names, without port.
    names: Vec<String>,
    /// `public_url`'s origin (`scheme://host[:port]`), when set.
    public_origin: Option<String>,
}

impl DashboardHosts {
    pub fn new(public_url: Option<&str>, allowed_hosts: &[String]) -> DashboardHosts {
        let public = public_url.and_then(|u| url::Url::parse(u).ok());
        let mut names: Vec<String> = allowed_hosts.iter().map(|h| name_of(h)).collect();
        match public.as_ref().and_then(|u| u.host_str()) {
            Some(host) => names.push(name_of(host)),
            None => names.push("localhost".into()),
        }
        DashboardHosts {
            names,
            public_origin: public.map(|u| u.origin().ascii_serialization()),
        }
    }

    /// Whether `authority` (`host[:port]`, as in a `Host` header) names one of the dashboard's
    /// hosts.
    pub fn allows(&self, authority: &str) -> bool {
        let name = name_of(authority);
        name.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
            || self.names.contains(&name)
    }

    /// Whether a form's `Origin` is the dashboard's own: `public_url`'s origin, or one of its
    /// hosts at the same host and port the request was sent to (`host`, already allowed).
    pub fn same_origin(&self, origin: &str, host: Option<&str>) -> bool {
        if self.public_origin.as_deref() == Some(origin) {
            return true;
        }
        let Some(authority) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        self.allows(authority) && host.is_some_and(|h| h.eq_ignore_ascii_case(authority))
    }
}

/// The lowercase host of `authority`, without its port.
fn name_of(authority: &str) -> String {
    let host = if authority.starts_with('[') {
        // An IPv6 literal: up to its closing bracket.
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The authority a request was sent to: HTTP/2's `:authority`, or HTTP/1's `Host`.
pub fn authority(req_uri: &axum::http::Uri, headers: &axum::http::HeaderMap) -> Option<String> {
    req_uri
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_names_and_addresses_are_allowed() {
        let local = DashboardHosts::new(None, &[]);
        for ok in [
            "localhost:8080",
            "LOCALHOST",
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.0.0.7",
        ] {
            assert!(local.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "localhost.evil.example",
            "",
            "127.0.0.1.nip.io",
        ] {
            assert!(!local.allows(bad), "{bad}");
        }
        let public = DashboardHosts::new(
            Some("https://images.example.com"),
            &["intranet.local".to_string()],
        );
        assert!(public.allows("images.example.com"));
        assert!(public.allows("intranet.local:8080"));
        assert!(!public.allows("localhost:8080"), "only without public_url");
    }

    #[test]
    fn an_origin_is_the_public_url_or_an_allowed_host_the_request_was_sent_to() {
        let public = DashboardHosts::new(Some("https://images.example.com"), &[]);
        assert!(public.same_origin("https://images.example.com", Some("10.1.1.1")));
        assert!(!public.same_origin("http://images.example.com", Some("10.1.1.1")));
        let local = DashboardHosts::new(None, &[]);
        assert!(local.same_origin("http://localhost:8080", Some("localhost:8080")));
        // Another port on the same machine is another origin (and another program).
        assert!(!local.same_origin("http://localhost:3000", Some("localhost:8080")));
        assert!(!local.same_origin("http://evil.example:8080", Some("evil.example:8080")));
        assert!(!local.same_origin("null", Some("localhost:8080")));
    }
}
