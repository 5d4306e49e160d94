//! The studio through HTTP, as a browser without JavaScript uses it: Create's form makes an
//! imagine charged to the signed-in account (no key pasted), a bad prompt comes back with the
//! parser's error and stores nothing, a second send of one form makes one task, a finished
//! task's buttons make the follow-ups of its record's `actions`, and the region editor's form
//! makes an inpaint of the painted mask. Every form is refused without its CSRF token. The
//! editor's painting itself, and Create's live feed, are in tests/browser/studio.test.mjs.

use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::common::{self, TestApp};
use crate::dashboard::{Browser, Page};
use easel::generate::ops;
use easel::images::{encode_png, RgbaImage};

const WITHIN: Duration = Duration::from_secs(30);

/// Create's form as the page sends it without script (`multipart/form-data`, for its files).
async fn create(b: &mut Browser, csrf: &str, fields: &[(&str, &str)], images: &[Vec<u8>]) -> Page {
    let mut form = reqwest::multipart::Form::new().text("csrf", csrf.to_string());
    for (name, value) in fields {
        form = form.text(name.to_string(), value.to_string());
    }
    for image in images {
        form = form.part(
            "image",
            reqwest::multipart::Part::bytes(image.clone()).file_name("reference.png"),
        );
    }
    let res = b
        .http
        .post(format!("{}/studio/create", b.base))
        .header("cookie", b.cookie_header())
        .header("origin", b.base.clone())
        .multipart(form)
        .send()
        .await
        .unwrap();
    b.keep(res).await
}

