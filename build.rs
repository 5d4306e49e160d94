//! Names the commit easel is built from, for `easel --version`: `EASEL_COMMIT` when it is set (a
//! container build, whose context has no .git), else `git rev-parse --short=12 HEAD`, else
//! `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=EASEL_COMMIT");
    let commit = match std::env::var("EASEL_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => commit.trim().to_string(),
        _ => from_git().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=EASEL_COMMIT={commit}");
}

fn from_git() -> Option<String> {
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Build again when HEAD moves: HEAD itself (a checkout), the branch it points at (a commit),
    // and packed refs. A worktree keeps HEAD in its own git dir and branches in the common one.
    let git_dir = PathBuf::from(git(&["rev-parse", "--git-dir"])?);
    let common = git(&["rev-parse", "--git-common-dir"]).map_or(git_dir.clone(), PathBuf::from);
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(branch));
    }
    // Only files that exist: cargo counts a missing one as changed, and would build every time.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(commit)
}
