//! `easel moderation`: the moderation term lists, written to the store; running nodes apply a
//! change within `tasks::moderation::REFRESH`.

use anyhow::Context;
use clap::Subcommand;

use super::operator::open_store;
use crate::config::Config;
use crate::tasks::moderation::Moderation;

#[derive(Subcommand)]
pub enum ModerationCommand {
    /// List the lists: name, number of terms, last written.
    List,
    /// Print a list's terms, one a line.
    Show { name: String },
    /// Add terms to a list (words, phrases, or `re:` patterns), making it if there is none.
    Add {
        name: String,
        #[arg(required = true)]
        terms: Vec<String>,
    },
    /// Remove terms from a list; with no terms, remove the whole list.
    Remove { name: String, terms: Vec<String> },
    /// Replace a list with the lines of FILE (`-`: standard input); blank lines and lines
    /// starting with `#` are skipped.
    Import { name: String, file: String },
}

pub(super) async fn moderation(config: Config, command: ModerationCommand) -> anyhow::Result<()> {
    let store = open_store(&config).await?;
    let lists = Moderation::new(store.clone());
    let refused = |e: crate::refusal::ApiError| anyhow::anyhow!("{e}");
    let actor = format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".into())
    );
    let existing = |name: &str| {
        let store = store.clone();
        let name = name.to_string();
        async move {
            store
                .moderation_list(&name)
                .await?
                .with_context(|| format!("no moderation list {name}"))
        }
    };
    match command {
        ModerationCommand::List => {
            println!("{:<32}  {:>7}  UPDATED", "NAME", "TERMS");
            for (list, at) in store.moderation_lists().await? {
                println!(
                    "{:<32}  {:>7}  {}",
                    list.name,
                    list.terms.len(),
                    crate::domain::rfc3339(at)
                );
            }
        }
        ModerationCommand::Show { name } => {
            for term in existing(&name).await? {
                println!("{term}");
            }
        }
        ModerationCommand::Add { name, terms } => {
            let mut all = store.moderation_list(&name).await?.unwrap_or_default();
            let before = all.len();
            for term in terms {
                if !all.contains(&term) {
                    all.push(term);
                }
            }
            let added = all.len() - before;
            lists.put(&actor, &name, all).await.map_err(refused)?;
            println!("{name}: {added} terms added");
        }
        ModerationCommand::Remove { name, terms } if terms.is_empty() => {
            lists
                .remove(&actor, &name)
                .await
                .map_err(refused)?
                .with_context(|| format!("no moderation list {name}"))?;
            println!("{name}: removed");
        }
        ModerationCommand::Remove { name, terms } => {
            let mut all = existing(&name).await?;
            let before = all.len();
            all.retain(|t| !terms.contains(t));
            let removed = before - all.len();
            lists.put(&actor, &name, all).await.map_err(refused)?;
            println!("{name}: {removed} terms removed");
        }
        ModerationCommand::Import { name, file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin()).context("reading standard input")?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?
            };
            let terms: Vec<String> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect();
            let count = terms.len();
            lists.put(&actor, &name, terms).await.map_err(refused)?;
            println!("{name}: {count} terms");
        }
    }
    store.close().await;
    Ok(())
}
