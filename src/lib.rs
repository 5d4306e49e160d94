//! easel: a self-hosted image-generation task service.
//!
//! One process runs three roles over one store: the HTTP API ([`api`]), the workers that
//! generate images ([`worker`]), and the webhook dispatcher ([`webhooks`]).
//! [`Application::build`] binds the listener (port 0 in tests) and opens the store;
//! [`Application::run`] runs the roles until shutdown.

pub mod accounts;
pub mod auth;
pub mod blobs;
pub mod cli;
pub mod config;
pub mod deploy;
pub mod domain;
pub mod generate;
pub mod http;
pub mod images;
pub mod metrics;
pub mod net;
pub mod ratelimit;
pub mod refusal;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod webhooks;
pub mod worker;

/// This build's version and the commit it was built from (build.rs: `git rev-parse`, or
/// `EASEL_COMMIT` where there is no git, as in a container build), as `easel --version` says it.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("EASEL_COMMIT"), ")");

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::blobs::Blobs;
use crate::config::{Config, Role};
use crate::domain::ContentPolicy;
use crate::generate::Generator;
use crate::http::state::{AppState, Shared};
use crate::images::inputs::{DecodeBudget, ImageFetcher, InputLimits};
use crate::net::DestinationPolicy;
use crate::store::{SharedStore, Store};
use crate::webhooks::client::WebhookClient;
use crate::webhooks::dispatcher::Dispatcher;
use crate::webhooks::progress::ProgressHooks;
use crate::worker::WorkerContext;

/// The email of the account created on the first start.
pub const FIRST_ACCOUNT_EMAIL: &str = "admin@localhost";

/// A built, not yet running, easel: listener bound, store open and migrated.
pub struct Application {
    listener: TcpListener,
    /// The `metrics_listen` listener, when configured.
    metrics_listener: Option<TcpListener>,
    state: AppState,
    worker: WorkerContext,
    dispatcher: Dispatcher,
    /// Progress deliveries, for the workers (see `webhooks::progress`).
    progress: ProgressHooks,
    public_url: String,
    first_key: Option<String>,
}

impl Application {
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        config.validate()?;
        // What a reload compares with: the settings as loaded, before the node adjusts them.
        let loaded = config.clone();
        metrics::set_route_templates(http::api::route_templates());
        std::fs::create_dir_all(&config.data_dir)?;
        let store = store::open(&config.database, &config.data_dir).await?;
        let first_key = bootstrap_first_account(store.as_ref()).await?;

