//! Whose request it is: the address every per-address limit, the sign-in throttle and the access
//! log count a request under. From a peer that is not a trusted proxy it is the peer's own
//! address, whatever the request's headers say (a client cannot choose its address). From a
//! trusted proxy (`trusted_proxies`) it is read from `Forwarded` (RFC 7239), or else
//! `X-Forwarded-For`, right to left: each proxy appends the address it was reached from, so the
//! first address from the right that is not a trusted proxy is the client, and the addresses
//! left of it are whatever that client chose to send. A malformed header is not guessed at: the
//! peer's own address is used.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// The request's client address, as an extension of every request the server hands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Whether `peer` is one of the trusted proxies.
pub fn trusted(peer: IpAddr, proxies: &[IpNet]) -> bool {
    let peer = canonical(peer);
    proxies.iter().any(|net| net.contains(&peer))
}

/// The client of a request that reached us from `peer` with `headers`.
pub fn client_of(peer: IpAddr, headers: &HeaderMap, proxies: &[IpNet]) -> IpAddr {
    let peer = canonical(peer);
    if !trusted(peer, proxies) {
        return peer;
    }
    let chain = if headers.contains_key(axum::http::header::FORWARDED) {
        forwarded_chain(headers)
    } else if headers.contains_key(&X_FORWARDED_FOR) {
        x_forwarded_for_chain(headers)
    } else {
        return peer;
    };
    let Some(chain) = chain else {
        return peer;
    };
    // Right to left, past our own proxies; where every hop is one of them, the leftmost.
    let mut client = peer;
    for hop in chain.iter().rev() {
        client = *hop;
        if !trusted(client, proxies) {
            break;
        }
    }
    client
}

/// The `for=` addresses of every `Forwarded` element, in order; `None` when any element has no
/// address easel can use (malformed, `unknown` or an obfuscated name).
fn forwarded_chain(headers: &HeaderMap) -> Option<Vec<IpAddr>> {
    let mut chain = Vec::new();
    for value in headers.get_all(axum::http::header::FORWARDED) {
        let value = value.to_str().ok()?;
        for element in value.split(',') {
            let mut found = None;
            for pair in element.split(';') {
                let (name, raw) = pair.split_once('=')?;
                if name.trim().eq_ignore_ascii_case("for") {
                    found = Some(node(raw.trim())?);
                }
            }
            chain.push(found?);
        }
    }
    (!chain.is_empty()).then_some(chain)
}

/// A `Forwarded` node: an IPv4 address with an optional port, or a bracketed IPv6 address with
/// an optional port (`"[2001:db8::1]:4711"`; RFC 7239 quotes it, and one left unquoted by a proxy
/// is read too).
fn node(raw: &str) -> Option<IpAddr> {
    let unquoted = match raw.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"')?,
        None => raw,
    };
    if let Some(rest) = unquoted.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(port)) {
            return None;
        }
        return v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (host, port_part) = match unquoted.split_once(':') {
        Some((host, p)) => (host, Some(p)),
        None => (unquoted, None),
    };
    if port_part.is_some_and(|p| !port(p)) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// A port as `Forwarded` writes one: digits, or an obfuscated `_name`.
