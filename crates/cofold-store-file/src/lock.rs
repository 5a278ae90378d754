//! The writer lock: `writer.lock` in a session folder names the run allowed to write and the
//! process it runs in (see [`crate::liveness`] for how that process is named and judged), with a
//! heartbeat that only matters when the process cannot be seen from here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::id::Timestamp;
use cofold_agents::store::RunStatus;
use serde::{Deserialize, Serialize};

use crate::durable::{Sync, temp_path, write_json};
use crate::jsonl::io_error;
use crate::liveness::{Liveness, ProcessMark, judge, this_process};

/// The file name of the lock inside a session folder.
pub(crate) const LOCK_FILE: &str = "writer.lock";

/// The content of `writer.lock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WriterLock {
    pub run_id: String,
    pub pid: u32,
    /// The holder's start time in clock ticks since boot; absent where `/proc` is not readable
    /// (and in locks written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    pub claimed_at: Timestamp,
    pub heartbeat_at: Timestamp,
}

impl WriterLock {
    fn mark(&self) -> ProcessMark {
        ProcessMark {
            pid: self.pid,
            start_time: self.start_time,
            boot_id: self.boot_id.clone(),
            pid_namespace: self.pid_namespace.clone(),
        }
    }

    /// True when the holder is this process.
    fn is_ours(&self) -> bool {
        judge(&self.mark()) == Liveness::This
    }
}

/// What a claim's holder is, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// This process.
    Ours,
    /// Another process that runs, or whose heartbeat is younger than the age limit.
    Alive,
    /// A process that has ended, or whose heartbeat is older than the age limit.
    Dead,
}

/// Judges a lock's holder: by its process when that can be seen from here, else by its heartbeat.
pub(crate) fn judge_holder(lock: &WriterLock, stale_after: Duration) -> Holder {
    match judge(&lock.mark()) {
        Liveness::This => Holder::Ours,
        Liveness::Alive => Holder::Alive,
        Liveness::Dead => Holder::Dead,
        Liveness::Unknown if is_stale(lock, stale_after) => Holder::Dead,
        Liveness::Unknown => Holder::Alive,
    }
}

/// What is on disk.
pub(crate) enum LockState {
    Missing,
    Unreadable,
    Held(WriterLock),
}

fn lock_path(folder: &Path) -> PathBuf {
    folder.join(LOCK_FILE)
}

