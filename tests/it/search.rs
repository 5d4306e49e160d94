//! Searching an account's tasks by the words of their prompts, through HTTP on either store:
//! `GET /api/v1/tasks?q=` with its filters and paging, and the dashboard's gallery
//! (`/gallery`), which shows the same search as a grid of images. Every word must match, only
//! the account's own tasks are found, bad queries are 400 in the contract's shape, and the
//! tasks stored before the search index existed are found too (SQLite's migration).

use serde_json::{json, Value};
use sqlx::Connection;

use crate::common::{self, TestApp};

/// The ids a listing finds, following `next_cursor` from the first page, and its pages.
async fn walk(app: &TestApp, key: &str, query: &str, limit: u32) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/tasks?limit={limit}&{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, body) = app.get_as(key, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
        pages += 1;
        let tasks = body["tasks"].as_array().unwrap();
        ids.extend(
            tasks
                .iter()
                .map(|t| t["task_id"].as_str().unwrap().to_string()),
        );
        match body["next_cursor"].as_str() {
            Some(c) => {
                assert_eq!(tasks.len(), limit as usize, "only the last page is short");
                cursor = Some(c.to_string());
            }
            None => return (ids, pages),
        }
    }
}

/// Owned copies of `of`, to compare with what a listing found.
fn ids(of: &[&String]) -> Vec<String> {
    of.iter().map(|s| s.to_string()).collect()
}

async fn found(app: &TestApp, key: &str, query: &str) -> Vec<String> {
    walk(app, key, query, 100).await.0
}

/// A key of `acct-1`, whose brass telescope stored before the migration under test is found by
/// its words, and not by others.
async fn the_old_task_is_found(app: &TestApp) -> String {
    let key = easel::auth::create_key(app.store.as_ref(), "acct-1", "old")
        .await
        .unwrap();
    assert_eq!(found(app, &key, "q=brass+telescope").await.len(), 1);
    assert!(found(app, &key, "q=brass+microscope").await.is_empty());
    key
}