fn port(p: &str) -> bool {
    (!p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        || (p.starts_with('_') && p.len() > 1)
}

/// Every address of every `X-Forwarded-For` line, in order; `None` when one is not an address.
fn x_forwarded_for_chain(headers: &HeaderMap) -> Option<Vec<IpAddr>> {
    let mut chain = Vec::new();
    for value in headers.get_all(&X_FORWARDED_FOR) {
        for hop in value.to_str().ok()?.split(',') {
            let hop = hop.trim();
            // Some proxies write IPv6 in brackets, with or without a port.
            let bare = match hop.strip_prefix('[') {
                Some(rest) => rest.split_once(']').map(|(v6, _)| v6)?,
                None => hop,
            };
            chain.push(bare.parse::<IpAddr>().ok()?);
        }
    }
    (!chain.is_empty()).then_some(chain)
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.5`, as a dual-stack listener reports one)
/// as the IPv4 address it is, so that trusted networks and counts see one address, not two.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies() -> Vec<IpNet> {
        ["127.0.0.2/32", "10.1.0.0/16", "fd00::/8"]
            .iter()
            .map(|n| n.parse().unwrap())
            .collect()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn from_anyone_but_a_trusted_proxy_the_headers_are_ignored() {
        let h = headers(&[
            ("x-forwarded-for", "10.0.0.5"),
            ("forwarded", "for=10.0.0.6"),
        ]);
        assert_eq!(
            client_of(ip("203.0.113.9"), &h, &proxies()),
            ip("203.0.113.9")
        );
        assert_eq!(client_of(ip("203.0.113.9"), &h, &[]), ip("203.0.113.9"));
    }

    #[test]
    fn the_first_untrusted_address_from_the_right_is_the_client() {
        let p = proxies();
        let xff = |v| headers(&[("x-forwarded-for", v)]);
        let peer = ip("127.0.0.2");
        assert_eq!(client_of(peer, &xff("10.0.0.5"), &p), ip("10.0.0.5"));
        // A client's own made-up entry is left of its real address.
        assert_eq!(
            client_of(peer, &xff("6.6.6.6, 10.0.0.5, 10.1.2.3"), &p),
            ip("10.0.0.5")
        );
        // Several header lines are one list, in order.
        let two = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "10.0.0.7"),
        ]);
        assert_eq!(client_of(peer, &two, &p), ip("10.0.0.7"));
        // Only proxies: the leftmost.
        assert_eq!(
            client_of(peer, &xff("10.1.0.1, 10.1.0.2"), &p),
            ip("10.1.0.1")
        );
        assert_eq!(
            client_of(peer, &xff("[2001:db8::7]:443"), &p),
            ip("2001:db8::7")
        );
        assert_eq!(client_of(peer, &headers(&[]), &p), peer);
    }

    #[test]
    fn forwarded_is_read_before_x_forwarded_for_with_its_quoting_and_ports() {
        let p = proxies();
        let peer = ip("127.0.0.2");
        let h = headers(&[
            (
                "forwarded",
                r#"for=192.0.2.60;proto=http;by=203.0.113.43, for="[2001:db8:cafe::17]:4711""#,
            ),
            ("x-forwarded-for", "10.0.0.99"),
        ]);
        assert_eq!(client_of(peer, &h, &p), ip("2001:db8:cafe::17"));
        let h = headers(&[(
            "forwarded",
            "for=198.51.100.17:8080;proto=https, For=10.1.9.9",
        )]);
        assert_eq!(client_of(peer, &h, &p), ip("198.51.100.17"));
        let h = headers(&[("forwarded", "for=[2001:db8::1]")]);
        assert_eq!(client_of(peer, &h, &p), ip("2001:db8::1"));
    }

    #[test]
    fn a_malformed_header_from_a_trusted_proxy_gives_the_peers_own_address() {
        let p = proxies();
        let peer = ip("127.0.0.2");
        for bad in [
            headers(&[("x-forwarded-for", "not-an-address")]),
            headers(&[("x-forwarded-for", "10.0.0.5,,")]),
            headers(&[("forwarded", "for=unknown")]),
            headers(&[("forwarded", "for=_hidden")]),
            headers(&[("forwarded", "proto=https")]),
            headers(&[("forwarded", r#"for="[2001:db8::1]:x""#)]),
            headers(&[("forwarded", "for")]),
        ] {
            assert_eq!(client_of(peer, &bad, &p), peer, "{bad:?}");
        }
    }

    #[test]
    fn an_ipv4_peer_written_as_ipv6_is_its_ipv4_address() {
        let p = proxies();
        let h = headers(&[("x-forwarded-for", "10.0.0.5")]);
        assert_eq!(client_of(ip("::ffff:127.0.0.2"), &h, &p), ip("10.0.0.5"));
        assert_eq!(client_of(ip("::ffff:8.8.8.8"), &h, &p), ip("8.8.8.8"));
        assert!(trusted(ip("fd12::1"), &p) && !trusted(ip("fe80::1"), &p));
    }
}
