//! Prometheus metrics: the process's counters and histograms, and their exposition (served by
//! `http::metrics`).
//!
//! Counters and histograms live in one process-wide registry (`METRICS`), so that the places
//! that count (the access log, the workers, the backend pool, the dispatcher, error mapping) need
//! no handle passed down to them. Gauges that describe shared state (the queue, the backends) are
//! computed at scrape time from the store and the pool of the application that serves the scrape.
//!
//! `/metrics` is off unless configured: `metrics_listen` serves it, unauthenticated, on its own
//! address (meant for a private network); `metrics_token` serves it on the main listener to
//! requests carrying `Authorization: Bearer <token>`. See docs/metrics.md.

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry, Unit};

use crate::store::{PlanLoad, QueueRow};

/// The media type of the exposition `prometheus-client` writes (OpenMetrics text, which
/// Prometheus scrapes natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    operation: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreErrorLabels {
    component: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlanLabels {
    plan: String,
    /// `queued` or `running`.
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendName {
    backend: String,
}

/// A model's name: bounded, as the models are the configured ones.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelName {
    model: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms to about 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn generation_histogram() -> Histogram {
    // 50 ms to about 27 minutes.
    Histogram::new(exponential_buckets(0.05, 2.0, 16))
}

fn lag_histogram() -> Histogram {
    // 10 ms to about 45 hours (retries run for hours).
    Histogram::new(exponential_buckets(0.01, 2.5, 20))
}

/// The process's counters and histograms.
struct Metrics {
    registry: Registry,
    http: HistogramFamily<RouteLabels>,
    /// One series per (route, status) resolved on first use and kept, so that a request costs
    /// an index computation and one histogram update, not a hash map lookup.
    http_series: Vec<OnceLock<Histogram>>,
    tasks: Family<TaskLabels, Counter>,
    generation: HistogramFamily<BackendLabels>,
    webhook_attempts: Family<OutcomeLabels, Counter>,
    webhook_lag: Histogram,
    webhook_progress: Family<OutcomeLabels, Counter>,
    store_errors: Family<StoreErrorLabels, Counter>,
    retention_removed: Counter,
    decode_budget_waits: Counter,
    previews: Counter,
    event_streams: Gauge,
    grids: Family<OutcomeLabels, Counter>,
    image_checks: Family<OutcomeLabels, Counter>,
    moderation_refusals: Family<ListLabels, Counter>,
    moderation_checks: Family<CheckLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CheckLabels {
    checker: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListLabels {
    list: String,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("easel");
    let r = &mut registry;
    // Registered in the order written: the order of the exposition.
    Metrics {
        http: registered(
            r,
            "http_request_duration",
            "HTTP requests by route template and status, and how long they took to answer",
            Some(Unit::Seconds),
            HistogramFamily::<RouteLabels>::new_with_constructor(latency_histogram as fn() -> _),
        ),
        http_series: (0..route_labels().len() * STATUSES.len())
            .map(|_| OnceLock::new())
            .collect(),
        tasks: registered(
            r,
            "tasks",
            "Tasks that reached a final state on this node's workers, by operation and status",
            None,
            Family::<TaskLabels, Counter>::default(),
        ),
        generation: registered(
            r,
            "generation_duration",
            "Time one generation took on a backend, by backend and outcome (ok, retry, error, canceled)",
            Some(Unit::Seconds),
            HistogramFamily::<BackendLabels>::new_with_constructor(generation_histogram as fn() -> _),
        ),
        webhook_attempts: registered(
            r,
            "webhook_attempts",
            "Webhook delivery attempts by outcome (delivered, retry, undeliverable)",
            None,
            Family::<OutcomeLabels, Counter>::default(),
        ),
        webhook_lag: registered(
            r,
            "webhook_delivery_lag",
            "Time from a delivery being queued (its task ending, or a redelivery) to its success",
            Some(Unit::Seconds),
            lag_histogram(),
        ),
        webhook_progress: registered(
            r,
            "webhook_progress_deliveries",
            "Progress webhook deliveries by outcome (delivered, failed, dropped: not sent because \
             the node's progress requests in flight were at their bound or the task had no usable \
             secret)",
            None,
            Family::<OutcomeLabels, Counter>::default(),
        ),
        store_errors: registered(
            r,
            "store_errors",
            "Failed store calls by component (api, worker, dispatcher) and kind (unavailable, other)",
            None,
            Family::<StoreErrorLabels, Counter>::default(),
        ),
        retention_removed: registered(
            r,
            "retention_removed_tasks",
            "Tasks whose images this node's retention sweep deleted",
            None,
            Counter::default(),
        ),
        decode_budget_waits: registered(
            r,
            "decode_budget_waits",
            "Tasks whose input images waited for room in this node's decode memory budget",
            None,
            Counter::default(),
        ),
        previews: registered(
            r,
            "previews_written",
            "Preview images of running tasks this node's workers stored",
            None,
            Counter::default(),
        ),
        event_streams: registered(
            r,
            "event_streams",
            "Server-Sent Events streams open on this node",
            None,
            Gauge::default(),
        ),
        grids: registered(
            r,
            "grids",
            "Grids of model backends' images this node made, by when (after_task, on_request, \
             before_task) or failed (an image that does not decode)",
            None,
            Family::<OutcomeLabels, Counter>::default(),
        ),
        image_checks: registered(
            r,
            "image_checks",
            "Callers' images (uploads and data: URLs) by outcome: decoded (checked in full under \
             the uploads' decode budget), or refused before any decode (over_quota: the day's \
             bytes; busy: the account's uploads in progress)",
            None,
            Family::<OutcomeLabels, Counter>::default(),
        ),
        moderation_refusals: registered(
            r,
            "moderation_refusals",
            "Submits refused at submit by a moderation list, by the list's name",
            None,
            Family::<ListLabels, Counter>::default(),
        ),
        moderation_checks: registered(
            r,
            "moderation_checks",
            "Answers of the operator's moderation checkers, by checker (prompt, image) and outcome (pass, flagged, unavailable)",
            None,
            Family::<CheckLabels, Counter>::default(),
        ),
        registry,
    }
});

/// `metric`, registered under `name` with `help` (and its `unit`), for the process to keep.
fn registered<M: Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric: M,
) -> M {
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, metric.clone()),
        None => registry.register(name, help, metric.clone()),
    }
    metric
}

