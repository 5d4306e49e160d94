//! The `easel` command: `serve` runs the service; `migrate` brings the database's schema up to
//! date; `keys` and `signing-secret` manage access; `backup`, `restore` and `healthcheck` are for
//! operators (src/deploy/); `imagine`, `upscale`, `fetch` and `tasks` are a client of a running
//! server (src/cli.rs).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use easel::cli::{self, Server, Waiting};
use easel::config::{Config, Overrides};
use easel::store::{SharedStore, Store};
use easel::{auth, webhooks, Application, FIRST_ACCOUNT_EMAIL};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "easel",
    version = easel::VERSION,
    about = "A self-hosted image-generation task service"
)]
struct Cli {
    /// TOML settings file (default: ./easel.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where the database and images live (EASEL_DATA_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Database URL (EASEL_DATABASE_URL); default: SQLite in the data dir.
    #[arg(long, global = true, value_name = "URL")]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API, the workers and the webhook dispatcher.
    Serve {
        /// Address to listen on (EASEL_LISTEN).
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        /// Base URL clients reach this server at (EASEL_PUBLIC_URL).
        #[arg(long, value_name = "URL")]
        public_url: Option<String>,
        /// Tasks generated at once (EASEL_WORKERS).
        #[arg(long, value_name = "N")]
        workers: Option<usize>,
        /// The roles this node runs, any of api, worker and dispatcher, comma-separated
        /// (EASEL_ROLES; default: all three).
        #[arg(long, value_name = "ROLES", value_delimiter = ',')]
        role: Option<Vec<String>>,
    },
    /// Create the database if needed and apply its migrations, then exit. `serve` does the same
    /// at start; this is for operators who migrate before rolling out a new version.
    Migrate,
    /// Copy the SQLite database and the local images into DIR (new or empty), consistently,
    /// while easel serves.
    Backup {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Put a backup made by `easel backup` back into an empty data dir.
    Restore {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Exit 0 when the server answers GET /healthz with 200, 1 otherwise (for containers).
    Healthcheck {
        /// The server's base URL (default: the `listen` address, a wildcard one on loopback).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Manage API keys.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Manage accounts: passwords, operators, credits.
    Accounts {
        #[command(subcommand)]
        command: AccountsCommand,
    },
    /// Print the account's webhook signing secret (whsec_...).
    SigningSecret {
        /// The account (default: the first one).
        #[arg(long, value_name = "EMAIL")]
        account: Option<String>,
        /// Replace the secret with a new one first.
        #[arg(long)]
        rotate: bool,
    },
    /// Client: submit an imagine task to the server at --url (key: EASEL_API_KEY).
    Imagine {
        prompt: String,
        /// Aspect ratio, like 16:9.
        #[arg(long = "ar", value_name = "W:H")]
        aspect_ratio: Option<String>,
        #[command(flatten)]
        generation: cli::Generation,
        #[command(flatten)]
        waiting: Waiting,
        #[command(flatten)]
        server: Server,
    },
    /// Client: upscale image INDEX (1 to 4) of a finished grid task.
    Upscale {
        task: String,
        index: u8,
        #[command(flatten)]
        generation: cli::Generation,
        #[command(flatten)]
        waiting: Waiting,
        #[command(flatten)]
        server: Server,
    },
    /// Client: show a task (its image URLs, or --json its record).
    Fetch {
        task: String,
        /// Download the images into this folder.
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
        #[command(flatten)]
        server: Server,
    },
    /// Client: list the account's tasks (GET /api/v1/tasks).
    Tasks {
        #[command(flatten)]
        server: Server,
    },
    /// Client: list the models the key's account may use (GET /api/v1/models).
    Models {
        #[command(flatten)]
        server: Server,
    },
    /// Client: cancel a task that has not ended (POST /api/v1/tasks/TASK/cancel).
    Cancel {
        task: String,
        #[command(flatten)]
        server: Server,
    },
    /// Client: upload an image file (POST /api/v1/upload) and print the answer, whose `url`
    /// every image field and image prompt takes.
    Upload {
        file: PathBuf,
        #[command(flatten)]
        server: Server,
    },
    /// Benchmark baseline (bench/run): a bare axum handler for `POST /api/v1/imagine` that
    /// parses the body like the real one and answers a fresh UUID, storing nothing.
    #[command(hide = true)]
    BenchBaseline {
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key and print it (only once; it is stored as a hash).
    Create {
        #[arg(long)]
        name: String,
        /// The account the key belongs to, created if it does not exist (default: the first).
        #[arg(long, value_name = "EMAIL")]
        account: Option<String>,
    },
    /// List keys: id, account, name, prefix, created, last used, revoked.
    List,
    /// Revoke a key by id; it is refused at once.
    Revoke { id: String },
}

#[derive(Subcommand)]
enum AccountsCommand {
    /// Set an account's password, read from the terminal (asked twice) or, when stdin is not a
    /// terminal, from its first line. Signs the account out everywhere.
    SetPassword { email: String },
    /// Create an account; set its password with `set-password`. It starts with
    /// `signup_credits`, as a sign-up would; an operator (`--admin`) with unlimited credits.
    Create {
        email: String,
        /// Make it an operator.
        #[arg(long)]
        admin: bool,
        /// Its starting credits instead: a number, or `unlimited`.
        #[arg(long, value_name = "N|unlimited")]
        credits: Option<String>,
    },
    /// List accounts: email, admin, disabled, credits, images, created.
    List,
    /// Set an account's credits: a number, or `unlimited`.
    Credits { email: String, credits: String },
    /// Disable an account: its keys and sessions are refused at once.
    Disable { email: String },
    /// Enable a disabled account again.
    Enable { email: String },
    /// Forget the account's failed sign-ins, from every address and browser, so that nothing
    /// limits or slows its next sign-in.
    Unlock { email: String },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("easel: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // The client commands read no settings: they only talk to a server.
    let Cli {
        config,
        data_dir,
        database_url,
        command,
    } = cli;
    let command = match command {
        Command::BenchBaseline { listen } => return bench_baseline(listen).await,
        Command::Imagine {
            prompt,
            aspect_ratio,
            generation,
            waiting,
            server,
        } => {
            let request = cli::Request::Imagine {
                prompt,
                aspect_ratio,
                generation,
                waiting,
            };
            return cli::run(server, request).await;
        }
        Command::Upscale {
            task,
            index,
            generation,
            waiting,
            server,
        } => {
            let request = cli::Request::Upscale {
                task,
                index,
                generation,
                waiting,
            };
            return cli::run(server, request).await;
        }
        Command::Fetch {
            task,
            output,
            server,
        } => return cli::run(server, cli::Request::Fetch { task, output }).await,
        Command::Tasks { server } => return cli::run(server, cli::Request::Tasks).await,
        Command::Models { server } => return cli::run(server, cli::Request::Models).await,
        Command::Cancel { task, server } => {
            return cli::run(server, cli::Request::Cancel { task }).await
        }
        Command::Upload { file, server } => {
            return cli::run(server, cli::Request::Upload { file }).await
        }
        other => other,
    };
    let mut overrides = Overrides {
        data_dir,
        database_url,
        ..Overrides::default()
    };
    if let Command::Serve {
        listen,
        public_url,
        workers,
        role,
    } = &command
    {
        overrides.listen = *listen;
        overrides.public_url = public_url.clone();
        overrides.workers = *workers;
        overrides.roles = role.clone();
    }
    let config = Config::load(config, &overrides)?;

    match command {
        Command::Serve { .. } => serve(config).await,
        Command::Migrate => {
            create_data_dir(&config)?;
            easel::store::migrate(&config.database, &config.data_dir).await?;
            println!("easel: the database is up to date");
            Ok(())
        }
        Command::Backup { dir } => {
            let made = easel::deploy::backup::backup(&config, &dir).await?;
            println!(
                "easel: backed up {} tasks and {} image files ({} bytes) into {}",
                made.tasks,
                made.file_count,
                made.file_bytes,
                dir.display()
            );
            if !made.local_files {
                println!("easel: the images are in the bucket; back it up with its own tools");
            }
            Ok(())
        }
        Command::Restore { dir } => {
            let restored = easel::deploy::backup::restore(&config, &dir).await?;
            println!(
                "easel: restored {} tasks and {} image files from the backup of {} into {}",
                restored.tasks,
                restored.file_count,
                restored.created_at,
                config.data_dir.display()
            );
            Ok(())
        }
        Command::Healthcheck { url } => {
            let url = match url {
                Some(url) => url,
                None => easel::deploy::health::local_url(config.server.listen)?,
            };
            easel::deploy::health::check(&url).await
        }
        Command::Keys { command } => keys(config, command).await,
        Command::Accounts { command } => accounts(config, command).await,
        Command::BenchBaseline { .. }
        | Command::Imagine { .. }
        | Command::Upscale { .. }
        | Command::Fetch { .. }
        | Command::Tasks { .. }
        | Command::Models { .. }
        | Command::Cancel { .. }
        | Command::Upload { .. } => unreachable!("handled before the settings are read"),
        Command::SigningSecret { account, rotate } => {
            let store = open_store(&config).await?;
            let account = account_or_first(store.as_ref(), account.as_deref()).await?;
            let mut secret = account.signing_secret;
            if rotate {
                secret = webhooks::signing::generate_secret();
                store.set_signing_secret(&account.id, &secret).await?;
            }
            println!("{secret}");
            Ok(())
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let _logs = easel::telemetry::init(config.server.log_format.as_str());
    let app = Application::build(config).await?;
    if let Some(key) = app.first_key() {
        println!("easel: created the first account ({FIRST_ACCOUNT_EMAIL}) and its API key.");
        println!("easel: this key is shown only once; keep it somewhere safe:");
        println!();
        println!("    {key}");
        println!();
    }
    println!("easel listening on http://{}", app.local_addr());
    tracing::info!(addr = %app.local_addr(), public_url = %app.public_url(), "serving");
    easel::deploy::notify::ready(app.local_addr());
    app.run(async {
        shutdown_signal().await;
        easel::deploy::notify::stopping();
    })
    .await
}

/// The submit benchmark's baseline: same binary, runtime, allocator and profile as `serve`, and a
/// handler that does the request work every submit needs (read the body, parse the JSON, check
/// `prompt`, make a UUID, write the answer) and nothing else: no auth, no store, no middleware.
async fn bench_baseline(listen: SocketAddr) -> anyhow::Result<()> {
    use axum::body::Bytes;
    use axum::http::StatusCode;
    use axum::routing::post;

    async fn imagine(body: Bytes) -> (StatusCode, axum::Json<serde_json::Value>) {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if v.get("prompt").is_some_and(|p| p.is_string()) => (
                StatusCode::OK,
                axum::Json(serde_json::json!({ "task_id": uuid::Uuid::new_v4() })),
            ),
            _ => (StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({}))),
        }
    }

    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    println!(
        "easel bench-baseline listening on http://{}",
        listener.local_addr()?
    );
    let app = axum::Router::new().route("/api/v1/imagine", post(imagine));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

fn create_data_dir(config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))
}

async fn open_store(config: &Config) -> anyhow::Result<SharedStore> {
    create_data_dir(config)?;
    easel::store::open(&config.database, &config.data_dir).await
}

async fn account_or_first(
    store: &dyn Store,
    email: Option<&str>,
) -> anyhow::Result<easel::store::Account> {
    match email {
        Some(email) => store
            .account_by_email(email)
            .await?
            .with_context(|| format!("no account {email}")),
        None => store
            .first_account()
            .await?
            .context("no account yet: run `easel serve` once, or pass --account EMAIL"),
    }
}

async fn keys(config: Config, command: KeysCommand) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    match command {
        KeysCommand::Create { name, account } => {
            let account = match account {
                Some(email) => {
                    store
                        .ensure_account(&email, &webhooks::signing::generate_secret())
                        .await?
                }
                None => match store.first_account().await? {
                    Some(a) => a,
                    None => {
                        store
                            .ensure_account(
                                FIRST_ACCOUNT_EMAIL,
                                &webhooks::signing::generate_secret(),
                            )
                            .await?
                    }
                },
            };
            println!(
                "{}",
                auth::create_key(store.as_ref(), &account.id, &name).await?
            );
        }
        KeysCommand::List => {
            let fmt = |t: Option<i64>| t.map(easel::domain::rfc3339).unwrap_or_else(|| "-".into());
            println!(
                "{:<36}  {:<24}  {:<16}  {:<12}  {:<24}  {:<24}  REVOKED",
                "ID", "ACCOUNT", "NAME", "PREFIX", "CREATED", "LAST USED"
            );
            for k in store.list_api_keys().await? {
                println!(
                    "{:<36}  {:<24}  {:<16}  {:<12}  {:<24}  {:<24}  {}",
                    k.id,
                    k.account_email,
                    k.name,
                    k.prefix,
                    fmt(Some(k.created_at)),
                    fmt(k.last_used_at),
                    fmt(k.revoked_at)
                );
            }
        }
        KeysCommand::Revoke { id } => {
            if store.revoke_api_key(&id).await? {
                println!("revoked {id}");
            } else {
                anyhow::bail!("no live key with id {id}");
            }
        }
    }
    store.close().await;
    Ok(())
}

/// A password from the terminal (asked twice, not echoed) or from stdin's first line.
fn read_password() -> anyhow::Result<String> {
    use std::io::{BufRead, IsTerminal};
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("New password: ")?;
        let again = rpassword::prompt_password("Again: ")?;
        anyhow::ensure!(first == again, "the two passwords differ; nothing changed");
        Ok(first)
    } else {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        Ok(line.strip_suffix('\r').unwrap_or(line).to_string())
    }
}

async fn accounts(config: Config, command: AccountsCommand) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    let find = |email: String| {
        let store = store.clone();
        async move {
            store
                .account_by_email(&email)
                .await?
                .with_context(|| format!("no account {email}"))
        }
    };
    match command {
        AccountsCommand::SetPassword { email } => {
            let account = find(email).await?;
            let password = read_password()?;
            easel::accounts::password_rules(&password, &account.email)
                .map_err(anyhow::Error::msg)?;
            let hash = easel::accounts::hash_password(password).await?;
            anyhow::ensure!(
                store.set_password(&account.id, &hash).await?,
                "no account {}",
                account.email
            );
            println!("password set for {}", account.email);
        }
        AccountsCommand::Create {
            email,
            admin,
            credits,
        } => {
            let email = easel::accounts::normalize_email(&email).map_err(anyhow::Error::msg)?;
            // An operator is not limited by surprise: unlimited, like the first account, unless
            // `--credits` says otherwise.
            let credits = match credits {
                Some(credits) => parse_credits(&credits)?,
                None if admin => None,
                None => config.accounts.signup_credits,
            };
            let created = store
                .create_user(&easel::store::NewAccount {
                    email: email.clone(),
                    password_hash: None,
                    signing_secret: webhooks::signing::generate_secret(),
                    admin,
                    credits,
                })
                .await?
                .with_context(|| format!("an account {email} exists already"))?;
            println!("created {}", created.email);
        }
        AccountsCommand::List => {
            println!(
                "{:<32}  {:<5}  {:<8}  {:<10}  {:<8}  CREATED",
                "EMAIL", "ADMIN", "DISABLED", "CREDITS", "IMAGES"
            );
            for a in store.list_accounts().await? {
                println!(
                    "{:<32}  {:<5}  {:<8}  {:<10}  {:<8}  {}",
                    a.email,
                    if a.admin { "yes" } else { "no" },
                    if a.disabled { "yes" } else { "no" },
                    a.credits
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "unlimited".into()),
                    a.total_images,
                    easel::domain::rfc3339(a.created_at)
                );
            }
        }
        AccountsCommand::Credits { email, credits } => {
            let credits = parse_credits(&credits)?;
            let account = find(email).await?;
            store.set_credits(&account.id, credits).await?;
            println!("credits of {} set", account.email);
        }
        AccountsCommand::Disable { email } => {
            let account = find(email).await?;
            store.set_disabled(&account.id, true).await?;
            println!("disabled {}", account.email);
        }
        AccountsCommand::Enable { email } => {
            let account = find(email).await?;
            store.set_disabled(&account.id, false).await?;
            println!("enabled {}", account.email);
        }
        AccountsCommand::Unlock { email } => {
            let account = find(email).await?;
            easel::accounts::throttle::unlock(store.as_ref(), &account.email).await?;
            println!(
                "unlocked {}: its failed sign-ins are forgotten",
                account.email
            );
        }
    }
    store.close().await;
    Ok(())
}

/// A balance as the command line gives it: a whole number, 0 or more, or `unlimited` (None).
fn parse_credits(credits: &str) -> anyhow::Result<Option<i64>> {
    match credits {
        "unlimited" => Ok(None),
        n => Ok(Some(n.parse::<i64>().ok().filter(|n| *n >= 0).context(
            "credits: must be a whole number of credits, 0 or more, or `unlimited`",
        )?)),
    }
}
