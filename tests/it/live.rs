//! A running task's live state through a real worker: its preview image while it runs (gone when
//! it ends), and its progress webhooks (at most one a second, none after the final delivery, and a
//! hanging progress receiver delays nobody's final delivery).

use std::time::{Duration, Instant};

use crate::common::receiver::{Behaviour, Receiver};
use crate::common::{self, wait_for, TestApp};
use serde_json::{json, Value};

async fn slow_node(secs: f64) -> TestApp {
    TestApp::spawn_with(|c| {
        c.worker.workers = 2;
        c.worker.procedural_min_duration = Duration::from_secs_f64(secs);
    })
    .await
}

fn body(received: &common::receiver::Received) -> Value {
    serde_json::from_slice(&received.body).unwrap()
}

#[tokio::test]
async fn a_running_task_shows_a_small_preview_which_goes_when_it_ends() {
    let app = slow_node(3.0).await;
    let id = app.imagine(json!({"prompt": "a windmill"})).await;
    let url = wait_for(Duration::from_secs(20), || async {
        let (_, record) = app.get(&format!("/api/v1/tasks/{id}")).await;
        assert_ne!(
            record["status"], "finished",
            "the preview came before the end"
        );
        record["preview_image_url"].as_str().map(str::to_string)
    })
    .await
    .expect("a preview while it runs");
    let response = app.http.get(&url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "image/jpeg");
    let bytes = response.bytes().await.unwrap();
    let preview = image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg).unwrap();
    let long = preview.width().max(preview.height());
    assert!(
        long > 0 && long <= app.config.worker.preview_max_px,
        "{long}"
    );

    let record = app.wait_final(&id, Duration::from_secs(30)).await;
    assert_eq!(record["status"], "finished");
    assert!(record.get("preview_image_url").is_none(), "{record}");
    let gone = wait_for(Duration::from_secs(5), || async {
        let status = app.http.get(&url).send().await.unwrap().status().as_u16();
        (status == 404).then_some(())
    })
    .await;
    assert!(gone.is_some(), "the preview is removed with the task's end");
}

#[tokio::test]
async fn progress_webhooks_come_at_most_once_a_second_and_never_after_the_final_one() {
    let app = slow_node(4.0).await;
    let receiver = Receiver::start(vec![Behaviour::Status(200)]).await;
    let id = app
        .imagine(json!({
            "prompt": "a glacier",
            "webhook_url": receiver.url,
            "webhook_events": ["progress", "completed"],
            "metadata": {"job": 7},
        }))
        .await;
    app.wait_final(&id, Duration::from_secs(30)).await;
    let finals = wait_for(Duration::from_secs(10), || async {
        let received = receiver.received();
        received
            .iter()
            .any(|r| body(r)["status"] == "finished")
            .then_some(received)
    })
    .await
    .expect("the final delivery");
    // Anything late would have arrived by now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let received = receiver.received();
    assert_eq!(
        received.len(),
        finals.len(),
        "nothing after the final delivery"
    );
    let last = received.last().unwrap();
    assert_eq!(
        body(last)["status"],
        "finished",
        "the final delivery is the last"
    );
    let progress: Vec<_> = received
        .iter()
        .filter(|r| body(r)["status"] == "processing")
        .collect();
    assert!(progress.len() >= 2, "progress over 4 s: {}", progress.len());
    let mut seen = 0;
    for (i, r) in progress.iter().enumerate() {
        let b = body(r);
        assert_eq!(b["task_id"], id.as_str());
        assert_eq!(b["metadata"], json!({"job": 7}));
        assert!(r.headers.contains_key("webhook-signature"));
        let p: i64 = b["percentage"].as_str().unwrap().parse().unwrap();
        assert!(p >= seen, "progress never goes back");
        seen = p;
        if i > 0 {
            let gap = r.at - progress[i - 1].at;
            assert!(
                gap >= Duration::from_millis(800),
                "one a second at most: {gap:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_hanging_progress_receiver_delays_no_final_delivery() {
    let app = slow_node(3.0).await;
    let hanging = Receiver::start(vec![Behaviour::Hang(Duration::from_secs(30))]).await;
    let prompt = Receiver::start(vec![Behaviour::Status(200)]).await;
    let slow = app
        .imagine(json!({
            "prompt": "progress to nowhere",
            "webhook_url": hanging.url,
            "webhook_events": ["progress"],
        }))
        .await;
    let other = app
        .imagine(json!({"prompt": "an ordinary task", "webhook_url": prompt.url}))
        .await;
    let ended = {
        app.wait_final(&other, Duration::from_secs(30)).await;
        Instant::now()
    };
    let arrived = wait_for(Duration::from_secs(10), || async {
        prompt.received().first().map(|r| r.at)
    })
    .await
    .expect("the other task's final delivery");
    assert!(
        arrived.saturating_duration_since(ended) < Duration::from_secs(3),
        "the final delivery came {:?} after the end",
        arrived.saturating_duration_since(ended)
    );
    assert!(
        hanging.count() >= 1,
        "the hanging receiver was sent progress"
    );
    app.wait_final(&slow, Duration::from_secs(30)).await;
}