/// The status codes easel answers, each its own label value; anything else is counted by class.
const STATUSES: [&str; 24] = [
    "200", "201", "202", "204", "304", "400", "401", "403", "404", "405", "408", "409", "413",
    "415", "422", "429", "431", "500", "503", "1xx", "2xx", "3xx", "4xx", "5xx",
];

fn status_index(status: u16) -> usize {
    let exact = match status {
        200 => Some(0),
        201 => Some(1),
        202 => Some(2),
        204 => Some(3),
        304 => Some(4),
        400 => Some(5),
        401 => Some(6),
        403 => Some(7),
        404 => Some(8),
        405 => Some(9),
        408 => Some(10),
        409 => Some(11),
        413 => Some(12),
        415 => Some(13),
        422 => Some(14),
        429 => Some(15),
        431 => Some(16),
        500 => Some(17),
        503 => Some(18),
        _ => None,
    };
    exact.unwrap_or(match status {
        0..=199 => 19,
        200..=299 => 20,
        300..=399 => 21,
        400..=499 => 22,
        _ => 23,
    })
}

/// The API's route templates, handed over once by whoever builds the router
/// (`set_route_templates`), so that this module needs nothing of the HTTP layer above it.
static ROUTE_TEMPLATES: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Hand over the API's route templates (`/api/v1/tasks/{task_id}`), before the first request is
/// counted; a node without the API never does, and counts every request under its own path's
/// fixed labels. Later calls change nothing: the series are made for the first list.
pub fn set_route_templates(templates: impl IntoIterator<Item = &'static str>) {
    let _ = ROUTE_TEMPLATES.set(templates.into_iter().collect());
}

/// Every route label: the API's route templates, then the image files, `/metrics`, and `other`
/// for paths no route matches (so that scanners cannot make new series).
fn route_labels() -> &'static [&'static str] {
    static LABELS: LazyLock<Vec<&'static str>> =
        LazyLock::new(|| labels_of(ROUTE_TEMPLATES.get_or_init(Vec::new)));
    &LABELS
}

fn labels_of(templates: &[&'static str]) -> Vec<&'static str> {
    let mut labels = templates.to_vec();
    labels.sort_unstable();
    labels.dedup();
    labels.extend(["/files/{key}", "/metrics", "other"]);
    labels
}

/// Whether `path` matches `template`, whose `{...}` segments match any one non-empty segment.
fn matches(template: &str, path: &str) -> bool {
    if !template.contains('{') {
        return template == path;
    }
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(ts), Some(ps)) if ts.starts_with('{') => {
                if ps.is_empty() {
                    return false;
                }
            }
            (Some(ts), Some(ps)) if ts == ps => {}
            _ => return false,
        }
    }
}

