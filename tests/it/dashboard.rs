//! The dashboard through HTTP, as a browser without JavaScript uses it: forms, cookies and
//! redirects. Its security rules: CSRF tokens and origins, session expiry, password rules,
//! sign-in limits, accounts that never see each other's tasks, sign-up closed. The whole flow in
//! a real browser is tests/browser (scripts/test.sh).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::{json, Value};

use crate::common::{self, TestApp};

/// A client that keeps cookies and does not follow redirects, so each answer can be checked.
pub(crate) struct Browser {
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    cookies: HashMap<String, String>,
}

pub(crate) struct Page {
    pub(crate) status: u16,
    headers: HeaderMap,
    pub(crate) body: String,
}

impl Page {
    pub(crate) fn location(&self) -> &str {
        self.headers
            .get(LOCATION)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }

    /// The value of the first hidden `csrf` field.
    pub(crate) fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .unwrap_or_else(|| panic!("a form with a csrf field in: {}", self.body));
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_string()
    }
}

impl Browser {
    pub(crate) fn new(app: &TestApp) -> Browser {
        Browser::at(app, "127.0.0.1")
    }

    /// A browser whose requests come from `address`, another loopback address (all of
    /// 127.0.0.0/8 reaches the server), as a client elsewhere would.
    fn at(app: &TestApp, address: &str) -> Browser {
        Browser {
            base: app.base.clone(),
            http: reqwest::Client::builder()
                .redirect(Policy::none())
                .local_address(address.parse::<std::net::IpAddr>().unwrap())
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    /// A browser whose requests reach the server through a proxy at `proxy` (another loopback
    /// address) that says they came from `client`, in `X-Forwarded-For`.
    fn behind(app: &TestApp, proxy: &str, client: &str) -> Browser {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", client.parse().unwrap());
        Browser {
            base: app.base.clone(),
            http: reqwest::Client::builder()
                .redirect(Policy::none())
                .local_address(proxy.parse::<std::net::IpAddr>().unwrap())
                .default_headers(headers)
                .build()
                .unwrap(),
            cookies: HashMap::new(),
        }
    }

    /// The same browser (its cookies) on another network.
    fn moved_to(&self, app: &TestApp, address: &str) -> Browser {
        Browser {
            cookies: self.cookies.clone(),
            ..Browser::at(app, address)
        }
    }

    pub(crate) fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub(crate) async fn keep(&mut self, res: reqwest::Response) -> Page {
        for c in res.headers().get_all(SET_COOKIE) {
            let c = c.to_str().unwrap();
            let (pair, _) = c.split_once(';').unwrap_or((c, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || c.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_string(), value.to_string());
            }
        }
        Page {
            status: res.status().as_u16(),
            headers: res.headers().clone(),
            body: res.text().await.unwrap(),
        }
    }

    pub(crate) async fn get(&mut self, path: &str) -> Page {
        let res = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        self.keep(res).await
    }

    /// POST a form as the dashboard's own pages do (with their Origin).
    pub(crate) async fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let origin = self.base.clone();
        self.post_from(path, fields, Some(&origin)).await
    }

    pub(crate) async fn post_from(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Page {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .form(fields);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        let res = req.send().await.unwrap();
        self.keep(res).await
    }

    /// POST a file form (`multipart/form-data`) as the dashboard's pages do, without script.
    async fn post_file(&mut self, path: &str, csrf: &str, image: Vec<u8>) -> Page {
        let form = reqwest::multipart::Form::new()
            .text("csrf", csrf.to_string())
            .part(
                "image",
                reqwest::multipart::Part::bytes(image).file_name("picture.png"),
            );
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("origin", self.base.clone())
            .multipart(form)
            .send()
            .await
            .unwrap();
        self.keep(res).await
    }

    /// Sign up (the form's own token), and expect to be signed in.
    async fn sign_up(&mut self, email: &str, password: &str) -> Page {
        let form = self.get("/signup").await;
        assert_eq!(form.status, 200, "{}", form.body);
        let csrf = form.csrf();
        self.post(
            "/signup",
            &[("csrf", &csrf), ("email", email), ("password", password)],
        )
        .await
    }

    async fn sign_in(&mut self, email: &str, password: &str) -> Page {
        let form = self.get("/signin").await;
        let csrf = form.csrf();
        self.post(
            "/signin",
            &[("csrf", &csrf), ("email", email), ("password", password)],
        )
        .await
    }

    /// Sign up with `PASSWORD` (and be signed in), then create a key: its secret.
    pub(crate) async fn sign_up_with_key(&mut self, email: &str, key_name: &str) -> String {
        let page = self.sign_up(email, PASSWORD).await;
        assert_eq!(page.status, 303, "{}", page.body);
        self.create_key(key_name).await
    }

    /// Create a key on the keys page; its secret.
    async fn create_key(&mut self, name: &str) -> String {
        let keys = self.get("/keys").await;
        let csrf = keys.csrf();
        let page = self.post("/keys", &[("csrf", &csrf), ("name", name)]).await;
        assert_eq!(page.status, 200, "{}", page.body);
        let at = page
            .body
            .find("data-testid=\"new-key\">")
            .expect("the new key");
        let rest = &page.body[at + "data-testid=\"new-key\">".len()..];
        rest[..rest.find('<').unwrap()].to_string()
    }
}

pub(crate) const PASSWORD: &str = "correct horse battery staple";

#[tokio::test]
async fn forms_without_the_right_token_or_from_another_site_are_refused() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let signed_up = b.sign_up("csrf@example.com", PASSWORD).await;
    assert_eq!(signed_up.status, 303, "{}", signed_up.body);
    let keys = b.get("/keys").await;
    assert_eq!(keys.status, 200);
    let csrf = keys.csrf();

    let none = b.post("/keys", &[("name", "no token")]).await;
    assert_eq!(none.status, 403, "{}", none.body);
    let wrong = b
        .post(
            "/keys",
            &[("csrf", "0".repeat(40).as_str()), ("name", "wrong")],
        )
        .await;
    assert_eq!(wrong.status, 403);
    let elsewhere = b
        .post_from(
            "/keys",
            &[("csrf", &csrf), ("name", "cross-site")],
            Some("https://evil.example"),
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    // Nothing was made by the refused forms.
    let listed = b.get("/keys").await.body;
    for name in ["no token", "wrong", "cross-site"] {
        assert!(!listed.contains(name), "{name} was created");
    }
    // The right token from the page's own origin works.
    let key = b.create_key("right").await;
    assert!(easel::auth::well_formed(&key), "{key}");

    // Another session's token is not this session's.
    let mut other = Browser::new(&app);
    other.sign_up("csrf-other@example.com", PASSWORD).await;
    let theirs = other
        .post("/keys", &[("csrf", &csrf), ("name", "borrowed")])
        .await;
    assert_eq!(theirs.status, 403);

    // Signed out, the sign-in form needs its cookie's token too.
    let mut fresh = Browser::new(&app);
    let page = fresh.get("/signin").await;
    let token = page.csrf();
    fresh.cookies.clear();
    let refused = fresh
        .post(
            "/signin",
            &[
                ("csrf", &token),
                ("email", "csrf@example.com"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(refused.status, 403);

    // Sign-out is a form like the others.
    let out = b.post("/signout", &[]).await;
    assert_eq!(out.status, 403);
    assert_eq!(b.get("/keys").await.status, 200, "still signed in");
}

#[tokio::test]
async fn signed_out_pages_send_to_sign_in_and_sign_out_ends_the_session() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    for path in ["/tasks", "/keys", "/playground", "/account", "/admin"] {
        let page = b.get(path).await;
        assert_eq!(page.status, 303, "{path}");
        assert!(
            page.location().starts_with("/signin?next="),
            "{path}: {}",
            page.location()
        );
    }
    let home = b.get("/").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("Sign in"));

    let signed_up = b.sign_up("out@example.com", PASSWORD).await;
    assert_eq!(signed_up.status, 303);
    let cookie = signed_up
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .find(|c| c.starts_with("easel_session="))
        .expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(!cookie.contains("Secure"), "http public_url: {cookie}");
    let stolen = b.cookies["easel_session"].clone();

    let keys = b.get("/keys").await;
    let csrf = keys.csrf();
    let out = b.post("/signout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b.get("/keys").await.status, 303);
    // The token is dead in the store, not only forgotten by this browser.
    b.cookies.insert("easel_session".into(), stolen);
    assert_eq!(b.get("/keys").await.status, 303);
}

#[tokio::test]
async fn the_session_cookie_is_secure_when_public_url_is_https() {
    let app =
        TestApp::spawn_with(|c| c.server.public_url = Some("https://easel.example".into())).await;
    let mut b = Browser::new(&app);
    let form = b.get("/signup").await;
    let csrf = form.csrf();
    let page = b
        .post_from(
            "/signup",
            &[
                ("csrf", &csrf),
                ("email", "tls@example.com"),
                ("password", PASSWORD),
            ],
            Some("https://easel.example"),
        )
        .await;
    assert_eq!(page.status, 303, "{}", page.body);
    let cookie = page
        .headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| c.to_str().unwrap().to_string())
        .find(|c| c.starts_with("easel_session="))
        .unwrap();
    assert!(cookie.contains("Secure"), "{cookie}");
}

#[tokio::test]
async fn sessions_expire() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    assert_eq!(b.sign_up("ttl@example.com", PASSWORD).await.status, 303);
    assert_eq!(b.get("/keys").await.status, 200);
    // The session's time runs out (`session_ttl` is at least a minute, so the test moves the
    // expiry, as the clock would).
    let mut db = common::database(&app.config).await;
    let moved = sqlx::query(&format!(
        "UPDATE sessions SET expires_at = {} WHERE account_id = (SELECT id FROM accounts \
         WHERE email = 'ttl@example.com')",
        easel::store::now_ms() - 1
    ))
    .execute(&mut db)
    .await
    .unwrap();
    assert_eq!(moved.rows_affected(), 1);
    let page = b.get("/keys").await;
    assert_eq!(page.status, 303);
    assert!(page.location().starts_with("/signin"));
    // Signing in again works, for `session_ttl` from now.
    assert_eq!(b.sign_in("ttl@example.com", PASSWORD).await.status, 303);
    assert_eq!(b.get("/keys").await.status, 200);
}

#[tokio::test]
async fn passwords_must_follow_the_rules() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let short = b.sign_up("short@example.com", "abc").await;
    assert_eq!(short.status, 400);
    assert!(short.body.contains("Password"), "{}", short.body);
    assert!(!b.cookies.contains_key("easel_session"));
    // No account was made: signing in with it fails like any wrong password.
    assert_eq!(b.sign_in("short@example.com", "abc").await.status, 401);
    let bad_email = b.sign_up("not-an-email", PASSWORD).await;
    assert_eq!(bad_email.status, 400);
    assert!(bad_email.body.contains("Email"));

    // Long enough but guessable: each refused with why, and no account made.
    for (weak, why) in [
        (
            "1234567890",
            "Password: too easy to guess (this is a top-100 common password)",
        ),
        ("          ", "Password: must not be only spaces."),
        (
            "password123",
            "Password: too easy to guess (this is a very common password)",
        ),
        ("weak.rules.1@example.com", "Password: too easy to guess"),
    ] {
        let page = b.sign_up("weak.rules.1@example.com", weak).await;
        assert_eq!(page.status, 400, "{weak:?}");
        assert!(page.body.contains(why), "{weak:?}: {}", page.body);
        assert!(!b.cookies.contains_key("easel_session"));
    }
    assert!(app
        .store
        .account_by_email("weak.rules.1@example.com")
        .await
        .unwrap()
        .is_none());
    let form = b.get("/signup").await;
    assert!(
        form.body.contains("not easy to guess"),
        "the rule is on the form"
    );
    assert_eq!(b.sign_up("rules@example.com", PASSWORD).await.status, 303);
}

/// The message of a page's error.
fn message(p: &Page) -> String {
    let at = p.body.find("role=\"alert\">").expect("an error message");
    let rest = &p.body[at + "role=\"alert\">".len()..];
    rest[..rest.find('<').unwrap()].to_string()
}

#[tokio::test]
async fn behind_a_trusted_proxy_one_clients_failed_sign_ins_do_not_lock_out_another() {
    use easel::accounts::throttle::SIGN_IN_MAX_PER_ADDRESS;
    let app = TestApp::spawn_with(|c| {
        c.server.trusted_proxies = vec!["127.0.0.2/32".parse().unwrap()];
    })
    .await;
    Browser::at(&app, "127.0.0.3")
        .sign_up("victim@example.com", PASSWORD)
        .await;
    let mut guesser = Browser::behind(&app, "127.0.0.2", "10.0.0.5");
    for i in 0..SIGN_IN_MAX_PER_ADDRESS {
        let email = format!("guess{i}@example.com");
        assert_eq!(guesser.sign_in(&email, "nope nope nope").await.status, 401);
    }
    let refused = guesser
        .sign_in("someone@example.com", "nope nope nope")
        .await;
    assert_eq!(refused.status, 429, "10.0.0.5 is over its limit");
    // Through the same proxy, another client signs in.
    let mut other = Browser::behind(&app, "127.0.0.2", "10.0.0.6");
    let page = other.sign_in("victim@example.com", PASSWORD).await;
    assert_eq!(page.status, 303, "{}", page.body);
    // From a peer that is no proxy of ours the header is ignored: its failures count against its
    // own address, whatever it claims.
    let mut liar = Browser::behind(&app, "127.0.0.4", "10.0.0.7");
    for i in 0..SIGN_IN_MAX_PER_ADDRESS {
        let email = format!("liar{i}@example.com");
        liar.sign_in(&email, "nope nope nope").await;
    }
    let mut honest = Browser::behind(&app, "127.0.0.4", "10.0.0.8");
    let refused = honest.sign_in("victim@example.com", PASSWORD).await;
    assert_eq!(
        refused.status, 429,
        "127.0.0.4 is one client, over its limit"
    );
}

#[tokio::test]
async fn sign_in_is_rate_limited_and_never_says_which_emails_exist() {
    use easel::accounts::throttle::{SIGN_IN_MAX_PER_ADDRESS, SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL};
    let app = TestApp::spawn().await;
    Browser::new(&app)
        .sign_up("limited@example.com", PASSWORD)
        .await;
    // A browser that has never signed in to it, as a guesser's is.
    let mut b = Browser::new(&app);

    let wrong = b
        .sign_in("limited@example.com", "wrong password here")
        .await;
    let unknown = b.sign_in("nobody@example.com", "wrong password here").await;
    assert_eq!(wrong.status, 401);
    assert_eq!(unknown.status, 401);
    assert_eq!(
        message(&wrong),
        message(&unknown),
        "the same words for both"
    );

    for _ in 1..SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL {
        assert_eq!(
            b.sign_in("limited@example.com", "nope nope nope")
                .await
                .status,
            401
        );
    }
    // Past the limit for this email from this address, even the right password is refused
    // here for a while.
    let refused = b.sign_in("limited@example.com", PASSWORD).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(message(&refused).contains("Too many failed sign-in attempts"));
    assert!(!b.cookies.contains_key("easel_session"));
    // The same for an email without an account: refusals say nothing about which emails exist.
    for _ in 0..SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL - 1 {
        b.sign_in("nobody@example.com", "nope nope nope").await;
    }
    let nobody = b.sign_in("nobody@example.com", "nope nope nope").await;
    assert_eq!(nobody.status, 429);
    assert_eq!(message(&nobody), message(&refused));

    // The per-address limit: this client has failed 10 times; keep failing on other emails.
    let used = 2 * SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL;
    for i in used..SIGN_IN_MAX_PER_ADDRESS {
        let page = b
            .sign_in(&format!("x{i}@example.com"), "nope nope nope")
            .await;
        assert_eq!(page.status, 401);
    }
    let other = b
        .sign_in("someone-else@example.com", "nope nope nope")
        .await;
    assert_eq!(other.status, 429, "the address is over its limit");
}

#[tokio::test]
async fn a_guesser_is_refused_and_slowed_but_never_locks_the_owner_out() {
    use easel::accounts::throttle::{SIGN_IN_FREE_PER_EMAIL, SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL};
    let app = TestApp::spawn().await;
    let email = "owner@example.com";
    // The owner's browser is known to the account from signing up in it.
    let mut owner = Browser::new(&app);
    assert_eq!(owner.sign_up(email, PASSWORD).await.status, 303);
    assert!(owner.cookies.contains_key("easel_browser"));
    owner.cookies.remove("easel_session");

    // A guesser spends its tries from one address, and is then refused there, right or wrong.
    let mut guesser = Browser::at(&app, "127.0.0.2");
    for _ in 0..SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL {
        assert_eq!(guesser.sign_in(email, "a wrong guess").await.status, 401);
    }
    assert_eq!(guesser.sign_in(email, PASSWORD).await.status, 429);

    // The owner signs in at once from another address, in a browser new to the account...
    let mut elsewhere = Browser::at(&app, "127.0.0.3");
    let started = Instant::now();
    assert_eq!(elsewhere.sign_in(email, PASSWORD).await.status, 303);
    assert!(started.elapsed() < Duration::from_secs(1), "not slowed yet");
    // ...and from the guesser's own address in the browser the account knows.
    let mut known = owner.moved_to(&app, "127.0.0.2");
    assert_eq!(known.sign_in(email, PASSWORD).await.status, 303);
    assert_eq!(known.get("/keys").await.status, 200);

    // Guessing from enough addresses slows every new browser down, and refuses none of them.
    let failures = SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL;
    let more = SIGN_IN_FREE_PER_EMAIL - failures;
    for n in 0..more {
        let address = format!("127.0.1.{}", n / SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL + 1);
        let page = Browser::at(&app, &address)
            .sign_in(email, "another wrong guess")
            .await;
        assert_eq!(page.status, 401);
    }
    let mut fresh = Browser::at(&app, "127.0.0.4");
    let started = Instant::now();
    let wrong = fresh.sign_in(email, "still guessing").await;
    assert_eq!(wrong.status, 401);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the {SIGN_IN_FREE_PER_EMAIL}th failure makes the next try wait"
    );
    let started = Instant::now();
    let right = fresh.sign_in(email, PASSWORD).await;
    assert_eq!(right.status, 303, "slowed, never refused: {}", right.body);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the wait doubles"
    );
    // The known browser skips the wait whatever the count.
    let mut known = owner.moved_to(&app, "127.0.0.5");
    assert_eq!(known.sign_in(email, PASSWORD).await.status, 303);
}

