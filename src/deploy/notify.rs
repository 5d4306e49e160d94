//! systemd's readiness protocol (`Type=notify`, deploy/easel.service): easel says `READY=1` once
//! its listener is bound and its store open, and `STOPPING=1` when it starts shutting down, so
//! that `systemctl start` returns when easel answers and units ordered after it start then.
//! Outside systemd (no `NOTIFY_SOCKET`) each call does nothing.

/// The service is ready: the listener is bound (connections queue from now on) and migrations
/// have run.
pub fn ready(addr: std::net::SocketAddr) {
    let status = format!("listening on http://{addr}");
    send(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ]);
}

/// The service is shutting down: running tasks are draining.
pub fn stopping() {
    send(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("shutting down: draining running tasks"),
    ]);
}

fn send(states: &[sd_notify::NotifyState]) {
    // A service manager that cannot be told is not a reason to stop serving: say so and go on.
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}
