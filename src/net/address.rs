//! Which IP addresses are public: the facts every outgoing request's destination check rests on.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// `true` for link-local addresses (169.254.0.0/16, fe80::/10), also when embedded in an
/// IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address, each of which can lead to the
/// IPv4 address.
pub fn is_link_local(ip: IpAddr) -> bool {
    fn v4(ip: std::net::Ipv4Addr) -> bool {
        let [a, b, _, _] = ip.octets();
        a == 169 && b == 254
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            let s = ip.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                v4(std::net::Ipv4Addr::new(a, b, c, d))
            };
            let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
            (s[0] & 0xffc0) == 0xfe80
                || ip.to_ipv4().is_some_and(v4)
                || (nat64 && embedded(s[6], s[7]))
                || (s[0] == 0x2002 && embedded(s[1], s[2]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every one of `addresses` is public, or every one is not.
    fn assert_all(public: bool, addresses: &[&str]) {
        for s in addresses {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(is_public_ip(ip), public, "{s}: public should be {public}");
        }
    }

    #[test]
    fn blocked_ipv4_ranges_are_not_public() {
        assert_all(
            false,
            &[
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
            ],
        );
    }

    #[test]
    fn blocked_ipv6_ranges_are_not_public() {
        assert_all(
            false,
            &[
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
            ],
        );
    }

    #[test]
    fn public_addresses_are_public() {
        assert_all(
            true,
            &[
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
            ],
        );
    }
}
