//! `easel backup DIR` and `easel restore DIR` for the embedded default (SQLite and local image
//! files).
//!
//! The database is copied with `VACUUM INTO` on a connection of its own: one read transaction,
//! so the copy is the database as one commit left it, while easel goes on writing beside it (in
//! WAL mode a reader never blocks the writer). The image folder is copied after it, so every
//! image a copied task refers to is already in place: a file is written under a temporary name
//! and renamed before the commit that names it. Files of tasks that end after the snapshot may
//! be copied too; nothing refers to them and easel's orphan sweep removes them after restore.
//! The manifest is written last: a folder without one is not a complete backup.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::config::{BlobStoreKind, Config, DatabaseKind};

/// The manifest's name in a backup folder.
pub const MANIFEST: &str = "easel-backup.json";
/// The database copy's name in a backup folder.
const DATABASE: &str = "easel.db";
/// The image folder's name, in a backup folder and in the data dir.
const FILES: &str = "files";
/// The layout of a backup folder; a restore refuses others.
const FORMAT: u32 = 1;

/// What a backup holds, written as its manifest.
#[derive(Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    /// The easel that took it (version and commit).
    pub easel: String,
    pub created_at: String,
    /// Tasks in the database copy.
    pub tasks: i64,
    /// Whether `files/` holds the images (false: they are in a bucket, not backed up here).
    pub local_files: bool,
    pub file_count: u64,
    pub file_bytes: u64,
}

/// Copy the data of the easel that `config` describes into `dir`, which must be missing or
/// empty. Safe while that easel serves.
pub async fn backup(config: &Config, dir: &Path) -> anyhow::Result<Manifest> {
    let database = sqlite_file(config, "backup")?;
    anyhow::ensure!(
        database.exists(),
        "backup: there is no database at {}: nothing to back up (check --data-dir or \
         database_url)",
        database.display()
    );
    ensure_empty(dir, "backup", "the backup folder")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let copy = dir.join(DATABASE);
    let tasks = blocking(move || snapshot(&database, &copy)).await?;

    let local_files = config.blobs.store == BlobStoreKind::Local;
    let (mut file_count, mut file_bytes) = (0, 0);
    if local_files {
        let from = config.data_dir.join(FILES);
        let to = dir.join(FILES);
        (file_count, file_bytes) = blocking(move || copy_tree(&from, &to, true)).await?;
    }
    let manifest = Manifest {
        format: FORMAT,
        easel: crate::VERSION.to_string(),
        created_at: crate::domain::rfc3339(chrono::Utc::now().timestamp_millis()),
        tasks,
        local_files,
        file_count,
        file_bytes,
    };
    write_synced(&dir.join(MANIFEST), &serde_json::to_vec_pretty(&manifest)?)?;
    sync_dir(dir)?;
    Ok(manifest)
}

/// Put the backup in `dir` back as the data of the easel that `config` describes: its data dir
/// (and database file, if `database_url` puts it elsewhere) must be missing or empty.
pub async fn restore(config: &Config, dir: &Path) -> anyhow::Result<Manifest> {
    let manifest_path = dir.join(MANIFEST);
    let text = std::fs::read(&manifest_path).map_err(|e| {
        anyhow::anyhow!(
            "restore: {} is not a complete easel backup (no {MANIFEST}: {e})",
            dir.display()
        )
    })?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .with_context(|| format!("restore: {} is not readable", manifest_path.display()))?;
    anyhow::ensure!(
        manifest.format == FORMAT,
        "restore: {} is a backup of format {}; this easel reads format {FORMAT}",
        dir.display(),
        manifest.format
    );
    let database = sqlite_file(config, "restore")?;
    if manifest.local_files && config.blobs.store != BlobStoreKind::Local {
        anyhow::bail!(
            "restore: the backup holds local image files but blob_store is {}: restore with \
             blob_store = \"local\", or copy {} into the bucket with your S3 tools first",
            config.blobs.store.as_str(),
            dir.join(FILES).display()
        );
    }
    ensure_empty(&config.data_dir, "restore", "the data dir")?;
    if !database.starts_with(&config.data_dir) {
        anyhow::ensure!(
            !database.exists(),
            "restore: a database already exists at {}; restore only where there is none",
            database.display()
        );
    }

    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    if manifest.local_files {
        let from = dir.join(FILES);
        let to = config.data_dir.join(FILES);
        blocking(move || copy_tree(&from, &to, false)).await?;
    }
    // The database last, through a temporary name: a restore cut short leaves no database that
    // names images not yet copied.
    let from = dir.join(DATABASE);
    let partial = database.with_extension("db.restoring");
    if let Some(parent) = database.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(&from, &partial)
        .with_context(|| format!("copying {} to {}", from.display(), partial.display()))?;
    std::fs::File::open(&partial)?.sync_all()?;
    std::fs::rename(&partial, &database)?;
    if let Some(parent) = database.parent() {
        sync_dir(parent)?;
    }
    Ok(manifest)
}

