//! The JSON API under `/api/v1` and the health checks: a handler per route over the use cases of
//! `crate::tasks`. Each resource's file registers its routes together with their OpenAPI entries
//! (utoipa-axum); the router and the document (`GET /api/v1/openapi.json`) are split from that
//! one registration, once per process, so that no route can be served undocumented or
//! documented unserved.

pub mod account;
pub mod account_webhook;
pub mod admin;
pub mod batch;
pub mod deliveries;
pub mod doc;
pub mod events;
pub mod files;
pub mod health;
pub mod models;
pub mod moderation;
pub mod records;
pub mod reload;
pub mod submit;
pub mod upload;
pub mod usage;

use std::sync::LazyLock;

use axum::http::{header, HeaderName, HeaderValue};
use axum::Router;
use utoipa::openapi::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::state::AppState;

/// The API's router and its document, made once: each app clones the router (a reference
/// count), and the document is served as the text it was serialized to.
struct Api {
    router: Router<AppState>,
    document: OpenApi,
    json: String,
}

static API: LazyLock<Api> = LazyLock::new(|| {
    let (router, mut document) = registered().split_for_parts();
    doc::finish(&mut document);
    let json = document.to_json().expect("the document serializes");
    Api {
        router,
        document,
        json,
    }
});

/// Every route of the API, each with its document entry.
///
/// Full paths rather than a router nested under `/api/v1`: a nested router rewrites every
/// request's URI to strip its prefix (a parse and an allocation per request).
fn registered() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(doc::base())
        .merge(submit::routes())
        .merge(batch::routes())
        .merge(records::routes())
        .merge(deliveries::routes())
        .merge(events::routes())
        .merge(upload::routes())
        .merge(account::routes())
        .merge(account_webhook::routes())
        .merge(usage::routes())
        .merge(admin::routes())
        .merge(models::routes())
        .merge(health::routes())
        .merge(moderation::routes())
        .merge(reload::routes())
        .merge(crate::http::openai::routes())
        .routes(routes!(openapi))
        .merge(files::routes())
}

/// The API's routes, the health checks and the image files.
pub fn routes() -> Router<AppState> {
    API.router.clone()
}

/// The OpenAPI document of the API.
pub fn document() -> &'static OpenApi {
    &API.document
}

/// Every documented path, `{param}` placeholders and all: the metrics' route templates.
pub fn route_templates() -> impl Iterator<Item = &'static str> {
    API.document.paths.paths.keys().map(String::as_str)
}

/// This document
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi",
    security(()),
    responses((status = 200, description = "OpenAPI 3 document", body = Object))
)]
async fn openapi() -> ([(HeaderName, HeaderValue); 1], &'static str) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        &API.json,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every `$ref` in `value`, and every operation a link names.
    fn references<'a>(value: &'a Value, refs: &mut Vec<&'a str>, linked: &mut Vec<&'a str>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(to)) = map.get("$ref") {
                    refs.push(to);
                }
                if let Some(Value::Object(links)) = map.get("links") {
                    linked.extend(links.values().filter_map(|l| l["operationId"].as_str()));
                }
                map.values().for_each(|v| references(v, refs, linked));
            }
            Value::Array(items) => items.iter().for_each(|v| references(v, refs, linked)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_and_every_link_names_an_operation() {
        let doc: Value = serde_json::from_str(&API.json).unwrap();
        let (mut refs, mut linked) = (Vec::new(), Vec::new());
        references(&doc, &mut refs, &mut linked);
        for to in refs {
            let pointer = to
                .strip_prefix('#')
                .expect("a reference inside the document");
            assert!(doc.pointer(pointer).is_some(), "{to} resolves");
        }
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .map(|op| {
                op["operationId"]
                    .as_str()
                    .expect("every operation has an id")
            })
            .collect();
        assert!(!linked.is_empty());
        for id in linked {
            assert!(ids.contains(&id), "a link names {id}");
        }
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all, "operationIds are unique");
    }

    #[test]
    fn the_metrics_get_every_route_template() {
        let templates: Vec<&str> = route_templates().collect();
        for path in [
            "/api/v1/tasks/{task_id}",
            "/healthz",
            "/readyz",
            "/api/v1/openapi.json",
        ] {
            assert!(templates.contains(&path), "{path}");
        }
        assert!(templates.len() > 30);
    }
}