/// Reads the lock of a session folder.
pub(crate) fn read(folder: &Path) -> Result<LockState, AgentError> {
    let path = lock_path(folder);
    match fs::read(&path) {
        Ok(bytes) => {
            Ok(serde_json::from_slice(&bytes).map_or(LockState::Unreadable, LockState::Held))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(LockState::Missing),
        Err(err) => Err(io_error("read", &path, &err)),
    }
}

/// The holder, when a readable lock exists.
pub(crate) fn holder(folder: &Path) -> Result<Option<WriterLock>, AgentError> {
    Ok(match read(folder)? {
        LockState::Held(lock) => Some(lock),
        LockState::Missing | LockState::Unreadable => None,
    })
}

/// Creates the lock only when there is none. The content is written to a temporary file first and
/// hard-linked into place, so the lock never exists half-written; the link fails when a lock exists.
fn create_exclusive(folder: &Path, lock: &WriterLock) -> Result<bool, AgentError> {
    let path = lock_path(folder);
    let temp = temp_path(folder);
    write_json(&temp, lock, Sync::Quick)?;
    let linked = fs::hard_link(&temp, &path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(io_error("create", &path, &err)),
    }
}

fn stamp(run_id: &str, claimed_at: Option<Timestamp>) -> WriterLock {
    let now = Timestamp::now();
    let me = this_process();
    WriterLock {
        run_id: run_id.to_owned(),
        pid: me.pid,
        start_time: me.start_time,
        boot_id: me.boot_id.clone(),
        pid_namespace: me.pid_namespace.clone(),
        claimed_at: claimed_at.unwrap_or_else(|| now.clone()),
        heartbeat_at: now,
    }
}

fn is_stale(lock: &WriterLock, stale_after: Duration) -> bool {
    let age = Timestamp::now()
        .unix_micros()
        .saturating_sub(lock.heartbeat_at.unix_micros());
    u128::try_from(age).unwrap_or(0) > stale_after.as_micros()
}

/// Claims the session for `run_id` in this process. `holder_status` answers the status of the
/// current holder's run record (`None` when it has none).
///
/// A claim whose holder is alive is never taken, whatever run the newcomer names; one whose holder
/// is dead is taken at once, except that a paused run's claim stays with that run, which a person
/// may still answer: only the same run (resumed) takes it.
pub(crate) fn claim(
    folder: &Path,
    run_id: &str,
    stale_after: Duration,
    holder_status: impl Fn(&str) -> Result<Option<RunStatus>, AgentError>,
) -> Result<bool, AgentError> {
    // Two processes judging the same dead holder must not both take its place.
    let _serial = ClaimGuard::take(folder)?;
    let mut retried = false;
    loop {
        if create_exclusive(folder, &stamp(run_id, None))? {
            return Ok(true);
        }
        match read(folder)? {
            // Removed between our create and our read: try again.
            LockState::Missing if !retried => retried = true,
            LockState::Unreadable if !retried => {
                let path = lock_path(folder);
                tracing::warn!(file = %path.display(), "removing an unreadable writer lock");
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                    Err(err) => return Err(io_error("remove", &path, &err)),
                }
                retried = true;
            }
            LockState::Missing | LockState::Unreadable => return Ok(false),
            LockState::Held(lock) => {
                let take = match judge_holder(&lock, stale_after) {
                    Holder::Ours => lock.run_id == run_id,
                    Holder::Alive => false,
                    Holder::Dead => {
                        lock.run_id == run_id
                            || holder_status(&lock.run_id)? != Some(RunStatus::Awaiting)
                    }
                };
                if take {
                    let claimed_at =
                        (lock.run_id == run_id && lock.is_ours()).then(|| lock.claimed_at.clone());
                    if claimed_at.is_none() {
                        tracing::warn!(
                            session = %folder.display(), from = %lock.run_id, pid = lock.pid, to = %run_id,
                            "taking the writer claim of a process that has ended"
                        );
                    }
                    write_json(&lock_path(folder), &stamp(run_id, claimed_at), Sync::Quick)?;
                }
                return Ok(take);
            }
        }
    }
}

/// The run holding the claim when its holder is dead.
pub(crate) fn dead_holder(
    folder: &Path,
    stale_after: Duration,
) -> Result<Option<String>, AgentError> {
    Ok(holder(folder)?
        .filter(|lock| judge_holder(lock, stale_after) == Holder::Dead)
        .map(|lock| lock.run_id))
}

/// An exclusive OS lock on the session folder for the length of a claim, so that reading,
/// judging and replacing the lock is one step among the processes of this machine. The OS drops
/// it when its holder dies, so it can never be left behind.
struct ClaimGuard {
    #[cfg(unix)]
    _folder: fs::File,
}

impl ClaimGuard {
    fn take(folder: &Path) -> Result<ClaimGuard, AgentError> {
        #[cfg(unix)]
        {
            let file = fs::File::open(folder).map_err(|err| io_error("open", folder, &err))?;
            file.lock()
                .map_err(|err| io_error("lock the folder", folder, &err))?;
            Ok(ClaimGuard { _folder: file })
        }
        #[cfg(not(unix))]
        {
            // Windows cannot lock a folder; the exclusive create still keeps two fresh claims apart.
            let _ = folder;
            Ok(ClaimGuard {})
        }
    }
}

fn mismatch(session_id: &str, run_id: &str, lock: Option<&WriterLock>) -> AgentError {
    match lock {
        Some(lock) if lock.run_id == run_id => AgentError::new(
            ErrorCode::WriterMismatch,
            format!(
                "run {run_id} of session {session_id} was taken over by pid {}; this process (pid {}) may no longer write it",
                lock.pid,
                std::process::id()
            ),
        ),
        _ => AgentError::new(
            ErrorCode::WriterMismatch,
            format!("run {run_id} does not hold the writer claim of session {session_id}"),
        ),
    }
}

/// Checks that `run_id` in this process holds the lock (message appends and heartbeats).
pub(crate) fn require_holder(
    folder: &Path,
    session_id: &str,
    run_id: &str,
) -> Result<WriterLock, AgentError> {
    match holder(folder)? {
        Some(lock) if lock.run_id == run_id && lock.is_ours() => Ok(lock),
        other => Err(mismatch(session_id, run_id, other.as_ref())),
    }
}

