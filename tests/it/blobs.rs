//! The blob stores: the same conformance tests against the local directory and against a real
//! S3-compatible server (moto, started by scripts/test.sh, which exports
//! `EASEL_TEST_S3_ENDPOINT`), then easel end to end with its images in a bucket, and `/files`.
//!
//! Without `EASEL_TEST_S3_ENDPOINT` the S3 tests are skipped with one line on stderr, except
//! under `CI=true`, where they fail: CI never skips them silently.

use std::io::Write;
use std::sync::Once;
use std::time::Duration;

use bytes::Bytes;
use easel::blobs::Blobs;
use easel::config::Config;
use serde_json::json;

use crate::common::s3::{new_bucket, test_credentials};
use crate::common::{self, s3, test_config, TestApp};

/// The S3 test server's endpoint, or `None` (after saying so once) when the S3 tests are to be
/// skipped.
fn s3_endpoint() -> Option<String> {
    let endpoint = s3::endpoint();
    if endpoint.is_none() {
        static SAID: Once = Once::new();
        // Straight to stderr, past libtest's capture, so the skip is seen.
        SAID.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "tests/it/blobs.rs: S3 tests skipped (EASEL_TEST_S3_ENDPOINT is not set; \
                 scripts/test.sh starts an S3 test server and sets it)"
            );
        });
    }
    endpoint
}

fn use_s3(config: &mut Config, endpoint: &str, bucket: &str) {
    config.blobs.store = easel::config::BlobStoreKind::S3;
    config.blobs.s3_bucket = Some(bucket.into());
    config.blobs.s3_endpoint = Some(endpoint.into());
    config.blobs.s3_path_style = true;
}

/// A store in a fresh bucket, with `prefix` as `s3_prefix`; with the config that opened it.
async fn s3_blobs(endpoint: &str, prefix: &str) -> (Blobs, Config) {
    let bucket = new_bucket(endpoint).await;
    let mut config = test_config(std::path::Path::new("/nonexistent"));
    use_s3(&mut config, endpoint, &bucket);
    config.blobs.s3_prefix = prefix.into();
    config.validate().unwrap();
    let blobs = Blobs::open(
        &config.blobs,
        &config.data_dir,
        config.database.sqlite_synchronous,
        "http://easel.test",
    )
    .await
    .unwrap();
    (blobs, config)
}

/// What every store must do alike.
async fn conformance(blobs: &Blobs) {
    let task = "0190d6c1-2b7e-7c3a-9f00-00000000000a";
    let first = Blobs::new_folder(task);
    let second = Blobs::new_folder(task);
    assert_ne!(first, second, "folders are unguessable, so never the same");

    // A new folder's files put at once (as a task's are), and got back byte for byte; a missing
    // key is None, not an error. Only keys directly in the folder are taken.
    let png = b"\x89PNG\r\n\x1a\n not really".to_vec();
    for stray in [format!("{second}/0.png"), format!("{first}/deeper/0.png")] {
        let refused = blobs
            .put_new_folder(&first, vec![(stray, Bytes::from_static(b"x"))])
            .await
            .unwrap_err();
        assert!(!refused.is_transient(), "{refused}");
    }
    blobs
        .put_new_folder(
            &first,
            vec![
                (format!("{first}/0.png"), Bytes::from(png.clone())),
                (format!("{first}/grid.png"), Bytes::from_static(b"grid")),
            ],
        )
        .await
        .unwrap();
    let got = blobs.get(&format!("{first}/0.png")).await.unwrap().unwrap();
    assert_eq!(&got[..], &png[..]);
    assert!(blobs
        .get(&format!("{first}/1.png"))
        .await
        .unwrap()
        .is_none());
    assert!(blobs
        .get(&format!("{task}/nope/0.png"))
        .await
        .unwrap()
        .is_none());
    // A key easel could not have made is refused before it reaches the store.
    let refused = blobs.get("../easel.db").await.unwrap_err();
    assert!(!refused.is_transient(), "{refused}");

    // Listing is by whole folder: a task whose id merely starts with this one's is not listed.
    blobs
        .put(&format!("{task}0/other/0.png"), b"x".to_vec())
        .await
        .unwrap();
    blobs
        .put(&format!("{second}/0.png"), b"second".to_vec())
        .await
        .unwrap();
    let mut expected = vec![
        format!("{first}/0.png"),
        format!("{first}/grid.png"),
        format!("{second}/0.png"),
    ];
    expected.sort();
    assert_eq!(blobs.list(task).await.unwrap(), expected);
    assert_eq!(
        blobs.list(&first).await.unwrap(),
        vec![format!("{first}/0.png"), format!("{first}/grid.png")]
    );
    assert!(blobs.list("no-such-task").await.unwrap().is_empty());

    // An earlier attempt's folders go, the kept one stays, other tasks are untouched.
    blobs.remove_stale_attempts(task, Some(&second)).await;
    assert_eq!(
        blobs.list(task).await.unwrap(),
        vec![format!("{second}/0.png")]
    );
    assert_eq!(
        blobs.list(&format!("{task}0")).await.unwrap(),
        vec![format!("{task}0/other/0.png")]
    );
    // With nothing to keep, everything of the task goes.
    blobs.remove_stale_attempts(task, None).await;
    assert!(blobs.list(task).await.unwrap().is_empty());
    blobs.remove_folder(&format!("{task}0/other")).await;
    assert!(blobs.list(&format!("{task}0")).await.unwrap().is_empty());
    // Removing what is not there is quiet.
    blobs.remove_folder(&first).await;

    assert_eq!(
        blobs.url(&format!("{second}/0.png")),
        format!("http://easel.test/files/{second}/0.png")
    );
}