async fn submit(app: &TestApp, key: &str, op: &str, body: Value) -> String {
    let (status, body) = app.post_as(key, &format!("/api/v1/{op}"), &body).await;
    assert_eq!(status, 200, "{body}");
    body["task_id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finds_the_accounts_tasks_with_every_word_newest_first_filtered_and_paged() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (_, mine) = app.account_with("searcher@example.com", None).await;
    let (_, theirs) = app.account_with("neighbour@example.com", None).await;
    let imagine = |prompt: &str| json!({ "prompt": prompt });
    let fox_snow = submit(&app, &mine, "imagine", imagine("A red fox in the snow")).await;
    let sky = submit(&app, &mine, "imagine", imagine("red sky at night")).await;
    let blue_fox = submit(&app, &mine, "imagine", imagine("a blue fox, sleeping")).await;
    let on_model = json!({ "prompt": "Red FOX portrait --ar 2:3", "model": "procedural" });
    let portrait = submit(&app, &mine, "imagine", on_model).await;
    let cafe = submit(&app, &mine, "imagine", imagine("le café de Flore, 1920")).await;
    let story = submit(
        &app,
        &mine,
        "shorten",
        json!({ "prompt": "a fox story, red" }),
    )
    .await;
    // Another account's tasks with the same words are never found.
    for prompt in ["a red fox", "red fox in the snow", "lighthouse"] {
        submit(&app, &theirs, "imagine", imagine(prompt)).await;
    }
    let mut lighthouses = Vec::new();
    for i in 0..25 {
        let prompt = format!("a lighthouse on a rocky coast, number {i}");
        lighthouses.push(submit(&app, &mine, "imagine", imagine(&prompt)).await);
    }
    lighthouses.reverse();

    // Every word must match, in any order and case; words are whole words.
    assert_eq!(
        found(&app, &mine, "q=red+fox").await,
        ids(&[&story, &portrait, &fox_snow])
    );
    assert_eq!(
        found(&app, &mine, "q=FOX%20Red").await,
        ids(&[&story, &portrait, &fox_snow])
    );
    assert_eq!(
        found(&app, &mine, "q=fox").await,
        ids(&[&story, &portrait, &blue_fox, &fox_snow])
    );
    assert_eq!(found(&app, &mine, "q=red").await.len(), 4, "and {sky}");
    assert!(found(&app, &mine, "q=red+fox+night").await.is_empty());
    assert!(found(&app, &mine, "q=fo").await.is_empty(), "whole words");
    // Punctuation separates words, as in the prompts themselves.
    assert_eq!(found(&app, &mine, "q=fox,+snow!").await, ids(&[&fox_snow]));
    assert_eq!(found(&app, &mine, "q=caf%C3%A9+1920").await, ids(&[&cafe]));
    // A blank search is no search.
    assert_eq!(found(&app, &mine, "q=+++").await.len(), 31);
    // The other account finds its own alone.
    assert_eq!(found(&app, &theirs, "q=red+fox").await.len(), 2);
    assert_eq!(found(&app, &theirs, "q=lighthouse").await.len(), 1);

    // With the filters: type, status (a canceled task), model.
    assert_eq!(
        found(&app, &mine, "q=red+fox&type=shorten").await,
        ids(&[&story])
    );
    assert_eq!(
        found(&app, &mine, "q=red+fox&type=imagine").await,
        ids(&[&portrait, &fox_snow])
    );
    let (status, body) = app
        .post_as(
            &mine,
            &format!("/api/v1/tasks/{fox_snow}/cancel"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        found(&app, &mine, "q=fox&status=canceled").await,
        ids(&[&fox_snow])
    );
    assert_eq!(
        found(&app, &mine, "q=fox&status=pending").await,
        ids(&[&story, &portrait, &blue_fox])
    );
    assert_eq!(
        found(&app, &mine, "q=fox&model=procedural").await,
        ids(&[&portrait])
    );
    assert_eq!(
        found(&app, &mine, "model=procedural").await,
        ids(&[&portrait])
    );
    assert!(found(&app, &mine, "q=fox&model=sdxl").await.is_empty());

    // Paged by the same cursor as every listing, newest first, no empty last page.
    for limit in [1, 7, 25] {
        let (ids, pages) = walk(&app, &mine, "q=lighthouse+rocky", limit).await;
        assert_eq!(ids, lighthouses, "limit {limit}");
        assert_eq!(pages, 25usize.div_ceil(limit as usize), "limit {limit}");
    }
    // A cursor of another account's search is refused as any foreign cursor is.
    let (_, page) = app.get_as(&theirs, "/api/v1/tasks?q=lighthouse").await;
    let foreign = page["tasks"][0]["task_id"].as_str().unwrap().to_string();
    let (status, body) = app
        .get_as(
            &mine,
            &format!("/api/v1/tasks?q=lighthouse&cursor={foreign}"),
        )
        .await;
    assert_eq!(status, 400, "{body}");

    // Bad queries: 400 in the contract's shape, naming the parameter.
    let at_most = "w".repeat(200);
    let (status, body) = app
        .get_as(&mine, &format!("/api/v1/tasks?q={at_most}"))
        .await;
    assert_eq!(status, 200, "200 characters are allowed: {body}");
    for (query, field) in [
        (format!("q={}", "w".repeat(201)), "q"),
        (format!("q={}", "é".repeat(201)), "q"),
        ("q=%21%21%21".to_string(), "q"),
        ("q=--%3A%3A".to_string(), "q"),
        ("q=a&q=b".to_string(), "q"),
        ("q=fox&status=done".to_string(), "status"),
        ("q=fox&type=paint".to_string(), "type"),
        (format!("model={}", "m".repeat(101)), "model"),
    ] {
        let (status, body) = app.get_as(&mine, &format!("/api/v1/tasks?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["errors"][0]["code"], "invalid_value", "{query}");
        let msg = body["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{field}:")), "{query}: {msg}");
    }
    let (status, body) = app.get_as("easel_nope", "/api/v1/tasks?q=%21").await;
    assert_eq!((status, body), (401, json!({})));
    app.stop().await;
}

/// A dashboard session for the account: the cookie a signed-in browser sends.
async fn session(app: &TestApp, account_id: &str) -> String {
    let (token, hash) = easel::accounts::new_session_token();
    app.store
        .create_session(account_id, &hash, easel::store::now_ms() + 600_000)
        .await
        .unwrap();
    format!("easel_session={token}")
}

async fn page(app: &TestApp, cookie: &str, path: &str) -> (u16, String) {
    let res = reqwest::Client::new()
        .get(app.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// The task pages a gallery page links to, in order.
fn tiles(body: &str) -> Vec<String> {
    let list = match body.split_once("<ul class=\"gallery\">") {
        Some((_, rest)) => rest.split_once("</ul>").unwrap().0,
        None => return Vec::new(),
    };
    list.split("<a href=\"/tasks/")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gallery_shows_the_accounts_images_searched_filtered_and_paged() {
    let app = TestApp::spawn().await;
    let (account, mine) = app.account_with("gallery@example.com", None).await;
    let (other, theirs) = app.account_with("gallery-other@example.com", None).await;
    let cookie = session(&app, &account).await;
    let mut boats = Vec::new();
    for i in 0..26 {
        let prompt = format!("a harbour at dawn, boat {i}");
        boats.push(submit(&app, &mine, "imagine", json!({ "prompt": prompt })).await);
    }
    let owl = json!({ "prompt": "an owl in a misty forest", "model": "procedural" });
    let owl = submit(&app, &mine, "imagine", owl).await;
    // Describe-like tasks make no image, so the gallery leaves them out.
    let words = submit(
        &app,
        &mine,
        "shorten",
        json!({ "prompt": "an owl, shortened" }),
    )
    .await;
    let theirs_owl = json!({ "prompt": "an owl in a misty forest" });
    let theirs_owl = submit(&app, &theirs, "imagine", theirs_owl).await;
    for id in boats.iter().chain([&owl, &words]) {
        let done = app
            .wait_final_as(&mine, id, std::time::Duration::from_secs(60))
            .await;
        assert_eq!(done["status"], "finished", "{done}");
    }

    // The first page: the newest images first, a page at a time, with the search form and
    // its filters under their accessible names, and the page in the navigation.
    let (status, body) = page(&app, &cookie, "/gallery").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<label for=\"q\">Search prompts</label>"),
        "{body}"
    );
    for name in ["Model", "Type", "Status"] {
        assert!(body.contains(&format!(">{name}</label>")), "{name}");
    }
    assert!(body.contains("<a href=\"/gallery\" aria-current=\"page\">Gallery</a>"));
    let first = tiles(&body);
    let newest: Vec<String> = std::iter::once(owl.clone())
        .chain(boats.iter().rev().cloned())
        .collect();
    assert_eq!(first, newest[..24]);
    assert!(!first.contains(&words) && !first.contains(&theirs_owl));
    // Each tile is the task's scaled image, named by its prompt.
    assert!(body.contains(&format!(
        "<img src=\"/tasks/{owl}/image/0?w=320\" alt=\"an owl in a misty forest\""
    )));
    let end = body
        .find("\">Older images</a>")
        .expect("a link to older images");
    let start = body[..end].rfind("href=\"").unwrap() + "href=\"".len();
    // As a browser reads the attribute (askama writes `&` as `&#38;`).
    let older = body[start..end].replace("&#38;", "&").replace("&amp;", "&");
    assert!(
        older.starts_with("/gallery?") && older.contains("cursor="),
        "{older}"
    );
    let (status, body) = page(&app, &cookie, &older).await;
    assert_eq!(status, 200);
    assert_eq!(tiles(&body), newest[24..], "{older}: {body}");
    assert!(body.contains("Newest</a>") && !body.contains("Older images"));

    // Searched: every word, the account's own only; the filters narrow it.
    let (_, body) = page(&app, &cookie, "/gallery?q=owl+forest").await;
    assert_eq!(tiles(&body), ids(&[&owl]));
    let (_, body) = page(&app, &cookie, "/gallery?q=owl+harbour").await;
    assert!(tiles(&body).is_empty());
    assert!(body.contains("No image's prompt holds every one of those words."));
    let (_, body) = page(
        &app,
        &cookie,
        "/gallery?q=boat+3&model=&type=imagine&status=finished",
    )
    .await;
    assert_eq!(tiles(&body), ids(&[&boats[3]]));
    let (_, body) = page(&app, &cookie, "/gallery?q=&model=procedural&type=&status=").await;
    assert_eq!(tiles(&body), ids(&[&owl]));
    assert!(body.contains("<option value=\"procedural\" selected>"));
    let (_, body) = page(&app, &cookie, "/gallery?status=failed").await;
    assert!(tiles(&body).is_empty());
    // The other account sees its owl alone.
    let theirs_cookie = session(&app, &other).await;
    let (_, body) = page(&app, &theirs_cookie, "/gallery?q=owl").await;
    assert_eq!(tiles(&body), ids(&[&theirs_owl]));

    // Bad input: the page says what is wrong, beside the form, and shows nothing.
    for query in ["q=%21%21%21", "status=done", "type=paint"] {
        let (status, body) = page(&app, &cookie, &format!("/gallery?{query}")).await;
        assert_eq!(status, 400, "{query}");
        assert!(body.contains("role=\"alert\""), "{query}: {body}");
        assert!(tiles(&body).is_empty());
    }
    let long = "w".repeat(201);
    let (status, body) = page(&app, &cookie, &format!("/gallery?q={long}")).await;
    assert_eq!(status, 400);
    assert!(body.contains("at most 200 characters"), "{body}");
    // Signed out: to the sign-in page.
    let res = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(app.url("/gallery"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 303);
    app.stop().await;
}

#[tokio::test]
async fn tasks_stored_before_the_search_index_are_found() {
    if common::sqlite_only("the SQLite migration that fills the index") {
        return;
    }
    // Migration 0024 adds the index; a task stored by the release before it is found after.
    let (dir, url, mut conn) = common::database_before(24).await;
    sqlx::query(
        "INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('acct-1', 'old@example.com', 's', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO tasks (account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at)
         VALUES ('acct-1', 'imagine', 'pending', 1, 'an old brass telescope', '1:1', 'fast',
             1, 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    let mut config = common::test_config(dir.path());
    config.database.url = Some(url);
    config.worker.workers = 0;
    let app = TestApp::start(dir, config).await;
    let key = the_old_task_is_found(&app).await;
    // And new ones beside it, through the indexer.
    submit(
        &app,
        &key,
        "imagine",
        json!({ "prompt": "a new brass telescope" }),
    )
    .await;
    assert_eq!(found(&app, &key, "q=brass+telescope").await.len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn sqlites_indexer_adds_new_tasks_behind_the_writer_without_a_search() {
    if common::sqlite_only("SQLite's indexer") {
        return;
    }
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (_, key) = app.account_with("indexed@example.com", None).await;
    for n in 0..3 {
        submit(
            &app,
            &key,
            "imagine",
            json!({ "prompt": format!("a paper lantern number {n}") }),
        )
        .await;
    }
    // The database file, read beside the server: the mark reaches the last task and the index
    // holds the three prompts, with no search made.
    let mut conn = sqlx::SqliteConnection::connect(&app.config.database_url())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let indexed: i64 = loop {
        let (behind, indexed): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT max(seq) FROM tasks) - (SELECT seq FROM tasks_search_done),
                    (SELECT count(*) FROM tasks_search WHERE tasks_search MATCH 'lantern')",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if behind == 0 {
            break indexed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{behind} tasks still not indexed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(indexed, 3);
    drop(conn);
    assert_eq!(found(&app, &key, "q=paper+lantern").await.len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_task_written_straight_into_the_database_is_found_too() {
    // As a node of the release before writes it (it gives PostgreSQL no lexemes), or a restore:
    // SQLite's indexer and PostgreSQL's fallback trigger index it all the same.
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let (account, key) = app.account_with("direct@example.com", None).await;
    let mut db = common::database(&app.config).await;
    sqlx::query(&format!(
        "INSERT INTO tasks (account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at)
         VALUES ('{account}', 'imagine', 'pending', 1, 'a Copper kettle, e-mail', '1:1',
             'fast', 1, 0)"
    ))
    .execute(&mut db)
    .await
    .unwrap();
    assert_eq!(found(&app, &key, "q=copper+KETTLE").await.len(), 1);
    assert_eq!(found(&app, &key, "q=mail").await.len(), 1);
    assert!(found(&app, &key, "q=copper+pot").await.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn postgres_tasks_stored_before_easel_cut_their_words_are_found() {
    if !common::on_postgres() {
        eprintln!("skipped on SQLite: this test is about PostgreSQL's migration 0019");
        return;
    }
    // Migration 0019 replaces the column PostgreSQL's parser generated with the words easel
    // cuts; a task stored by the release before it is found after, by its words alone.
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config(dir.path());
    config.worker.workers = 0;
    let url = config.database.url.clone().unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut before = sqlx::migrate!("./migrations/postgres");
    before.migrations = std::borrow::Cow::Owned(
        before
            .migrations
            .iter()
            .filter(|m| m.version < 19)
            .cloned()
            .collect(),
    );
    before.run(&mut conn).await.unwrap();
    for statement in [
        "INSERT INTO accounts (id, email, signing_secret, created_at)
         VALUES ('acct-1', 'old@example.com', 's', 0)",
        "INSERT INTO tasks (account_id, task_type, status, priority, prompt, aspect_ratio,
             process_mode, seed, created_at)
         VALUES ('acct-1', 'imagine', 'pending', 1, 'an old Brass-telescope', '1:1', 'fast',
             1, 0)",
    ] {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();
    let app = TestApp::start(dir, config).await;
    the_old_task_is_found(&app).await;
    app.stop().await;
}
