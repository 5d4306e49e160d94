//! Where easel's outgoing requests may go: webhook deliveries, input images and the redirects
//! they follow are all checked under one [`DestinationPolicy`].
//!
//! Three layers work together:
//!
//! * [`validate_webhook_url`] checks a caller's URL (scheme, user info, length, IP-literal
//!   hosts, `localhost` names) without touching DNS;
//! * the clients check the URL again before every attempt or hop, because the policy may have
//!   changed and reqwest never consults the resolver for IP-literal hosts;
//! * [`PublicOnlyResolver`] is installed as reqwest's DNS resolver and drops every non-public
//!   address from DNS answers, so a hostname that resolves (or re-binds) to an internal address
//!   can never be connected to: the addresses it returns are exactly the ones reqwest dials.
//!
//! `allow_http` and `allow_private` open this up for development and tests only. Input images
//! add [`NoLinkLocalResolver`] on top, which keeps cloud metadata endpoints out of reach even then.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

use super::address::{is_link_local, is_public_ip};

/// Longest webhook URL accepted, in characters.
pub const MAX_URL_CHARS: usize = 2048;

/// Which destinations webhook deliveries may reach.
///
/// The default (both `false`) is the production setting: https only, public addresses only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestinationPolicy {
    /// Also accept plain `http://` URLs (development and tests only).
    pub allow_http: bool,
    /// Also accept loopback, private, link-local and reserved addresses (development and tests
    /// only).
    pub allow_private: bool,
}

impl DestinationPolicy {
    /// The production setting, and the default.
    pub const STRICT: DestinationPolicy = DestinationPolicy {
        allow_http: false,
        allow_private: false,
    };
    /// Both development switches on: what reaches a receiver on the same machine (tests).
    pub const OPEN: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: true,
    };
}

/// Validate a caller's `webhook_url`.
///
/// Returns the parsed URL, or a short lowercase phrase without the field name describing the
/// first rule broken (e.g. `"must be an absolute https URL"`). Performs no DNS lookups: names
/// are checked when they are resolved, by [`PublicOnlyResolver`].
pub fn validate_webhook_url(raw: &str, policy: &DestinationPolicy) -> Result<Url, String> {
    let scheme_msg = if policy.allow_http {
        "must be an absolute http or https URL"
    } else {
        "must be an absolute https URL"
    };

    if raw.chars().count() > MAX_URL_CHARS {
        return Err(format!("must be at most {MAX_URL_CHARS} characters"));
    }

    let url = match Url::parse(raw) {
        Ok(url) => url,
        Err(url::ParseError::EmptyHost) => return Err("must have a host".to_owned()),
        Err(_) => return Err(scheme_msg.to_owned()),
    };

    // Parsing percent-encodes and IDNA-encodes, so the stored (serialized) form may be longer.
    if url.as_str().len() > MAX_URL_CHARS {
        return Err(format!("must be at most {MAX_URL_CHARS} characters"));
    }

    let scheme_ok = match url.scheme() {
        "https" => true,
        "http" => policy.allow_http,
        _ => false,
    };
    if !scheme_ok {
        return Err(scheme_msg.to_owned());
    }

    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not contain user info".to_owned());
    }

    let private_msg = "must not point to a private or reserved address";
    match url.host() {
        None => return Err("must have a host".to_owned()),
        Some(Host::Ipv4(v4)) => {
            if !policy.allow_private && !is_public_ip(IpAddr::V4(v4)) {
                return Err(private_msg.to_owned());
            }
        }
        Some(Host::Ipv6(v6)) => {
            if !policy.allow_private && !is_public_ip(IpAddr::V6(v6)) {
                return Err(private_msg.to_owned());
            }
        }
        Some(Host::Domain(domain)) => {
            // The url crate lowercases and IDNA-encodes hosts of http(s) URLs.
            let name = domain.trim_end_matches('.');
            if name.is_empty() {
                return Err("must have a host".to_owned());
            }
            let is_localhost = name.eq_ignore_ascii_case("localhost")
                || name.to_ascii_lowercase().ends_with(".localhost");
            if is_localhost && !policy.allow_private {
                return Err(private_msg.to_owned());
            }
        }
    }

    Ok(url)
}

/// Error returned by [`PublicOnlyResolver`] when a name resolves, but only to addresses that
/// the policy forbids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NonPublicDestination {
    host: String,
}

impl NonPublicDestination {
    /// The name that was resolved.
    pub fn host(&self) -> &str {
        &self.host
    }
}

impl fmt::Display for NonPublicDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host {} resolves only to non-public addresses",
            self.host
        )
    }
}

impl StdError for NonPublicDestination {}