/// The value of the hidden `name` field of the page's first form that has one.
fn hidden(page: &Page, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page
        .body
        .find(&marker)
        .unwrap_or_else(|| panic!("a {name} field in: {}", page.body));
    let rest = &page.body[at + marker.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn tasks_of(app: &TestApp, key: &str) -> Vec<Value> {
    let (status, body) = app.get_as(key, "/api/v1/tasks").await;
    assert_eq!(status, 200, "{body}");
    body["tasks"].as_array().unwrap().clone()
}

async fn credits(app: &TestApp, key: &str) -> Value {
    app.get_as(key, "/api/v1/account").await.1["credits"].clone()
}

fn task_of(location: &str) -> String {
    location
        .strip_prefix("/tasks/")
        .unwrap_or_else(|| panic!("a task's page: {location}"))
        .to_string()
}

fn png(width: u32, height: u32) -> Vec<u8> {
    let mut image = RgbaImage::new(width, height);
    for px in image.data.chunks_exact_mut(4) {
        px.copy_from_slice(&[40, 120, 200, 255]);
    }
    encode_png(&image)
}

#[tokio::test]
async fn create_makes_an_imagine_charged_to_the_signed_in_account_once_per_form() {
    let app = TestApp::spawn_with(|c| {
        c.accounts.costs.insert("imagine".into(), 7);
    })
    .await;
    let mut b = Browser::new(&app);
    // The key is only the test's way to read the account through the API.
    let key = b.sign_up_with_key("maker@example.com", "reader").await;
    let before = credits(&app, &key).await;

    let home = b.get("/").await;
    assert_eq!(home.status, 200);
    for label in [
        ">Prompt<",
        ">Aspect ratio<",
        ">Model<",
        ">Steps<",
        ">Guidance<",
        ">Sampler<",
        ">Negative prompt<",
        ">Mode<",
        ">Add image<",
        ">Generate<",
    ] {
        assert!(home.body.contains(label), "{label} on Create");
    }
    let (csrf, idem) = (home.csrf(), hidden(&home, "idempotency"));
    let fields = [
        ("prompt", "a lighthouse at dusk --ar 16:9"),
        ("process_mode", "relax"),
        ("steps", "12"),
        ("idempotency", idem.as_str()),
    ];
    let made = create(&mut b, &csrf, &fields, &[]).await;
    assert_eq!(made.status, 303, "{}", made.body);
    assert_eq!(made.location(), "/");
    // A second click on the same form is answered with the first one's task.
    let again = create(&mut b, &csrf, &fields, &[]).await;
    assert_eq!(again.status, 303, "{}", again.body);

    let tasks = tasks_of(&app, &key).await;
    assert_eq!(tasks.len(), 1, "one task for one form: {tasks:?}");
    let task = &tasks[0];
    assert_eq!(task["task_type"], "imagine");
    assert_eq!(task["prompt"], "a lighthouse at dusk");
    assert_eq!(task["aspect_ratio"], "16:9");
    assert_eq!(task["process_mode"], "relax");
    let id = task["task_id"].as_str().unwrap();
    let record = app.wait_final_as(&key, id, WITHIN).await;
    assert_eq!(record["status"], "finished", "{record}");
    assert_eq!(record["cost"], 7, "{record}");
    assert_eq!(
        credits(&app, &key).await,
        before.as_i64().unwrap() - 7,
        "charged as the API charges"
    );
    // The feed under the form shows it, and the studio's own key is no key of the account's list.
    let home = b.get("/").await;
    assert!(
        home.body.contains(&format!("data-task=\"{id}\"")),
        "{}",
        home.body
    );
    let keys = b.get("/keys").await;
    assert!(
        keys.body.contains("reader") && !keys.body.contains("Studio"),
        "{}",
        keys.body
    );

    // An image prompt: the file is kept as an upload of the account and starts the prompt.
    let home = b.get("/").await;
    let idem = hidden(&home, "idempotency");
    let fields = [("prompt", "in this style"), ("idempotency", idem.as_str())];
    let made = create(&mut b, &csrf, &fields, &[png(64, 64)]).await;
    assert_eq!(made.status, 303, "{}", made.body);
    let tasks = tasks_of(&app, &key).await;
    assert_eq!(tasks.len(), 2);
    let prompts = tasks[0]["image_prompts"].as_array().expect("image prompts");
    assert_eq!(prompts.len(), 1, "{}", tasks[0]);
    assert!(
        prompts[0].as_str().unwrap().contains("/uploads/"),
        "{prompts:?}"
    );
}

#[tokio::test]
async fn a_refused_create_shows_the_reason_beside_its_field_and_stores_nothing() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("typo@example.com", "reader").await;
    let before = credits(&app, &key).await;
    let home = b.get("/").await;
    let (csrf, idem) = (home.csrf(), hidden(&home, "idempotency"));

    // The API's own parser and its words, beside the prompt; the form comes back as sent.
    let (status, api) = app
        .post_as(
            &key,
            "/api/v1/imagine",
            &json!({"prompt": "a fox --ar 16:9 --bogus 3"}),
        )
        .await;
    assert_eq!(status, 400);
    let message = api["errors"][0]["msg"].as_str().unwrap().to_string();
    let bad = [
        ("prompt", "a fox --ar 16:9 --bogus 3"),
        ("idempotency", idem.as_str()),
    ];
    for images in [vec![], vec![png(32, 32)]] {
        let page = create(&mut b, &csrf, &bad, &images).await;
        assert_eq!(page.status, 400, "{}", page.body);
        assert!(page.body.contains("id=\"c-prompt-error\""), "{}", page.body);
        let escaped = message
            .replace('&', "&amp;")
            .replace('"', "&#34;")
            .replace('\'', "&#39;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(
            page.body.contains(&message) || page.body.contains(&escaped),
            "{message} in {}",
            page.body
        );
        assert!(page.body.contains("a fox --ar 16:9 --bogus 3</textarea>"));
    }
    // Steps outside the model's limits: beside Steps.
    let page = create(
        &mut b,
        &csrf,
        &[("prompt", "a fox"), ("steps", "100000")],
        &[],
    )
    .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("id=\"c-steps-error\""), "{}", page.body);
    // A file that is not an image: said beside the file field.
    let page = create(
        &mut b,
        &csrf,
        &[("prompt", "a fox")],
        &[b"not a picture".to_vec()],
    )
    .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("id=\"c-image-error\""), "{}", page.body);

    assert!(tasks_of(&app, &key).await.is_empty(), "nothing stored");
    assert_eq!(credits(&app, &key).await, before);
    // Every upload expires some time: none at all is kept.
    let uploads = app.store.expired_uploads(i64::MAX, 100).await.unwrap();
    assert!(
        uploads.is_empty(),
        "no upload kept for a refused form: {uploads:?}"
    );
}

