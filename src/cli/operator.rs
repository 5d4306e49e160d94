//! The operator's commands over the store itself (no server needed): API keys, accounts, and the
//! webhook signing secret.

use anyhow::Context;
use clap::Subcommand;

use crate::accounts::operators;
use crate::config::Config;
use crate::store::{AccountChange, SharedStore, Store};
use crate::{auth, webhooks, FIRST_ACCOUNT_EMAIL};

#[derive(Subcommand)]
pub enum KeysCommand {
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
pub enum AccountsCommand {
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
    /// Put an account on a plan (one of the configured `[plans.NAME]`). Applies to its next
    /// submit and claim at once, to its request rate within 30 s on every node.
    Plan { email: String, plan: String },
    /// Set when an account expires: an RFC 3339 time, a date (the end of that day, UTC), or
    /// `never`. After it, its keys get 402 `account_expired`; its queued tasks still run.
    Expire {
        email: String,
        #[arg(value_name = "DATE|never")]
        when: String,
    },
    /// Disable an account: its keys and sessions are refused at once.
    Disable { email: String },
    /// Enable a disabled account again.
    Enable { email: String },
    /// Forget the account's failed sign-ins, from every address and browser, so that nothing
    /// limits or slows its next sign-in.
    Unlock { email: String },
}

pub(super) fn create_data_dir(config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))
}

pub(super) async fn open_store(config: &Config) -> anyhow::Result<SharedStore> {
    create_data_dir(config)?;
    crate::store::open(&config.database, &config.data_dir).await
}

pub(super) async fn account_or_first(
    store: &dyn Store,
    email: Option<&str>,
) -> anyhow::Result<crate::store::Account> {
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

pub(super) async fn keys(config: Config, command: KeysCommand) -> anyhow::Result<()> {
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
            let fmt = |t: Option<i64>| t.map(crate::domain::rfc3339).unwrap_or_else(|| "-".into());
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
                let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
                store
                    .record_audit(&crate::store::NewAudit {
                        actor: format!("cli:{user}"),
                        action: "key.revoke".into(),
                        account_id: None,
                        before: serde_json::json!({ "key": id, "revoked": false }),
                        after: serde_json::json!({ "key": id, "revoked": true }),
                    })
                    .await?;
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

pub(super) async fn accounts(config: Config, command: AccountsCommand) -> anyhow::Result<()> {
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
            crate::accounts::password_rules(&password, &account.email)
                .map_err(anyhow::Error::msg)?;
            let hash = crate::accounts::hash_password(password).await?;
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
            let email = crate::accounts::normalize_email(&email).map_err(anyhow::Error::msg)?;
            // An operator is not limited by surprise: unlimited, like the first account, unless
            // `--credits` says otherwise.
            let credits = match credits {
                Some(credits) => parse_credits(&credits)?,
                None if admin => None,
                None => config.accounts.signup_credits,
            };
            let created = store
                .create_user(&crate::store::NewAccount {
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
                    crate::domain::rfc3339(a.created_at)
                );
            }
        }
        AccountsCommand::Credits { email, credits } => {
            let credits = operators::parse_credits(&credits)?;
            let change = AccountChange {
                credits: Some(credits),
                ..Default::default()
            };
            let account = operate(&store, &config, find(email).await?, &change).await?;
            println!("credits of {} set", account.email);
        }
        AccountsCommand::Plan { email, plan } => {
            let change = AccountChange {
                plan: Some(plan),
                ..Default::default()
            };
            let account = operate(&store, &config, find(email).await?, &change).await?;
            println!("{} is on the plan {}", account.email, account.plan);
        }
        AccountsCommand::Expire { email, when } => {
            let expires_at = operators::parse_expiry(&when, crate::store::now_ms())?;
            let change = AccountChange {
                expires_at: Some(expires_at),
                ..Default::default()
            };
            let account = operate(&store, &config, find(email).await?, &change).await?;
            match account.expires_at {
                Some(at) => println!(
                    "{} expires at {}",
                    account.email,
                    crate::domain::rfc3339(at)
                ),
                None => println!("{} never expires", account.email),
            }
        }
        AccountsCommand::Disable { email } => {
            set_disabled(&store, &config, find(email).await?, true).await?
        }
        AccountsCommand::Enable { email } => {
            set_disabled(&store, &config, find(email).await?, false).await?
        }
        AccountsCommand::Unlock { email } => {
            let account = find(email).await?;
            crate::accounts::throttle::unlock(store.as_ref(), &account.email).await?;
            println!(
                "unlocked {}: its failed sign-ins are forgotten",
                account.email
            );
        }
    }
    store.close().await;
    Ok(())
}

/// Disable an account, or enable it again, and say which.
async fn set_disabled(
    store: &SharedStore,
    config: &Config,
    account: crate::store::Account,
    disabled: bool,
) -> anyhow::Result<()> {
    let change = AccountChange {
        disabled: Some(disabled),
        ..Default::default()
    };
    let account = operate(store, config, account, &change).await?;
    let done = if disabled { "disabled" } else { "enabled" };
    println!("{done} {}", account.email);
    Ok(())
}

/// A balance as the command line gives it: a whole number, 0 or more, or `unlimited` (None).
fn parse_credits(credits: &str) -> anyhow::Result<Option<i64>> {
    Ok(operators::parse_credits(credits)?)
}

/// Apply an operator's change from the command line, recorded in the audit log as
/// `cli:<user>`; the account after it.
async fn operate(
    store: &SharedStore,
    config: &Config,
    account: crate::store::Account,
    change: &AccountChange,
) -> anyhow::Result<crate::store::Account> {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    Ok(operators::change_account(
        store.as_ref(),
        &config.plans,
        &format!("cli:{user}"),
        &account,
        change,
    )
    .await?)
}
