//! Resource bounds: slow clients, huge heads and bodies, and thousands of connections do not stop
//! easel from serving others, and its memory stays bounded; input images share the node's decode
//! memory budget.

use std::time::Duration;

use crate::common::binary::Easel;
use crate::common::{split, TestApp};
use easel::images::{encode_png, RgbaImage};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_string()
}

/// Whether the server has closed `stream` (EOF or an error) within `within`.
async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_senders_are_cut_off_and_others_are_served() {
    // Every client here shares one address: no cap per address (tests/it/hostile.rs has that).
    let app = TestApp::spawn_with(|c| {
        c.server.header_timeout = Duration::from_secs(1);
        c.server.max_connections_per_address = 0;
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(addr(&app)).await.unwrap();
        s.write_all(b"POST /api/v1/imagine HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // Trickle a byte now and then, as a slowloris client does.
    let trickle = tokio::spawn(async move {
        for _ in 0..4 {
            for s in slow.iter_mut() {
                let _ = s.write_all(b"X").await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        slow
    });
    for i in 0..20 {
        let (status, _) = app
            .post("/api/v1/imagine", &json!({"prompt": format!("served {i}")}))
            .await;
        assert_eq!(status, 200);
    }
    let mut slow = trickle.await.unwrap();
    let mut cut = 0;
    for s in slow.iter_mut() {
        if closed_by_server(s, Duration::from_secs(5)).await {
            cut += 1;
        }
    }
    assert_eq!(
        cut, 300,
        "every slow client was cut off after the header timeout"
    );
}

#[tokio::test]
async fn huge_heads_and_bodies_are_refused_without_harm() {
    let app = TestApp::spawn_with(|c| c.server.body_timeout = Duration::from_secs(1)).await;

    // A head just over 64 KiB, or of 100 KiB: 431 (or the connection is closed), and nothing else
    // is affected; one just under is served.
    for (header, refused) in [(60 * 1024, false), (66 * 1024, true), (100 * 1024, true)] {
        let mut s = TcpStream::connect(addr(&app)).await.unwrap();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: {}\r\n\r\n",
            "a".repeat(header)
        );
        let _ = s.write_all(head.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        if refused {
            assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
                "{header}: {answer}"
            );
        } else {
            assert!(answer.starts_with("HTTP/1.1 200"), "{header}: {answer}");
        }
    }

    // A declared 10 MiB body is refused before it is sent.
    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    let head = format!(
        "POST /api/v1/imagine HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        app.key,
        10 * 1024 * 1024
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answered without reading the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");

    // A chunked body that grows past the limit is cut off at the limit.
    let big = reqwest::Body::wrap_stream(futures::stream::iter(
        (0..200).map(|_| Ok::<_, std::io::Error>(vec![b' '; 64 * 1024])),
    ));
    let res = app
        .http
        .post(app.url("/api/v1/imagine"))
        .header("Authorization", &app.key)
        .header("Content-Type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, body) = split(res).await;
    assert_eq!(
        (status, body["errors"][0]["code"].as_str()),
        (413, Some("payload_too_large"))
    );

    // A body that never finishes arriving: 408 after body_timeout.
    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    let head = format!(
        "POST /api/v1/imagine HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"prompt\"",
        app.key
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");

    // Still serving.
    let (status, _) = app
        .post("/api/v1/imagine", &json!({"prompt": "still here"}))
        .await;
    assert_eq!(status, 200);
    // Nothing half-written by any of the refused requests.
    let counts = app.store.task_counts().await.unwrap();
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<i64>(), 1, "{counts:?}");
}

/// Read one answer (head and a `Content-Length` body) from `s`, leaving the connection open.
async fn read_answer(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("answered in time")
            .unwrap();
        assert!(n > 0, "closed mid-answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn an_answer_given_before_its_body_is_read_says_the_connection_closes() {
    let app = TestApp::spawn().await;
    // Refused before the body is read (no key): the rest of the body is on the connection, so
    // the server closes it, and says so in the answer's head, where a pooling client looks.
    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    s.write_all(
        b"POST /api/v1/imagine HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"prompt\"",
    )
    .await
    .unwrap();
    let answer = read_answer(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(closed_by_server(&mut s, Duration::from_secs(5)).await);

    // A body read whole keeps the connection: its answer says nothing of closing, and the
    // next request on the same connection is answered.
    let mut s = TcpStream::connect(addr(&app)).await.unwrap();
    let body = r#"{"prompt":"kept alive"}"#;
    let request = format!(
        "POST /api/v1/imagine HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        app.key,
        body.len()
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("connection: close"), "{answer}");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_connections_keep_memory_bounded_and_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(
        dir.path(),
        &[
            ("EASEL_HEADER_TIMEOUT", "3s"),
            ("EASEL_MAX_CONNECTIONS", "1000"),
            ("EASEL_MAX_CONNECTIONS_PER_ADDRESS", "0"),
        ],
    );
    let key = easel.first_key.clone().unwrap();
    let target = easel.base.trim_start_matches("http://").to_string();
    // Warm up, then measure.
    for _ in 0..20 {
        easel
            .post(&key, "/api/v1/imagine", json!({"prompt": "warm"}))
            .await;
    }
    let before = rss_kib(easel.child.id());

    // 1,500 connections: half silent, half mid-way through a request head. Only 1,000 are
    // served at once; the rest wait in the kernel's queue until the header timeout frees slots.
    let mut conns = Vec::new();
    for i in 0..1500 {
        let mut s = TcpStream::connect(&target).await.unwrap();
        if i % 2 == 0 {
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHo").await;
        }
        conns.push(s);
    }
    // Others are still served: at worst they wait for the header timeout to free a slot.
    let started = std::time::Instant::now();
    let (status, _) = easel
        .post(&key, "/api/v1/imagine", json!({"prompt": "served"}))
        .await;
    assert_eq!(status, 200);
    let waited = started.elapsed();
    let during = rss_kib(easel.child.id());
    eprintln!(
        "RSS {} KiB before, {} KiB with 1,500 connections; a request waited {:?}",
        before, during, waited
    );
    assert!(
        during < before + 100 * 1024,
        "memory stays bounded: {before} KiB -> {during} KiB"
    );
    // Every one of them, silent or slow, is closed by the server.
    let mut cut = 0;
    for s in conns.iter_mut() {
        if closed_by_server(s, Duration::from_secs(15)).await {
            cut += 1;
        }
    }
    assert_eq!(cut, 1500);
}

/// Send one request on `stream`, read its answer, then wait for the server to close the
/// connection; how long it stayed open after the answer.
async fn open_after_answer(stream: &mut TcpStream) -> Duration {
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: easel\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let answered = std::time::Instant::now();
    assert!(closed_by_server(stream, Duration::from_secs(10)).await);
    answered.elapsed()
}

/// A connection that never sends a request is closed `header_timeout` after it opened; one that
/// made a request, `idle_timeout` after its answer ended, counted from that end, or for HTTP/1
/// `header_timeout` if that is shorter (the next request's head is due within it).
#[tokio::test]
async fn silent_connections_are_closed() {
    let app = TestApp::spawn_with(|c| {
        c.server.header_timeout = Duration::from_millis(500);
        c.server.idle_timeout = Duration::from_millis(300);
    })
    .await;
    let mut silent = TcpStream::connect(addr(&app)).await.unwrap();
    assert!(closed_by_server(&mut silent, Duration::from_secs(5)).await);

    // The request comes late in the first period, so that a clock counted from the connection's
    // opening would close it early.
    let mut kept = TcpStream::connect(addr(&app)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let open_for = open_after_answer(&mut kept).await;
    assert!(
        open_for >= Duration::from_millis(280),
        "closed {open_for:?} after its answer"
    );

    let app = TestApp::spawn_with(|c| {
        c.server.header_timeout = Duration::from_millis(500);
        c.server.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let mut kept = TcpStream::connect(addr(&app)).await.unwrap();
    let open_for = open_after_answer(&mut kept).await;
    assert!(
        open_for >= Duration::from_millis(480),
        "closed {open_for:?} after its answer"
    );
}

/// A PNG of `side` x `side` with a little detail, so that it is not all one colour.
fn input_png(side: u32) -> Vec<u8> {
    let mut img = RgbaImage::new(side, side);
    for (i, px) in img.data.chunks_exact_mut(4).enumerate() {
        px[0] = (i % 251) as u8;
        px[1] = (i / side as usize % 241) as u8;
    }
    encode_png(&img)
}

/// The decode budget's waits so far, from `/metrics` (a count for the whole test process).
async fn decode_waits(app: &TestApp, token: &str) -> u64 {
    app.metric(token, "easel_decode_budget_waits_total").await as u64
}

/// The node's decode memory budget, sized here from what two 2-image blends need: one of them
/// fits, both at once do not, and a blend of five does not fit even alone. The five-image blend
/// fails naming its inputs; the two blends submitted together both finish, one of them having
/// waited for the other's images to be dropped (each generation takes at least a second, so the
/// first holds its share while the second arrives).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_images_share_the_decode_budget_and_a_set_over_it_fails() {
    use easel::config::DecodeMemoryBudget;
    use easel::images::inputs::{probe, InputLimits};

    let png = input_png(500);
    let header = probe(&png, &InputLimits::default()).unwrap();
    let pair = 2 * header.held_bytes() + header.working_bytes();
    let five = 5 * header.held_bytes() + header.working_bytes();
    let budget = pair * 3 / 2 / 1024 * 1024;
    assert!(pair <= budget && 2 * pair > budget && five > budget);

    const TOKEN: &str = "decode-budget-metrics";
    let app = TestApp::spawn_with(|c| {
        c.limits.decode_memory_budget = DecodeMemoryBudget::Bytes(budget);
        c.worker.workers = 2;
        c.worker.procedural_min_duration = Duration::from_secs(1);
        c.server.metrics_token = Some(TOKEN.into());
    })
    .await;
    let served = {
        let png = png.clone();
        axum::Router::new().route(
            "/{name}",
            axum::routing::get(move || {
                let png = png.clone();
                async move { ([("content-type", "image/png")], png) }
            }),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, served).await });
    let blend = |n: usize, tag: &str| {
        let urls: Vec<String> = (0..n).map(|i| format!("{base}/{tag}-{i}.png")).collect();
        json!({ "image_urls": urls })
    };
    let submit = |body: serde_json::Value| {
        let app = &app;
        async move {
            let (status, answer) = app.post("/api/v1/blend", &body).await;
            assert_eq!(status, 200, "{answer}");
            answer["task_id"].as_str().unwrap().to_string()
        }
    };
    let within = Duration::from_secs(60);

    let over = submit(blend(5, "five")).await;
    let record = app.wait_final(&over, within).await;
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["error"].as_str().unwrap();
    assert!(
        error.starts_with("image_urls: decoding needs ")
            && error.ends_with("this node allows")
            && error.contains(" MiB at once, more than the "),
        "{error}"
    );

    let waits = decode_waits(&app, TOKEN).await;
    let (a, b) = (submit(blend(2, "a")).await, submit(blend(2, "b")).await);
    let mut ends = Vec::new();
    for id in [a, b] {
        let record = app.wait_final(&id, within).await;
        assert_eq!(record["status"], "finished", "{record}");
        let at = record["finished_at"].as_str().unwrap();
        ends.push(chrono::DateTime::parse_from_rfc3339(at).unwrap());
    }
    assert!(
        decode_waits(&app, TOKEN).await > waits,
        "one of the two blends waited for the other's images"
    );
    // The first held its images' share until its job was done, so the second generated after
    // it, not beside it.
    let apart = (ends[1] - ends[0]).num_milliseconds().abs();
    assert!(apart >= 900, "the blends ended {apart} ms apart");
}

/// A PNG of `side` x `side` of noise, which compresses to about its raw size.
fn noise_png(side: u32) -> Vec<u8> {
    let mut state: u32 = 0x2545_f491;
    let data = (0..side * side * 4)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            if i % 4 == 3 {
                255
            } else {
                state as u8
            }
        })
        .collect();
    encode_png(&RgbaImage {
        width: side,
        height: side,
        data,
    })
}

/// A client that takes an answer slower than `min_send_rate` while the server has more to send
/// is closed; one that takes it at once gets it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_slower_than_min_send_rate_is_closed() {
    let app = TestApp::spawn_with(|c| {
        c.server.min_send_rate = Some((8 * 1024, Duration::from_secs(1)));
    })
    .await;
    let png = noise_png(1200);
    let res = app
        .http
        .post(app.url("/api/v1/upload"))
        .header("Authorization", &app.key)
        .header("Content-Type", "image/png")
        .body(png.clone())
        .send()
        .await
        .unwrap();
    let (status, upload) = split(res).await;
    assert_eq!(status, 201, "{upload}");
    let path = upload["url"]
        .as_str()
        .unwrap()
        .trim_start_matches(&app.base)
        .to_string();
    assert_eq!(
        app.bytes(&upload["url"]).await.len(),
        png.len(),
        "a reader at speed"
    );

    // A small receive buffer, so that the server's writes wait for this reader soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(addr(&app).parse().unwrap()).await.unwrap();
    slow.write_all(format!("GET {path} HTTP/1.1\r\nhost: easel\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (mut taken, mut closed) = (0usize, false);
    let mut buf = [0u8; 256];
    while started.elapsed() < Duration::from_secs(20) {
        match tokio::time::timeout(Duration::from_secs(2), slow.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => taken += n,
            Err(_) => {}
        }
        // About 2.5 KiB a second: a third of the minimum.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed,
        "still open after {:?}, {taken} bytes taken",
        started.elapsed()
    );
    assert!(
        taken < png.len() / 4,
        "closed after {taken} of {} bytes",
        png.len()
    );
}

/// Ten streams of the account resumed with `Last-Event-ID: 0` over 3,000 tasks with 3 KiB of
/// metadata each, whose clients never read past the head: the server reads the history a page
/// at a time as each socket drains, so its memory grows by a few pages, not ten histories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_resumed_from_the_start_and_never_read_keep_memory_bounded() {
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let easel = Easel::start(
        dir.path(),
        &[
            ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "5000"),
            ("EASEL_WORKERS", "0"),
        ],
    );
    let key = easel.first_key.clone().unwrap();
    let metadata = json!({"note": "m".repeat(3 * 1024)});
    futures::stream::iter(0..3000)
        .for_each_concurrent(8, |i| {
            let (easel, key, metadata) = (&easel, &key, &metadata);
            async move {
                let body = json!({"prompt": format!("task {i}"), "metadata": metadata});
                let (status, answer) = easel.post(key, "/api/v1/imagine", body).await;
                assert_eq!(status, 200, "{answer}");
            }
        })
        .await;
    let before = rss_kib(easel.child.id());

    let target = easel.base.trim_start_matches("http://").to_string();
    let mut streams = Vec::new();
    for _ in 0..10 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(target.parse().unwrap()).await.unwrap();
        let request = format!(
            "GET /api/v1/events HTTP/1.1\r\nhost: easel\r\nauthorization: {key}\r\n\
             last-event-id: 0\r\n\r\n"
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 64];
        let n = s.read(&mut head).await.unwrap();
        let head = String::from_utf8_lossy(&head[..n]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        streams.push(s);
    }
    // Long enough for the server to fill what the sockets hold and then wait.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rss_kib(easel.child.id());
    eprintln!("RSS {before} KiB before, {during} KiB with 10 unread streams");
    assert!(
        during < before + 64 * 1024,
        "memory stays bounded: {before} KiB -> {during} KiB"
    );
    drop(streams);
}

/// A counter of the binary's `/metrics` (asked with `token`), by its name with labels.
async fn binary_metric(easel: &Easel, token: &str, name: &str) -> f64 {
    let text = easel
        .http
        .get(format!("{}/metrics", easel.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// 40 uploads at once of a PNG of 100 KB that decodes to 100 MB: the account's uploads in
/// progress are bounded (the rest 429 before any decode), the decodes stay inside the uploads'
/// quarter of the decode budget, and the node answers `/healthz` meanwhile. Past its day's
/// bytes, the account's next upload is 429 without a decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_upload_bombs_stays_in_the_uploads_budget_and_past_the_day_nothing_decodes() {
    const TOKEN: &str = "upload-bomb-metrics";
    let bomb = encode_png(&RgbaImage::new(5000, 5000));
    let dir = tempfile::tempdir().unwrap();
    let daily = (bomb.len() * 12).to_string();
    let easel = Easel::start(
        dir.path(),
        &[
            ("EASEL_DECODE_MEMORY_BUDGET", "1GiB"),
            ("EASEL_MAX_UPLOAD_BYTES_PER_DAY", &daily),
            ("EASEL_METRICS_TOKEN", TOKEN),
        ],
    );
    let key = easel.first_key.clone().unwrap();
    let upload = || {
        easel
            .http
            .post(format!("{}/api/v1/upload", easel.base))
            .header("Authorization", &key)
            .header("Content-Type", "image/png")
            .body(bomb.clone())
            .send()
    };
    let before = rss_kib(easel.child.id());
    let done = std::sync::atomic::AtomicBool::new(false);
    let watch = async {
        let (mut slowest, mut peak) = (Duration::ZERO, before);
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let asked = std::time::Instant::now();
            let health = reqwest::get(format!("{}/healthz", easel.base))
                .await
                .unwrap();
            assert_eq!(health.status(), 200);
            slowest = slowest.max(asked.elapsed());
            peak = peak.max(rss_kib(easel.child.id()));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (slowest, peak)
    };
    let flood = async {
        let answers = futures::future::join_all((0..40).map(|_| upload())).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        answers
            .into_iter()
            .map(|a| a.unwrap().status().as_u16())
            .collect::<Vec<u16>>()
    };
    let (statuses, (slowest, peak)) = tokio::join!(flood, watch);
    let stored = statuses.iter().filter(|s| **s == 201).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    eprintln!(
        "{stored} stored, {refused} refused; RSS {before} KiB before, {peak} KiB at peak; \
         /healthz at worst {slowest:?}"
    );
    assert_eq!(stored + refused, 40, "{statuses:?}");
    assert!(stored >= 1, "{statuses:?}");
    let mut outcomes = Vec::new();
    for outcome in ["decoded", "busy", "over_quota"] {
        let name = format!("easel_image_checks_total{{outcome=\"{outcome}\"}}");
        outcomes.push(binary_metric(&easel, TOKEN, &name).await as usize);
    }
    assert_eq!(
        outcomes.iter().sum::<usize>(),
        40,
        "each counted once: {outcomes:?}"
    );
    assert!(
        outcomes[1] >= 1,
        "some waited for none of the decoder: {outcomes:?}"
    );
    // The uploads' budget is 256 MiB (a quarter of 1 GiB); the bodies and the server's own
    // working memory take the rest of the margin.
    assert!(
        peak < before + 320 * 1024,
        "decoding stayed in the uploads' budget: {before} KiB -> {peak} KiB"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?}"
    );

    // Spend the day, then one more: refused without a decode.
    for _ in 0..12 {
        if upload().await.unwrap().status() == 429 {
            break;
        }
    }
    let decoded = "easel_image_checks_total{outcome=\"decoded\"}";
    let over = "easel_image_checks_total{outcome=\"over_quota\"}";
    let (decoded_before, over_before) = (
        binary_metric(&easel, TOKEN, decoded).await,
        binary_metric(&easel, TOKEN, over).await,
    );
    let refused = upload().await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["errors"][0]["code"], "quota_exceeded", "{body}");
    assert_eq!(binary_metric(&easel, TOKEN, decoded).await, decoded_before);
    assert_eq!(binary_metric(&easel, TOKEN, over).await, over_before + 1.0);
}
