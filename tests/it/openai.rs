//! OpenAI's Images API under `/v1`, through HTTP against a spawned server: the answers' shapes
//! (url and b64_json, png/jpeg/webp), `n` from ceil(n/4) ordinary tasks listed by easel's own
//! API, unknown fields ignored, errors in OpenAI's shape naming `param`, 401, 413 before the body
//! is read, edits with and without a mask, variations, streaming, and `GET /v1/models`. The real
//! `openai` Python client is run against easel by tests/openai_client (scripts/test.sh).

use std::io::Cursor;
use std::time::Duration;

use crate::common::{split, TestApp};
use base64::Engine;
use image::{DynamicImage, ImageFormat, RgbaImage};
use serde_json::{json, Value};

fn png(w: u32, h: u32, alpha: impl Fn(u32, u32) -> u8) -> Vec<u8> {
    let img = RgbaImage::from_fn(w, h, |x, y| {
        image::Rgba([(x * 3) as u8, (y * 5) as u8, 90, alpha(x, y)])
    });
    let mut out = Cursor::new(Vec::new());
    DynamicImage::ImageRgba8(img)
        .write_to(&mut out, ImageFormat::Png)
        .unwrap();
    out.into_inner()
}

async fn post_json(app: &TestApp, auth: &str, path: &str, body: &Value) -> (u16, Value) {
    let res = app
        .http
        .post(app.url(path))
        .header("authorization", auth)
        .json(body)
        .send()
        .await
        .unwrap();
    split(res).await
}

fn bearer(app: &TestApp) -> String {
    format!("Bearer {}", app.key)
}

async fn tasks_listed(app: &TestApp) -> Vec<Value> {
    let (_, listed) = app.get("/api/v1/tasks?limit=100").await;
    listed["tasks"].as_array().unwrap().clone()
}

/// The OpenAI error of an answer: its status, `param` and `code`.
fn error_of(status: u16, body: &Value) -> (u16, Option<&str>, Option<&str>) {
    let error = &body["error"];
    assert!(error["message"].is_string(), "{body}");
    assert!(error["type"].is_string(), "{body}");
    (status, error["param"].as_str(), error["code"].as_str())
}

