//! Loading the layers: their order, the example file, keys and values refused by name, and
//! secrets kept out of `Debug`.

use std::time::Duration;

use super::*;

/// `Config::load` with `file` as `easel.toml` in a jail (its own working directory and
/// environment), the error as text.
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn load_in_jail(jail: &mut figment::Jail, file: &str) -> Result<Config, String> {
    jail.create_file("easel.toml", file)
        .map_err(|e| e.to_string())?;
    Config::load(None, &Overrides::default()).map_err(|e| e.to_string())
}

/// What loading `file` gives; a panic when it is refused.
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn loaded(file: &str) -> Config {
    let mut config = None;
    figment::Jail::expect_with(|jail| {
        config = Some(load_in_jail(jail, file)?);
        Ok(())
    });
    config.expect("the jail ran")
}

/// Loading `file` is refused with an error that says each of `naming`.
fn assert_refused(file: &str, naming: &[&str]) {
    let error = refused(file);
    for word in naming {
        assert!(error.contains(word), "{file:?}: {error}\n(expected {word})");
    }
}

/// The error that loading `file` ends with; a panic when it loads.
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn refused(file: &str) -> String {
    let mut error = String::new();
    figment::Jail::expect_with(|jail| {
        match load_in_jail(jail, file) {
            Ok(_) => panic!("{file:?} was accepted"),
            Err(e) => error = e,
        }
        Ok(())
    });
    error
}

#[test]
fn defaults_validate() {
    Config::default().validate().unwrap();
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn layers_apply_in_order() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "easel.toml",
            "workers = 7\nwebhook_timeout = \"4s\"\nblocked_terms = [\"x\"]\n",
        )?;
        jail.set_env("EASEL_WEBHOOK_TIMEOUT", "3s");
        jail.set_env("EASEL_WEBHOOK_RETRY_SCHEDULE", "1s, 2s,5s");
        jail.set_env("EASEL_WEBHOOK_ALLOW_HTTP", "true");
        let overrides = Overrides {
            workers: Some(3),
            ..Overrides::default()
        };
        let c = Config::load(None, &overrides).map_err(|e| e.to_string())?;
        assert_eq!(c.worker.workers, 3);
        assert_eq!(c.webhooks.timeout, Duration::from_secs(3));
        assert_eq!(
            c.webhooks.retry_schedule,
            vec![
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(5)
            ]
        );
        assert!(c.webhooks.allow_http);
        assert_eq!(c.worker.blocked_terms, vec!["x".to_string()]);
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn every_section_reads_its_keys_from_the_environment() {
    figment::Jail::expect_with(|jail| {
        for (key, value) in [
            ("EASEL_ROLES", "api, worker"),
            ("EASEL_LOG_FORMAT", "json"),
            ("EASEL_DATABASE_MAX_CONNECTIONS", "5"),
            ("EASEL_SQLITE_SYNCHRONOUS", "normal"),
            ("EASEL_BLOB_STORE", "s3"),
            ("EASEL_S3_BUCKET", "images"),
            ("EASEL_MIN_FREE_SPACE", "5%"),
            ("EASEL_MAX_WAIT", "20s"),
            ("EASEL_DECODE_MEMORY_BUDGET", "512MiB"),
            ("EASEL_SIGNUP", "closed"),
            ("EASEL_SIGNUP_CREDITS", "unlimited"),
            ("EASEL_SIGNUPS_PER_HOUR", "30"),
            ("EASEL_RETENTION_SWEEP_INTERVAL", "5m"),
            ("EASEL_WEBHOOK_CONCURRENCY", "3"),
            ("EASEL_PLANS__SELF-HOSTED__MAX_PENDING", "7"),
            // Not settings: test switches and other programs' variables are left alone.
            ("EASEL_TEST_STORE", "sqlite"),
            ("EASEL_SOMETHING_ELSE", "1"),
        ] {
            jail.set_env(key, value);
        }
        let c = Config::load(None, &Overrides::default()).map_err(|e| e.to_string())?;
        assert_eq!(c.server.roles, vec![Role::Api, Role::Worker]);
        assert!(!c.runs(Role::Dispatcher));
        assert_eq!(c.server.log_format, LogFormat::Json);
        assert_eq!(c.database.max_connections, 5);
        assert_eq!(c.database.sqlite_synchronous, SqliteSynchronous::Normal);
        assert_eq!(c.blobs.store, BlobStoreKind::S3);
        assert_eq!(c.blobs.min_free_space, FreeSpace::Percent(5.0));
        assert_eq!(c.limits.max_wait, Duration::from_secs(20));
        assert_eq!(
            c.limits.decode_memory_budget,
            DecodeMemoryBudget::Bytes(512 << 20)
        );
        assert!(!c.signup_open());
        assert_eq!(c.accounts.signup_credits, None);
        assert_eq!(c.accounts.signups_per_hour, 30);
        assert_eq!(c.retention.sweep_interval, Duration::from_secs(300));
        assert_eq!(c.webhooks.concurrency, 3);
        assert_eq!(c.plans.of("self-hosted").max_pending, 7);
        Ok(())
    });
}

