//! Midjourney prompt parameters through HTTP: the record's `prompt` without them and its
//! `parameters` beside it, for imagine, shorten and follow-ups; a body field over the same
//! parameter; what the procedural generator draws with `--tile`; and each bad parameter a 400
//! naming it, with nothing stored. Runs on SQLite, or with `EASEL_TEST_STORE=postgres` on
//! PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::backend_mocks::flat;
use crate::backend_mocks::sdwebui::{start_webui, WebUi};
use crate::common::{self, TestApp};
use easel::images::{encode_png, RgbaImage};

const WITHIN: Duration = Duration::from_secs(60);

/// Mean absolute difference (RGB) between column `a` and column `b` of `img`.
fn columns_apart(img: &RgbaImage, a: u32, b: u32) -> f64 {
    let at = |x: u32, y: u32| (y as usize * img.width as usize + x as usize) * 4;
    let sum: u64 = (0..img.height)
        .flat_map(|y| (0..3).map(move |c| (y, c)))
        .map(|(y, c)| u64::from(img.data[at(a, y) + c].abs_diff(img.data[at(b, y) + c])))
        .sum();
    sum as f64 / f64::from(img.height * 3)
}

/// The ids of the tasks of the app's account.
async fn stored(app: &TestApp) -> Vec<Value> {
    let (status, page) = app.get("/api/v1/tasks?limit=100").await;
    assert_eq!(status, 200, "{page}");
    page["tasks"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_shows_the_prompt_without_its_parameters_and_the_parameters_beside_it() {
    let app = TestApp::spawn().await;
    let fox = app
        .finished(
            "imagine",
            json!({"prompt": "a red fox in the snow --ar 2:1 --no trees --seed 42 --chaos 30 \
                          --tile --s 250 --q .5 --style raw --v 6.1"}),
            WITHIN,
        )
        .await;
    assert_eq!(fox["prompt"], "a red fox in the snow");
    assert_eq!(
        fox["parameters"],
        json!({"aspect": "2:1", "no": "trees", "seed": 42, "chaos": 30, "tile": true,
               "stylize": 250, "quality": 0.5, "style": "raw", "version": "6.1"})
    );
    assert_eq!(fox["aspect_ratio"], "2:1");
    assert_eq!(fox["seed"], 42);
    let first = app.image(&fox["image_urls"][0]).await;
    assert_eq!((first.width, first.height), (128, 64));

    // --tile: the left column continues the right one, which it does not without --tile.
    let plain = app
        .finished(
            "imagine",
            json!({"prompt": "a red fox in the snow --ar 2:1 --no trees --seed 42 --chaos 30"}),
            WITHIN,
        )
        .await;
    let (mut tiled_seams, mut plain_seams, mut steps) = (0.0, 0.0, 0.0);
    for i in 0..4 {
        let tiled = app.image(&fox["image_urls"][i]).await;
        let untiled = app.image(&plain["image_urls"][i]).await;
        tiled_seams += columns_apart(&tiled, 127, 0);
        plain_seams += columns_apart(&untiled, 127, 0);
        steps += columns_apart(&tiled, 126, 127).max(columns_apart(&tiled, 0, 1));
    }
    assert!(
        tiled_seams <= 2.0 * steps + 4.0 && plain_seams > 2.0 * tiled_seams,
        "seams: tiled {tiled_seams:.1} (steps beside them {steps:.1}), plain {plain_seams:.1}"
    );

    // A body field wins over the same parameter; the parameters still say what the prompt said.
    let body_wins = app
        .finished(
            "imagine",
            json!({"prompt": "a red fox --ar 2:1 --seed 42", "aspect_ratio": "1:1", "seed": 7}),
            WITHIN,
        )
        .await;
    assert_eq!(body_wins["aspect_ratio"], "1:1");
    assert_eq!(body_wins["seed"], 7);
    assert_eq!(
        body_wins["parameters"],
        json!({"aspect": "2:1", "seed": 42})
    );

    // A follow-up that reuses its parent's prompt reuses its parameters, but draws anew.
    let reroll = app
        .finished("reroll", json!({"parent_task_id": fox["task_id"]}), WITHIN)
        .await;
    assert_eq!(reroll["prompt"], "a red fox in the snow");
    let mut inherited = fox["parameters"].clone();
    inherited.as_object_mut().unwrap().remove("seed");
    assert_eq!(reroll["parameters"], inherited);
    assert_eq!(reroll["aspect_ratio"], "2:1");
    assert_ne!(reroll["seed"], 42);
    let up = app
        .finished(
            "upscale-1x",
            json!({"parent_task_id": fox["task_id"], "index": 1}),
            WITHIN,
        )
        .await;
    assert_eq!(up["prompt"], "a red fox in the snow");
    assert_eq!(up["parameters"], inherited);

    // One with a prompt of its own has that prompt's parameters only.
    let whale = app.finished("reroll", json!({"parent_task_id": fox["task_id"], "prompt": "a blue whale \u{2014}chaos 80 --seed 5"}), WITHIN)
    .await;
    assert_eq!(whale["prompt"], "a blue whale");
    assert_eq!(whale["parameters"], json!({"chaos": 80, "seed": 5}));
    assert_eq!(whale["seed"], 5);
    assert_eq!(whale["aspect_ratio"], "2:1", "the parent's, without --ar");
    let variation = app
        .finished(
            "variations",
            json!({"parent_task_id": fox["task_id"], "index": 2, "prompt": "a fox --ar 1:2"}),
            WITHIN,
        )
        .await;
    assert_eq!(variation["prompt"], "a fox");
    assert_eq!(variation["parameters"], json!({"aspect": "1:2"}));
    assert_eq!(variation["aspect_ratio"], "1:2");

    // Shorten reads the text; a prompt without parameters has no `parameters`.
    let short = app
        .finished(
            "shorten",
            json!({"prompt": "a very beautiful lighthouse on a rocky coast --ar 16:9"}),
            WITHIN,
        )
        .await;
    assert_eq!(
        short["prompt"],
        "a very beautiful lighthouse on a rocky coast"
    );
    assert_eq!(short["parameters"], json!({"aspect": "16:9"}));
    let bare = app
        .finished(
            "imagine",
            json!({"prompt": "rock--paper--scissors"}),
            WITHIN,
        )
        .await;
    assert_eq!(bare["prompt"], "rock--paper--scissors");
    assert!(bare.get("parameters").is_none(), "{bare}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_parameter_is_a_400_naming_it_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let parent = app
        .finished("imagine", json!({"prompt": "a harbour"}), WITHIN)
        .await;
    let parent_id = parent["task_id"].clone();
    let cases = [
        (
            "imagine",
            json!({"prompt": "a fox --foo 3"}),
            "prompt: unknown parameter --foo",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --ar 1:1 --ar 2:1"}),
            "prompt: --ar given twice",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --ar 0:1"}),
            "prompt: --ar must look like \"W:H\" with positive integers, e.g. \"16:9\"",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --no"}),
            "prompt: --no needs words after it",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --chaos 101"}),
            "prompt: --chaos must be 0 to 100",
        ),
        (
            "shorten",
            json!({"prompt": "a fox --q 3"}),
            "prompt: --q must be .25, .5, 1 or 2",
        ),
        (
            "imagine",
            json!({"prompt": "--ar 16:9"}),
            "prompt: has only parameters; the words to draw come before them",
        ),
        (
            "reroll",
            json!({"parent_task_id": parent_id, "prompt": "a fox --tile 3"}),
            "prompt: --tile takes no value (got \"3\"); parameters come at the end of the prompt",
        ),
        (
            "variations",
            json!({"parent_task_id": parent_id, "index": 1, "prompt": "a fox --seed -1"}),
            "prompt: --seed must be an integer from 0 to 4294967295",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --stop 9"}),
            "prompt: --stop must be 10 to 100",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --fast --turbo"}),
            "prompt: --fast and --turbo cannot be used together",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --repeat 41"}),
            "prompt: --repeat must be 1 to 40",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --sref cute"}),
            "prompt: --sref takes image URLs, style codes (digits) or random (got \"cute\")",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --sw 1001"}),
            "prompt: --sw must be 0 to 1000",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --cref 42"}),
            "prompt: --cref takes image URLs (got \"42\")",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --oref data:image/png;base64,!!"}),
            "--oref: ",
        ),
        (
            "imagine",
            json!({"prompt": "a fox --cref https://169.254.169.254/a.png"}),
            "--cref[0]: ",
        ),
        (
            "imagine",
            json!({"prompt": "a fox::-2 --ar 1:1"}),
            "prompt: the :: weights must add up to more than 0",
        ),
        (
            "reroll",
            json!({"parent_task_id": parent_id, "prompt": "a fox --exp 101"}),
            "prompt: --exp must be 0 to 100",
        ),
    ];
    for (op, body, msg) in cases {
        let (status, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
        assert_eq!(status, 400, "{op} {body}: {answer}");
        assert_eq!(answer["errors"][0]["code"], "invalid_value", "{answer}");
        let got = answer["errors"][0]["msg"].as_str().unwrap();
        match msg.strip_suffix(' ') {
            // The image-field checks' own words follow the parameter's name.
            Some(field) => assert!(got.starts_with(field), "{op} {body}: {got}"),
            None => assert_eq!(got, msg, "{op} {body}"),
        }
    }
    // Midjourney's video parameters are known, and no backend here makes video.
    for name in ["video", "motion", "loop", "end"] {
        let body = json!({"prompt": format!("a fox --{name} 1")});
        let (status, answer) = app.post("/api/v1/imagine", &body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["errors"][0]["code"], "unsupported_operation");
        let msg = answer["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(&format!("prompt: --{name}")), "{msg}");
    }
    let tasks = stored(&app).await;
    assert_eq!(tasks.len(), 1, "only the parent: {tasks:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_stored_with_its_parameters_in_its_prompt_passes_them_on_parsed() {
    let app = TestApp::spawn().await;
    // As tasks were stored before prompts were parsed apart: the parameters in the prompt, none
    // in the extras.
    let key = easel::auth::hash_key(&app.key);
    let mut legacy = common::new_task("fast", 1);
    legacy.prompt = "a fox on a hill --ar 2:1 --tile --seed 9".into();
    legacy.aspect_ratio = "2:1".parse().unwrap();
    let id = common::insert(app.store.as_ref(), &legacy, &key).await;
    let parent = app.wait_final(&id.to_string(), WITHIN).await;
    assert_eq!(parent["status"], "finished", "{parent}");
    assert!(parent.get("parameters").is_none(), "{parent}");
    let reroll = app
        .finished("reroll", json!({"parent_task_id": id.to_string()}), WITHIN)
        .await;
    assert_eq!(reroll["prompt"], "a fox on a hill");
    assert_eq!(reroll["parameters"], json!({"aspect": "2:1", "tile": true}));
    // One whose old parameters no longer parse is passed on whole.
    legacy.prompt = "a fox --stopp 50".into();
    let id = common::insert(app.store.as_ref(), &legacy, &key).await;
    app.wait_final(&id.to_string(), WITHIN).await;
    let reroll = app
        .finished("reroll", json!({"parent_task_id": id.to_string()}), WITHIN)
        .await;
    assert_eq!(reroll["prompt"], "a fox --stopp 50");
    assert!(reroll.get("parameters").is_none(), "{reroll}");
}

/// A `data:` URL of a flat 16 x 16 PNG.
fn png_url(shade: u8) -> String {
    use base64::Engine;
    let png = encode_png(&flat(16, 16, shade));
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn todays_midjourney_parameters_are_recorded_and_references_kept_as_uploads() {
    let app = TestApp::spawn().await;
    let prompt = format!(
        "a cabin in the woods::2 snow::0.5 --sref {} 123 --sw 200 --sv 4 --cref {} --cw 40 \
         --oref {} --ow 300 --p abc --stop 80 --draft --exp 25 --raw --turbo",
        png_url(10),
        png_url(20),
        png_url(30)
    );
    let record = app
        .finished("imagine", json!({ "prompt": prompt }), WITHIN)
        .await;
    assert_eq!(record["prompt"], "a cabin in the woods::2 snow::0.5");
    assert_eq!(record["process_mode"], "turbo", "--turbo sets the mode");
    let p = &record["parameters"];
    // Each data: URL is kept as an upload of the account: the record shows its easel URL.
    let kept = |v: &Value| {
        let url = v.as_str().unwrap().to_string();
        assert!(url.starts_with(&app.url("/")), "{url}");
        url
    };
    let (sref, cref, oref) = (kept(&p["sref"][0]), kept(&p["cref"][0]), kept(&p["oref"]));
    assert_eq!(
        p,
        &json!({
            "sref": [sref, "123"], "sw": 200, "sv": 4, "cref": [cref], "cw": 40, "oref": oref,
            "ow": 300, "personalize": ["abc"], "stop": 80, "draft": true, "exp": 25,
            "style": "raw", "process_mode": "turbo",
            "weights": [{"text": "a cabin in the woods", "weight": 2.0},
                        {"text": "snow", "weight": 0.5}],
        })
    );
    // The uploads are the caller's: one of them feeds another task's reference.
    let again = app
        .finished(
            "imagine",
            json!({"prompt": format!("a lake --cref {cref}")}),
            WITHIN,
        )
        .await;
    assert_eq!(again["parameters"]["cref"], json!([cref]));

    // The body's process_mode wins over the prompt's; the parameters still say what it said.
    let relaxed = app
        .finished(
            "imagine",
            json!({"prompt": "a cabin --turbo", "process_mode": "relax"}),
            WITHIN,
        )
        .await;
    assert_eq!(relaxed["process_mode"], "relax");
    assert_eq!(relaxed["parameters"], json!({"process_mode": "turbo"}));
    // `--sref random` is recorded as the code picked for it.
    let random = app
        .finished(
            "imagine",
            json!({"prompt": "a cabin --sref random"}),
            WITHIN,
        )
        .await;
    let code = random["parameters"]["sref"][0].as_str().unwrap();
    assert!(code.bytes().all(|b| b.is_ascii_digit()), "{code}");
    // The same style code, the same look: the same prompt and seed with another code differ.
    let styled = |code: &str| json!({"prompt": format!("a cabin --seed 5 --sref {code}")});
    let a = app.finished("imagine", styled("42"), WITHIN).await;
    let b = app.finished("imagine", styled("42"), WITHIN).await;
    let c = app.finished("imagine", styled("43"), WITHIN).await;
    let image = |r: &Value| r["image_urls"][0].clone();
    let (a, b, c) = (
        app.image(&image(&a)).await,
        app.image(&image(&b)).await,
        app.image(&image(&c)).await,
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webui_gets_fewer_steps_for_stop_and_draft_and_weights_in_its_syntax() {
    let ui = Arc::new(WebUi::default());
    let url = start_webui(ui.clone()).await;
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![serde_json::from_value(json!({
            "name": "gpu", "kind": "sdwebui", "url": url, "timeout": "20s",
        }))
        .unwrap()];
        let mut model = easel::config::ModelConfig {
            name: "sd15".into(),
            backends: vec!["gpu".into()],
            default: true,
            ..Default::default()
        };
        model.defaults.steps = Some(30);
        c.models = vec![model];
    })
    .await;
    for (prompt, steps, text) in [
        ("a fox", 30, "a fox"),
        ("a fox --draft", 15, "a fox"),
        ("a fox --stop 50", 15, "a fox"),
        ("a fox --stop 80 --draft", 12, "a fox"),
        (
            "a red fox::2 (snow)::-0.5 trees",
            30,
            "(a red fox:2) (\\(snow\\):-0.5) (trees:1)",
        ),
    ] {
        let record = app
            .finished("imagine", json!({ "prompt": prompt }), WITHIN)
            .await;
        assert_eq!(record["steps"], steps, "{prompt}: {record}");
        let (_, sent) = ui.last();
        assert_eq!(sent["steps"], steps, "{prompt}");
        assert_eq!(sent["prompt"], text, "{prompt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comfyui_gets_the_reference_images_in_its_placeholders_and_the_weights_and_steps() {
    use crate::backend_mocks::comfyui::ComfyMock;
    let mock = Arc::new(ComfyMock::default());
    let url = mock.start().await;
    let workflow = format!(
        "{}/tests/fixtures/comfyui/txt2img-references.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let app = TestApp::spawn_with(|c| {
        c.backends = vec![serde_json::from_value(json!({
            "name": "comfy", "kind": "comfyui", "url": url, "timeout": "20s",
            "workflow": workflow,
            "nodes": {"sref": "10", "cref": "11", "oref": "12"},
        }))
        .unwrap()];
    })
    .await;
    let prompt = format!(
        "a cabin::2 snow --sref {} 7 --cref {} --oref {} --stop 50",
        png_url(10),
        png_url(20),
        png_url(30)
    );
    let record = app
        .finished("imagine", json!({ "prompt": prompt }), WITHIN)
        .await;
    assert_eq!(record["status"], "finished", "{record}");
    let graph = mock.prompts.lock().unwrap()[0]["prompt"].clone();
    assert_eq!(graph["6"]["inputs"]["text"], "(a cabin:2) (snow:1)");
    // ComfyUI's kind default is 20 steps: half of them.
    assert_eq!(graph["3"]["inputs"]["steps"], 10);
    assert_eq!(record["steps"], 10);
    // Each reference uploaded (the style code is no image) and named in its placeholder.
    let uploads = mock.uploads.lock().unwrap().clone();
    assert_eq!(
        uploads.len(),
        3,
        "{:?}",
        uploads.iter().map(|u| &u.0).collect::<Vec<_>>()
    );
    for (node, shade) in [("10", 10), ("11", 20), ("12", 30)] {
        let name = graph[node]["inputs"]["image"].as_str().unwrap();
        let (_, image) = uploads.iter().find(|(n, _)| n == name).unwrap();
        assert_eq!(image, &flat(16, 16, shade), "node {node}");
    }
}