#[tokio::test]
async fn generations_answer_openais_shape_from_ordinary_tasks() {
    let app = TestApp::spawn().await;
    let auth = bearer(&app);
    // n = 6: two imagine tasks of four images, the first six answered; an unknown field ignored.
    let (status, body) = post_json(
        &app,
        &auth,
        "/v1/images/generations",
        &json!({"prompt": "a red fox", "n": 6, "size": "1536x1024", "response_format": "url",
                "some_future_field": {"x": 1}, "style": "vivid", "user": "u-42"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 6, "{body}");
    assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(body["output_format"], "png");
    assert_eq!(body["quality"], "auto");
    let tasks = tasks_listed(&app).await;
    assert_eq!(tasks.len(), 2, "n = 6 makes two tasks");
    for task in &tasks {
        assert_eq!(task["task_type"], "imagine", "{task}");
        assert_eq!(task["status"], "finished", "{task}");
        assert_eq!(task["prompt"], "a red fox");
        assert_eq!(task["aspect_ratio"], "3:2");
        assert_eq!(task["metadata"]["openai_user"], "u-42", "{task}");
    }
    // Each URL is one of the tasks' own images, fetchable without a key.
    let images: Vec<String> = tasks
        .iter()
        .flat_map(|t| t["image_urls"].as_array().unwrap().clone())
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    let (w, h) = {
        let first = app.image(&data[0]["url"]).await;
        (first.width, first.height)
    };
    assert_eq!(body["size"], format!("{w}x{h}"));
    assert!(w > h, "3:2 is wider than high: {w}x{h}");
    for d in data {
        assert!(
            images.contains(&d["url"].as_str().unwrap().to_string()),
            "{d}"
        );
    }

    // b64_json in JPEG: decodes, the same size.
    let (status, body) = post_json(
        &app,
        &auth,
        "/v1/images/generations",
        &json!({"prompt": "a blue fox", "response_format": "b64_json", "output_format": "jpeg",
                "output_compression": 70, "quality": "high", "background": "opaque"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 1);
    assert_eq!(body["output_format"], "jpeg");
    assert_eq!(body["quality"], "high");
    assert_eq!(body["background"], "opaque");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body["data"][0]["b64_json"].as_str().unwrap())
        .unwrap();
    assert_eq!(&bytes[..3], &[0xFF, 0xD8, 0xFF]);
    let decoded = image::load_from_memory(&bytes).unwrap();
    assert_eq!(
        format!("{}x{}", decoded.width(), decoded.height()),
        body["size"]
    );

    // A url in WebP: kept once, fetchable, a WebP file.
    let (status, body) = post_json(
        &app,
        &app.key,
        "/v1/images/generations",
        &json!({"prompt": "a green fox", "output_format": "webp", "model": "dall-e-3"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let webp = app.bytes(&body["data"][0]["url"]).await;
    assert_eq!(&webp[8..12], b"WEBP");
    assert_eq!(tasks_listed(&app).await.len(), 4);
}

#[tokio::test]
async fn refusals_are_in_openais_shape_and_name_the_param() {
    let app = TestApp::spawn().await;
    let auth = bearer(&app);
    for (body, param) in [
        (json!({"n": 1}), "prompt"),
        (json!({"prompt": 5}), "prompt"),
        (json!({"prompt": "a", "n": 11}), "n"),
        (json!({"prompt": "a", "n": 0}), "n"),
        (json!({"prompt": "a", "n": "2"}), "n"),
        (json!({"prompt": "a", "size": "big"}), "size"),
        (json!({"prompt": "a", "size": "100x1000"}), "size"),
        (
            json!({"prompt": "a", "response_format": "jpg"}),
            "response_format",
        ),
        (
            json!({"prompt": "a", "output_format": "gif"}),
            "output_format",
        ),
        (
            json!({"prompt": "a", "output_compression": 101}),
            "output_compression",
        ),
        (json!({"prompt": "a", "quality": "ultra"}), "quality"),
        (json!({"prompt": "a", "stream": "yes"}), "stream"),
        (
            json!({"prompt": "a", "partial_images": 4}),
            "partial_images",
        ),
        (json!({"prompt": "a", "model": "no-such-model"}), "model"),
        (json!({"prompt": ""}), "prompt"),
    ] {
        let (status, answer) = post_json(&app, &auth, "/v1/images/generations", &body).await;
        assert_eq!(error_of(status, &answer).0, 400, "{body}: {answer}");
        assert_eq!(error_of(status, &answer).1, Some(param), "{body}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error");
    }
    assert!(
        tasks_listed(&app).await.is_empty(),
        "no refusal stores a task"
    );

    // 401: no key, a key easel never made, OpenAI's own key shape.
    for auth in [
        "",
        "Bearer easel_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "Bearer sk-proj-abc",
    ] {
        let (status, answer) = post_json(
            &app,
            auth,
            "/v1/images/generations",
            &json!({"prompt": "a"}),
        )
        .await;
        assert_eq!(
            error_of(status, &answer),
            (401, None, Some("invalid_api_key"))
        );
    }
    let res = app.http.get(app.url("/v1/models")).send().await.unwrap();
    assert_eq!(res.status(), 401);

    // 413 on a form declared over mask_body_limit, answered before the body is sent whole.
    let limit = app.config.limits.mask_body_limit;
    let res = app
        .http
        .post(app.url("/v1/images/edits"))
        .header("authorization", &auth)
        .header("content-type", "multipart/form-data; boundary=x")
        .body(vec![b'x'; limit + 1])
        .send()
        .await
        .unwrap();
    let (status, answer) = split(res).await;
    assert_eq!(error_of(status, &answer).0, 413, "{answer}");
    // A JSON body over body_limit.
    let big = "a ".repeat(app.config.limits.body_limit);
    let (status, answer) = post_json(
        &app,
        &auth,
        "/v1/images/generations",
        &json!({"prompt": big}),
    )
    .await;
    assert_eq!(error_of(status, &answer).0, 413, "{answer}");

    // The models, in OpenAI's list shape.
    let res = app
        .http
        .get(app.url("/v1/models"))
        .header("authorization", &auth)
        .send()
        .await
        .unwrap();
    let (status, models) = split(res).await;
    assert_eq!(status, 200);
    assert_eq!(models["object"], "list");
    let (_, ours) = app.get("/api/v1/models").await;
    let names: Vec<&Value> = ours["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["name"])
        .collect();
    let ids: Vec<&Value> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["id"])
        .collect();
    assert_eq!(ids, names);
    for m in models["data"].as_array().unwrap() {
        assert_eq!(m["object"], "model");
        assert_eq!(m["owned_by"], "easel");
    }

    // The OpenAPI document covers the routes.
    let (_, doc) = app.get("/api/v1/openapi.json").await;
    for path in [
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/images/variations",
        "/v1/models",
    ] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
}

fn form(
    image: Vec<u8>,
    mask: Option<Vec<u8>>,
    fields: &[(&str, &str)],
) -> reqwest::multipart::Form {
    let mut form = reqwest::multipart::Form::new().part(
        "image",
        reqwest::multipart::Part::bytes(image)
            .file_name("image.png")
            .mime_str("image/png")
            .unwrap(),
    );
    if let Some(mask) = mask {
        form = form.part(
            "mask",
            reqwest::multipart::Part::bytes(mask)
                .file_name("mask.png")
                .mime_str("image/png")
                .unwrap(),
        );
    }
    for (name, value) in fields {
        form = form.text(name.to_string(), value.to_string());
    }
    form
}

async fn post_form(app: &TestApp, path: &str, form: reqwest::multipart::Form) -> (u16, Value) {
    let res = app
        .http
        .post(app.url(path))
        .header("authorization", bearer(app))
        .multipart(form)
        .send()
        .await
        .unwrap();
    split(res).await
}

#[tokio::test]
async fn edits_and_variations_become_easels_operations() {
    let app = TestApp::spawn().await;
    let image = png(64, 48, |_, _| 255);
    // Without a mask: an imagine with the image as an image prompt.
    let (status, body) = post_form(
        &app,
        "/v1/images/edits",
        form(
            image.clone(),
            None,
            &[("prompt", "make it snow"), ("n", "2")],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    let tasks = tasks_listed(&app).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["task_type"], "imagine");
    assert_eq!(tasks[0]["prompt"], "make it snow");
    assert_eq!(tasks[0]["image_prompts"].as_array().unwrap().len(), 1);

    // With OpenAI's mask (transparent = redraw): upscale-highres 2x, then inpaint.
    let mask = png(64, 48, |x, _| if x < 32 { 0 } else { 255 });
    let (status, body) = post_form(
        &app,
        "/v1/images/edits",
        form(
            image.clone(),
            Some(mask),
            &[("prompt", "a lake"), ("response_format", "b64_json")],
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let tasks = tasks_listed(&app).await;
    let kinds: Vec<&str> = tasks
        .iter()
        .map(|t| t["task_type"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"upscale-highres") && kinds.contains(&"inpaint"),
        "{kinds:?}"
    );
    let inpaint = tasks.iter().find(|t| t["task_type"] == "inpaint").unwrap();
    assert_eq!(inpaint["prompt"], "a lake");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body["data"][0]["b64_json"].as_str().unwrap())
        .unwrap();
    let first = app.bytes(&inpaint["image_urls"][0]).await;
    assert_eq!(bytes, first, "the answer is the inpaint task's first image");

    // A mask of another size, or without a transparent pixel: 400 naming mask, nothing stored.
    let before = tasks_listed(&app).await.len();
    for mask in [png(10, 10, |_, _| 0), png(64, 48, |_, _| 255)] {
        let (status, body) = post_form(
            &app,
            "/v1/images/edits",
            form(image.clone(), Some(mask), &[("prompt", "x")]),
        )
        .await;
        assert_eq!(
            error_of(status, &body),
            (400, Some("mask"), Some("invalid_image"))
        );
    }
    let (status, body) = post_form(&app, "/v1/images/edits", form(image.clone(), None, &[])).await;
    assert_eq!(error_of(status, &body).1, Some("prompt"), "{body}");
    // A prompt the moderation lists refuse: 400 before the masked edit's upscale is stored.
    let res = app
        .http
        .put(app.url("/api/v1/admin/moderation/lists/test"))
        .header("authorization", &app.key)
        .json(&json!({"terms": ["forbidden"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let mask = png(64, 48, |x, _| if x < 32 { 0 } else { 255 });
    let (status, body) = post_form(
        &app,
        "/v1/images/edits",
        form(image.clone(), Some(mask), &[("prompt", "a forbidden lake")]),
    )
    .await;
    assert_eq!(
        error_of(status, &body),
        (400, Some("prompt"), Some("content_policy"))
    );
    let (status, body) = post_json(
        &app,
        &bearer(&app),
        "/v1/images/generations",
        &json!({"prompt": "a forbidden fox"}),
    )
    .await;
    assert_eq!(
        error_of(status, &body),
        (400, Some("prompt"), Some("content_policy"))
    );
    assert_eq!(tasks_listed(&app).await.len(), before);

    // Variations: upscale-highres 2x, then variations of it.
    let (status, body) = post_form(
        &app,
        "/v1/images/variations",
        form(image, None, &[("n", "5"), ("size", "1024x1024")]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"].as_array().unwrap().len(), 5);
    let tasks = tasks_listed(&app).await;
    let variations = tasks
        .iter()
        .filter(|t| t["task_type"] == "variations")
        .count();
    assert_eq!(variations, 2, "n = 5 makes two variations tasks");
}

#[tokio::test]
async fn a_stream_sends_openais_events_and_a_gone_client_leaves_its_task() {
    // Paced, so that previews are stored (at most one a second) while the task runs.
    let app =
        TestApp::spawn_with(|c| c.worker.procedural_min_duration = Duration::from_secs(3)).await;
    let res = app
        .http
        .post(app.url("/v1/images/generations"))
        .header("authorization", bearer(&app))
        .json(&json!({"prompt": "a fox", "stream": true, "partial_images": 2, "n": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let text = tokio::time::timeout(Duration::from_secs(60), res.text())
        .await
        .unwrap()
        .unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter_map(|block| {
            let event = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((event.to_string(), serde_json::from_str(data).unwrap()))
        })
        .collect();
    let completed: Vec<&Value> = events
        .iter()
        .filter(|(e, _)| e == "image_generation.completed")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(completed.len(), 2, "{text}");
    let partials = events
        .iter()
        .filter(|(e, _)| e == "image_generation.partial_image")
        .count();
    assert!((1..=2).contains(&partials), "{text}");
    for (event, data) in &events {
        assert_eq!(data["type"], event.as_str());
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data["b64_json"].as_str().unwrap())
            .unwrap();
        image::load_from_memory(&bytes).unwrap();
    }
    let tasks = tasks_listed(&app).await;
    assert_eq!(tasks.len(), 1);

    // A client that goes away at once: its task still runs to its end.
    let res = app
        .http
        .post(app.url("/v1/images/generations"))
        .header("authorization", bearer(&app))
        .json(&json!({"prompt": "a hare", "stream": true}))
        .send()
        .await
        .unwrap();
    drop(res);
    let hare = crate::common::wait_for(Duration::from_secs(30), || async {
        tasks_listed(&app)
            .await
            .into_iter()
            .find(|t| t["prompt"] == "a hare" && t["status"] == "finished")
    })
    .await;
    assert!(hare.is_some(), "the task of a gone stream finishes");
}

#[tokio::test]
async fn a_call_refused_part_way_stores_nothing_that_runs_and_charges_nothing() {
    // Paced, so that the first task is still running when the second is refused.
    let app =
        TestApp::spawn_with(|c| c.worker.procedural_min_duration = Duration::from_secs(3)).await;
    // Credits for one imagine (4): n = 8 needs two.
    let (_, key) = app.account_with("poor@example.com", Some(4)).await;
    let (status, body) = post_json(
        &app,
        &format!("Bearer {key}"),
        "/v1/images/generations",
        &json!({"prompt": "two foxes", "n": 8}),
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "insufficient_credits");
    let (_, listed) = app.get_as(&key, "/api/v1/tasks?limit=100").await;
    let tasks = listed["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["status"], "canceled", "the first task is canceled");
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 4, "its credits came back: {account}");
}

#[tokio::test]
async fn a_call_not_ready_within_openai_wait_is_504_and_its_task_goes_on() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.limits.openai_wait = Duration::from_secs(1);
    })
    .await;
    let res = app
        .http
        .post(app.url("/v1/images/generations"))
        .header("authorization", bearer(&app))
        .json(&json!({"prompt": "a slow fox"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.headers()["x-should-retry"],
        "false",
        "the SDKs must not submit again"
    );
    let (status, body) = split(res).await;
    assert_eq!(error_of(status, &body), (504, None, Some("timeout")));
    let tasks = tasks_listed(&app).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["status"], "pending");
    let id = tasks[0]["task_id"].as_str().unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains(id),
        "{body}"
    );
}