/// The SQLite database file `config` names; PostgreSQL has its own tools.
fn sqlite_file(config: &Config, what: &str) -> anyhow::Result<PathBuf> {
    match config.database.kind_in(&config.data_dir)? {
        DatabaseKind::Sqlite(url) => {
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
                .with_context(|| format!("{what}: database_url"))?;
            Ok(options.get_filename().to_path_buf())
        }
        DatabaseKind::Postgres(_) => anyhow::bail!(
            "{what}: the database is PostgreSQL; use pg_dump and pg_restore (and your bucket's \
             own tools for the images), as docs/deployment.md describes"
        ),
    }
}

/// Refuse a folder that holds anything: a backup or restore never mixes with older files.
fn ensure_empty(dir: &Path, what: &str, name: &str) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => anyhow::ensure!(
            entries.next().is_none(),
            "{what}: {name} {} is not empty; give a new or empty folder",
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("{what}: reading {}", dir.display())),
    }
    Ok(())
}

/// `VACUUM INTO` `copy` from `database`; the number of tasks in the copy.
fn snapshot(database: &Path, copy: &Path) -> anyhow::Result<i64> {
    use rusqlite::OpenFlags;
    let target = copy
        .to_str()
        .context("backup: the backup folder's path must be valid UTF-8")?;
    // Read-write without create: a database in WAL mode needs its shared-memory file, which a
    // read-only connection cannot make when easel is not running. VACUUM INTO writes only `copy`.
    let conn = rusqlite::Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("backup: opening {}", database.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    conn.execute("VACUUM INTO ?1", [target])
        .with_context(|| format!("backup: copying {} to {target}", database.display()))?;
    drop(conn);
    std::fs::File::open(copy)?.sync_all()?;
    let copy = rusqlite::Connection::open_with_flags(copy, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let tasks = copy.query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))?;
    Ok(tasks)
}

/// Copy every finished file below `from` into `to` (created), synced; the files' count and
/// bytes. In a live folder (`live`), files that vanish while it is walked (a task's earlier
/// attempt removed, retention) are skipped, as are files still being written (`.partial`) and
/// easel's storage probes.
fn copy_tree(from: &Path, to: &Path, live: bool) -> anyhow::Result<(u64, u64)> {
    let (mut count, mut bytes) = (0u64, 0u64);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = from.join(&rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && (live || rel.as_os_str().is_empty()) =>
            {
                continue
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        std::fs::create_dir_all(to.join(&rel))?;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let rel = rel.join(&name);
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) if live && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            if kind.is_dir() {
                if live && rel == Path::new(crate::blobs::PROBE_FOLDER) {
                    continue;
                }
                stack.push(rel);
            } else if kind.is_file() {
                if live && Path::new(&name).extension().is_some_and(|e| e == "partial") {
                    continue;
                }
                let target = to.join(&rel);
                match std::fs::copy(entry.path(), &target) {
                    Ok(n) => {
                        std::fs::File::open(&target)?.sync_all()?;
                        count += 1;
                        bytes += n;
                    }
                    Err(e) if live && e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("copying {}", entry.path().display()))
                    }
                }
            }
        }
        sync_dir(&to.join(&rel))?;
    }
    Ok((count, bytes))
}

fn write_synced(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut file =
        std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// Make a folder's new entries durable.
fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .context("the copy stopped unexpectedly")?
}