#[test]
fn the_example_file_holds_the_defaults() {
    let c = loaded(include_str!("../../easel.example.toml"));
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        serde_json::to_value(Config::default()).unwrap()
    );
}

#[test]
fn plans_hold_every_per_plan_setting_in_one_table() {
    let c = loaded(
        r#"default_plan = "free"
[plans.free]
max_running = 1
max_pending = 5
[plans.pro]
credits_per_period = 2000
period = "week"
max_running = 4
max_pending = 500
rate = { rate = 20, burst = 40 }
models = ["procedural"]
batch_max = 40
moderation = ["default", "brand-safety"]
"#,
    );
    let pro = c.plans.of("pro");
    assert_eq!(pro.credits_per_period, Some(2000));
    assert_eq!(pro.period, Period::Week);
    assert_eq!(
        (pro.max_running, pro.max_pending, pro.batch_max),
        (4, 500, 40)
    );
    assert_eq!(
        pro.rate.as_ref().map(|r| (r.rate, r.burst)),
        Some((20.0, 40))
    );
    assert_eq!(pro.moderation.as_deref().map(<[String]>::len), Some(2));
    // An account on a plan that is not configured has the default plan's settings.
    assert_eq!(c.plans.resolve("self-hosted"), "free");
    assert_eq!(c.plans.of("self-hosted").max_pending, 5);
    assert_eq!(
        c.plans.of("free").period,
        Period::Month,
        "the default period"
    );
    assert_eq!(c.plans.names(), ["free", "pro"]);
    // How the claims and submits take the limits: `store::quota`'s tests.
    // Without plans, every account is on `self-hosted` with every default.
    let d = Config::default();
    assert_eq!(d.plans.names(), ["self-hosted"]);
    assert_eq!(d.plans.of("anything").max_pending, 1000);
    assert_eq!(d.plans.of("anything").batch_max, 20);
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn an_old_per_plan_key_is_refused_saying_where_it_went() {
    for (file, went) in [
        (
            "max_pending_per_account = 10\n",
            "`max_pending` of a `[plans.NAME]`",
        ),
        (
            "max_running_per_account = 3\n",
            "`max_running` of a `[plans.NAME]`",
        ),
        (
            "[max_running_by_plan]\npro = 12\n",
            "`max_running` of a `[plans.NAME]`",
        ),
        (
            "[rate_limits.free]\nrate = 1.0\nburst = 5\n",
            "`rate` of a `[plans.NAME]`",
        ),
        (
            "[[models]]\nname = \"m\"\nbackends = [\"procedural\"]\nplans = [\"pro\"]\n",
            "`[plans.NAME]` table's `models`",
        ),
    ] {
        assert_refused(file, &["moved", went]);
    }
    let mut error = String::new();
    figment::Jail::expect_with(|jail| {
        jail.set_env("EASEL_MAX_PENDING_PER_ACCOUNT", "5");
        error = load_in_jail(jail, "").unwrap_err();
        Ok(())
    });
    assert!(
        error.contains("`EASEL_MAX_PENDING_PER_ACCOUNT` moved"),
        "{error}"
    );
}

#[test]
fn broken_plans_are_refused_naming_the_setting() {
    for (file, named) in [
        (
            "default_plan = \"gold\"\n[plans.free]\n",
            "default_plan: `gold` is not a plan; the plans are `free`",
        ),
        (
            "[plans.self-hosted]\nmodels = [\"sdxl\"]\n",
            "plans.self-hosted.models: no model is named `sdxl` (the models are procedural)",
        ),
        (
            "[plans.self-hosted]\nrate = { rate = 0.0, burst = 5 }\n",
            "plans.self-hosted.rate.rate: must be between",
        ),
        (
            "[plans.self-hosted]\nrate = { rate = 1.0, burst = 0 }\n",
            "plans.self-hosted.rate: burst and account_burst must be at least 1",
        ),
        (
            "[plans.self-hosted]\nmax_pending = 0\n",
            "plans.self-hosted.max_pending",
        ),
        (
            "[plans.self-hosted]\nbatch_max = 0\n",
            "plans.self-hosted.batch_max",
        ),
        (
            "[plans.self-hosted]\nperiod = \"year\"\n",
            "period must be `day`, `week` or `month`",
        ),
        ("[plans.self-hosted]\nmax_runing = 2\n", "max_runing"),
    ] {
        assert_refused(file, &[named]);
    }
}

#[test]
fn a_misspelt_key_or_table_is_refused_by_its_name() {
    assert_refused(
        "workerz = 4\n",
        &["`workerz` is not a setting", "did you mean `workers`"],
    );
    assert_refused(
        "[[backend]]\nname = \"a\"\nkind = \"procedural\"\n",
        &["`backend` is not a setting"],
    );
    assert_refused(
        "[webhook]\ntimeout = \"5s\"\n",
        &["`webhook` is not a setting"],
    );
    // Below the top, each table refuses the keys it does not have.
    assert_refused(
        "[[backends]]\nname = \"a\"\nkind = \"procedural\"\nconcurency = 2\n",
        &["concurency"],
    );
    assert_refused(
        "[plans.free]\nrate = { rate = 1.0, burst = 5, brust = 6 }\n",
        &["brust"],
    );
    assert_refused("[costs]\nimagin = 1\n", &["imagin"]);
}

#[test]
fn a_choice_not_offered_is_refused_naming_the_setting_and_the_choices() {
    for (file, named) in [
        (
            "blob_store = \"ftp\"\n",
            "blob_store must be `local` or `s3`, not `ftp`",
        ),
        (
            "signup = \"invite\"\n",
            "signup must be `open` or `closed`, not `invite`",
        ),
        (
            "log_format = \"xml\"\n",
            "log_format must be `text` or `json`, not `xml`",
        ),
        (
            "sqlite_synchronous = \"off\"\n",
            "sqlite_synchronous must be `full` or `normal`, not `off`",
        ),
        (
            "roles = [\"api\", \"cook\"]\n",
            "roles must be `api`, `worker` or `dispatcher`, not `cook`",
        ),
        ("min_free_space = \"lots\"\n", "min_free_space: `lots`"),
        (
            "decode_memory_budget = \"lots\"\n",
            "decode_memory_budget: `lots` is not a size",
        ),
        (
            "decode_memory_budget = 1000\n",
            "decode_memory_budget must be from 1 MiB to 4 TiB",
        ),
    ] {
        assert_refused(file, &[named]);
    }
}

#[test]
fn a_database_password_never_shows_in_debug_output() {
    let mut config = Config::default();
    config.database.url = Some("postgres://easel:hunter2@db:5432/easel".into());
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("postgres://easel:***@db:5432/easel"),
        "{shown}"
    );
}

