//! Writes that survive a crash or a power loss: whole files through a synced temporary file, a
//! rename and a sync of the folder; folders removed by first renaming them to a tombstone.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use cofold_agents::error::AgentError;
use serde::Serialize;

use crate::jsonl::io_error;
use crate::names::TEMP_PREFIX;

/// The prefix of a removed folder waiting to be deleted. It starts with [`TEMP_PREFIX`], so
/// listings and lookups never see it.
pub(crate) const TOMBSTONE_PREFIX: &str = "%tmp-removed-";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary name in `folder` that no encoded id or key can take.
pub(crate) fn temp_path(folder: &Path) -> PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    folder.join(format!("{TEMP_PREFIX}-{}-{n}", std::process::id()))
}

/// How hard a whole-file write works to last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// Synced before and after the rename: once this returns, the new file outlasts a power loss.
    Durable,
    /// Synced before the rename only: a power loss leaves the old file or the new one, both whole.
    /// For refreshes whose loss is harmless (a session's `updatedAt`, a run's last message id).
    Replace,
    /// Renamed into place without syncing: a reader never sees half a file, but a power loss
    /// may leave an empty one. For files that mean nothing after a reboot (the writer lock).
    Quick,
}

/// Writes `bytes` to `path` whole: into a temporary file in the same folder, then renamed over the
/// target, so a reader sees the old content or the new, never half of one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], sync: Sync) -> Result<(), AgentError> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let temp = temp_path(folder);
    let written = write_file(&temp, bytes, sync).and_then(|()| rename(&temp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_error("write", path, &err));
    }
    if sync == Sync::Durable {
        sync_folder(folder)?;
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8], sync: Sync) -> io::Result<()> {
    let mut file = crate::private::file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    file.write_all(bytes)?;
    if sync != Sync::Quick {
        // Without this, the rename can reach the disk before the data, and a power loss then
        // leaves an empty file under the final name.
        file.sync_all()?;
    }
    Ok(())
}

/// Writes a value as pretty JSON (2-space indent) through [`write_atomic`].
pub(crate) fn write_json<T: Serialize>(
    path: &Path,
    value: &T,
    sync: Sync,
) -> Result<(), AgentError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|err| AgentError::internal(format!("a record could not be serialized: {err}")))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, sync)
}

/// Makes the entries of a folder (files created, renamed or removed in it) durable.
pub(crate) fn sync_folder(folder: &Path) -> Result<(), AgentError> {
    #[cfg(unix)]
    {
        File::open(folder)
            .and_then(|dir| dir.sync_all())
            .map_err(|err| io_error("sync the folder", folder, &err))
    }
    #[cfg(not(unix))]
    {
        // Windows cannot open a folder as a file; NTFS journals its renames.
        let _ = folder;
        Ok(())
    }
}

/// Renames, retrying for up to a second on Windows, where a reader holding the target open makes
/// the rename fail with a sharing error.
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(windows)]
    {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match fs::rename(from, to) {
                Err(err)
                    if err.kind() == io::ErrorKind::PermissionDenied
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }
    #[cfg(not(windows))]
    {
        fs::rename(from, to)
    }
}

/// Removes a folder so that a crash at any point leaves it whole under its name or gone from it:
/// it is first renamed to a tombstone beside it (one atomic step, synced), then deleted. A
/// tombstone a crash left behind is deleted by [`sweep_tombstones`].
pub(crate) fn remove_folder(folder: &Path) -> Result<(), AgentError> {
    let parent = folder.parent().unwrap_or(Path::new("."));
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tombstone = parent.join(format!("{TOMBSTONE_PREFIX}{}-{n}", std::process::id()));
    rename(folder, &tombstone).map_err(|err| io_error("remove", folder, &err))?;
    sync_folder(parent)?;
    crate::crash::point("remove:renamed")?;
    // The folder is already gone from sight; what is left is disk space, swept again at the next
    // open.
    if let Err(err) = fs::remove_dir_all(&tombstone) {
        tracing::warn!(folder = %tombstone.display(), error = %err, "cannot delete a removed folder");
    }
    Ok(())
}

/// Deletes the tombstones left in `parent` by removals a crash interrupted.
pub(crate) fn sweep_tombstones(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(TOMBSTONE_PREFIX) {
            let path = entry.path();
            if let Err(err) = fs::remove_dir_all(&path) {
                tracing::warn!(folder = %path.display(), error = %err, "cannot delete a removed folder");
            }
        }
    }
}

/// How long nothing in a staging folder may have changed before an open takes it for the leftover
/// of a create or fork that a crash cut short. A create or fork in progress in another process
/// writes into its staging folder all the time, and a create takes milliseconds, so a folder quiet
/// this long before the open has no writer left.
pub(crate) const STAGING_QUIET: Duration = Duration::from_secs(5);

/// Deletes the staging folders in a sessions folder (`%tmp-<pid>-<n>`, where a create or fork
/// builds a session before renaming it into place) in which nothing changed since `quiet_since`.
/// Tombstones are [`sweep_tombstones`]' part; temporary files are left to the writes they belong to.
pub(crate) fn sweep_staging(parent: &Path, quiet_since: SystemTime) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(TEMP_PREFIX) || name.starts_with(TOMBSTONE_PREFIX) {
            continue;
        }
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if last_change(&path).is_none_or(|changed| changed >= quiet_since) {
            continue;
        }
        tracing::info!(folder = %path.display(), "deleting the staging folder of a create or fork that did not finish");
        if let Err(err) = fs::remove_dir_all(&path) {
            tracing::warn!(folder = %path.display(), error = %err, "cannot delete a staging folder");
        }
    }
}

/// The latest modification time of a folder and everything in it; `None` when one cannot be read.
fn last_change(path: &Path) -> Option<SystemTime> {
    let mut latest = fs::symlink_metadata(path).ok()?.modified().ok()?;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).ok()?.flatten() {
            let meta = entry.metadata().ok()?;
            latest = latest.max(meta.modified().ok()?);
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Some(latest)
}
