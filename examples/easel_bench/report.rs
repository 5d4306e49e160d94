//! The results: rows of the table, the JSON file, and the "latest results" section of
//! docs/benchmarks.md.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

/// One line of the table: a figure of easel, the same figure of its baseline measured in the same
/// run, their ratio (value / baseline), and the goal from issue 4.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Which benchmark produced it.
    pub bench: &'static str,
    pub figure: String,
    pub unit: &'static str,
    /// One number, or two (p50 and p99) for latency rows.
    pub value: Vec<f64>,
    pub baseline: Option<Vec<f64>>,
    /// value / baseline, of the last number (p99 for latency rows).
    pub ratio: Option<f64>,
    pub goal: String,
    /// None: the figure is informational (no goal applies to it).
    pub met: Option<bool>,
}

impl Row {
    pub fn new(bench: &'static str, figure: impl Into<String>, unit: &'static str) -> Row {
        Row {
            bench,
            figure: figure.into(),
            unit,
            value: Vec::new(),
            baseline: None,
            ratio: None,
            goal: String::new(),
            met: None,
        }
    }

    pub fn value(mut self, v: &[f64]) -> Row {
        self.value = v.to_vec();
        self
    }

    /// Set the baseline and the ratio value / baseline (of the last numbers).
    pub fn baseline(mut self, b: &[f64]) -> Row {
        self.baseline = Some(b.to_vec());
        if let (Some(v), Some(b)) = (self.value.last(), b.last()) {
            if *b != 0.0 {
                self.ratio = Some(v / b);
            }
        }
        self
    }

    pub fn goal(mut self, goal: impl Into<String>, met: bool) -> Row {
        self.goal = goal.into();
        self.met = Some(met);
        self
    }
}

/// A count with thousands separators: 1,000,000.
pub fn count(n: usize) -> String {
    if n >= 1000 {
        num(n as f64)
    } else {
        n.to_string()
    }
}

/// "1 client", "16 clients".
pub fn clients(n: usize) -> String {
    if n == 1 {
        "1 client".into()
    } else {
        format!("{n} clients")
    }
}

/// A number for people: thousands separators when large, three significant digits otherwise.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x.abs() >= 1000.0 {
        let digits = format!("{:.0}", x.abs());
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if x < 0.0 {
            out.insert(0, '-');
        }
        out
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn values(v: &[f64], unit: &str) -> String {
    if unit.is_empty() {
        // A count.
        let joined: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        return joined.join(" / ");
    }
    let joined: Vec<String> = v.iter().map(|x| num(*x)).collect();
    format!("{} {unit}", joined.join(" / "))
}

/// The table, in Markdown (readable as plain text too).
pub fn table(rows: &[Row]) -> String {
    let mut lines = vec![
        "| figure | easel | baseline | ratio | goal | met |".to_string(),
        "|---|---:|---:|---:|---|:---:|".to_string(),
    ];
    for r in rows {
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} |",
            r.figure,
            values(&r.value, r.unit),
            r.baseline
                .as_ref()
                .map(|b| values(b, r.unit))
                .unwrap_or_else(|| "-".into()),
            r.ratio
                .map(|x| format!("{x:.2}x"))
                .unwrap_or_else(|| "-".into()),
            if r.goal.is_empty() { "-" } else { &r.goal },
            match r.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "-",
            }
        ));
    }
    lines.join("\n")
}

/// What the machine is, for the record.
pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    serde_json::json!({
        "cpu": cpu,
        "cores": cores,
        "memory_gib": (mem_gib * 10.0).round() / 10.0,
        "kernel": kernel,
    })
}

/// The 1-minute load average: how busy the machine was with anything (this run included).
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub const DOCS_START: &str = "<!-- bench:latest:start -->";
pub const DOCS_END: &str = "<!-- bench:latest:end -->";

/// Replace the "latest results" section of the docs (between the markers) with `section`.
pub fn update_docs(path: &Path, section: &str) -> anyhow::Result<()> {
    let doc =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let start = doc
        .find(DOCS_START)
        .with_context(|| format!("no {DOCS_START} marker in {}", path.display()))?;
    let end = doc
        .find(DOCS_END)
        .with_context(|| format!("no {DOCS_END} marker in {}", path.display()))?;
    anyhow::ensure!(start < end, "markers out of order in {}", path.display());
    let updated = format!(
        "{}{DOCS_START}\n{}\n{}",
        &doc[..start],
        section.trim_end(),
        &doc[end..]
    );
    std::fs::write(path, updated)?;
    Ok(())
}
