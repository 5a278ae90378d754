//! The writer lock: `writer.lock` in a session folder names the run allowed to write and the
//! process it runs in, with a heartbeat so another process can take over a run that died.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::id::Timestamp;
use cofold_agents::store::RunStatus;
use serde::{Deserialize, Serialize};

use crate::jsonl::{io_error, temp_path, write_json};

/// The file name of the lock inside a session folder.
pub(crate) const LOCK_FILE: &str = "writer.lock";

/// The content of `writer.lock`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WriterLock {
    pub run_id: String,
    pub pid: u32,
    pub claimed_at: Timestamp,
    pub heartbeat_at: Timestamp,
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
    write_json(&temp, lock)?;
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
    WriterLock {
        run_id: run_id.to_owned(),
        pid: std::process::id(),
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
pub(crate) fn claim(
    folder: &Path,
    run_id: &str,
    stale_after: Duration,
    holder_status: impl Fn(&str) -> Result<Option<RunStatus>, AgentError>,
) -> Result<bool, AgentError> {
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
            LockState::Held(lock) if lock.run_id == run_id => {
                write_json(&lock_path(folder), &stamp(run_id, Some(lock.claimed_at)))?;
                return Ok(true);
            }
            LockState::Held(lock) => {
                // Only a running holder that stopped beating is taken over; a paused one waits for
                // a person however long that takes.
                let takeover = holder_status(&lock.run_id)? == Some(RunStatus::Running)
                    && is_stale(&lock, stale_after);
                if takeover {
                    tracing::warn!(
                        session = %folder.display(), from = %lock.run_id, pid = lock.pid, to = %run_id,
                        "taking over a stale writer"
                    );
                    write_json(&lock_path(folder), &stamp(run_id, None))?;
                }
                return Ok(takeover);
            }
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
        Some(lock) if lock.run_id == run_id && lock.pid == std::process::id() => Ok(lock),
        other => Err(mismatch(session_id, run_id, other.as_ref())),
    }
}

/// Refuses a write by `run_id` when the lock names that run in another process: this process was
/// superseded. No lock, or a lock of another run, lets the write through.
pub(crate) fn fence(folder: &Path, session_id: &str, run_id: &str) -> Result<(), AgentError> {
    match holder(folder)? {
        Some(lock) if lock.run_id == run_id && lock.pid != std::process::id() => {
            Err(mismatch(session_id, run_id, Some(&lock)))
        }
        _ => Ok(()),
    }
}

/// Refreshes `heartbeatAt` of the holder's lock.
pub(crate) fn heartbeat(folder: &Path, session_id: &str, run_id: &str) -> Result<(), AgentError> {
    let mut lock = require_holder(folder, session_id, run_id)?;
    lock.heartbeat_at = Timestamp::now();
    write_json(&lock_path(folder), &lock)
}

/// Removes the lock when `run_id` in this process holds it.
pub(crate) fn release(folder: &Path, run_id: &str) -> Result<(), AgentError> {
    match holder(folder)? {
        Some(lock) if lock.run_id == run_id && lock.pid == std::process::id() => remove(folder),
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