/// reqwest DNS resolver that resolves with the system resolver (`tokio::net::lookup_host`) and
/// drops every non-public address from the answer unless `allow_private` is set.
///
/// reqwest connects only to the addresses a resolver returns, so a name that resolves, or later
/// re-binds, to an internal address cannot be reached through it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicOnlyResolver {
    allow_private: bool,
}

impl PublicOnlyResolver {
    /// A resolver that keeps private and reserved addresses only when `allow_private` is set.
    pub fn new(allow_private: bool) -> Self {
        Self { allow_private }
    }
}

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest replaces it with the URL's port or the scheme's default.
            let answers: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if answers.is_empty() {
                return Err(format!("no addresses found for host {host}").into());
            }
            let kept: Vec<SocketAddr> = answers
                .into_iter()
                .filter(|addr| allow_private || is_public_ip(addr.ip()))
                .collect();
            if kept.is_empty() {
                tracing::debug!(%host, "dropped non-public DNS answers for webhook destination");
                return Err(Box::new(NonPublicDestination { host }) as _);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// A name that resolved only to link-local addresses.
#[derive(Debug)]
pub struct LinkLocalDestination {
    host: String,
}

impl fmt::Display for LinkLocalDestination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host {} resolves only to link-local addresses",
            self.host
        )
    }
}

impl StdError for LinkLocalDestination {}

/// The webhook resolver, then link-local addresses dropped whatever the policy: with
/// `allow_private` off the inner resolver has dropped them already, with it on this is what
/// keeps a name that resolves to a metadata endpoint out of reach.
#[derive(Clone, Copy, Debug)]
pub struct NoLinkLocalResolver {
    pub inner: PublicOnlyResolver,
}

pub fn without_link_local(addrs: impl Iterator<Item = SocketAddr>) -> Vec<SocketAddr> {
    addrs.filter(|addr| !is_link_local(addr.ip())).collect()
}