#[test]
fn bad_values_are_refused() {
    let mut c = Config::default();
    c.worker.workers = 1000;
    assert!(c.validate().is_err());
    let mut c = Config::default();
    c.webhooks.retry_schedule = vec![Duration::from_secs(5), Duration::from_secs(1)];
    assert!(c.validate().is_err());
}

#[test]
fn account_settings_are_merged_and_checked() {
    let c = loaded(
        "signup = \"closed\"\nsignup_credits = 50\nsession_ttl = \"2h\"\n[costs]\nimagine = 9\n",
    );
    assert!(!c.signup_open());
    assert_eq!(c.accounts.signup_credits, Some(50));
    assert_eq!(c.accounts.session_ttl, Duration::from_secs(7200));
    assert_eq!(c.cost(OpKind::Imagine), 9);
    assert_eq!(
        c.cost(OpKind::Upscale1x),
        1,
        "the others keep their defaults"
    );
    assert_eq!(c.cost(OpKind::Seed), 0);
    // Open sign-up gives a finite grant unless the file says `unlimited`; a number written as
    // text (as the environment gives it) reads the same.
    let grant = |file: &str| loaded(file).accounts.signup_credits;
    assert_eq!(grant(""), Some(SIGNUP_CREDITS));
    assert_eq!(grant("signup_credits = \"unlimited\"\n"), None);
    assert_eq!(grant("signup_credits = \"25\"\n"), Some(25));
    assert_eq!(grant("signup_credits = 0\n"), Some(0));
    assert_refused(
        "signup_credits = \"lots\"\n",
        &["signup_credits", "unlimited"],
    );
    assert_refused("signup = \"invite\"\n", &["signup"]);
    type Change = fn(&mut Config);
    let cases: [(Change, &str); 10] = [
        (|c| c.accounts.signup_credits = Some(-1), "signup_credits"),
        (|c| c.accounts.signups_per_hour = 0, "signups_per_hour"),
        (
            |c| c.accounts.credits_low_threshold = -1,
            "credits_low_threshold",
        ),
        (
            |c| c.accounts.costs = [("imagin".to_string(), 1)].into_iter().collect(),
            "imagin",
        ),
        (
            |c| c.accounts.costs = [("imagine".to_string(), -2)].into_iter().collect(),
            "costs: imagine",
        ),
        (
            |c| c.accounts.session_ttl = Duration::from_secs(5),
            "session_ttl",
        ),
        (
            |c| c.limits.idempotency_ttl = Duration::from_secs(31 * 86_400),
            "idempotency_ttl",
        ),
        (
            |c| c.limits.idempotency_ttl = Duration::from_secs(59),
            "idempotency_ttl",
        ),
        (|c| c.limits.max_wait = Duration::from_secs(61), "max_wait"),
        (
            |c| c.limits.max_wait = Duration::from_millis(1500),
            "max_wait",
        ),
    ];
    for (change, named) in cases {
        let mut bad = Config::default();
        change(&mut bad);
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(named), "{e}");
    }
}

