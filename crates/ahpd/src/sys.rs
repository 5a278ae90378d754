//! Process facts from the operating system: liveness, signals, sessions, and which program a
//! process runs.

use std::path::PathBuf;

use rustix::process::{Pid, Signal};

fn pid_of(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

/// Whether a process with this id exists.
pub fn alive(pid: u32) -> bool {
    let Some(p) = pid_of(pid) else {
        return false;
    };
    match rustix::process::test_kill_process(p) {
        Ok(()) => !is_zombie(pid),
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Whether the process runs an `ahpd` executable (this one, or one named `ahpd`).
pub fn is_ahpd(pid: u32) -> bool {
    let exe: Option<PathBuf> = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let ours = std::env::current_exe().ok();
    if let (Some(exe), Some(ours)) = (&exe, &ours)
        && exe == ours
    {
        return true;
    }
    let named = |p: &PathBuf| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ahpd"))
    };
    exe.as_ref().is_some_and(named)
        || std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim().starts_with("ahpd"))
}

/// Sends SIGTERM (`kill = false`) or SIGKILL.
pub fn signal(pid: u32, kill: bool) -> std::io::Result<()> {
    let p = pid_of(pid).ok_or_else(|| std::io::Error::other("not a process id"))?;
    let sig = if kill { Signal::KILL } else { Signal::TERM };
    rustix::process::kill_process(p, sig).map_err(std::io::Error::from)
}

/// Starts a new session so the detached daemon outlives the terminal that started it.
pub fn new_session() {
    let _ = rustix::process::setsid();
}

/// Raises the soft limit on open descriptors to the hard one, so connections, sessions and
/// the files they use are limited by what the system allows rather than by the usual soft
/// default of 1,024. Connections that have not shown the token are bounded separately (see
/// `pendingConnectionCap`). Commands the daemon runs inherit the raised limit.
pub fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some() && limit.maximum.is_some() && limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => tracing::debug!(limit = ?limit.maximum, "raised the descriptor limit"),
            Err(e) => {
                tracing::warn!(error = %e, "could not raise the limit on open descriptors");
            }
        }
    }
}

/// Hands the allocator's free pages back to the system (glibc's `malloc_trim`).
///
/// glibc returns freed memory on its own only from the top of a heap; a streamed answer frees
/// thousands of small blocks scattered between ones that stay (the transcript, the state), so
/// without this the pages a turn used stay counted as the daemon's long after it ended. With
/// another C library this does nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and only walks the allocator's own free lists,
    // under the allocator's locks; any thread may call it at any time.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
