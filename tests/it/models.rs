//! Models and generation settings through the HTTP API: `GET /api/v1/models` on the default
//! configuration and with `[[models]]`, the settings a record shows, each refusal of a bad
//! setting (with nothing stored), and a model's tasks reaching only its backends with the
//! values resolved at submit (the WebUI mock records what it was sent).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::common::{self, TestApp};
use easel::config::models::{ModelDefaults, ModelLimits};
use easel::config::ModelConfig;
use easel::generate::backends::BackendConfig;

const WITHIN: Duration = Duration::from_secs(60);

fn webui(name: &str, url: &str) -> BackendConfig {
    serde_json::from_value(json!({
        "name": name, "kind": "sdwebui", "url": url, "timeout": "20s",
    }))
    .unwrap()
}

fn model(name: &str, backends: &[&str]) -> ModelConfig {
    ModelConfig {
        name: name.into(),
        description: format!("{name} for tests"),
        backends: backends.iter().map(|b| b.to_string()).collect(),
        ..ModelConfig::default()
    }
}

async fn tasks_stored(app: &TestApp) -> usize {
    let (status, page) = app.get("/api/v1/tasks").await;
    assert_eq!(status, 200, "{page}");
    page["tasks"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_configuration_lists_its_backend_as_a_model_and_records_the_settings() {
    let app = TestApp::spawn().await;
    let (status, body) = app.get_as("nope", "/api/v1/models").await;
    assert_eq!((status, body), (401, json!({})));
    let (status, body) = app.get("/api/v1/models").await;
    assert_eq!(status, 200, "{body}");
    let models = body["models"].as_array().unwrap();
    assert_eq!(models.len(), 1, "{body}");
    let m = &models[0];
    assert_eq!(m["name"], "procedural");
    assert_eq!(m["up"], true);
    // Without [[models]] no model is the default: a request naming none runs anywhere.
    assert_eq!(m["default"], false);
    assert!(m["operations"]
        .as_array()
        .unwrap()
        .contains(&json!("imagine")));
    assert!(!m["operations"]
        .as_array()
        .unwrap()
        .contains(&json!("shorten")));
    assert_eq!(
        m["defaults"]["steps"],
        Value::Null,
        "procedural takes no steps"
    );
    assert_eq!(m["limits"]["steps"], json!([1, 150]));
    // The procedural generator's own controls: no guidance to scale, no weights syntax, no
    // workflow to take reference images (a style code picks its look: --sref acts).
    assert_eq!(
        m["prompt_parameters"],
        json!([
            "--ar", "--no", "--seed", "--chaos", "--tile", "--iw", "--fast", "--relax", "--turbo",
            "--repeat", "--stop", "--draft", "--sref", "--p"
        ]),
        "{body}"
    );

    // Named, with settings: the record shows the values used.
    let id = app
        .imagine(json!({
            "prompt": "a red fox", "model": "procedural", "steps": 12, "cfg_scale": 4.5,
            "sampler": "euler", "negative_prompt": "trees"
        }))
        .await;
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["model"], "procedural");
    assert_eq!(record["steps"], 12);
    assert_eq!(record["cfg_scale"], 4.5);
    assert_eq!(record["sampler"], "euler");
    assert_eq!(record["negative_prompt"], "trees");
    // A follow-up runs on its parent's model, with its own settings.
    let (status, answer) = app
        .post(
            "/api/v1/upscale-1x",
            &json!({"parent_task_id": id, "index": 1}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let up = app.fetch(answer["task_id"].as_str().unwrap()).await;
    assert_eq!(up["model"], "procedural", "{up}");
    assert!(up.get("steps").is_none(), "{up}");
    // Unnamed: no model, and nothing a procedural backend has no control for.
    let id = app.imagine(json!({"prompt": "a blue fox"})).await;
    let record = app.fetch(&id).await;
    for field in ["model", "steps", "cfg_scale", "sampler", "negative_prompt"] {
        assert!(record.get(field).is_none(), "{field}: {record}");
    }
    // Text operations run on no model.
    let (status, answer) = app
        .post(
            "/api/v1/shorten",
            &json!({"prompt": "a long prompt", "model": "x"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_naming_the_field_and_the_rule_and_nothing_is_stored() {
    let app = TestApp::spawn_with(|c| {
        let mut small = model("small", &["p"]);
        small.limits = ModelLimits {
            steps: Some([1, 10]),
            cfg_scale: Some([1.0, 9.0]),
        };
        small.default = true;
        let pro = model("pro", &["p"]);
        c.plans.plans.insert(
            "self-hosted".into(),
            easel::config::Plan {
                models: Some(vec!["small".into()]),
                ..Default::default()
            },
        );
        c.plans.plans.insert("pro".into(), Default::default());
        c.backends =
            vec![serde_json::from_value(json!({"name": "p", "kind": "procedural"})).unwrap()];
        c.models = vec![small, pro];
    })
    .await;
    let long = "x".repeat(4001);
    let cases = [
        (
            json!({"model": "nope"}),
            "model: there is no model \"nope\"; the models are small, pro",
        ),
        (
            json!({"model": "pro"}),
            "model: the model pro is not available on the account's plan (self-hosted)",
        ),
        (
            json!({"steps": 11}),
            "steps: must be from 1 to 10 for the model small",
        ),
        (
            json!({"steps": 0}),
            "steps: must be from 1 to 10 for the model small",
        ),
        (json!({"steps": "5"}), "steps: must be an integer"),
        (
            json!({"cfg_scale": 9.5}),
            "cfg_scale: must be from 1 to 9 for the model small",
        ),
        (
            json!({"sampler": "warp"}),
            "sampler: \"warp\" is not a sampler its backends know",
        ),
        (
            json!({"negative_prompt": long}),
            "negative_prompt: must be at most 4000 characters (got 4001)",
        ),
        (
            json!({"negative_prompt": "a\u{7}b"}),
            "negative_prompt: must not contain control characters",
        ),
        (
            json!({"negative_prompt": "a\u{202D}b"}),
            "negative_prompt: must not contain bidirectional embedding, override or isolate",
        ),
    ];
    for (extra, message) in cases {
        let mut body = json!({"prompt": "a fox"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, answer) = app.post("/api/v1/imagine", &body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let msg = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(message), "{msg} (expected {message})");
    }
    // A bad key still learns nothing about its body.
    let (status, answer) = app
        .post_as(
            "nope",
            "/api/v1/imagine",
            &json!({"prompt": "a", "model": "nope"}),
        )
        .await;
    assert_eq!((status, answer), (401, json!({})));
    assert_eq!(tasks_stored(&app).await, 0);

    // The default model, its limits listed; the restricted one not listed for this plan.
    let (_, body) = app.get("/api/v1/models").await;
    let names: Vec<&str> = body["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["small"]);
    assert_eq!(body["models"][0]["default"], true);
    assert_eq!(body["models"][0]["limits"]["steps"], json!([1, 10]));
    let id = app.imagine(json!({"prompt": "a fox", "steps": 10})).await;
    assert_eq!(app.fetch(&id).await["model"], "small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_tasks_go_only_to_its_backends_with_the_settings_resolved_at_submit() {
    let a = Arc::new(WebUi {
        shade: 10,
        ..WebUi::default()
    });
    let b = Arc::new(WebUi {
        shade: 100,
        ..WebUi::default()
    });
    let (url_a, url_b) = (start_webui(a.clone()).await, start_webui(b.clone()).await);
    let app = TestApp::spawn_with(|c| {
        let mut only_imagine = webui("gpu-b", &url_b);
        only_imagine.operations = Some(vec!["imagine".into()]);
        c.backends = vec![webui("gpu-a", &url_a), only_imagine];
        let mut sd15 = model("sd15", &["gpu-a"]);
        sd15.checkpoint = Some("v1-5-pruned-emaonly.safetensors".into());
        sd15.default = true;
        let mut xl = model("sdxl", &["gpu-b"]);
        xl.checkpoint = Some("sd_xl_base_1.0.safetensors".into());
        xl.defaults = ModelDefaults {
            steps: Some(25),
            cfg_scale: Some(6.0),
            sampler: Some("dpmpp_2m_karras".into()),
            negative_prompt: Some("blurry".into()),
        };
        c.models = vec![sd15, xl];
        c.server.metrics_token = Some("metrics-token-for-models".into());
    })
    .await;
    let (status, ready) = app.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["backends"][1]["models"], json!(["sdxl"]), "{ready}");
    assert_eq!(
        ready["models"],
        json!([{"name": "sd15", "up": true}, {"name": "sdxl", "up": true}])
    );
    let metrics = app.metrics("metrics-token-for-models").await;
    assert!(
        metrics.contains("easel_model_up{model=\"sdxl\"} 1"),
        "{metrics}"
    );

    // sdxl's defaults, on gpu-b only, four times.
    let mut last = String::new();
    for _ in 0..4 {
        let id = app
            .imagine(json!({"prompt": "a harbour", "model": "sdxl", "aspect_ratio": "3:2"}))
            .await;
        let record = app.wait_final(&id, WITHIN).await;
        assert_eq!(record["status"], "finished", "{record}");
        last = id;
        assert_eq!(
            (&record["model"], &record["steps"], &record["sampler"]),
            (&json!("sdxl"), &json!(25), &json!("dpmpp_2m_karras"))
        );
    }
    assert_eq!(a.jobs.load(Ordering::SeqCst), 0, "gpu-a serves only sd15");
    assert_eq!(b.jobs.load(Ordering::SeqCst), 4);
    let (_, sent) = b.last();
    assert_eq!(sent["negative_prompt"], "blurry");
    assert_eq!(sent["steps"], 25);
    assert_eq!(sent["cfg_scale"], 6.0);
    assert_eq!(sent["sampler_name"], "DPM++ 2M Karras");
    assert_eq!(
        sent["override_settings"]["sd_model_checkpoint"],
        "sd_xl_base_1.0.safetensors"
    );
    let (w, h) = (
        sent["width"].as_u64().unwrap(),
        sent["height"].as_u64().unwrap(),
    );
    assert!(w > h && w % 8 == 0 && h % 8 == 0, "{w}x{h}");

    // sdxl's backend runs only imagine: its follow-ups are refused, unless they name a model
    // that can run them.
    let variation = json!({"parent_task_id": last, "index": 1});
    let (status, answer) = app.post("/api/v1/variations", &variation).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["errors"][0]["code"], "unsupported_operation");
    assert_eq!(
        answer["errors"][0]["msg"],
        "variations: no backend of the model sdxl can run this operation"
    );
    let mut elsewhere = variation.clone();
    elsewhere["model"] = json!("sd15");
    let (status, answer) = app.post("/api/v1/variations", &elsewhere).await;
    assert_eq!(status, 200, "{answer}");
    let record = app
        .wait_final(answer["task_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(
        (&record["status"], &record["model"]),
        (&json!("finished"), &json!("sd15"))
    );
    assert_eq!(
        a.jobs.load(Ordering::SeqCst),
        1,
        "the variation ran on gpu-a"
    );

    // The default model, with the body's values over the kind's defaults.
    let id = app
        .imagine(json!({
            "prompt": "a harbour", "steps": 8, "sampler": "ddim", "negative_prompt": "gulls"
        }))
        .await;
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["model"], "sd15", "{record}");
    assert_eq!(record["cfg_scale"], 7.0, "the sdwebui kind's default");
    assert_eq!(a.jobs.load(Ordering::SeqCst), 2);
    let (_, sent) = a.last();
    assert_eq!(
        (
            &sent["steps"],
            &sent["sampler_name"],
            &sent["negative_prompt"]
        ),
        (&json!(8), &json!("DDIM"), &json!("gulls"))
    );
    assert_eq!(
        sent["override_settings"]["sd_model_checkpoint"],
        "v1-5-pruned-emaonly.safetensors"
    );
    // A follow-up stays on its parent's model (and so on gpu-a).
    let (status, answer) = app
        .post(
            "/api/v1/variations",
            &json!({"parent_task_id": id, "index": 2}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let record = app
        .wait_final(answer["task_id"].as_str().unwrap(), WITHIN)
        .await;
    assert_eq!(record["model"], "sd15", "{record}");
    assert_eq!(a.jobs.load(Ordering::SeqCst), 3);
    assert_eq!(b.jobs.load(Ordering::SeqCst), 4);

    // The prompt's parameters reach the WebUI as its own controls.
    let id = app
        .imagine(json!({
            "prompt": "a harbour --no boats, gulls --stylize 1000 --tile --chaos 50 --ar 16:9 --seed 5"
        }))
        .await;
    let record = app.wait_final(&id, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["prompt"], "a harbour");
    assert_eq!(record["negative_prompt"], "boats, gulls");
    let (_, sent) = a.last();
    assert_eq!(sent["prompt"], "a harbour");
    assert_eq!(sent["negative_prompt"], "boats, gulls");
    assert_eq!(sent["seed"], 5);
    assert_eq!(sent["tiling"], true);
    assert!(sent["subseed_strength"].as_f64().unwrap() > 0.0, "{sent}");
    let cfg = sent["cfg_scale"].as_f64().unwrap();
    assert!(
        cfg < 7.0 && cfg == record["cfg_scale"].as_f64().unwrap(),
        "{cfg}"
    );
    let (w, h) = (
        sent["width"].as_f64().unwrap(),
        sent["height"].as_f64().unwrap(),
    );
    assert!((w / h - 16.0 / 9.0).abs() < 0.1, "{w}x{h}");
    // A body field wins over the same parameter.
    let id = app
        .imagine(json!({"prompt": "a harbour --no boats", "negative_prompt": "fog"}))
        .await;
    app.wait_final(&id, WITHIN).await;
    assert_eq!(a.last().1["negative_prompt"], "fog");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sends_the_model_and_settings_and_lists_the_models() {
    let app = TestApp::spawn().await;
    let (base, key) = (app.base.clone(), app.key.clone());
    let run = move |args: &[&str]| {
        let output = std::process::Command::new(common::binary::BIN)
            .args(args)
            .args(["--url", &base])
            .env("EASEL_API_KEY", &key)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let (printed, listed) = tokio::task::spawn_blocking(move || {
        let printed = run(&[
            "imagine",
            "a fox --no trees",
            "--model",
            "procedural",
            "--steps",
            "20",
            "--cfg-scale",
            "5",
            "--sampler",
            "heun",
            "--wait",
            "--json",
        ]);
        (printed, run(&["models"]))
    })
    .await
    .unwrap();
    let record: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(
        (
            &record["model"],
            &record["steps"],
            &record["cfg_scale"],
            &record["sampler"]
        ),
        (
            &json!("procedural"),
            &json!(20),
            &json!(5.0),
            &json!("heun")
        )
    );
    assert!(listed.starts_with("procedural"), "{listed}");
    assert!(listed.contains(" up "), "{listed}");
}

fn comfyui(name: &str, url: &str, workflow: &str, nodes: Value) -> BackendConfig {
    let workflow = format!(
        "{}/tests/fixtures/comfyui/{workflow}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_value(json!({
        "name": name, "kind": "comfyui", "url": url, "timeout": "20s",
        "workflow": workflow, "nodes": nodes,
    }))
    .unwrap()
}

/// Each model's `prompt_parameters` through `GET /api/v1/models`: what its backends' kinds,
/// dialects and workflows' placeholders give, and only what every one of its backends has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_model_lists_the_prompt_parameters_that_act_on_its_backends() {
    use crate::backend_mocks::comfyui::ComfyMock;
    let mock = Arc::new(ComfyMock::default());
    let comfy_url = mock.start().await;
    let ui = Arc::new(WebUi::default());
    let ui_url = start_webui(ui).await;
    let app = TestApp::spawn_with(|c| {
        let openai = |name: &str, dialect: Option<&str>| -> BackendConfig {
            let mut b = json!({
                "name": name, "kind": "openai", "url": "http://127.0.0.1:9/v1", "api_key": "k",
            });
            if let Some(d) = dialect {
                b["dialect"] = json!(d);
            }
            serde_json::from_value(b).unwrap()
        };
        c.backends = vec![
            comfyui("plain", &comfy_url, "txt2img.json", json!({})),
            comfyui(
                "refs",
                &comfy_url,
                "txt2img-references.json",
                json!({"sref": "10", "cref": "11", "oref": "12"}),
            ),
            comfyui(
                "style-only",
                &comfy_url,
                "txt2img-references.json",
                json!({"sref": "10"}),
            ),
            webui("ui", &ui_url),
            openai("dalle", None),
            openai("sdcpp", Some("sd-cpp")),
            openai("sdcpp-steps", Some("sd-cpp")),
        ];
        let mut sdcpp_steps = model("sdcpp-steps", &["sdcpp-steps"]);
        sdcpp_steps.defaults = ModelDefaults {
            steps: Some(20),
            cfg_scale: Some(5.0),
            ..ModelDefaults::default()
        };
        c.models = vec![
            model("plain", &["plain"]),
            model("refs", &["refs"]),
            model("style-only", &["style-only"]),
            model("ui", &["ui"]),
            // A task of it may run on either: what both have.
            model("mixed", &["ui", "refs"]),
            model("dalle", &["dalle"]),
            model("sdcpp", &["sdcpp"]),
            sdcpp_steps,
        ];
    })
    .await;
    let (status, body) = app.get("/api/v1/models").await;
    assert_eq!(status, 200, "{body}");
    let listed = |name: &str| -> Vec<String> {
        let m = body["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no model {name}: {body}"));
        serde_json::from_value(m["prompt_parameters"].clone()).unwrap()
    };
    let queue = ["--fast", "--relax", "--turbo", "--repeat"];
    let with = |first: &[&str], last: &[&str]| -> Vec<String> {
        first
            .iter()
            .chain(queue.iter())
            .chain(last.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let comfy_first = ["--ar", "--no", "--seed", "--stylize", "--iw"];
    assert_eq!(
        listed("plain"),
        with(&comfy_first, &["--stop", "--draft", "::"]),
        "a workflow without placeholders takes no reference images"
    );
    assert_eq!(
        listed("refs"),
        with(
            &comfy_first,
            &["--stop", "--draft", "--sref", "--cref", "--oref", "::"]
        )
    );
    assert_eq!(
        listed("style-only"),
        with(&comfy_first, &["--stop", "--draft", "--sref", "::"])
    );
    let ui_first = [
        "--ar",
        "--no",
        "--seed",
        "--chaos",
        "--stylize",
        "--tile",
        "--iw",
    ];
    assert_eq!(listed("ui"), with(&ui_first, &["--stop", "--draft", "::"]));
    assert_eq!(
        listed("mixed"),
        with(&comfy_first, &["--stop", "--draft", "::"]),
        "the WebUI's --chaos and --tile and the workflow's references are not on both"
    );
    assert_eq!(listed("dalle"), with(&["--ar"], &[]));
    assert_eq!(
        listed("sdcpp"),
        with(&["--ar", "--no", "--seed", "--iw"], &[]),
        "no default steps or guidance for --stop, --draft, --stylize to scale"
    );
    assert_eq!(
        listed("sdcpp-steps"),
        with(
            &["--ar", "--no", "--seed", "--stylize", "--iw"],
            &["--stop", "--draft"]
        )
    );

    // What the list says is what reaches the backend: the same prompt's reference images are
    // uploaded into the workflow that declares placeholders, and not to the one without.
    let reference = {
        use base64::Engine;
        let png = easel::images::encode_png(&crate::backend_mocks::flat(16, 16, 40));
        let b64 = base64::engine::general_purpose::STANDARD.encode(png);
        format!("data:image/png;base64,{b64}")
    };
    let prompt = format!("a cabin --sref {reference} --cref {reference} --oref {reference}");
    for (model, uploads) in [("plain", 0), ("refs", 3)] {
        let before = mock.uploads.lock().unwrap().len();
        let record = app
            .finished("imagine", json!({"prompt": prompt, "model": model}), WITHIN)
            .await;
        assert_eq!(record["status"], "finished", "{record}");
        let after = mock.uploads.lock().unwrap().len();
        assert_eq!(after - before, uploads, "{model}");
    }
}