#[test]
fn metrics_settings_are_checked() {
    let mut c = Config::default();
    c.server.metrics_token = Some("short".into());
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("metrics_token"), "{e}");
    let mut c = Config::default();
    c.server.metrics_token = Some("a-secret-metrics-token".into());
    let shown = format!("{c:?}");
    assert!(!shown.contains("a-secret-metrics-token"), "{shown}");
}

#[test]
fn blob_store_settings_are_checked_and_named() {
    let mut c = Config::default();
    c.blobs.store = BlobStoreKind::S3;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("s3_bucket"), "{e}");
    assert_refused("blob_store = \"ftp\"\n", &["blob_store", "`local` or `s3`"]);
    let mut c = Config::default();
    c.blobs.store = BlobStoreKind::S3;
    c.blobs.s3_bucket = Some("images".into());
    c.blobs.s3_endpoint = Some("localhost:9000".into());
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("s3_endpoint"), "{e}");
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn retention_is_forever_by_default_and_at_least_a_minute_when_set() {
    figment::Jail::expect_with(|jail| {
        let load = || Config::load(None, &Overrides::default()).map_err(|e| e.to_string());
        assert_eq!(load()?.retention.keep, None);
        jail.create_file("easel.toml", "retention = \"30days\"\n")?;
        assert_eq!(
            load()?.retention.keep,
            Some(Duration::from_secs(30 * 86_400))
        );
        jail.set_env("EASEL_RETENTION", "forever");
        assert_eq!(load()?.retention.keep, None);
        jail.set_env("EASEL_RETENTION", "12h");
        assert_eq!(load()?.retention.keep, Some(Duration::from_secs(12 * 3600)));
        jail.set_env("EASEL_RETENTION", "30s");
        let e = load().unwrap_err();
        assert!(e.contains("retention must be at least 1 minute"), "{e}");
        jail.set_env("EASEL_RETENTION", "soon");
        let e = load().unwrap_err();
        assert!(e.contains("retention") && e.contains("`soon`"), "{e}");
        Ok(())
    });
    let mut c = Config::default();
    c.retention.sweep_interval = Duration::ZERO;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("retention_sweep_interval"), "{e}");
}

