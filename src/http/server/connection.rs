//! What each connection's parts share, whichever serves it (hyper, or `streams` for an event
//! stream): the bound on a request's head, where its requests come from, and whether it has a
//! request in progress (its idle clock).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Request;
use tokio::time::Instant;

use crate::http::client_address::{self, ClientAddress};

/// The largest request head (request line and headers) accepted; larger ones get 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Where a connection's requests come from: its peer, and through a trusted proxy the client
/// each request names.
#[derive(Clone)]
pub(super) struct Origin {
    pub(super) peer: std::net::SocketAddr,
    /// The peer is a trusted proxy.
    pub(super) proxied: bool,
    pub(super) trusted: Arc<[ipnet::IpNet]>,
}

impl Origin {
    /// Gives `req` its client's address, for the per-address limits and the access log.
    pub(super) fn mark<B>(&self, req: &mut Request<B>) {
        let client = if self.proxied {
            client_address::client_of(self.peer.ip(), req.headers(), &self.trusted)
        } else {
            self.peer.ip()
        };
        req.extensions_mut().insert(ClientAddress(client));
        req.extensions_mut().insert(ConnectInfo(self.peer));
    }
}

/// Whether a connection has a request in progress, and since when it has had none. Each request
/// counts itself in and out ([`Busy`]) with atomic operations; the connection's idle timer
/// ([`idle`]) reads them only when its deadline comes. (Through a `watch` channel, every
/// request's start and end woke the timer and re-armed its sleep.)
pub(super) struct Activity {
    /// When the connection was accepted.
    opened: Instant,
    /// Requests in progress.
    busy: AtomicUsize,
    /// When the last request ended, in microseconds after `opened`, plus one; 0 before any has.
    ended: AtomicU64,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            busy: AtomicUsize::new(0),
            ended: AtomicU64::new(0),
        }
    }

    /// When the connection counts as idle, as things stand: `first` after it opened if no
    /// request has ended yet, `later` after the last one ended; None while one is in progress.
    fn idle_at(&self, first: Duration, later: Duration) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(match self.ended.load(Ordering::Acquire) {
            0 => self.opened + first,
            ended => self.opened + Duration::from_micros(ended - 1) + later,
        })
    }
}

/// Resolves once the connection has had no request in progress for `first` (before its first
/// request) or `later` (after one). It wakes at the deadline as last known, and looks again.
pub(super) async fn idle(activity: &Activity, first: Duration, later: Duration) {
    loop {
        match activity.idle_at(first, later) {
            Some(at) if at <= Instant::now() => return,
            Some(at) => tokio::time::sleep_until(at).await,
            // A request in progress ends no sooner than now; look again `later` from now.
            None => tokio::time::sleep(later).await,
        }
    }
}

/// One request of a connection in progress.
pub(super) struct Busy(Arc<Activity>);

impl Busy {
    pub(super) fn start(activity: &Arc<Activity>) -> Busy {
        activity.busy.fetch_add(1, Ordering::AcqRel);
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The end's time first: the timer reads it once it sees no request in progress.
        let ended = self.0.opened.elapsed().as_micros() as u64 + 1;
        self.0.ended.fetch_max(ended, Ordering::Release);
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}
