//! Submits measured two ways on one server, alternated run by run (with a setting, then without,
//! then without, then with...), so that a machine's drift falls on both alike: the shape of the
//! `plans` and `indexing` rows. Each way's rate and server CPU per request.

use std::future::Future;

use anyhow::Context;
use serde_json::{json, Value};

use crate::idempotency::rate;
use crate::proc::{cpu_secs, Server};
use crate::report::{clients as clients_text, Row};
use crate::submit::check;
use crate::wrk::WrkResult;
use crate::Ctx;

/// A server for durable submits in `data`, workers stopped, with the configuration `config`
/// (its file `easel.toml` in `data`) and `env` besides; with its first key.
pub async fn submit_server(
    ctx: &Ctx,
    data: &std::path::Path,
    config: &str,
    env: &[(&str, String)],
) -> anyhow::Result<(Server, String)> {
    std::fs::create_dir_all(data)?;
    let file = data.join("easel.toml");
    std::fs::write(&file, config)?;
    let mut all = vec![
        ("EASEL_CONFIG", file.display().to_string()),
        ("EASEL_DATA_DIR", data.display().to_string()),
        ("EASEL_LISTEN", "127.0.0.1:0".into()),
        ("EASEL_WORKERS", "0".into()),
    ];
    all.extend(env.iter().cloned());
    let server = Server::start(&ctx.easel, &["serve"], &all, data, "easel").await?;
    let key = server.key.clone().context("easel printed no first key")?;
    Ok((server, key))
}

/// The server's CPU time per request, in ms: `cpu` seconds over the requests of `runs`.
pub fn cpu_per_request(cpu: f64, runs: &[WrkResult]) -> f64 {
    cpu * 1000.0 / runs.iter().map(|r| r.requests).sum::<u64>().max(1) as f64
}

/// The runs of each way and the server CPU they took.
pub struct Alternated {
    pub with: Vec<WrkResult>,
    pub without: Vec<WrkResult>,
    cpu_with: f64,
    cpu_without: f64,
}

/// Where one way's submits go: a server, its submit URL, and the load generator's environment
/// (the key). Both ways may be one server, set one way or the other between runs.
#[derive(Clone, Copy)]
pub struct Side<'a> {
    pub server: &'a Server,
    pub url: &'a str,
    pub env: &'a [(&'a str, String)],
}

impl<'a> Side<'a> {
    /// Both ways on one server, set one way or the other between runs.
    pub fn both(server: &'a Server, url: &'a str, env: &'a [(&'a str, String)]) -> [Side<'a>; 2] {
        let side = Side { server, url, env };
        [side, side]
    }
}

/// `rounds` runs of durable submits each way, with `clients` connections, `set(true)` or
/// `set(false)` before each and `settle` the same after each: what the server still does for
/// the run's requests once they are answered (work left to the background) is counted in its
/// CPU.
pub async fn run<F, Fut, G, GFut>(
    ctx: &Ctx,
    [with_side, without_side]: [Side<'_>; 2],
    clients: usize,
    rounds: usize,
    mut set: F,
    mut settle: G,
) -> anyhow::Result<Alternated>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
    G: FnMut(bool) -> GFut,
    GFut: Future<Output = anyhow::Result<()>>,
{
    let script = "submit_idempotent.lua";
    let secs = ctx.plan.run_secs;
    let one_server = with_side.server.pid() == without_side.server.pid();
    for (side, with) in [(with_side, true), (without_side, false)] {
        if with || !one_server {
            set(with).await?;
            ctx.wrk
                .run(script, side.url, clients, ctx.plan.warmup_secs, side.env)
                .await?;
            settle(with).await?;
        }
    }
    let mut out = Alternated {
        with: Vec::new(),
        without: Vec::new(),
        cpu_with: 0.0,
        cpu_without: 0.0,
    };
    for round in 0..rounds {
        for with in [round % 2 == 1, round % 2 == 0] {
            let side = if with { with_side } else { without_side };
            set(with).await?;
            let cpu = cpu_secs(Some(side.server.pid()))?;
            let r = ctx
                .wrk
                .run(script, side.url, clients, secs, side.env)
                .await?;
            settle(with).await?;
            let used = cpu_secs(Some(side.server.pid()))? - cpu;
            check(&r, "easel")?;
            if with {
                out.cpu_with += used;
                out.with.push(r);
            } else {
                out.cpu_without += used;
                out.without.push(r);
            }
        }
    }
    Ok(out)
}

impl Alternated {
    /// The two rows of `bench`: the rate with against without (with `goal` as the least ratio
    /// at `goal_clients`), and the server's CPU per request each way.
    pub fn rows(
        &self,
        bench: &'static str,
        what: &str,
        clients: usize,
        goal: (usize, f64, &str),
    ) -> Vec<Row> {
        let (goal_clients, least, goal_text) = goal;
        let mut row = Row::new(
            bench,
            format!("{what}, {}: requests/s", clients_text(clients)),
            "req/s",
        )
        .value(&[rate(&self.with)])
        .baseline(&[rate(&self.without)]);
        if clients == goal_clients {
            let met = row.ratio.is_some_and(|r| r >= least);
            row = row.goal(goal_text, met);
        }
        let cpu = Row::new(
            bench,
            format!("{what}, {}: server CPU per request", clients_text(clients)),
            "ms",
        )
        .value(&[cpu_per_request(self.cpu_with, &self.with)])
        .baseline(&[cpu_per_request(self.cpu_without, &self.without)]);
        vec![row, cpu]
    }

    /// The runs, for the results file.
    pub fn details(&self, clients: usize, with: &str, without: &str) -> Value {
        json!({ "clients": clients, with: self.with, without: self.without })
    }
}