#[tokio::test]
async fn easel_accounts_unlock_forgets_the_failed_sign_ins() {
    use easel::accounts::throttle::SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL;
    let app = TestApp::spawn().await;
    let email = "locked@example.com";
    Browser::new(&app).sign_up(email, PASSWORD).await;
    let mut b = Browser::at(&app, "127.0.0.2");
    for _ in 0..SIGN_IN_MAX_PER_ADDRESS_AND_EMAIL {
        assert_eq!(b.sign_in(email, "a wrong guess").await.status, 401);
    }
    assert_eq!(b.sign_in(email, PASSWORD).await.status, 429);

    // The real binary, on this server's database (SQLite file or PostgreSQL schema).
    let unlock = |email: &str| {
        common::binary::command(
            app.dir.path(),
            &[
                ("EASEL_DATA_DIR", app.dir.path().to_str().unwrap()),
                ("EASEL_DATABASE_URL", &app.config.database_url()),
            ],
        )
        .args(["accounts", "unlock", email])
        .output()
        .unwrap()
    };
    let out = unlock("nobody@example.com");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no account"));
    assert_eq!(
        b.sign_in(email, PASSWORD).await.status,
        429,
        "still refused"
    );
    let out = unlock("LOCKED@example.com");
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("unlocked locked@example.com"));
    assert_eq!(b.sign_in(email, PASSWORD).await.status, 303);
}