        let listener = TcpListener::bind(config.server.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.server.listen))?;
        let addr = listener.local_addr()?;
        let metrics_listener = match config.server.metrics_listen {
            Some(at) => Some(
                TcpListener::bind(at)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot listen on {at} (metrics_listen): {e}"))?,
            ),
            None => None,
        };
        let public_url = config
            .server
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{addr}"));

        let destinations = DestinationPolicy {
            allow_http: config.webhooks.allow_http,
            allow_private: config.webhooks.allow_private,
        };
        if destinations.allow_http || destinations.allow_private {
            tracing::warn!(
                allow_http = destinations.allow_http,
                allow_private = destinations.allow_private,
                "webhook destination checks are relaxed: use this for development and tests only"
            );
        }
        let mut config = config;
        // Twice the backends' total concurrency: a backend's slot is freed as soon as it has
        // answered, and another worker's task must be waiting for it then, while the first
        // decodes and stores its images; fewer would leave backends idle.
        let wanted: usize = 2 * config.backends.iter().map(|b| b.concurrency).sum::<usize>();
        if config.worker.workers > 0 && wanted > config.worker.workers {
            tracing::info!(
                workers = wanted,
                "workers raised to twice the backends' total concurrency"
            );
            config.worker.workers = wanted;
        }
        let config = Arc::new(config);
        let content_policy = ContentPolicy::new(&config.worker.blocked_terms)
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
        let blobs = Blobs::open(
            &config.blobs,
            &config.data_dir,
            config.database.sqlite_synchronous,
            &public_url,
        )
        .await?;
        let limits = InputLimits {
            max_bytes: config.limits.input_max_bytes,
            max_pixels: config.limits.input_max_pixels,
            timeout: config.limits.input_timeout,
            ..InputLimits::default()
        };
        let decode_budget = DecodeBudget::new(config.limits.decode_memory_budget.bytes());
        if config.runs(Role::Worker) {
            tracing::info!(
                bytes = decode_budget.bytes(),
                setting = %config.limits.decode_memory_budget,
                "decode memory budget"
            );
        }
        let fetcher = ImageFetcher::new(destinations, limits, &webhooks::user_agent())
            .map_err(|e| anyhow::anyhow!("input image client: {e}"))?;
        let moderation_services = Arc::new(config::Live::new(
            net::moderation::ModerationServices::new(
                &config.moderation,
                destinations,
                &webhooks::user_agent(),
            )
            .map_err(|e| anyhow::anyhow!("configuration: {e}"))?,
        ));
        let claims = worker::Claims::new(&config);
        let rate_limits = Arc::new(ratelimit::RateLimits::new(&config.plans));
        let pool = Arc::new(generate::backends::build(&config)?);
        for backend in pool.health() {
            tracing::info!(
                backend = backend.name,
                concurrency = backend.concurrency,
                "image backend configured"
            );
        }
        let generator: Arc<dyn Generator> = pool.clone();
        let tasks = Arc::new(tasks::Tasks {
            config: config.clone(),
            store: store.clone(),
            blobs: blobs.clone(),
            pool: pool.clone(),
            fetcher: fetcher.clone(),
            upload_budget: DecodeBudget::new(decode_budget.bytes() / 4),
            uploads_in_progress: Default::default(),
            destinations,
            content_policy: content_policy.clone(),
            shutdown: CancellationToken::new(),
            idempotency: Default::default(),
            line: tasks::queue_position::QueueLine::new(
                store.clone(),
                store::ClaimRules::of(&config.plans),
            ),
            streams: Arc::new(tasks::streams::Streams::new(&config.limits)),
            moderation: Arc::new(
                tasks::moderation::Moderation::new(store.clone())
                    .with_services(moderation_services.clone()),
            ),
            pending: config::Live::new(store::PendingLimits::of_plans(&config.plans)),
            plans: Arc::new(config::Live::new(config.plans.clone())),
        });
        let reloader = Arc::new(deploy::reload::Reloader::new(
            loaded,
            tasks.clone(),
            rate_limits.clone(),
            claims.clone(),
            moderation_services.clone(),
            destinations,
        ));
        let state = AppState::new(Shared {
            tasks,
            rate_limits,
            reloader,
            hosts: http::hosts::DashboardHosts::new(
                config.server.public_url.as_deref(),
                &config.server.allowed_hosts,
            ),
            live_keys: auth::LiveKeys::default(),
        });
        // A client of its own: progress requests never take the final deliveries' connections.
        let progress = ProgressHooks::new(
            WebhookClient::new(
                config.webhooks.progress_timeout,
                destinations,
                &webhooks::user_agent(),
                config.webhooks.progress_concurrency,
            )
            .map_err(|e| anyhow::anyhow!("progress webhook client: {e}"))?,
            config.webhooks.progress_concurrency,
        );
        let room = Arc::new(worker::Room::default());
        let worker = WorkerContext {
            store: store.clone(),
            blobs,
            generator,
            inputs: worker::Inputs {
                fetcher,
                limits,
                budget: decode_budget,
            },
            policy: content_policy,
            config: config.clone(),
            generating: Arc::new(worker::Permits::new(
                config.worker.workers.max(1),
                room.clone(),
            )),
            room,
            turns: Arc::default(),
            claiming: Arc::default(),
            progress_hooks: progress.clone(),
            claims,
            moderation: moderation_services,
            owner: format!(
                "{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
        };
        let client = WebhookClient::new(
            config.webhooks.timeout,
            destinations,
            &webhooks::user_agent(),
            config.webhooks.concurrency,
        )
        .map_err(|e| anyhow::anyhow!("webhook client: {e}"))?;
        let dispatcher = Dispatcher {
            store,
            client,
            config,
        };
        Ok(Application {
            listener,
            metrics_listener,
            state,
            worker,
            dispatcher,
            progress,
            public_url,
            first_key,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener")
    }

    /// Where `/metrics` is served without credentials (`metrics_listen`), if it is.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound listener"))
    }

    /// The base URL image addresses are built from.
    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    /// The API key created on the first start with an empty store, if this was that start.
    pub fn first_key(&self) -> Option<&str> {
        self.first_key.as_deref()
    }

    pub fn store(&self) -> &SharedStore {
        &self.state.store
    }

    /// Where a reload (`easel reload`, SIGHUP, `POST /api/v1/admin/reload`) reads the settings
    /// again: `easel serve` gives the file and flags it was started with.
    pub fn set_config_source(&self, source: deploy::reload::ConfigSource) {
        self.state.reloader.set_source(source);
    }

    /// The reloader, for tests and tools that reload without a signal.
    pub fn reloader(&self) -> Arc<deploy::reload::Reloader> {
        self.state.reloader.clone()
    }

    /// The worker, for driving the queue one task at a time (`run_one_task`) in tests and tools.
    pub fn worker(&self) -> &WorkerContext {
        &self.worker
    }

    /// The dispatcher, for sending due deliveries in one step (`dispatch_due`).
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// The node's progress deliveries (one per node; clones share its in-flight bound).
    pub fn progress_hooks(&self) -> &ProgressHooks {
        &self.progress
    }

    /// Run the API, the workers and the dispatcher until `signal` completes, then shut down
    /// gracefully: stop taking work, let running tasks and deliveries end (up to
    /// `shutdown_timeout`, after which they are released to be picked up again), and close.
    pub async fn run(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let shutdown = self.state.shutdown.clone();
        let config = self.state.config.clone();
        let store = self.state.store.clone();

        let workers = config
            .runs(Role::Worker)
            .then(|| tokio::spawn(worker::run_pool(self.worker.clone(), shutdown.clone())));
        if config.runs(Role::Worker) {
            // Only a node that generates needs to know which backends answer.
            tokio::spawn(self.state.pool.clone().run_probes(shutdown.clone()));
        }
        let dispatcher = config
            .runs(Role::Dispatcher)
            .then(|| tokio::spawn(self.dispatcher.clone().run(shutdown.clone())));
        tracing::info!(
            store = store.kind(),
            roles = %config.server.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(","),
            "roles started"
        );
        let background = {
            let store = store.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move { store.run_background(stop).await })
        };
        if config.runs(Role::Api) {
            tokio::spawn(sweep_expired(store.clone(), shutdown.clone()));
            // The lists before the first request is served, then kept fresh.
            let moderation = self.state.moderation.clone();
            if let Err(e) = moderation.refresh().await {
                tracing::warn!(error = %e, "could not read the moderation lists at start");
            }
            tokio::spawn(moderation.run(shutdown.clone()));
            tokio::spawn(accounts::grants::run(
                store.clone(),
                self.state.plans.clone(),
                shutdown.clone(),
            ));
        }
        #[cfg(unix)]
        tokio::spawn(reload_on_hangup(
            self.state.reloader.clone(),
            shutdown.clone(),
        ));
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            signal.await;
            tracing::info!("shutdown requested");
            trigger.cancel();
        });

        let app = http::app::app(self.state.clone());
        let limits = http::server::ConnectionLimits {
            max_connections: config.server.max_connections,
            max_per_address: config.server.max_connections_per_address,
            trusted_proxies: config.server.trusted_proxies.clone().into(),
            header_timeout: config.server.header_timeout,
            idle_timeout: config.server.idle_timeout,
            drain: std::time::Duration::from_secs(2),
            min_send_rate: match config.server.min_send_rate {
                Some((bytes, window)) => http::server::SendRate { bytes, window },
                None => http::server::SendRate {
                    bytes: 0,
                    window: std::time::Duration::from_secs(1),
                },
            },
            held_open: http::app::held_open,
        };
        #[cfg(unix)]
        http::open_files::prepare(limits.max_connections);
        let server = tokio::spawn(http::server::serve(
            self.listener,
            app,
            limits.clone(),
            shutdown.clone(),
        ));
        let metrics_server = self.metrics_listener.map(|listener| {
            let app = http::metrics::router(self.state.clone());
            tokio::spawn(http::server::serve(listener, app, limits, shutdown.clone()))
        });

        shutdown.cancelled().await;
        let grace = config.server.shutdown_timeout + std::time::Duration::from_secs(1);
        let finished = tokio::time::timeout(grace, async {
            for role in [workers, dispatcher].into_iter().flatten() {
                let _ = role.await;
            }
        })
        .await;
        if finished.is_err() {
            tracing::warn!("workers or dispatcher did not stop in time");
        }
        // The server loop closes idle connections at once and waits briefly for busy ones.
        let _ = server.await;
        if let Some(metrics_server) = metrics_server {
            let _ = metrics_server.await;
        }
        let _ = background.await;
        store.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// On the first start with an empty store, create the first account and an API key for it.