#[test]
fn backend_kinds_are_written_as_the_settings_name_them() {
    for (kind, name) in [
        (BackendKind::Procedural, "procedural"),
        (BackendKind::Openai, "openai"),
        (BackendKind::Sdwebui, "sdwebui"),
        (BackendKind::Comfyui, "comfyui"),
    ] {
        assert_eq!(kind.as_str(), name);
        let read: BackendKind = serde_json::from_value(serde_json::json!(name)).unwrap();
        assert_eq!(read, kind);
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error
fn upload_settings_have_defaults_and_take_sizes_and_durations() {
    figment::Jail::expect_with(|jail| {
        let load = || Config::load(None, &Overrides::default()).map_err(|e| e.to_string());
        let c = load()?;
        assert_eq!(c.limits.max_upload_bytes_per_day, 1 << 30);
        assert_eq!(c.retention.upload_retention, Duration::from_secs(24 * 3600));
        jail.create_file(
            "easel.toml",
            "max_upload_bytes_per_day = 1048576\nupload_retention = \"2h\"\n",
        )?;
        let c = load()?;
        assert_eq!(c.limits.max_upload_bytes_per_day, 1 << 20);
        assert_eq!(c.retention.upload_retention, Duration::from_secs(2 * 3600));
        jail.set_env("EASEL_MAX_UPLOAD_BYTES_PER_DAY", "512MiB");
        assert_eq!(load()?.limits.max_upload_bytes_per_day, 512 << 20);
        jail.set_env("EASEL_MAX_UPLOAD_BYTES_PER_DAY", "lots");
        let e = load().unwrap_err();
        assert!(e.contains("max_upload_bytes_per_day"), "{e}");
        Ok(())
    });
    let mut c = Config::default();
    c.limits.max_upload_bytes_per_day = 0;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("max_upload_bytes_per_day"), "{e}");
    let mut c = Config::default();
    c.retention.upload_retention = Duration::ZERO;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("upload_retention"), "{e}");
}

const TWO_WEBUIS: &str = r#"
[[backends]]
name = "gpu-a"
kind = "sdwebui"
url = "http://127.0.0.1:7860"

[[backends]]
name = "gpu-b"
kind = "comfyui"
url = "http://127.0.0.1:8188"
"#;

#[test]
fn models_are_read_filled_from_their_kinds_and_checked() {
    let file = format!(
        r#"{TWO_WEBUIS}
[[models]]
name = "sd15"
description = "Stable Diffusion 1.5"
backends = ["gpu-a", "gpu-b"]
checkpoint = "v1-5-pruned-emaonly.safetensors"
defaults = {{ steps = 25, sampler = "euler_a", negative_prompt = "blurry" }}
limits = {{ steps = [1, 50], cfg_scale = [1, 20] }}

[[models]]
name = "xl"
backends = ["gpu-b"]
default = true

[plans.self-hosted]
models = ["sd15"]

[plans.pro]
"#
    );
    let c = loaded(&file);
    let catalogue = c.catalogue().unwrap();
    let sd15 = catalogue.get("sd15").unwrap();
    assert_eq!(sd15.steps, Some(25));
    assert_eq!(sd15.cfg_scale, Some(7.0), "the first kind's default");
    assert_eq!(sd15.cfg_range, [1.0, 20.0]);
    assert_eq!(sd15.negative_prompt.as_deref(), Some("blurry"));
    assert!(!sd15.default && sd15.allows("anything"));
    // Only what both the WebUI and ComfyUI know.
    assert!(!sd15.samplers().contains(&"plms") && sd15.samplers().contains(&"ddim"));
    let xl = catalogue.get("xl").unwrap();
    assert_eq!((xl.steps, xl.sampler.as_deref()), (Some(20), Some("euler")));
    assert_eq!(catalogue.default_model().unwrap().name, "xl");
    assert!(xl.allows("pro") && !xl.allows("self-hosted"));
    assert!(
        sd15.plans.is_none(),
        "every plan may use it: no lookup of the caller's plan"
    );
    assert_eq!(catalogue.served_by("gpu-b"), ["sd15", "xl"]);
    assert_eq!(
        catalogue.checkpoint("sd15"),
        Some("v1-5-pruned-emaonly.safetensors")
    );
    assert!(catalogue.anywhere.is_none());
}