#[tokio::test]
async fn studio_forms_without_their_token_or_from_another_site_are_refused() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("forged@example.com", "reader").await;
    let parent = app.imagine_as(&key, json!({"prompt": "a grid"})).await;
    app.wait_final_as(&key, &parent, WITHIN).await;
    let page = b.get(&format!("/tasks/{parent}")).await;
    let csrf = page.csrf();

    let forged = create(&mut b, "0000", &[("prompt", "a forged fox")], &[]).await;
    assert_eq!(forged.status, 403);
    let forged = b
        .post(&format!("/tasks/{parent}/follow-up"), &[("label", "U1")])
        .await;
    assert_eq!(forged.status, 403);
    let elsewhere = b
        .post_from(
            &format!("/tasks/{parent}/follow-up"),
            &[("csrf", &csrf), ("label", "U1")],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    let forged = b
        .post("/studio/region", &[("task", &parent), ("mask", "data:,")])
        .await;
    assert_eq!(forged.status, 403);
    assert_eq!(tasks_of(&app, &key).await.len(), 1, "nothing made");
}

#[tokio::test]
async fn a_finished_tasks_buttons_make_its_records_actions_for_the_session_account() {
    let app = TestApp::spawn_with(|c| {
        c.accounts.costs.insert("upscale-1x".into(), 3);
        c.retention.keep = None;
    })
    .await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("buttons@example.com", "reader").await;
    let grid = app.imagine_as(&key, json!({"prompt": "a red kite"})).await;
    let record = app.wait_final_as(&key, &grid, WITHIN).await;
    let page = b.get(&format!("/tasks/{grid}")).await;
    assert_eq!(page.status, 200);
    // One button per action of the record, named by its label (the reroll arrows by what
    // they do).
    for action in record["actions"].as_array().unwrap() {
        let label = action["label"].as_str().unwrap();
        assert!(
            page.body
                .contains(&format!("name=\"label\" value=\"{label}\"")),
            "{label} in {}",
            page.body
        );
    }
    for name in [
        ">U2<",
        ">V4<",
        "</span> Reroll<",
        ">Copy prompt<",
        ">Use as image prompt<",
        ">Download<",
    ] {
        assert!(page.body.contains(name), "{name}");
    }
    assert!(
        !page.body.contains(">Vary (Region)<"),
        "a grid has no region to vary"
    );
    // `Use as image prompt`: Create with the image starting the prompt.
    let marker = "href=\"/?image_prompt=";
    let at = page.body.find(marker).expect("Use as image prompt");
    let href = &page.body[at + "href=\"".len()..];
    let href = href[..href.find('"').unwrap()].replace("&amp;", "&");
    let create = b.get(&href).await;
    let image = record["original_image_url"].as_str().unwrap();
    assert!(
        create.body.contains(&format!(">{image} </textarea>")),
        "{image} starts the prompt: {}",
        create.body
    );
    let before = credits(&app, &key).await.as_i64().unwrap();

    let (csrf, idem) = (page.csrf(), hidden(&page, "idempotency"));
    let form = [
        ("csrf", csrf.as_str()),
        ("label", "U2"),
        ("idempotency", idem.as_str()),
    ];
    let made = b.post(&format!("/tasks/{grid}/follow-up"), &form).await;
    assert_eq!(made.status, 303, "{}", made.body);
    let up = task_of(made.location());
    // The same button twice: the same task.
    let again = b.post(&format!("/tasks/{grid}/follow-up"), &form).await;
    assert_eq!(again.location(), made.location());
    let upscale = app.wait_final_as(&key, &up, WITHIN).await;
    assert_eq!(upscale["task_type"], "upscale-1x");
    assert_eq!(upscale["parent_task_id"], grid.as_str());
    assert_eq!(upscale["index"], 2);
    assert_eq!(upscale["cost"], 3);
    assert_eq!(credits(&app, &key).await, before - 3);

    // The upscale offers its own: variations, zoom, pan by name, and the region editor.
    let page = b.get(&format!("/tasks/{up}")).await;
    for name in [
        ">Vary (Strong)<",
        ">Zoom Out 2x<",
        "</span> Pan right<",
        ">Vary (Region)<",
    ] {
        assert!(page.body.contains(name), "{name} in {}", page.body);
    }
    let csrf = page.csrf();
    let idem = hidden(&page, "idempotency");
    let pan = b
        .post(
            &format!("/tasks/{up}/follow-up"),
            &[
                ("csrf", csrf.as_str()),
                ("label", "➡️"),
                ("idempotency", idem.as_str()),
            ],
        )
        .await;
    assert_eq!(pan.status, 303, "{}", pan.body);
    let pan = app.fetch_as(&key, &task_of(pan.location())).await;
    assert_eq!(pan["task_type"], "pan");
    assert_eq!(pan["direction"], "right");

    // A label the record does not offer: said, nothing made.
    let count = tasks_of(&app, &key).await.len();
    let refused = b
        .post(
            &format!("/tasks/{up}/follow-up"),
            &[("csrf", csrf.as_str()), ("label", "U1")],
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("not one of the follow-ups"),
        "{}",
        refused.body
    );
    // Another account's task is not there.
    let mut other = Browser::new(&app);
    other.sign_up_with_key("other@example.com", "theirs").await;
    let theirs = other.get("/").await.csrf();
    let stranger = other
        .post(
            &format!("/tasks/{grid}/follow-up"),
            &[("csrf", theirs.as_str()), ("label", "U1")],
        )
        .await;
    assert_eq!(stranger.status, 404);
    assert_eq!(tasks_of(&app, &key).await.len(), count);
}