#[tokio::test]
async fn sign_ups_from_one_address_are_limited_and_a_refused_one_stores_nothing() {
    let app = TestApp::spawn().await;
    let per_hour = easel::config::SIGNUPS_PER_HOUR;
    assert_eq!(
        app.config.accounts.signups_per_hour, per_hour,
        "the default"
    );
    let mut b = Browser::new(&app);
    for i in 0..per_hour {
        let page = b.sign_up(&format!("many{i}@example.com"), PASSWORD).await;
        assert_eq!(page.status, 303, "{}", page.body);
    }
    let accounts = app.store.account_count().await.unwrap();
    b.cookies.remove("easel_session");
    let refused = b.sign_up("one-more@example.com", PASSWORD).await;
    assert_eq!(refused.status, 429);
    assert!(
        message(&refused).contains("Too many accounts were made from this address"),
        "{}",
        refused.body
    );
    assert!(!b.cookies.contains_key("easel_session"));
    assert_eq!(app.store.account_count().await.unwrap(), accounts);
    assert!(app
        .store
        .account_by_email("one-more@example.com")
        .await
        .unwrap()
        .is_none());
    // Another address is counted apart.
    let mut other = Browser::at(&app, "127.0.0.2");
    assert_eq!(
        other.sign_up("one-more@example.com", PASSWORD).await.status,
        303
    );
}