#[test]
fn without_models_each_backend_is_its_own_with_its_kinds_defaults() {
    let mut c = Config::default();
    let catalogue = c.catalogue().unwrap();
    assert_eq!(catalogue.models.len(), 1);
    assert_eq!(catalogue.models[0].name, "procedural");
    assert_eq!(catalogue.models[0].steps, None);
    c.backends = serde_json::from_value(serde_json::json!([
        {"name": "gpu-a", "kind": "sdwebui", "url": "http://h", "model": "ckpt"},
        {"name": "gpu-b", "kind": "comfyui", "url": "http://h", "model": "x"},
    ]))
    .unwrap();
    let catalogue = c.catalogue().unwrap();
    let names: Vec<&str> = catalogue.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["gpu-a", "gpu-b"]);
    assert!(
        catalogue.default_model().is_none(),
        "no model is the default"
    );
    let a = catalogue.get("gpu-a").unwrap();
    assert_eq!(
        (a.steps, a.cfg_scale, a.sampler.as_deref()),
        (Some(30), Some(7.0), Some("euler_a"))
    );
    assert_eq!(catalogue.checkpoint("gpu-a"), Some("ckpt"));
    assert_eq!(
        catalogue.checkpoint("gpu-b"),
        None,
        "the workflow names its own"
    );
    let anywhere = catalogue.anywhere.unwrap();
    assert_eq!(anywhere.steps, Some(30), "the first backend's kind");
}

#[test]
fn broken_models_stop_easel_naming_the_setting() {
    let table = |body: &str| format!("{TWO_WEBUIS}\n[[models]]\n{body}\n");
    let cases = [
        (
            table("name = \"m\"\nbackends = [\"gpu-x\"]"),
            "models.m.backends: no backend is named \"gpu-x\" (the backends are gpu-a, gpu-b)",
        ),
        (
            table("name = \"m\"\nbackends = []"),
            "models.m.backends: must name at least one backend",
        ),
        (
            table("name = \"M m\"\nbackends = [\"gpu-a\"]"),
            "models: name \"M m\" must be",
        ),
        (
            table(
                "name = \"m\"\nbackends = [\"gpu-a\"]\ndefault = true\n[[models]]\nname = \"n\"\n\
                 backends = [\"gpu-b\"]\ndefault = true",
            ),
            "models: only one model may be the default; m, n are",
        ),
        (
            table(
                "name = \"m\"\nbackends = [\"gpu-a\"]\n[[models]]\nname = \"m\"\nbackends = [\"gpu-b\"]",
            ),
            "models: the name \"m\" is used twice",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\", \"gpu-b\"]\ndefaults = { steps = 60 }\nlimits = { steps = [1, 50] }"),
            "models.m.defaults.steps: 60 is outside limits.steps [1, 50]",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\", \"gpu-b\"]\ndefaults = { cfg_scale = 0.5 }"),
            "models.m.defaults.cfg_scale: 0.5 is outside limits.cfg_scale [1, 30]",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\", \"gpu-b\"]\nlimits = { steps = [10, 5] }"),
            "models.m.limits.steps: must be [least, most] with 1 <= least <= most <= 500",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\", \"gpu-b\"]\ndefaults = { sampler = \"plms\" }"),
            "models.m.defaults.sampler: \"plms\" is not a sampler all of its backends know",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\"]"),
            "backends.gpu-b: serves no model",
        ),
        (
            table("name = \"m\"\nbackends = [\"gpu-a\", \"gpu-b\"]\nstep = 3"),
            "unknown field: found `step`",
        ),
    ];
    for (file, message) in cases {
        assert_refused(&file, &[message]);
    }
}