/// Refuses a write by `run_id` when the lock names that run in another process: this process was
/// superseded. No lock, or a lock of another run, lets the write through.
pub(crate) fn fence(folder: &Path, session_id: &str, run_id: &str) -> Result<(), AgentError> {
    match holder(folder)? {
        Some(lock) if lock.run_id == run_id && !lock.is_ours() => {
            Err(mismatch(session_id, run_id, Some(&lock)))
        }
        _ => Ok(()),
    }
}

/// The writer lock file as one `stat` saw it (device, inode, change and modification times,
/// length; `None` when there is none), and when its content was last read.
#[derive(Debug, Clone)]
pub(crate) struct Stamp {
    file: Option<FileLook>,
    read_at: Instant,
    /// When `stat` last showed the file unchanged.
    looked_at: Instant,
}

type FileLook = (u64, u64, i64, i64, i64, i64, u64);

/// How long an unchanged lock file is trusted without reading it again. Every write of the lock
/// replaces the file, so a takeover changes what `stat` shows; the limit only covers a
/// replacement that happened to look the same to `stat` (a reused inode within one clock tick).
const STAMP_TRUST: Duration = Duration::from_secs(1);

#[cfg(unix)]
fn stamp_of(path: &Path) -> Option<FileLook> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| {
        (
            m.dev(),
            m.ino(),
            m.ctime(),
            m.ctime_nsec(),
            m.mtime(),
            m.mtime_nsec(),
            m.len(),
        )
    })
}

#[cfg(not(unix))]
fn stamp_of(_path: &Path) -> Option<FileLook> {
    None
}

/// How long after a `stat` showed the lock unchanged the next append goes without one.
///
/// A streamed reply appends a fragment every few microseconds, and the `stat` was about a twentieth of
/// the daemon's work per fragment. Another process takes the lock only from a holder that is
/// dead, or (on another machine) that stopped beating for far longer than this, so a writer
/// that was stopped meanwhile looks again at its first append after waking.
const STAT_TRUST: Duration = Duration::from_millis(20);

/// As [`fence`], for the appends of one run: a `stat` of the lock is enough while it looks as it
/// did when `seen` was taken, and none is made within [`STAT_TRUST`] of the last. Reading and
/// parsing the lock for every streamed fragment cost more than the append itself.
pub(crate) fn fence_seen(
    folder: &Path,
    session_id: &str,
    run_id: &str,
    seen: &mut Option<Stamp>,
) -> Result<(), AgentError> {
    if cfg!(unix)
        && let Some(stamp) = seen.as_ref()
        && stamp.looked_at.elapsed() < STAT_TRUST
        && stamp.read_at.elapsed() < STAMP_TRUST
    {
        return Ok(());
    }
    let now = stamp_of(&lock_path(folder));
    // Elsewhere `stat` gives no inode to tell a replaced file by, so the lock is read each time.
    if cfg!(unix)
        && let Some(stamp) = seen.as_mut()
        && stamp.file == now
        && stamp.read_at.elapsed() < STAMP_TRUST
    {
        stamp.looked_at = Instant::now();
        return Ok(());
    }
    *seen = None;
    fence(folder, session_id, run_id)?;
    let read_at = Instant::now();
    *seen = Some(Stamp {
        file: now,
        read_at,
        looked_at: read_at,
    });
    Ok(())
}

/// Refreshes `heartbeatAt` of the holder's lock.
pub(crate) fn heartbeat(folder: &Path, session_id: &str, run_id: &str) -> Result<(), AgentError> {
    let mut lock = require_holder(folder, session_id, run_id)?;
    lock.heartbeat_at = Timestamp::now();
    write_json(&lock_path(folder), &lock, Sync::Quick)
}

/// Removes the lock when `run_id` in this process holds it.
pub(crate) fn release(folder: &Path, run_id: &str) -> Result<(), AgentError> {
    match holder(folder)? {
        Some(lock) if lock.run_id == run_id && lock.is_ours() => remove(folder),
        _ => Ok(()),
    }
}

/// Removes the lock whoever holds it (a cut that drops a paused holder).
pub(crate) fn remove(folder: &Path) -> Result<(), AgentError> {
    let path = lock_path(folder);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error("remove", &path, &err)),
    }
}
