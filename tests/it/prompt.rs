//! Midjourney prompt parameters through HTTP: the record's `prompt` without them and its
//! `parameters` beside it, for imagine, shorten and follow-ups; a body field over the same
//! parameter; what the procedural generator draws with `--tile`; and each bad parameter a 400
//! naming it, with nothing stored. Runs on SQLite, or with `EASEL_TEST_STORE=postgres` on
//! PostgreSQL.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{self, TestApp};
use easel::images::RgbaImage;

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
    ];
    for (op, body, msg) in cases {
        let (status, answer) = app.post(&format!("/api/v1/{op}"), &body).await;
        assert_eq!(status, 400, "{op} {body}: {answer}");
        assert_eq!(answer["errors"][0]["code"], "invalid_value", "{answer}");
        assert_eq!(answer["errors"][0]["msg"], msg, "{op} {body}");
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
    legacy.prompt = "a fox --stop 50".into();
    let id = common::insert(app.store.as_ref(), &legacy, &key).await;
    app.wait_final(&id.to_string(), WITHIN).await;
    let reroll = app
        .finished("reroll", json!({"parent_task_id": id.to_string()}), WITHIN)
        .await;
    assert_eq!(reroll["prompt"], "a fox --stop 50");
    assert!(reroll.get("parameters").is_none(), "{reroll}");
}