#[tokio::test]
async fn the_local_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.database.sqlite_synchronous = easel::config::SqliteSynchronous::Full;
    let blobs = Blobs::open(
        &config.blobs,
        &config.data_dir,
        config.database.sqlite_synchronous,
        "http://easel.test/",
    )
    .await
    .unwrap();
    conformance(&blobs).await;
    // Folders go with their last file.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("files"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn the_s3_store_conforms() {
    let Some(endpoint) = s3_endpoint() else {
        return;
    };
    let (blobs, _) = s3_blobs(&endpoint, "").await;
    conformance(&blobs).await;
}

#[tokio::test]
async fn the_s3_store_keeps_every_key_under_its_prefix() {
    let Some(endpoint) = s3_endpoint() else {
        return;
    };
    let (blobs, config) = s3_blobs(&endpoint, "/deploy/easel/").await;
    conformance(&blobs).await;

    // Seen without the prefix, the objects are below it.
    let folder = Blobs::new_folder("task-p");
    blobs
        .put(&format!("{folder}/0.png"), b"p".to_vec())
        .await
        .unwrap();
    let whole = Blobs::open(
        &easel::config::Blobs {
            s3_prefix: String::new(),
            ..config.blobs.clone()
        },
        &config.data_dir,
        config.database.sqlite_synchronous,
        "http://easel.test",
    )
    .await
    .unwrap();
    assert_eq!(
        whole.list("deploy").await.unwrap(),
        vec![format!("deploy/easel/{folder}/0.png")]
    );
    // URLs do not show the prefix: it is the store's business.
    assert_eq!(
        blobs.url(&format!("{folder}/0.png")),
        format!("http://easel.test/files/{folder}/0.png")
    );
}

/// The image URLs of a finished task, the grid last.
fn image_urls(record: &serde_json::Value) -> Vec<String> {
    assert_eq!(record["status"], "finished", "{record}");
    let mut urls: Vec<String> = record["image_urls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    urls.push(record["original_image_url"].as_str().unwrap().to_string());
    urls
}

/// GET `url` and check it is served as a cacheable PNG; its bytes.
async fn get_png(http: &reqwest::Client, url: &str) -> bytes::Bytes {
    let res = http.get(url).send().await.unwrap();
    assert_eq!(res.status(), 200, "{url}");
    let h = res.headers();
    assert_eq!(h["content-type"], "image/png");
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(h.contains_key("etag"));
    let bytes = res.bytes().await.unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(&bytes[..]));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut pixels).expect("a whole PNG");
    bytes
}