impl Resolve for NoLinkLocalResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let answers = self.inner.resolve(name);
        Box::pin(async move {
            let kept = without_link_local(answers.await?);
            if kept.is_empty() {
                return Err(Box::new(LinkLocalDestination { host }) as _);
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: DestinationPolicy = DestinationPolicy::STRICT;
    const HTTP: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: false,
    };
    const PRIVATE: DestinationPolicy = DestinationPolicy {
        allow_http: false,
        allow_private: true,
    };
    const OPEN: DestinationPolicy = DestinationPolicy::OPEN;

    fn err(raw: &str, policy: DestinationPolicy) -> String {
        match validate_webhook_url(raw, &policy) {
            Ok(url) => panic!("{raw} should be refused under {policy:?}, got {url}"),
            Err(msg) => msg,
        }
    }

    fn ok(raw: &str, policy: DestinationPolicy) -> Url {
        match validate_webhook_url(raw, &policy) {
            Ok(url) => url,
            Err(msg) => panic!("{raw} should be accepted under {policy:?}: {msg}"),
        }
    }

    #[test]
    fn default_policy_is_strict() {
        assert_eq!(DestinationPolicy::default(), STRICT);
    }

    #[test]
    fn validate_accepts_public_https_urls() {
        let url = ok("https://hooks.example.com/easel?x=1", STRICT);
        assert_eq!(url.as_str(), "https://hooks.example.com/easel?x=1");
        ok("https://example.com", STRICT);
        ok("https://example.com:8443/a/b", STRICT);
        ok("https://8.8.8.8/hook", STRICT);
        ok("https://[2606:4700::1111]/hook", STRICT);
        ok("HTTPS://Example.COM/hook", STRICT);
        ok("https://localhost.example.com/hook", STRICT);
        ok("https://mylocalhost/hook", STRICT);
    }

    #[test]
    fn validate_enforces_length() {
        let prefix = "https://example.com/";
        let exact = format!("{prefix}{}", "a".repeat(MAX_URL_CHARS - prefix.len()));
        assert_eq!(exact.len(), MAX_URL_CHARS);
        ok(&exact, STRICT);
        let long = format!("{exact}a");
        assert_eq!(err(&long, STRICT), "must be at most 2048 characters");
        // 1000 characters that serialize to 6000 (percent-encoded UTF-8).
        let grows = format!("{prefix}{}", "ä".repeat(1000));
        assert!(grows.chars().count() <= MAX_URL_CHARS);
        assert_eq!(err(&grows, STRICT), "must be at most 2048 characters");
    }

    #[test]
    fn validate_requires_absolute_url_and_scheme() {
        for raw in [
            "",
            "not a url",
            "/relative/path",
            "example.com/hook",
            "ftp://example.com/hook",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "ws://example.com/",
            "https://exa mple.com/",
            "https://example.com:99999/",
        ] {
            assert_eq!(err(raw, STRICT), "must be an absolute https URL", "{raw}");
        }
        assert_eq!(
            err("http://example.com/hook", STRICT),
            "must be an absolute https URL"
        );
        assert_eq!(
            err("http://example.com/hook", PRIVATE),
            "must be an absolute https URL"
        );
        ok("http://example.com/hook", HTTP);
        ok("http://example.com/hook", OPEN);
        assert_eq!(
            err("ftp://example.com/hook", HTTP),
            "must be an absolute http or https URL"
        );
    }

    #[test]
    fn validate_requires_a_host() {
        assert_eq!(err("https://", STRICT), "must have a host");
        assert_eq!(err("https:///", STRICT), "must have a host");
        assert_eq!(err("https://:443/x", STRICT), "must have a host");
        assert_eq!(err("https://./x", STRICT), "must have a host");
        assert_eq!(err("http://", OPEN), "must have a host");
    }

    #[test]
    fn validate_refuses_user_info() {
        for raw in [
            "https://user@example.com/",
            "https://user:pass@example.com/",
            "https://:pass@example.com/",
        ] {
            assert_eq!(err(raw, STRICT), "must not contain user info", "{raw}");
            assert_eq!(err(raw, OPEN), "must not contain user info", "{raw}");
        }
    }

    #[test]
    fn validate_refuses_private_ip_literals_unless_allowed() {
        let private = "must not point to a private or reserved address";
        for raw in [
            "https://127.0.0.1/",
            "https://127.0.0.1:8080/hook",
            "https://10.0.0.5/",
            "https://169.254.169.254/latest/meta-data",
            "https://192.168.1.1/",
            "https://0.0.0.0/",
            "https://0/",
            "https://2130706433/",
            "https://0x7f.0.0.1/",
            "https://017700000001/",
            "https://[::1]/",
            "https://[::]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:7f00:1]/",
            "https://[fe80::1]/",
            "https://[fd00::1]/",
            "https://[64:ff9b::a00:1]/",
            "https://[2002:7f00:1::1]/",
            "https://[2001:db8::1]/",
        ] {
            assert_eq!(err(raw, STRICT), private, "{raw}");
            assert_eq!(err(raw, HTTP), private, "{raw}");
            ok(raw, PRIVATE);
            ok(raw, OPEN);
        }
        assert_eq!(err("http://127.0.0.1:9/", HTTP), private);
        ok("http://127.0.0.1:9/", OPEN);
        assert_eq!(
            err("http://127.0.0.1:9/", PRIVATE),
            "must be an absolute https URL"
        );
    }

    #[test]
    fn validate_refuses_localhost_names_unless_allowed() {
        let private = "must not point to a private or reserved address";
        for raw in [
            "https://localhost/",
            "https://localhost:8443/hook",
            "https://LOCALHOST/",
            "https://localhost./",
            "https://api.localhost/",
            "https://a.b.localhost./x",
        ] {
            assert_eq!(err(raw, STRICT), private, "{raw}");
            ok(raw, PRIVATE);
        }
        assert_eq!(err("http://localhost:3000/", HTTP), private);
        ok("http://localhost:3000/", OPEN);
    }

    async fn resolve(resolver: PublicOnlyResolver, host: &str) -> Result<Vec<SocketAddr>, String> {
        let name: Name = host.parse().map_err(|_| "bad name".to_owned())?;
        resolver
            .resolve(name)
            .await
            .map(|addrs| addrs.collect())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn resolver_refuses_localhost_unless_private_allowed() {
        let msg = resolve(PublicOnlyResolver::new(false), "localhost")
            .await
            .expect_err("localhost must be refused");
        assert!(
            msg.contains("resolves only to non-public addresses"),
            "unexpected error: {msg}"
        );
        assert!(msg.contains("localhost"), "unexpected error: {msg}");

        let addrs = resolve(PublicOnlyResolver::new(true), "localhost")
            .await
            .expect("localhost allowed when allow_private");
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }

    #[tokio::test]
    async fn resolver_error_is_downcastable() {
        let name: Name = "localhost".parse().unwrap();
        let err = match PublicOnlyResolver::new(false).resolve(name).await {
            Ok(addrs) => panic!("expected an error, got {:?}", addrs.collect::<Vec<_>>()),
            Err(err) => err,
        };
        let typed = err
            .downcast_ref::<NonPublicDestination>()
            .expect("typed error");
        assert_eq!(typed.host(), "localhost");
    }
}