/// Of nodes starting together on an empty store, only the one whose insert made the account
/// creates (and prints) the key.
async fn bootstrap_first_account(store: &dyn Store) -> anyhow::Result<Option<String>> {
    if store.account_count().await? > 0 {
        return Ok(None);
    }
    // The first account is the operator's: admin, unlimited credits, its password set later
    // with `easel accounts set-password`.
    let created = store
        .create_user(&store::NewAccount {
            email: FIRST_ACCOUNT_EMAIL.to_string(),
            password_hash: None,
            signing_secret: webhooks::signing::generate_secret(),
            admin: true,
            credits: None,
        })
        .await?;
    match created {
        Some(account) => Ok(Some(auth::create_key(store, &account.id, "initial").await?)),
        None => Ok(None),
    }
}

/// An API node's housekeeping: expired sessions and idempotency keys deleted every
/// [`accounts::SWEEP_EVERY`] until `stop`.
async fn sweep_expired(store: SharedStore, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(accounts::SWEEP_EVERY) => {}
            _ = stop.cancelled() => return,
        }
        accounts::forget_expired_sessions(store.as_ref()).await;
        tasks::idempotency::forget_expired(store.as_ref(), &stop).await;
    }
}

/// Reload the settings on each SIGHUP until `stop`; a refused reload is logged, and the
/// running settings stay.
#[cfg(unix)]
async fn reload_on_hangup(reloader: Arc<deploy::reload::Reloader>, stop: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; reload with POST /api/v1/admin/reload");
        return;
    };
    loop {
        tokio::select! {
            got = hangups.recv() => if got.is_none() { return },
            _ = stop.cancelled() => return,
        }
        if let Err(refused) = reloader.reload("signal:SIGHUP").await {
            tracing::error!(error = %refused, "reload refused");
        }
    }
}