#[tokio::test]
async fn with_s3_any_node_serves_any_tasks_images_from_the_bucket() {
    let Some(endpoint) = s3_endpoint() else {
        return;
    };
    let bucket = new_bucket(&endpoint).await;
    let app = TestApp::spawn_with(|c| use_s3(c, &endpoint, &bucket)).await;
    let id = app
        .imagine(json!({"prompt": "a lighthouse in a bucket"}))
        .await;
    let record = app.wait_final(&id, Duration::from_secs(20)).await;
    let urls = image_urls(&record);
    assert_eq!(urls.len(), 5);

    let mut bodies = Vec::new();
    for url in &urls {
        assert!(
            url.starts_with(&format!("{}/files/{id}/", app.base)),
            "{url}"
        );
        bodies.push(get_png(&app.http, url).await);
    }

    // The objects are in the bucket, under the keys of the URLs, and nothing is on local disk.
    let keys: Vec<String> = urls
        .iter()
        .map(|u| {
            u.strip_prefix(&format!("{}/files/", app.base))
                .unwrap()
                .to_string()
        })
        .collect();
    let bucket_view = Blobs::open(
        &app.config.blobs,
        &app.config.data_dir,
        app.config.database.sqlite_synchronous,
        "http://elsewhere",
    )
    .await
    .unwrap();
    let mut listed = bucket_view.list(&id).await.unwrap();
    let mut expected = keys.clone();
    listed.sort();
    expected.sort();
    assert_eq!(listed, expected);
    for (key, body) in keys.iter().zip(&bodies) {
        assert_eq!(bucket_view.get(key).await.unwrap().unwrap(), *body);
    }
    assert!(!app.dir.path().join("files").join(&id).exists());

    // Another node, with its own data dir and database, serves the same bytes from the bucket.
    let other = TestApp::spawn_with(|c| use_s3(c, &endpoint, &bucket)).await;
    for (key, body) in keys.iter().zip(&bodies) {
        let url = format!("{}/files/{key}", other.base);
        assert_eq!(get_png(&other.http, &url).await, *body, "{url}");
    }

    // HEAD answers the headers without the body; a cached copy is confirmed with 304.
    let res = other
        .http
        .head(urls[0].replace(&app.base, &other.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "image/png");
    let etag = res.headers()["etag"].clone();
    let res = app
        .http
        .get(&urls[0])
        .header("if-none-match", etag.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 304);
    assert_eq!(res.headers()["etag"], etag);

    // A key that is not in the bucket is a 404 in the API's error shape.
    let (status, body) = common::split(
        app.http
            .get(app.url(&format!("/files/{id}/0000/0.png")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(body["errors"][0]["code"], "file_not_found");
    other.stop().await;
    app.stop().await;
}

#[tokio::test]
async fn blobs_public_url_is_the_base_of_image_urls() {
    let app = TestApp::spawn_with(|c| {
        c.blobs.public_url = Some("https://cdn.example.com/easel-images/".into());
    })
    .await;
    let id = app.imagine(json!({"prompt": "a cdn"})).await;
    let record = app.wait_final(&id, Duration::from_secs(20)).await;
    for url in image_urls(&record) {
        let key = url
            .strip_prefix("https://cdn.example.com/easel-images/")
            .unwrap_or_else(|| panic!("{url}"));
        assert!(key.starts_with(&format!("{id}/")), "{url}");
        // easel still serves the key itself.
        get_png(&app.http, &app.url(&format!("/files/{key}"))).await;
    }
}

#[tokio::test]
async fn files_outside_the_store_and_unknown_keys_are_not_found() {
    let app = TestApp::spawn().await;
    let id = app.imagine(json!({"prompt": "a guarded door"})).await;
    let record = app.wait_final(&id, Duration::from_secs(20)).await;
    let url = &image_urls(&record)[0];
    get_png(&app.http, url).await;
    // The database and the image are both under data_dir: no spelling of a path reaches one
    // from the other.
    assert!(app.dir.path().join("easel.db").exists());
    let key = url.strip_prefix(&format!("{}/files/", app.base)).unwrap();
    for path in [
        "/files/..%2Feasel.db".to_string(),
        "/files/%2e%2e/easel.db".to_string(),
        "/files/%2E%2E%2F%2E%2E%2Feasel.db".to_string(),
        "/files/%2Fetc%2Fpasswd".to_string(),
        "/files/x%5C..%5C..%5Ceasel.db".to_string(),
        "/files/%ff%fe".to_string(),
        format!("/files/{id}"),
        format!("/files/{id}/0000/0.png"),
        format!("/files/{key}.partial"),
    ] {
        let res = app.http.get(app.url(&path)).send().await.unwrap();
        let (status, body) = common::split(res).await;
        assert_eq!(status, 404, "{path}: {body}");
        // The URL standard reads `%2e%2e` as `..`, so the client may send `/easel.db`.
        let code = body["errors"][0]["code"].as_str().unwrap_or_default();
        assert!(
            matches!(code, "file_not_found" | "route_not_found"),
            "{path}: {body}"
        );
    }

    // Literal dot segments, which HTTP clients would normalise away, sent as they are.
    for target in [
        "/files/../easel.db",
        "/files/x/../../easel.db",
        "/files//etc/passwd",
    ] {
        let response = raw_get(&app.base, target).await;
        let status_line = response.lines().next().unwrap_or_default().to_string();
        assert!(status_line.contains(" 404 "), "{target}: {response}");
        assert!(response.contains("\"errors\""), "{target}: {response}");
    }
}

/// The whole response to `GET {target}`, the request line written verbatim.
async fn raw_get(base: &str, target: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn an_unreachable_bucket_does_not_stop_start_and_answers_503() {
    test_credentials();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let app = TestApp::spawn_with(|c| use_s3(c, &endpoint, "nowhere")).await;
    let res = app
        .http
        .get(app.url("/files/task/0123abcd/0.png"))
        .send()
        .await
        .unwrap();
    assert!(res.headers().contains_key("retry-after"));
    let (status, body) = common::split(res).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["errors"][0]["code"], "unavailable");
}

#[tokio::test]
async fn blob_settings_that_cannot_work_stop_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.blobs.store = easel::config::BlobStoreKind::S3;
    let e = easel::Application::build(config.clone())
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("s3_bucket"), "{e}");

    // A store easel does not have cannot be built at all: it is refused where it is written.
    let file = dir.path().join("easel.toml");
    std::fs::write(&file, "blob_store = \"gcs\"\n").unwrap();
    let e = easel::config::Config::load(Some(file), &Default::default())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("blob_store") && e.contains("`local` or `s3`") && e.contains("gcs"),
        "{e}"
    );

    config.blobs.store = easel::config::BlobStoreKind::Local;
    config.blobs.public_url = Some("cdn.example.com".into());
    let e = easel::Application::build(config)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("blobs_public_url"), "{e}");
}
