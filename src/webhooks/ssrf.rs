//! SSRF defence for webhook destinations.
//!
//! Three layers work together:
//!
//! * [`validate_webhook_url`] checks a caller's URL at submit time (scheme, user info, length,
//!   IP-literal hosts, `localhost` names) without touching DNS;
//! * the delivery client checks the URL again before every attempt, because the policy may
//!   have changed and reqwest never consults the resolver for IP-literal hosts;
//! * [`PublicOnlyResolver`] is installed as reqwest's DNS resolver and drops every non-public
//!   address from DNS answers, so a hostname that resolves (or re-binds) to an internal address
//!   can never be connected to: the addresses it returns are exactly the ones reqwest dials.
//!
//! `allow_http` and `allow_private` open this up for development and tests only.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::{Host, Url};

/// Longest webhook URL accepted, in characters.
pub const MAX_URL_CHARS: usize = 2048;

/// `true` only for globally routable unicast addresses.
///
/// IPv4 refuses 0.0.0.0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24,
/// 192.0.2/24, 192.88.99/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24, 224/4 and
/// 240/4 (which includes 255.255.255.255).
///
/// IPv6 judges the embedded IPv4 address of IPv4-mapped (`::ffff:0:0/96`), NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) addresses, and refuses `::`, `::1`,
/// `64:ff9b:1::/48`, `100::/64`, `2001::/23`, `2001:db8::/32`, `3fff::/20`, `fc00::/7`,
/// `fe80::/10`, `fec0::/10` and `ff00::/8`. Anything outside the global unicast block
/// `2000::/3` is refused as well (that covers every range above that lies outside it, plus the
/// remaining IETF-reserved space), since no public address has been allocated there.
pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_ipv4(v4),
        IpAddr::V6(v6) => is_public_ipv6(v6),
    }
}

fn is_public_ipv4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // 0.0.0.0/8 "this network"
        || a == 10 // 10/8 private
        || (a == 100 && (b & 0xc0) == 64) // 100.64/10 CGNAT
        || a == 127 // 127/8 loopback
        || (a == 169 && b == 254) // 169.254/16 link local
        || (a == 172 && (b & 0xf0) == 16) // 172.16/12 private
        || (a == 192 && b == 0 && c == 0) // 192.0.0/24 IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // 192.0.2/24 TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 192.88.99/24 6to4 relay anycast
        || (a == 192 && b == 168) // 192.168/16 private
        || (a == 198 && (b & 0xfe) == 18) // 198.18/15 benchmarking
        || (a == 198 && b == 51 && c == 100) // 198.51.100/24 TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // 203.0.113/24 TEST-NET-3
        || a >= 224; // 224/4 multicast, 240/4 reserved incl. broadcast
    !refused
}

fn is_public_ipv6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();

    // ::ffff:0:0/96 IPv4-mapped: judge the embedded IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_ipv4(v4);
    }
    // 64:ff9b::/96 NAT64 well-known prefix: judge the embedded IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0) {
        return is_public_ipv4(embedded_v4(s[6], s[7]));
    }
    // 2002::/16 6to4: the IPv4 address sits in bits 16..48.
    if s[0] == 0x2002 {
        return is_public_ipv4(embedded_v4(s[1], s[2]));
    }

    let refused = ip.is_unspecified() // ::
        || ip.is_loopback() // ::1
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // 64:ff9b:1::/48 local-use NAT64
        || (s[0] == 0x100 && s[1..4].iter().all(|&x| x == 0)) // 100::/64 discard-only
        || (s[0] == 0x2001 && s[1] < 0x200) // 2001::/23 IETF protocol assignments
        || (s[0] == 0x2001 && s[1] == 0xdb8) // 2001:db8::/32 documentation
        || (s[0] == 0x3fff && (s[1] & 0xf000) == 0) // 3fff::/20 documentation
        || (s[0] & 0xfe00) == 0xfc00 // fc00::/7 unique local
        || (s[0] & 0xffc0) == 0xfe80 // fe80::/10 link local
        || (s[0] & 0xffc0) == 0xfec0 // fec0::/10 site local (deprecated)
        || (s[0] & 0xff00) == 0xff00 // ff00::/8 multicast
        || (s[0] & 0xe000) != 0x2000; // outside 2000::/3 global unicast
    !refused
}

fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    let [a, b] = hi.to_be_bytes();
    let [c, d] = lo.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocked_ipv4_ranges_are_not_public() {
        let blocked = [
            // 0.0.0.0/8
            "0.0.0.0",
            "0.1.2.3",
            "0.255.255.255",
            // 10/8
            "10.0.0.0",
            "10.1.2.3",
            "10.255.255.255",
            // 100.64/10
            "100.64.0.0",
            "100.100.100.100",
            "100.127.255.255",
            // 127/8
            "127.0.0.1",
            "127.1.2.3",
            "127.255.255.255",
            // 169.254/16
            "169.254.0.1",
            "169.254.169.254",
            // 172.16/12
            "172.16.0.0",
            "172.20.1.1",
            "172.31.255.255",
            // 192.0.0/24
            "192.0.0.0",
            "192.0.0.8",
            "192.0.0.255",
            // 192.0.2/24
            "192.0.2.0",
            "192.0.2.55",
            // 192.88.99/24
            "192.88.99.1",
            // 192.168/16
            "192.168.0.1",
            "192.168.255.255",
            // 198.18/15
            "198.18.0.0",
            "198.19.255.255",
            // 198.51.100/24
            "198.51.100.7",
            // 203.0.113/24
            "203.0.113.9",
            // 224/4
            "224.0.0.1",
            "239.255.255.250",
            // 240/4
            "240.0.0.1",
            "250.1.2.3",
            "255.255.255.255",
        ];
        for s in blocked {
            assert!(!is_public_ip(ip(s)), "{s} should be refused");
        }
    }

    #[test]
    fn blocked_ipv6_ranges_are_not_public() {
        let blocked = [
            "::",
            "::1",
            // IPv4-mapped with a non-public v4
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "::ffff:255.255.255.255",
            // NAT64 /96 with a non-public v4
            "64:ff9b::127.0.0.1",
            "64:ff9b::10.1.1.1",
            "64:ff9b::192.168.0.1",
            // NAT64 local-use /48: refused whatever it embeds
            "64:ff9b:1::8.8.8.8",
            "64:ff9b:1:ffff::1",
            // 100::/64 discard-only
            "100::",
            "100::1",
            "100::ffff:ffff:ffff:ffff",
            // 2001::/23 IETF protocol assignments (Teredo, benchmarking, ORCHID, ...)
            "2001::",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "2001:10::1",
            "2001:1ff:ffff::1",
            // 2001:db8::/32 documentation
            "2001:db8::",
            "2001:db8::1",
            "2001:db8:ffff:ffff::1",
            // 2002::/16 6to4 with a non-public v4
            "2002:7f00:1::",
            "2002:7f00:0001::1",
            "2002:0a00:0001::1",
            "2002:c0a8:0101::1",
            "2002:a9fe:a9fe::1",
            // fc00::/7 unique local
            "fc00::1",
            "fd12:3456:789a::1",
            "fdff:ffff::1",
            // fe80::/10 link local
            "fe80::1",
            "febf:ffff::1",
            // fec0::/10 site local
            "fec0::1",
            "feff::1",
            // ff00::/8 multicast
            "ff02::1",
            "ff0e::1",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            // 3fff::/20 documentation
            "3fff::1",
            "3fff:fff:ffff::1",
            // outside 2000::/3 (IETF reserved, IPv4-compatible, SIIT)
            "::127.0.0.1",
            "::8.8.8.8",
            "::ffff:0:8.8.8.8",
            "4000::1",
            "5f00::1",
            "e000::1",
        ];
        for s in blocked {
            assert!(!is_public_ip(ip(s)), "{s} should be refused");
        }
    }

    #[test]
    fn public_addresses_are_public() {
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "9.9.9.9",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.255.255",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.1",
            "192.0.3.1",
            "192.88.98.1",
            "192.169.0.1",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.101.1",
            "203.0.114.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2001:200::1",
            "2001:db9::1",
            "2a00:1450:4001:80b::200e",
            "3ffe::1",
            "3fff:1000::1",
            // embedded public IPv4
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:0808:0808::1",
        ];
        for s in public {
            assert!(is_public_ip(ip(s)), "{s} should be public");
        }
    }

    const STRICT: DestinationPolicy = DestinationPolicy {
        allow_http: false,
        allow_private: false,
    };
    const HTTP: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: false,
    };
    const PRIVATE: DestinationPolicy = DestinationPolicy {
        allow_http: false,
        allow_private: true,
    };
    const OPEN: DestinationPolicy = DestinationPolicy {
        allow_http: true,
        allow_private: true,
    };

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
