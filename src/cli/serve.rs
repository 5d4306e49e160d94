//! `easel serve`, and the submit benchmark's bare baseline, each until Ctrl-C or SIGTERM.

use std::net::SocketAddr;

use anyhow::Context;

use crate::config::Config;
use crate::deploy::reload::ConfigSource;
use crate::{Application, FIRST_ACCOUNT_EMAIL};

pub(super) async fn serve(config: Config, source: ConfigSource) -> anyhow::Result<()> {
    let _logs = crate::telemetry::init(config.server.log_format.as_str());
    let app = Application::build(config).await?;
    app.set_config_source(source);
    if let Some(key) = app.first_key() {
        println!("easel: created the first account ({FIRST_ACCOUNT_EMAIL}) and its API key.");
        println!("easel: this key is shown only once; keep it somewhere safe:");
        println!();
        println!("    {key}");
        println!();
    }
    println!("easel listening on http://{}", app.local_addr());
    tracing::info!(addr = %app.local_addr(), public_url = %app.public_url(), "serving");
    crate::deploy::notify::ready(app.local_addr());
    app.run(async {
        shutdown_signal().await;
        crate::deploy::notify::stopping();
    })
    .await
}

/// The submit benchmark's baseline: same binary, runtime, allocator and profile as `serve`, and a
/// handler that does the request work every submit needs (read the body, parse the JSON, check
/// `prompt`, make a UUID, write the answer) and nothing else: no auth, no store, no middleware.
pub(super) async fn bench_baseline(listen: SocketAddr) -> anyhow::Result<()> {
    use axum::body::Bytes;
    use axum::http::StatusCode;
    use axum::routing::post;

    async fn imagine(body: Bytes) -> (StatusCode, axum::Json<serde_json::Value>) {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if v.get("prompt").is_some_and(|p| p.is_string()) => (
                StatusCode::OK,
                axum::Json(serde_json::json!({ "task_id": uuid::Uuid::new_v4() })),
            ),
            _ => (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({}))),
        }
    }

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!(
        "easel bench-baseline listening on http://{}",
        listener.local_addr()?
    );
    let app = axum::Router::new().route("/api/v1/imagine", post(imagine));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