#[tokio::test]
async fn a_new_sign_up_starts_with_the_grant_and_is_refused_402_when_it_runs_out() {
    // 60 credits an imagine: the default grant of 100 pays for one.
    let app = TestApp::spawn_with(|c| {
        c.accounts.costs.insert("imagine".into(), 60);
    })
    .await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("granted@example.com", "spending").await;
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(
        account["credits"],
        easel::config::SIGNUP_CREDITS,
        "{account}"
    );
    app.imagine_as(&key, json!({ "prompt": "a fox" })).await;
    let (status, body) = app
        .post_as(
            &key,
            "/api/v1/imagine",
            &json!({ "prompt": "a second fox" }),
        )
        .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["errors"][0]["code"], "insufficient_credits");
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 40, "{account}");
}

#[tokio::test]
async fn unlimited_sign_up_credits_are_a_setting() {
    let app = TestApp::spawn_with(|c| c.accounts.signup_credits = None).await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("free@example.com", "free").await;
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], Value::Null, "{account}");
}

#[tokio::test]
async fn accounts_never_see_each_others_tasks_or_keys() {
    let app = TestApp::spawn().await;
    let mut alice = Browser::new(&app);
    let key = alice
        .sign_up_with_key("alice@example.com", "alice's program")
        .await;
    let task = app
        .imagine_as(&key, json!({"prompt": "alice secret lighthouse"}))
        .await;
    let record = app
        .wait_final_as(&key, &task, Duration::from_secs(20))
        .await;
    assert_eq!(record["status"], "finished", "{record}");

    let own = alice.get(&format!("/tasks/{task}")).await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("alice secret lighthouse"));
    assert_eq!(
        alice
            .get(&format!("/tasks/{task}/image/1?w=96"))
            .await
            .status,
        200
    );
    assert!(alice
        .get("/tasks")
        .await
        .body
        .contains("alice secret lighthouse"));

    let mut bob = Browser::new(&app);
    bob.sign_up("bob@example.com", PASSWORD).await;
    for path in [
        format!("/tasks/{task}"),
        format!("/tasks/{task}/progress"),
        format!("/tasks/{task}/image/0?w=96"),
        format!("/tasks/{task}/image/1?w=320"),
    ] {
        let page = bob.get(&path).await;
        assert_eq!(page.status, 404, "{path}");
        assert!(!page.body.contains("lighthouse"), "{path} leaks the prompt");
    }
    let list = bob.get("/tasks").await;
    assert!(!list.body.contains("lighthouse"));
    let csrf = list.csrf();
    let redeliver = bob
        .post(&format!("/tasks/{task}/redeliver"), &[("csrf", &csrf)])
        .await;
    assert_eq!(redeliver.status, 404);

    // Bob cannot revoke Alice's key by its id, and does not see it.
    let key_id = app
        .store
        .list_api_keys()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.name == "alice's program")
        .unwrap()
        .id;
    let revoke = bob
        .post(
            &format!("/keys/{key_id}/revoke"),
            &[("csrf", &csrf), ("confirm", "yes")],
        )
        .await;
    assert_eq!(revoke.status, 404);
    assert!(!bob.get("/keys").await.body.contains("alice"));
    let (status, _) = app.get_as(&key, &format!("/api/v1/tasks/{task}")).await;
    assert_eq!(status, 200, "alice's key still works");

    // Not an operator: the operators' page does not exist for Bob.
    assert_eq!(bob.get("/admin").await.status, 404);
}

#[tokio::test]
async fn revoking_a_key_on_the_page_refuses_it_at_once() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    b.sign_up("revoke@example.com", PASSWORD).await;
    let page = b.get("/keys").await;
    let unnamed = b
        .post("/keys", &[("csrf", &page.csrf()), ("name", "  ")])
        .await;
    assert_eq!(unnamed.status, 400);
    assert!(
        unnamed.body.contains("Name: must not be empty"),
        "{}",
        unnamed.body
    );
    let key = b.create_key("short-lived").await;
    assert_eq!(app.get_as(&key, "/api/v1/account").await.0, 200);
    let keys = b.get("/keys").await;
    let csrf = keys.csrf();
    let at = keys.body.find("/revoke\"").unwrap();
    let start = keys.body[..at].rfind("/keys/").unwrap();
    let path = format!("{}/revoke", &keys.body[start..at]);
    // The first step asks for confirmation and changes nothing.
    let confirm = b.post(&path, &[("csrf", &csrf)]).await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains("short-lived"));
    assert_eq!(app.get_as(&key, "/api/v1/account").await.0, 200);
    let done = b.post(&path, &[("csrf", &csrf), ("confirm", "yes")]).await;
    assert_eq!(done.status, 303);
    assert_eq!(app.get_as(&key, "/api/v1/account").await.0, 401);
    assert!(b.get("/keys").await.body.contains("Revoked"));
}

