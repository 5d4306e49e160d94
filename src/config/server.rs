//! The node itself: where it listens, which roles it runs, how it logs, how long it waits for
//! clients and for its own shutdown, and where its metrics are served.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{check_http_url, choice, choice_list, duration, string_list};

choice! {
    /// The roles a node can run: `api` (the HTTP API and image files), `worker` (claims and
    /// generates tasks) and `dispatcher` (sends webhooks).
    pub enum Role ("roles") {
        Api = "api",
        Worker = "worker",
        Dispatcher = "dispatcher",
    }
}

choice! {
    /// How log lines are written.
    pub enum LogFormat ("log_format") {
        Text = "text",
        Json = "json",
    }
}

/// The node's own settings.
#[derive(Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Server {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Base URL that clients use to reach this server; image URLs are built from it.
    /// Default: `http://{listen}` (with the port actually bound).
    pub public_url: Option<String>,
    /// The roles this node runs; all three by default. In the environment: a comma-separated
    /// list.
    #[serde(with = "choice_list")]
    pub roles: Vec<Role>,
    /// Log format: `text` or `json`.
    pub log_format: LogFormat,
    /// A client must send a request's headers within this time, or its connection is closed.
    #[serde(with = "duration")]
    pub header_timeout: Duration,
    /// A request body must arrive within this time (408 otherwise).
    #[serde(with = "duration")]
    pub body_timeout: Duration,
    /// A connection with no request in progress is closed after this long: between requests on
    /// HTTP/1, with no open stream on HTTP/2 (its pings do not count).
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Most open client connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Most open connections from one client address (an IPv6 client's whole /64); more are
    /// closed as they are accepted. 0: no limit, for a node behind a proxy that connects from one
    /// address.
    pub max_connections_per_address: usize,
    /// Host names, besides `public_url`'s, that the dashboard answers to (requests naming any
    /// other host get 421, so a DNS-rebinding page cannot drive it). Without `public_url`, the
    /// loopback names and the listen address are allowed too. In the environment: a
    /// comma-separated list.
    #[serde(deserialize_with = "string_list::deserialize")]
    pub allowed_hosts: Vec<String>,
    /// The reverse proxies in front of this node (CIDRs or addresses, IPv4 and IPv6): only from
    /// these peers is the client's address read from `Forwarded` or `X-Forwarded-For` (right to
    /// left, the first address not in this list), for every per-address limit and the access log;
    /// from anyone else those headers are ignored. Their own connections are not counted under
    /// `max_connections_per_address`. In the environment: a comma-separated list. Default: none.
    #[serde(with = "networks")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The least a client must take of an answer while the server has more to send it (an
    /// image download, an event stream that has fallen behind): `SIZE/DURATION`, `1KiB/30s` by
    /// default; a connection whose client takes less over that window is closed. `0`: no
    /// minimum (a client that takes nothing at all is still closed after `idle_timeout`).
    #[serde(with = "send_rate")]
    pub min_send_rate: Option<(u64, Duration)>,
    /// How long shutdown waits for running tasks and deliveries before releasing them.
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,
    /// Serve `GET /metrics` (Prometheus) on this separate address, without credentials: bind it
    /// to a private interface. Unset: no separate listener.
    pub metrics_listen: Option<SocketAddr>,
    /// Serve `GET /metrics` on the main listener to requests with `Authorization: Bearer
    /// <metrics_token>` (at least 16 characters). Unset: `/metrics` is not on the main listener.
    pub metrics_token: Option<String>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            public_url: None,
            roles: Role::ALL.to_vec(),
            log_format: LogFormat::Text,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_address: 256,
            allowed_hosts: Vec::new(),
            trusted_proxies: Vec::new(),
            min_send_rate: Some((1024, Duration::from_secs(30))),
            shutdown_timeout: Duration::from_secs(30),
            metrics_listen: None,
            metrics_token: None,
        }
    }
}

