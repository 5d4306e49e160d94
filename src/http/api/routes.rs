//! The API's routes as the contract lists them, and its OpenAPI document. A leaf: the metrics
//! read the route templates from here to label requests.

/// The OpenAPI 3 document of this API, served at `/api/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Every API route the server answers, as (method, path) with `{param}` placeholders. The OpenAPI
/// document lists exactly these; the tests check both against the running router. The
/// dashboard's pages (`crate::http::web::routes`) are HTML for people, not part of the API, and are
/// neither listed here nor documented there.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/api/v1/imagine"),
    ("post", "/api/v1/upscale-1x"),
    ("post", "/api/v1/upscale-alt"),
    ("post", "/api/v1/upscale-highres"),
    ("post", "/api/v1/variations"),
    ("post", "/api/v1/reroll"),
    ("post", "/api/v1/pan"),
    ("post", "/api/v1/outpaint"),
    ("post", "/api/v1/inpaint"),
    ("post", "/api/v1/blend"),
    ("post", "/api/v1/describe"),
    ("post", "/api/v1/shorten"),
    ("post", "/api/v1/seed"),
    ("post", "/api/v1/faceswap"),
    ("post", "/api/v1/midjourney/upscale"),
    ("post", "/api/v1/midjourney/vary"),
    ("post", "/api/v1/midjourney/zoom"),
    ("post", "/api/v1/fetch"),
    ("post", "/api/v1/fetch-many"),
    ("get", "/api/v1/tasks"),
    ("get", "/api/v1/tasks/{task_id}"),
    ("post", "/api/v1/tasks/{task_id}/cancel"),
    ("post", "/api/v1/tasks/{task_id}/redeliver"),
    ("get", "/api/v1/tasks/{task_id}/webhook-attempts"),
    ("get", "/api/v1/tasks/{task_id}/events"),
    ("get", "/api/v1/events"),
    ("post", "/api/v1/upload"),
    ("get", "/api/v1/account"),
    ("get", "/api/v1/models"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_exactly_the_routes() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, ops) in doc["paths"].as_object().expect("paths") {
            for method in ops.as_object().expect("operations").keys() {
                documented.push((method.clone(), path.clone()));
            }
        }
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
    }
}