#[tokio::test]
async fn sign_up_can_be_closed() {
    let app = TestApp::spawn_with(|c| c.accounts.signup = easel::config::Signup::Closed).await;
    let mut b = Browser::new(&app);
    let page = b.get("/signup").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("closed"));
    assert!(!b
        .get("/signin")
        .await
        .body
        .contains("href=\"/signup\">Sign up</a>."));
    // A form posted anyway makes nothing.
    let signin = b.get("/signin").await;
    let csrf = signin.csrf();
    let posted = b
        .post(
            "/signup",
            &[
                ("csrf", &csrf),
                ("email", "closed@example.com"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(posted.status, 403);
    assert!(!b.cookies.contains_key("easel_session"));
    assert!(app
        .store
        .account_by_email("closed@example.com")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn assets_are_embedded_and_cached_for_good() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let page = b.get("/signin").await;
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    let mut found = 0;
    for asset in page.body.split('"').filter(|s| s.starts_with("/assets/")) {
        found += 1;
        let res = b
            .http
            .get(format!("{}{asset}", app.base))
            .header("accept-encoding", "gzip")
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{asset}");
        let cache = res.headers()["cache-control"].to_str().unwrap();
        assert!(cache.contains("immutable"), "{asset}: {cache}");
        let etag = res.headers()["etag"].clone();
        let again = b
            .http
            .get(format!("{}{asset}", app.base))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{asset}");
    }
    assert_eq!(found, 3, "the stylesheet, htmx and easel.js");
    let stale = b.get("/assets/easel.000000000000.css").await;
    assert_eq!(stale.status, 404);
}

#[tokio::test]
async fn the_signing_secret_is_shown_and_rotated_on_request_only() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    b.sign_up("secret@example.com", PASSWORD).await;
    let account = app
        .store
        .account_by_email("secret@example.com")
        .await
        .unwrap()
        .unwrap();
    let page = b.get("/account").await;
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains(&account.signing_secret),
        "not shown until asked"
    );
    let csrf = page.csrf();
    assert_eq!(b.post("/account/secret", &[]).await.status, 403);
    let shown = b.post("/account/secret", &[("csrf", &csrf)]).await;
    assert!(shown.body.contains(&account.signing_secret));
    let rotated = b.post("/account/secret/rotate", &[("csrf", &csrf)]).await;
    assert_eq!(rotated.status, 200);
    let after = app
        .store
        .account_by_email("secret@example.com")
        .await
        .unwrap()
        .unwrap();
    assert_ne!(after.signing_secret, account.signing_secret);
    assert!(after.signing_secret.starts_with("whsec_"));
    assert!(rotated.body.contains(&after.signing_secret));
}

#[tokio::test]
async fn the_account_page_sets_and_removes_the_account_webhook_with_the_apis_checks() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    b.sign_up("hook-page@example.com", PASSWORD).await;
    let account = app
        .store
        .account_by_email("hook-page@example.com")
        .await
        .unwrap()
        .unwrap();
    let page = b.get("/account").await;
    assert!(page.body.contains("Account webhook"), "{}", page.body);
    let csrf = page.csrf();
    let form = |csrf: &str, threshold: &str| -> Vec<(String, String)> {
        [
            ("csrf", csrf),
            ("url", "http://127.0.0.1:9/h"),
            ("credits_low", "on"),
            ("task_failed", "on"),
            ("credits_low_threshold", threshold),
            ("secret", "page-secret"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    // Without the token: refused, nothing stored.
    let no_token = form("", "5");
    assert_eq!(
        b.post("/account/webhook", &fields(&no_token)).await.status,
        403
    );
    // The API's checks: a bad threshold and an event-less form are named, nothing stored.
    let bad = form(&csrf, "five");
    let refused = b.post("/account/webhook", &fields(&bad)).await;
    assert!(
        refused
            .body
            .contains("credits_low_threshold: must be a whole number"),
        "{}",
        refused.body
    );
    let refused = b
        .post(
            "/account/webhook",
            &[("csrf", &csrf), ("url", "http://127.0.0.1:9/h")],
        )
        .await;
    assert!(
        refused
            .body
            .contains("events: must name at least one event"),
        "{}",
        refused.body
    );
    assert!(app
        .store
        .account_webhook(&account.id)
        .await
        .unwrap()
        .is_none());

    let good = form(&csrf, "25");
    let saved = b.post("/account/webhook", &fields(&good)).await;
    assert_eq!(saved.status, 200);
    assert!(saved.body.contains("Webhook saved."), "{}", saved.body);
    assert!(
        !saved.body.contains("page-secret"),
        "the secret is not shown again"
    );
    let hook = app
        .store
        .account_webhook(&account.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hook.url, "http://127.0.0.1:9/h");
    assert_eq!(hook.events.to_column(), "credits.low,task.failed");
    assert_eq!(hook.credits_low_threshold, Some(25));
    assert_eq!(hook.secret.as_deref(), Some("page-secret"));

    let removed = b.post("/account/webhook/delete", &[("csrf", &csrf)]).await;
    assert!(removed.body.contains("Webhook removed."));
    assert!(app
        .store
        .account_webhook(&account.id)
        .await
        .unwrap()
        .is_none());
}

fn fields(f: &[(String, String)]) -> Vec<(&str, &str)> {
    f.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The first account (the operator) signed in, its password set as `easel accounts
/// set-password` sets it.
pub(crate) async fn operator(app: &TestApp) -> Browser {
    let admin = app.store.first_account().await.unwrap().unwrap();
    let hash = easel::accounts::hash_password(PASSWORD.into())
        .await
        .unwrap();
    assert!(app.store.set_password(&admin.id, &hash).await.unwrap());
    let mut op = Browser::new(app);
    assert_eq!(op.sign_in(&admin.email, PASSWORD).await.status, 303);
    op
}

#[tokio::test]
async fn the_operators_page_lists_the_accounts_with_work_and_their_running_limit() {
    let app = TestApp::spawn_with(|c| {
        c.worker.workers = 0;
        c.plans.default_mut().max_running = 2;
    })
    .await;
    let mut op = operator(&app).await;
    let page = op.get("/admin").await;
    assert!(page
        .body
        .contains("No account has tasks queued or running."));

    let key = app.key_for("busy@example.com").await;
    for _ in 0..3 {
        app.imagine_as(&key, json!({"prompt": "a mill"})).await;
    }
    // One of them taken by a worker elsewhere.
    assert!(app
        .store
        .claim_task("elsewhere", 60_000)
        .await
        .unwrap()
        .is_some());
    let page = op.get("/admin").await;
    assert!(page.body.contains("Accounts with work"), "{}", page.body);
    assert!(
        page.body.contains("at most 2 running per account"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(
            "<td>busy@example.com</td><td>self-hosted</td><td>2</td><td>1</td><td>2</td>"
        ),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn operators_see_every_account_and_can_disable_one_or_set_its_credits() {
    let app = TestApp::spawn().await;
    let mut op = operator(&app).await;
    let admin = app.store.first_account().await.unwrap().unwrap();

    let mut bob = Browser::new(&app);
    let key = bob.sign_up_with_key("bob-op@example.com", "bob's").await;
    let bob_id = app
        .store
        .account_by_email("bob-op@example.com")
        .await
        .unwrap()
        .unwrap()
        .id;

    let page = op.get("/admin").await;
    assert_eq!(page.status, 200);
    for part in [
        "bob-op@example.com",
        "Queue",
        "procedural",
        "Failing webhook destinations",
    ] {
        assert!(page.body.contains(part), "{part}");
    }
    let csrf = page.csrf();
    let path = format!("/admin/accounts/{bob_id}");
    let set = op
        .post(
            &path,
            &[("csrf", &csrf), ("action", "credits"), ("credits", "7")],
        )
        .await;
    assert_eq!(set.status, 303);
    let (_, account) = app.get_as(&key, "/api/v1/account").await;
    assert_eq!(account["credits"], 7, "{account}");
    let bad = op
        .post(
            &path,
            &[("csrf", &csrf), ("action", "credits"), ("credits", "-3")],
        )
        .await;
    assert_eq!(bad.status, 400);

    let disabled = op
        .post(&path, &[("csrf", &csrf), ("action", "disable")])
        .await;
    assert_eq!(disabled.status, 303);
    assert_eq!(
        app.get_as(&key, "/api/v1/account").await.0,
        401,
        "keys refused"
    );
    assert_eq!(bob.get("/keys").await.status, 303, "the session is over");
    assert_eq!(
        bob.sign_in("bob-op@example.com", PASSWORD).await.status,
        401
    );

    // Not on itself, and not without the token.
    let own = op
        .post(
            &format!("/admin/accounts/{}", admin.id),
            &[("csrf", &csrf), ("action", "disable")],
        )
        .await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("cannot disable your own account"));
    let enable = op.post(&path, &[("action", "enable")]).await;
    assert_eq!(enable.status, 403);
    assert_eq!(app.get_as(&key, "/api/v1/account").await.0, 401);
}

#[tokio::test]
async fn the_playground_submits_with_the_accounts_own_keys_only() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("play@example.com", "playground").await;
    let page = b.get("/playground").await;
    assert_eq!(page.status, 200);
    let csrf = page.csrf();

    // Another account's key (the first account's) is refused, and nothing is submitted.
    let theirs = b
        .post(
            "/playground",
            &[
                ("csrf", &csrf),
                ("key", &app.key),
                ("operation", "imagine"),
                ("prompt", "not mine"),
            ],
        )
        .await;
    assert_eq!(theirs.status, 200);
    assert!(
        theirs.body.contains("paste one of this account"),
        "{}",
        theirs.body
    );
    // The API's own validation speaks through the playground.
    let empty = b
        .post(
            "/playground",
            &[("csrf", &csrf), ("key", &key), ("operation", "imagine")],
        )
        .await;
    assert!(empty.body.contains("prompt"), "{}", empty.body);
    let bad_extra = b
        .post(
            "/playground",
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("operation", "imagine"),
                ("prompt", "x"),
                ("extra", "[1, 2]"),
            ],
        )
        .await;
    assert!(bad_extra.body.contains("JSON object"), "{}", bad_extra.body);

    let ok = b
        .post(
            "/playground",
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("operation", "imagine"),
                ("prompt", "a playground kite"),
                ("extra", r#"{"aspect_ratio": "3:2"}"#),
            ],
        )
        .await;
    assert_eq!(ok.status, 200);
    // The fragment follows the task's event stream until it is final.
    let at = ok
        .body
        .find("data-live=\"/tasks/")
        .expect("a live fragment");
    let id = &ok.body[at + "data-live=\"/tasks/".len()..][..36];
    let task: uuid::Uuid = id.parse().unwrap();
    let (status, record) = app.get_as(&key, &format!("/api/v1/tasks/{task}")).await;
    assert_eq!(status, 200);
    assert_eq!(record["prompt"], "a playground kite");
    assert_eq!(record["aspect_ratio"], "3:2");
    let progress = common::wait_for(Duration::from_secs(20), || async {
        let p = b_progress(&app, &b.cookie_header(), task).await;
        (!p.contains("data-live")).then_some(p)
    })
    .await
    .expect("the fragment stops following the task once it is final");
    assert!(progress.contains("finished"));
    assert_eq!(progress.matches("<img").count(), 5);
    // Only one task was made: the refused forms made none.
    let (_, list) = app.get_as(&key, "/api/v1/tasks").await;
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1, "{list}");
}

async fn b_progress(app: &TestApp, cookies: &str, task: uuid::Uuid) -> String {
    reqwest::Client::new()
        .get(app.url(&format!("/tasks/{task}/progress")))
        .header("cookie", cookies)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_task_whose_images_retention_removed_shows_a_note_instead_of_images() {
    let app = TestApp::spawn_with(|c| {
        c.retention.keep = Some(Duration::from_secs(1));
        c.retention.sweep_interval = Duration::from_millis(100);
    })
    .await;
    let mut b = Browser::new(&app);
    let key = b.sign_up_with_key("kept@example.com", "short-lived").await;
    let task = app
        .imagine_as(&key, json!({"prompt": "a fading photograph"}))
        .await;
    let (status, body) = app
        .post_as(
            &key,
            "/api/v1/shorten",
            &json!({"prompt": "a very long prompt about an old photograph fading in the sun"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let text_task = body["task_id"].as_str().unwrap().to_string();
    for id in [&task, &text_task] {
        common::wait_for(Duration::from_secs(30), || async {
            let (_, t) = app.get_as(&key, &format!("/api/v1/tasks/{id}")).await;
            (t["data_removed"] == true).then_some(())
        })
        .await
        .expect("the task's data was removed");
    }
    // A text result is the record, not a file: it is still shown.
    let (_, record) = app
        .get_as(&key, &format!("/api/v1/tasks/{text_task}"))
        .await;
    let first = record["content"][0].as_str().unwrap().to_string();
    let text_page = b.get(&format!("/tasks/{text_task}/progress")).await;
    assert_eq!(text_page.status, 200);
    assert!(
        text_page
            .body
            .contains(&format!("<li>{}</li>", askama_escape(&first))),
        "{first} in {}",
        text_page.body
    );

    let page = b.get(&format!("/tasks/{task}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("a fading photograph"));
    assert!(
        page.body.contains("The images were removed"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Images removed (retention)"));
    assert!(
        !page.body.contains(&format!("/tasks/{task}/image/")),
        "no broken image: {}",
        page.body
    );
    let progress = b.get(&format!("/tasks/{task}/progress")).await;
    assert_eq!(progress.status, 200);
    assert!(progress.body.contains("The images were removed"));
    let list = b.get("/tasks").await;
    assert!(list.body.contains("a fading photograph"));
    assert!(!list.body.contains(&format!("/tasks/{task}/image/")));
    for n in 0..5 {
        let scaled = b.get(&format!("/tasks/{task}/image/{n}?w=96")).await;
        assert_eq!(scaled.status, 404, "image {n}");
    }
}

/// `text` as the templates escape it (enough for the words of a prompt).
fn askama_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

#[tokio::test]
async fn a_task_that_has_not_ended_is_canceled_from_its_page_by_its_owner_only() {
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let mut alice = Browser::new(&app);
    let key = alice
        .sign_up_with_key("alice@example.com", "alice's program")
        .await;
    let task = app
        .imagine_as(&key, json!({"prompt": "a queued comet"}))
        .await;
    let page = alice.get(&format!("/tasks/{task}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Cancel task"), "{}", page.body);
    let csrf = page.csrf();

    // Someone else's cancel is a 404 and changes nothing.
    let mut bob = Browser::new(&app);
    bob.sign_up("bob@example.com", PASSWORD).await;
    let bobs_csrf = bob.get("/tasks").await.csrf();
    let refused = bob
        .post(&format!("/tasks/{task}/cancel"), &[("csrf", &bobs_csrf)])
        .await;
    assert_eq!(refused.status, 404);
    let (_, record) = app.get_as(&key, &format!("/api/v1/tasks/{task}")).await;
    assert_eq!(record["status"], "pending");

    let done = alice
        .post(&format!("/tasks/{task}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.location(), format!("/tasks/{task}?cancel=done"));
    let page = alice.get(done.location()).await;
    assert!(
        page.body.contains("The task was canceled."),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("Cancel task"),
        "an ended task has no button"
    );
    let (_, record) = app.get_as(&key, &format!("/api/v1/tasks/{task}")).await;
    assert_eq!(record["status"], "canceled");
    // Once more, as from a stale page: it had ended already.
    let again = alice
        .post(&format!("/tasks/{task}/cancel"), &[("csrf", &csrf)])
        .await;
    assert_eq!(again.location(), format!("/tasks/{task}?cancel=ended"));
}

#[tokio::test]
async fn the_playground_uploads_an_image_without_script_and_offers_its_url() {
    let app = TestApp::spawn().await;
    let mut b = Browser::new(&app);
    let key = b
        .sign_up_with_key("pictures@example.com", "playground")
        .await;
    let page = b.get("/playground").await;
    assert!(
        page.body.contains("enctype=\"multipart/form-data\""),
        "{}",
        page.body
    );
    let csrf = page.csrf();
    let mut png = std::io::Cursor::new(Vec::new());
    image::DynamicImage::ImageRgba8(image::RgbaImage::from_pixel(
        24,
        16,
        image::Rgba([200, 40, 40, 255]),
    ))
    .write_to(&mut png, image::ImageFormat::Png)
    .unwrap();
    let png = png.into_inner();

    // Without the session's token: refused, nothing stored.
    let forged = b
        .post_file("/playground/upload", "forged", png.clone())
        .await;
    assert_eq!(forged.status, 403);
    // Not an image: the API's words, nothing stored.
    let text = b
        .post_file("/playground/upload", &csrf, b"hello".to_vec())
        .await;
    assert_eq!(text.status, 200);
    assert!(
        text.body
            .contains("image: not a PNG, JPEG, WebP or GIF image"),
        "{}",
        text.body
    );
    assert!(!text.body.contains("data-testid=\"upload\""));

    let page = b.post_file("/playground/upload", &csrf, png.clone()).await;
    assert_eq!(page.status, 200);
    let at = page
        .body
        .find("id=\"pg-upload-url\" readonly value=\"")
        .expect("the URL");
    let rest = &page.body[at + "id=\"pg-upload-url\" readonly value=\"".len()..];
    let url = rest[..rest.find('"').unwrap()].to_string();
    assert!(url.starts_with(&app.url("/files/uploads/")), "{url}");
    assert!(page.body.contains("image/png, 24x16"), "{}", page.body);
    // The prompt starts with it, as an image prompt.
    assert!(
        page.body.contains(&format!(">{url} </textarea>")),
        "{}",
        page.body
    );
    let served = app.http.get(&url).send().await.unwrap();
    assert_eq!(served.bytes().await.unwrap().to_vec(), png);

    // The upload is the account's: describe from the playground takes it, with its key.
    let described = b
        .post(
            "/playground",
            &[
                ("csrf", &csrf),
                ("key", &key),
                ("operation", "describe"),
                ("extra", &format!(r#"{{"image_url": "{url}"}}"#)),
            ],
        )
        .await;
    // Live while it runs, or already finished when the page is drawn (describe is quick).
    assert!(
        described.body.contains("data-live=\"/tasks/")
            || described.body.contains("data-status>finished"),
        "{}",
        described.body
    );
    // Another account cannot use it.
    let (status, body) = app
        .post("/api/v1/describe", &serde_json::json!({ "image_url": url }))
        .await;
    assert_eq!(status, 404, "{body}");
    let files = std::fs::read_dir(app.dir.path().join("files").join("uploads"))
        .unwrap()
        .flatten()
        .flat_map(|account| std::fs::read_dir(account.path()).unwrap().flatten())
        .count();
    assert_eq!(files, 1, "the refused forms stored nothing");
}

/// The events of a dashboard stream until `enough` says so, or the stream ends; `ended` says
/// which. Each event is its name and its JSON data.
async fn read_events(
    res: &mut reqwest::Response,
    enough: impl Fn(&[(String, Value)]) -> bool,
) -> (Vec<(String, Value)>, bool) {
    let mut text = String::new();
    let mut events = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            while let Some(at) = text.find("\n\n") {
                let block: String = text.drain(..at + 2).collect();
                let mut name = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        name = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !data.is_empty() {
                    events.push((name, serde_json::from_str(&data).unwrap()));
                    if enough(&events) {
                        return false;
                    }
                }
            }
            match res.chunk().await.unwrap() {
                Some(bytes) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => return true,
            }
        }
    })
    .await
    .expect("the stream said what was waited for in time");
    (events, read)
}

impl Browser {
    /// Open one of the dashboard's event streams with the session's cookie.
    async fn open(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn the_dashboards_event_streams_need_the_session_and_show_the_accounts_own_tasks() {
    // No worker: the tasks wait in line.
    let app = TestApp::spawn_with(|c| c.worker.workers = 0).await;
    let mut alice = Browser::new(&app);
    let key = alice
        .sign_up_with_key("alice@example.com", "alice's program")
        .await;
    let mut ids = Vec::new();
    for prompt in ["a first lantern", "a second lantern"] {
        ids.push(app.imagine_as(&key, json!({ "prompt": prompt })).await);
    }
    let (first, second) = (&ids[0], &ids[1]);

    // Without a session: to the sign-in page, as every dashboard page.
    let mut nobody = Browser::new(&app);
    for path in [format!("/tasks/{second}/events"), "/tasks/events".into()] {
        let page = nobody.get(&path).await;
        assert_eq!(page.status, 303, "{path}");
        assert!(page.location().starts_with("/signin?next="), "{path}");
    }
    // Another account's task: 404, nothing said of it.
    let mut bob = Browser::new(&app);
    bob.sign_up("bob@example.com", PASSWORD).await;
    for path in [
        format!("/tasks/{second}/events"),
        format!("/tasks/{second}/preview/0a1b2c/preview-1.jpg"),
    ] {
        let page = bob.get(&path).await;
        assert_eq!(page.status, 404, "{path}");
        assert!(!page.body.contains("lantern"), "{path} leaks the prompt");
    }
    // Bob's own stream says his task, and nothing of Alice's (all three wait; accounts take
    // turns, so Bob's goes between Alice's first and second).
    let bobs_key = bob.create_key("bob's program").await;
    let kite = app
        .imagine_as(&bobs_key, json!({ "prompt": "a kite" }))
        .await;
    let (theirs, _) = read_events(&mut bob.open("/tasks/events").await, |e| !e.is_empty()).await;
    assert_eq!(theirs[0].1["task_id"], kite.as_str());
    assert_eq!(theirs[0].1["queue_position"], 1);

    // The page says where the task stands without script, and the script's stream address.
    let page = alice.get(&format!("/tasks/{second}")).await;
    assert!(page.body.contains("queued, 2 ahead"), "{}", page.body);
    assert!(page
        .body
        .contains(&format!("data-live=\"/tasks/{second}/events\"")));
    assert!(!page.body.contains("every 1s"), "no polling");

    let mut stream = alice.open(&format!("/tasks/{second}/events")).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let (said, _) = read_events(&mut stream, |e| !e.is_empty()).await;
    assert_eq!(said[0].0, "task");
    assert_eq!(said[0].1["task_id"], second.as_str());
    assert_eq!(said[0].1["status"], "pending");
    assert_eq!(said[0].1["queue_position"], 2);
    assert_eq!(said[0].1["waiting_for"], "turn");

    let mut all = alice.open("/tasks/events").await;
    assert_eq!(all.status(), 200);
    let (said, _) = read_events(&mut all, |e| e.len() >= 2).await;
    let mut seen: Vec<&str> = said
        .iter()
        .map(|(_, d)| d["task_id"].as_str().unwrap())
        .collect();
    seen.sort();
    let mut want = vec![first.as_str(), second.as_str()];
    want.sort();
    assert_eq!(seen, want);

    // Canceled: its final record on both streams, and the task's stream ends.
    let (status, _) = app
        .post_as(&key, &format!("/api/v1/tasks/{second}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200);
    let (said, ended) = read_events(&mut stream, |_| false).await;
    assert!(ended);
    let (name, last) = said.last().expect("the final record");
    assert_eq!(
        (name.as_str(), last["status"].as_str()),
        ("task", Some("canceled"))
    );
    let (said, _) = read_events(&mut all, |e| {
        e.iter().any(|(_, d)| d["status"] == "canceled")
    })
    .await;
    assert_eq!(said.last().unwrap().1["task_id"], second.as_str());
}

#[tokio::test]
async fn a_running_tasks_preview_is_shown_from_this_site_and_its_stream_ends_with_it() {
    let app = TestApp::spawn_with(|c| {
        c.worker.procedural_min_duration = Duration::from_secs(6);
    })
    .await;
    let mut alice = Browser::new(&app);
    let key = alice
        .sign_up_with_key("alice@example.com", "alice's program")
        .await;
    let id = app
        .imagine_as(&key, json!({"prompt": "a slow harbour"}))
        .await;

    let mut stream = alice.open(&format!("/tasks/{id}/events")).await;
    let (said, _) = read_events(&mut stream, |e| {
        e.iter().any(|(_, d)| d["preview_image_url"].is_string())
    })
    .await;
    let preview = said
        .iter()
        .find_map(|(_, d)| d["preview_image_url"].as_str())
        .unwrap()
        .to_string();
    assert!(
        preview.starts_with(&format!("/tasks/{id}/preview/")),
        "the preview is on the dashboard's own site: {preview}"
    );
    let image = alice
        .http
        .get(app.url(&preview))
        .header("cookie", alice.cookie_header())
        .send()
        .await
        .unwrap();
    assert_eq!(image.status(), 200);
    assert_eq!(image.headers()["content-type"], "image/jpeg");
    assert_eq!(&image.bytes().await.unwrap()[..2], &[0xff, 0xd8]);
    let mut bob = Browser::new(&app);
    bob.sign_up("bob@example.com", PASSWORD).await;
    assert_eq!(bob.get(&preview).await.status, 404);

    // The page as a refresh shows it: the stored preview, while the task runs.
    common::wait_for(Duration::from_secs(20), || async {
        let page = reqwest::Client::new()
            .get(app.url(&format!("/tasks/{id}")))
            .header("cookie", alice.cookie_header())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        page.contains(&format!("src=\"/tasks/{id}/preview/"))
            .then_some(())
    })
    .await
    .expect("the page shows the preview while the task runs");

    let (said, ended) = read_events(&mut stream, |_| false).await;
    assert!(ended, "the stream ends after the final record");
    let (name, last) = said.last().unwrap();
    assert_eq!(name, "task");
    assert_eq!(last["status"], "finished");
    assert!(last.get("preview_image_url").is_none(), "{last}");
    assert!(said
        .iter()
        .any(|(n, d)| n == "progress" && d["status"] == "processing"));
}
