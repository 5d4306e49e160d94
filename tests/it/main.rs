//! The integration suite, as one test binary: one module per part (`api`, `tasks`, `store`, ...),
//! so that a test's path reads `api::some_test`. One binary links the crate once; the suite was
//! 34 binaries, each linking the whole crate, which took much of CI's time and of `target/`.
//!
//! Two parts are binaries of their own, for reasons given in their headers: `tests/load` (the
//! tests that put whole processes under load) and `tests/sd_server.rs` (a real model server,
//! run on its own by scripts/test.sh).
//!
//! What the modules share is process-wide here: easel's metrics (counters are read as "at least
//! this test's", scrape-time gauges belong to one node), the tests' tracing subscriber (set up
//! once, `common::init_logs`) and the S3 test credentials (set once, `common::s3`).

#[path = "../common/mod.rs"]
mod common;

mod backend_mocks;

mod account_webhook;
mod accounts;
mod api;
mod backends;
mod backup;
mod batch;
mod blobs;
mod cancel_and_wait;
mod cli_client;
mod dashboard;
mod events;
mod fairness;
mod follow_ups;
mod fuzz;
mod hostile;
mod idempotency;
mod idempotency_nodes;
mod limits;
mod line_order;
mod live;
mod models;
mod moderation;
mod moderation_services;
mod observability;
mod openai;
mod operations;
mod plans;
mod plans_nodes;
mod process;
mod progress_hooks;
mod prompt;
mod reliability;
mod reload;
mod retention;
mod search;
mod storage_faults;
mod store;
mod studio;
mod tasks;
mod uploads;
mod usage;
mod webhook_events;
mod webhooks;