/// The index of the route label for `path`.
fn route_index(path: &str) -> usize {
    index_in(route_labels(), path)
}

fn index_in(labels: &[&str], path: &str) -> usize {
    let last = labels.len() - 1;
    if path.starts_with("/files/") {
        return last - 2;
    }
    if path == "/metrics" {
        return last - 1;
    }
    labels[..last - 2]
        .iter()
        .position(|t| matches(t, path))
        .unwrap_or(last)
}

/// Count one answered request (called by the access log layer).
pub fn observe_request(path: &str, status: u16, elapsed: Duration) {
    let m = &*METRICS;
    let route = route_index(path);
    let status = status_index(status);
    let series = m.http_series[route * STATUSES.len() + status].get_or_init(|| {
        m.http
            .get_or_create_owned(&RouteLabels {
                route: route_labels()[route],
                status: STATUSES[status],
            })
            .clone()
    });
    series.observe(elapsed.as_secs_f64());
}

/// Count a preview a worker stored.
pub fn preview_written() {
    METRICS.previews.inc();
}

/// An event stream opened (`1`) or closed (`-1`).
pub fn event_streams(delta: i64) {
    METRICS.event_streams.inc_by(delta);
}

/// Count a task that reached its final state (`finished`, `failed` or `canceled`).
pub fn task_ended(operation: &'static str, status: &'static str) {
    METRICS
        .tasks
        .get_or_create(&TaskLabels { operation, status })
        .inc();
}

/// Record one generation's time on `backend`; `outcome` is `ok`, `retry` (a transient failure
/// that is tried again), `error` or `canceled` (stopped because its task was canceled).
pub fn generation_done(backend: &str, outcome: &'static str, took: Duration) {
    METRICS
        .generation
        .get_or_create(&BackendLabels {
            backend: backend.to_string(),
            outcome,
        })
        .observe(took.as_secs_f64());
}

/// Count a webhook attempt by the delivery status it led to (`delivered`, `pending` counted as
/// `retry`, `undeliverable`); `lag` is set on success.
pub fn webhook_attempt(status: &'static str, lag: Option<Duration>) {
    let outcome = if status == "pending" { "retry" } else { status };
    METRICS
        .webhook_attempts
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
    if let Some(lag) = lag {
        METRICS.webhook_lag.observe(lag.as_secs_f64());
    }
}

