//! The `easel` command: `serve` runs the service; `migrate` brings the database's schema up to
//! date; `keys`, `accounts` and `signing-secret` manage access ([`operator`]); `backup`,
//! `restore` and `healthcheck` are for operators (src/deploy/); `imagine`, `upscale`, `fetch`
//! and `tasks` are a client of a running server ([`client`]). `src/main.rs` only calls [`main`].

pub mod client;
mod moderation;
mod operator;
mod reload;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Config, Overrides};
pub use moderation::ModerationCommand;
use operator::{account_or_first, accounts, create_data_dir, keys, open_store};
pub use operator::{AccountsCommand, KeysCommand};
use serve::{bench_baseline, serve};

#[derive(Parser)]
#[command(
    name = "easel",
    version = crate::VERSION,
    about = "A self-hosted image-generation task service"
)]
pub struct Cli {
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
pub enum Command {
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
    /// Ask a running node to read its settings again (backends, models, plans, moderation),
    /// with an operator's key in EASEL_API_KEY; SIGHUP does the same. Each node reloads itself.
    Reload {
        /// The node's base URL (default: the `listen` address, a wildcard one on loopback).
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
    /// Manage the moderation term lists that refuse prompts at submit.
    Moderation {
        #[command(subcommand)]
        command: ModerationCommand,
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
    /// The client commands, talking to a running server.
    #[command(flatten)]
    Client(client::Request),
    /// Benchmark baseline (bench/run): a bare axum handler for `POST /api/v1/imagine` that
    /// parses the body like the real one and answers a fresh UUID, storing nothing.
    #[command(hide = true)]
    BenchBaseline {
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
}

/// The `easel` command: parse the command line and run it on a new runtime.
pub fn main() -> std::process::ExitCode {
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
        Command::Client(request) => return client::run(request).await,
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
    let source = crate::deploy::reload::ConfigSource {
        file: config.clone(),
        overrides: overrides.clone(),
    };
    let config = Config::load(config, &overrides)?;

    match command {
        Command::Serve { .. } => serve(config, source).await,
        Command::Migrate => {
            create_data_dir(&config)?;
            crate::store::migrate(&config.database, &config.data_dir).await?;
            println!("easel: the database is up to date");
            Ok(())
        }
        Command::Backup { dir } => {
            let made = crate::deploy::backup::backup(&config, &dir).await?;
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
            let restored = crate::deploy::backup::restore(&config, &dir).await?;
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
                None => crate::deploy::health::local_url(config.server.listen)?,
            };
            crate::deploy::health::check(&url).await
        }
        Command::Reload { url } => {
            let url = match url {
                Some(url) => url,
                None => crate::deploy::health::local_url(config.server.listen)?,
            };
            reload::reload(&url).await
        }
        Command::Keys { command } => keys(config, command).await,
        Command::Accounts { command } => accounts(config, command).await,
        Command::Moderation { command } => moderation::moderation(config, command).await,
        Command::BenchBaseline { .. } | Command::Client(_) => {
            unreachable!("handled before the settings are read")
        }
        Command::SigningSecret { account, rotate } => {
            let store = open_store(&config).await?;
            let account = account_or_first(store.as_ref(), account.as_deref()).await?;
            let mut secret = account.signing_secret;
            if rotate {
                secret = crate::webhooks::signing::generate_secret();
                store.set_signing_secret(&account.id, &secret).await?;
            }
            println!("{secret}");
            Ok(())
        }
    }
}
