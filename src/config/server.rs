//! The node itself: where it listens, which roles it runs, how it logs, how long it waits for
//! clients and for its own shutdown, and where its metrics are served.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{check_http_url, choice, choice_list, duration};

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
    /// Most open client connections; more wait in the kernel's accept queue.
    pub max_connections: usize,
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
            max_connections: 4096,
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
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            bail!("configuration: header_timeout and body_timeout must be non-zero");
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