#[tokio::test]
async fn follow_ups_of_a_task_whose_images_are_gone_are_refused_with_a_message() {
    let app = TestApp::spawn_with(|c| {
        c.retention.keep = Some(Duration::from_secs(1));
        c.retention.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("gone@example.com", "reader").await;
    let grid = app
        .imagine_as(&key, json!({"prompt": "a fading kite"}))
        .await;
    common::wait_for(WITHIN, || async {
        let t = app.fetch_as(&key, &grid).await;
        (t["data_removed"] == true).then_some(())
    })
    .await
    .expect("the images were removed");
    let page = b.get(&format!("/tasks/{grid}")).await;
    assert!(
        !page.body.contains("follow-up"),
        "no buttons: {}",
        page.body
    );
    let csrf = page.csrf();
    let refused = b
        .post(
            &format!("/tasks/{grid}/follow-up"),
            &[("csrf", csrf.as_str()), ("label", "U1")],
        )
        .await;
    assert_eq!(refused.status, 400);
    assert!(refused.body.contains("no longer kept"), "{}", refused.body);
    assert_eq!(tasks_of(&app, &key).await.len(), 1);
}

/// A mask of `size`, white (redraw) inside `x0..x1` x `y0..y1`, black elsewhere: what the editor
/// sends for a rectangle.
fn mask(size: u32, (x0, y0, x1, y1): (u32, u32, u32, u32)) -> (RgbaImage, String) {
    let mut mask = RgbaImage::new(size, size);
    for (i, px) in mask.data.chunks_exact_mut(4).enumerate() {
        let (x, y) = (i as u32 % size, i as u32 / size);
        let inside = (x0..x1).contains(&x) && (y0..y1).contains(&y);
        let v = if inside { 255 } else { 0 };
        px.copy_from_slice(&[v, v, v, 255]);
    }
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(encode_png(&mask))
    );
    (mask, url)
}

#[tokio::test]
async fn the_region_editor_makes_an_inpaint_of_its_mask_and_refuses_an_empty_one() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("region@example.com", "reader").await;
    let grid = app.imagine_as(&key, json!({"prompt": "a blue door"})).await;
    app.wait_final_as(&key, &grid, WITHIN).await;
    let up = app
        .submit_as(
            &key,
            "upscale-1x",
            json!({"parent_task_id": grid, "index": 1}),
        )
        .await;
    let upscale = app.wait_final_as(&key, &up, WITHIN).await;
    let parent = app.image(&upscale["image_url"]).await;
    let size = parent.width;

    let editor = b.get(&format!("/tasks/{up}/region")).await;
    assert_eq!(editor.status, 200, "{}", editor.body);
    assert!(editor
        .body
        .contains("role=\"application\" aria-label=\"Region editor\""));
    assert!(editor.body.contains(&format!("data-width=\"{size}\"")));
    assert!(editor.body.contains(">Submit region<"));
    // A grid has no region editor.
    assert_eq!(b.get(&format!("/tasks/{grid}/region")).await.status, 400);
    let csrf = editor.csrf();
    let idem = hidden(&editor, "idempotency");

    // An empty mask and one of another size: the API's reasons, on the editor; nothing made.
    let count = tasks_of(&app, &key).await.len();
    let (_, empty) = mask(size, (0, 0, 0, 0));
    let (_, small) = mask(size / 2, (0, 0, 8, 8));
    for (bad, says) in [
        (empty, "marks no pixel"),
        (small, "must be the parent image"),
        (String::new(), "paint the region"),
    ] {
        let page = b
            .post(
                "/studio/region",
                &[
                    ("csrf", csrf.as_str()),
                    ("task", up.as_str()),
                    ("mask", bad.as_str()),
                ],
            )
            .await;
        assert_eq!(page.status, 400, "{}", page.body);
        assert!(page.body.contains(says), "{says} in {}", page.body);
        assert!(page.body.contains("Region editor"), "the editor again");
    }
    assert_eq!(tasks_of(&app, &key).await.len(), count, "nothing made");

    let rect = (size / 4, size / 4, size / 2, size / 2);
    let (painted, url) = mask(size, rect);
    let made = b
        .post(
            "/studio/region",
            &[
                ("csrf", csrf.as_str()),
                ("task", up.as_str()),
                ("mask", url.as_str()),
                ("prompt", "a brass knocker"),
                ("idempotency", idem.as_str()),
            ],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let inpaint = app
        .wait_final_as(&key, &task_of(made.location()), WITHIN)
        .await;
    assert_eq!(inpaint["task_type"], "inpaint");
    assert_eq!(inpaint["status"], "finished", "{inpaint}");
    assert_eq!(inpaint["parent_task_id"], up.as_str());
    assert_eq!(inpaint["prompt"], "a brass knocker");
    // Only what was painted changes.
    for url in inpaint["image_urls"].as_array().unwrap() {
        let img = app.image(url).await;
        let mut changed = 0;
        for (i, (a, p)) in img
            .data
            .chunks_exact(4)
            .zip(parent.data.chunks_exact(4))
            .enumerate()
        {
            let m = &painted.data[i * 4..i * 4 + 4];
            if ops::mask_redraws([m[0], m[1], m[2], m[3]]) {
                changed += usize::from(a != p);
            } else {
                assert_eq!(a, p, "pixel {i} outside the region is the parent's");
            }
        }
        assert!(changed > 0, "the region is redrawn");
    }
}
