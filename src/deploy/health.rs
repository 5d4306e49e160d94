//! `easel healthcheck`: GET `/healthz` on the local server and succeed only on 200, for a
//! container's HEALTHCHECK (the runtime image has no curl or shell tools to do it).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;

/// How long the whole check may take; a runtime's own timeout is usually longer (30 s).
const TIMEOUT: Duration = Duration::from_secs(5);

/// The address to check a server listening on `listen` at: a wildcard address (`0.0.0.0` in a
/// container) is reached on the loopback of the same family.
pub fn local_url(listen: SocketAddr) -> anyhow::Result<String> {
    anyhow::ensure!(
        listen.port() != 0,
        "healthcheck: listen has port 0 (a port chosen at start); pass --url"
    );
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(format!("http://{}", SocketAddr::new(ip, listen.port())))
}

/// Check the server at `base` (`http://host:port`): Ok when `/healthz` answers 200 in time.
pub async fn check(base: &str) -> anyhow::Result<()> {
    let url = format!("{}/healthz", base.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .context("healthcheck: building the HTTP client")?;
    let res = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("healthcheck: {url} did not answer"))?;
    anyhow::ensure!(
        res.status() == reqwest::StatusCode::OK,
        "healthcheck: {url} answered {}",
        res.status()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_addresses_are_checked_on_the_loopback() {
        let url = |s: &str| local_url(s.parse().unwrap());
        assert_eq!(url("0.0.0.0:8080").unwrap(), "http://127.0.0.1:8080");
        assert_eq!(url("[::]:8080").unwrap(), "http://[::1]:8080");
        assert_eq!(url("10.0.0.5:9000").unwrap(), "http://10.0.0.5:9000");
        assert!(url("127.0.0.1:0").is_err());
    }
}