/// Count a progress delivery: `delivered`, `failed` (its one attempt failed) or `dropped`.
pub fn webhook_progress(outcome: &'static str) {
    METRICS
        .webhook_progress
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Count a failed store call made by `component` (`api`, `worker` or `dispatcher`).
pub fn store_error(component: &'static str, kind: &'static str) {
    METRICS
        .store_errors
        .get_or_create(&StoreErrorLabels { component, kind })
        .inc();
}

/// Count tasks whose images the retention sweep deleted.
pub fn retention_removed(tasks: u64) {
    METRICS.retention_removed.inc_by(tasks);
}

/// Count a grid made from a task's four stored images: `after_task`, `on_request`,
/// `before_task`, or `failed`.
pub fn grid_made(outcome: &'static str) {
    METRICS
        .grids
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Count a submit refused by the moderation list `list`.
pub fn moderation_refusal(list: &str) {
    METRICS
        .moderation_refusals
        .get_or_create(&ListLabels {
            list: list.to_string(),
        })
        .inc();
}

/// Count one answer of an operator's checker (`prompt` or `image`): `pass`, `flagged` or
/// `unavailable`.
pub fn moderation_check(checker: &'static str, outcome: &'static str) {
    METRICS
        .moderation_checks
        .get_or_create(&CheckLabels { checker, outcome })
        .inc();
}

/// Count a caller's image checked: `decoded`, `over_quota` or `busy`.
pub fn image_check(outcome: &'static str) {
    METRICS
        .image_checks
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Count a task whose input images wait for room in the decode memory budget.
pub fn decode_budget_wait() {
    METRICS.decode_budget_waits.inc();
}

/// One backend's gauges.
pub struct BackendGauges {
    pub name: String,
    pub up: bool,
    pub in_flight: usize,
}

/// The whole exposition: the process's metrics, then the gauges of the shared state as read now
/// (the operators' page's queue query, whose pending rows are the queue, and the backends).
pub fn render(
    queue: &[QueueRow],
    plans: &[PlanLoad],
    backends: impl IntoIterator<Item = BackendGauges>,
    models: impl IntoIterator<Item = (String, bool)>,
) -> String {
    let mut scrape = Registry::with_prefix("easel");

    let depth = Family::<ModeLabels, Gauge>::default();
    let oldest = Family::<ModeLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    let now = crate::store::now_ms();
    for mode in ["turbo", "fast", "relax"] {
        // Every mode has its series, even when empty, so that dashboards show zero, not nothing.
        let _ = depth.get_or_create(&ModeLabels { mode: mode.into() });
        let _ = oldest.get_or_create(&ModeLabels { mode: mode.into() });
    }
    for row in queue {
        if row.status != "pending" {
            continue;
        }
        let labels = ModeLabels {
            mode: row.process_mode.clone(),
        };
        depth.get_or_create(&labels).set(row.tasks);
        let age = (now - row.oldest_created_at).max(0) as f64 / 1000.0;
        oldest.get_or_create(&labels).set(age);
    }
    scrape.register(
        "queue_depth",
        "Tasks waiting to be claimed, by process mode",
        depth,
    );
    scrape.register_with_unit(
        "queue_oldest_age",
        "Age of the oldest task waiting to be claimed, by process mode (0 when none waits)",
        Unit::Seconds,
        oldest,
    );

    // By plan, not by account: the label's values are the operators' few plans.
    let by_plan = Family::<PlanLabels, Gauge>::default();
    for load in plans {
        for (state, n) in [("queued", load.queued), ("running", load.running)] {
            by_plan
                .get_or_create(&PlanLabels {
                    plan: load.plan.clone(),
                    state: state.into(),
                })
                .set(n);
        }
    }
    scrape.register(
        "account_tasks",
        "Tasks queued and running, summed over the accounts of each plan",
        by_plan,
    );

    let up = Family::<BackendName, Gauge>::default();
    let in_flight = Family::<BackendName, Gauge>::default();
    for backend in backends {
        let labels = BackendName {
            backend: backend.name,
        };
        up.get_or_create(&labels).set(i64::from(backend.up));
        in_flight
            .get_or_create(&labels)
            .set(backend.in_flight as i64);
    }
    scrape.register(
        "backend_up",
        "1 when the backend is taking work, 0 while it is marked down",
        up,
    );
    scrape.register(
        "backend_in_flight",
        "Generations running on the backend now, from this node",
        in_flight,
    );

    let model_up = Family::<ModelName, Gauge>::default();
    for (model, up) in models {
        model_up
            .get_or_create(&ModelName { model })
            .set(i64::from(up));
    }
    scrape.register(
        "model_up",
        "1 when any backend serving the model is taking work, 0 when none is",
        model_up,
    );

    let mut text = String::with_capacity(16 * 1024);
    encode_registry(&mut text, &METRICS.registry).expect("writing to a String");
    encode_registry(&mut text, &scrape).expect("writing to a String");
    encode_eof(&mut text).expect("writing to a String");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_a_bounded_set_of_route_templates() {
        let labels = labels_of(&[
            "/api/v1/imagine",
            "/api/v1/tasks/{task_id}",
            "/api/v1/tasks/{task_id}/redeliver",
        ]);
        let label = |path: &str| labels[index_in(&labels, path)];
        assert_eq!(label("/api/v1/imagine"), "/api/v1/imagine");
        let id = uuid::Uuid::new_v4();
        assert_eq!(
            label(&format!("/api/v1/tasks/{id}")),
            "/api/v1/tasks/{task_id}"
        );
        assert_eq!(
            label(&format!("/api/v1/tasks/{id}/redeliver")),
            "/api/v1/tasks/{task_id}/redeliver"
        );
        assert_eq!(label("/files/a/b/c.png"), "/files/{key}");
        assert_eq!(label("/metrics"), "/metrics");
        assert_eq!(label("/wp-admin/login.php"), "other");
        assert_eq!(label("/api/v1/tasks/"), "other");
        assert_eq!(label("/api/v1/tasks/x/y/z"), "other");
    }

    #[test]
    fn statuses_map_to_a_fixed_set() {
        assert_eq!(STATUSES[status_index(200)], "200");
        assert_eq!(STATUSES[status_index(429)], "429");
        assert_eq!(STATUSES[status_index(418)], "4xx");
        assert_eq!(STATUSES[status_index(502)], "5xx");
        assert_eq!(STATUSES[status_index(101)], "1xx");
        assert_eq!(STATUSES[status_index(302)], "3xx");
    }
}