impl Server {
    /// Whether this node runs `role`.
    pub fn runs(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        use anyhow::bail;
        if self.roles.is_empty() {
            bail!("configuration: roles must name at least one of api, worker, dispatcher");
        }
        if self.header_timeout.is_zero()
            || self.body_timeout.is_zero()
            || self.idle_timeout.is_zero()
        {
            bail!("configuration: header_timeout, body_timeout and idle_timeout must be non-zero");
        }
        if let Some(bad) = self
            .allowed_hosts
            .iter()
            .find(|h| h.is_empty() || h.contains(['/', '@', ' ']))
        {
            bail!("configuration: allowed_hosts: {bad:?} is not a host name");
        }
        if self.max_connections == 0 {
            bail!("configuration: max_connections must be at least 1");
        }
        check_http_url("public_url", self.public_url.as_deref())?;
        if self.metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
            bail!("configuration: metrics_token must be at least 16 characters");
        }
        if self.listen.port() != 0 && self.metrics_listen == Some(self.listen) {
            bail!("configuration: metrics_listen must differ from listen");
        }
        Ok(())
    }
}

/// `trusted_proxies`: networks (`10.0.0.0/8`, `fd00::/8`) or single addresses (a /32 or /128),
/// as a list or, in the environment, comma-separated text; a wrong one refused by its text.
mod networks {
    use ipnet::IpNet;
    use serde::{de, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(nets: &[IpNet], s: S) -> Result<S::Ok, S::Error> {
        nets.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
        super::super::values::string_list::deserialize(d)?
            .iter()
            .map(|text| parse(text).map_err(de::Error::custom))
            .collect()
    }

    pub fn parse(text: &str) -> Result<IpNet, String> {
        text.parse::<IpNet>()
            .map(|net| net.trunc())
            .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| {
                format!(
                    "trusted_proxies: {text:?} is not a network (10.0.0.0/8, fd00::/8) or an \
                     address"
                )
            })
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn networks_and_single_addresses_are_read_and_nonsense_is_named() {
            assert_eq!(
                super::parse("10.0.0.0/8").unwrap().to_string(),
                "10.0.0.0/8"
            );
            assert_eq!(
                super::parse("10.1.2.3/8").unwrap().to_string(),
                "10.0.0.0/8"
            );
            assert_eq!(
                super::parse("127.0.0.2").unwrap().to_string(),
                "127.0.0.2/32"
            );
            assert_eq!(super::parse("fd00::/8").unwrap().to_string(), "fd00::/8");
            assert_eq!(super::parse("::1").unwrap().to_string(), "::1/128");
            let e = super::parse("10.0.0.0/33").unwrap_err();
            assert!(e.contains("\"10.0.0.0/33\""), "{e}");
            assert!(super::parse("proxy.local").is_err());
        }
    }
}

/// `min_send_rate`: `SIZE/DURATION` (`1KiB/30s`, `64KB/1m`), or `0` for none.
mod send_rate {
    use std::time::Duration;

    use serde::{de, Deserialize, Deserializer, Serializer};

    use super::super::values::{duration, parse_size};

    pub fn serialize<S: Serializer>(
        rate: &Option<(u64, Duration)>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match rate {
            Some((bytes, window)) => {
                s.serialize_str(&format!("{bytes}/{}", humantime::format_duration(*window)))
            }
            None => s.serialize_str("0"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<(u64, Duration)>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(0) => Ok(None),
            Raw::Number(n) => Err(de::Error::custom(format!(
                "min_send_rate must be SIZE/DURATION (like 1KiB/30s) or 0, not {n}"
            ))),
            Raw::Text(text) => parse(&text).map_err(de::Error::custom),
        }
    }

    pub fn parse(text: &str) -> Result<Option<(u64, Duration)>, String> {
        let text = text.trim();
        if text == "0" {
            return Ok(None);
        }
        let bad =
            || format!("min_send_rate must be SIZE/DURATION (like 1KiB/30s) or 0, not `{text}`");
        let (size, window) = text.split_once('/').ok_or_else(bad)?;
        let bytes = parse_size(size).map_err(|_| bad())?;
        let window = duration::parse(window.trim()).map_err(|_| bad())?;
        if bytes == 0 || window.is_zero() {
            return Err(bad());
        }
        Ok(Some((bytes, window)))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_rate_is_a_size_over_a_duration_or_zero() {
            assert_eq!(parse("1KiB/30s"), Ok(Some((1024, Duration::from_secs(30)))));
            assert_eq!(
                parse("64KB / 1m"),
                Ok(Some((64_000, Duration::from_secs(60))))
            );
            assert_eq!(parse("0"), Ok(None));
            for bad in ["1KiB", "fast", "0/30s", "1KiB/0s", "1KiB/soon"] {
                assert!(parse(bad).unwrap_err().contains("SIZE/DURATION"), "{bad}");
            }
        }
    }
}
