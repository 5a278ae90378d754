//! Whether the process named in a writer claim still runs.
//!
//! A pid alone says little: after a restart the number is handed to another process, and two
//! containers sharing a store folder each have their own pid 1. A claim therefore names its
//! process by four things read from `/proc`: the pid, the process's start time (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot), the kernel's boot id
//! (`/proc/sys/kernel/random/boot_id`) and the pid namespace (`/proc/self/ns/pid`). When the
//! boot id and the namespace match ours, the pid means the same process to us as to the holder, and
//! one read of `/proc/<pid>/stat` settles the question: no such process, a zombie, or a different
//! start time means the holder is gone. Otherwise (another machine, another container, a system
//! without `/proc`) nothing local can tell, and the caller falls back to the claim's heartbeat age.

use std::fs;
use std::io;
use std::sync::OnceLock;

/// How this process is named in a claim. Fields this system cannot read are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessMark {
    pub pid: u32,
    pub start_time: Option<u64>,
    pub boot_id: Option<String>,
    pub pid_namespace: Option<String>,
}

/// What can be said about a claim's holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// The holder is this very process.
    This,
    /// Another process that is running now.
    Alive,
    /// The process has ended (or the pid now names a different process).
    Dead,
    /// The holder cannot be seen from here; only its heartbeat can tell.
    Unknown,
}

/// The mark of the current process, read once.
pub(crate) fn this_process() -> &'static ProcessMark {
    static MARK: OnceLock<ProcessMark> = OnceLock::new();
    MARK.get_or_init(|| {
        let pid = std::process::id();
        ProcessMark {
            pid,
            start_time: match read_stat(pid) {
                Ok(Some(stat)) => Some(stat.start_time),
                _ => None,
            },
            boot_id: boot_id(),
            pid_namespace: pid_namespace(),
        }
    })
}

/// Judges the holder named by `mark`.
pub(crate) fn judge(mark: &ProcessMark) -> Liveness {
    let me = this_process();
    if mark == me {
        return Liveness::This;
    }
    let comparable = mark.boot_id.is_some()
        && mark.boot_id == me.boot_id
        && mark.pid_namespace.is_some()
        && mark.pid_namespace == me.pid_namespace;
    let Some(start_time) = mark.start_time.filter(|_| comparable) else {
        return Liveness::Unknown;
    };
    match read_stat(mark.pid) {
        Ok(Some(stat)) if stat.start_time == start_time && !stat.ended => Liveness::Alive,
        Ok(_) => Liveness::Dead,
        // `/proc` mounted with `hidepid`, or some other refusal: we cannot see, so we do not guess.
        Err(_) => Liveness::Unknown,
    }
}

struct Stat {
    start_time: u64,
    ended: bool,
}

/// The start time and state of a process; `None` when there is no such process.
fn read_stat(pid: u32) -> io::Result<Option<Stat>> {
    let text = match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    // The command name (field 2) sits in parentheses and may itself hold spaces and parentheses,
    // so fields are counted from the last `)`.
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "an unexpected /proc stat line");
    let after = text
        .rfind(')')
        .map(|at| &text[at + 1..])
        .ok_or_else(malformed)?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (the state); the start time is field 22.
    let state = fields.first().ok_or_else(malformed)?;
    let start_time = fields
        .get(19)
        .and_then(|field| field.parse().ok())
        .ok_or_else(malformed)?;
    Ok(Some(Stat {
        start_time,
        ended: matches!(*state, "Z" | "X" | "x"),
    }))
}

fn boot_id() -> Option<String> {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = text.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

fn pid_namespace() -> Option<String> {
    let link = fs::read_link("/proc/self/ns/pid").ok()?;
    Some(link.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn this_process_is_recognised_and_a_changed_start_time_is_not() {
        let me = this_process().clone();
        assert_eq!(judge(&me), Liveness::This);
        if me.start_time.is_some() && me.boot_id.is_some() && me.pid_namespace.is_some() {
            let reused = ProcessMark {
                start_time: me.start_time.map(|t| t + 1),
                ..me.clone()
            };
            assert_eq!(
                judge(&reused),
                Liveness::Dead,
                "the pid names another process"
            );
            let elsewhere = ProcessMark {
                boot_id: Some("another-boot".into()),
                ..me
            };
            assert_eq!(judge(&elsewhere), Liveness::Unknown);
        }
    }

    #[test]
    fn a_command_name_with_parentheses_and_spaces_is_parsed() {
        // The parser counts from the last `)`; check it against our own line, whatever our name.
        let me = this_process();
        if let Ok(Some(stat)) = read_stat(me.pid) {
            assert_eq!(Some(stat.start_time), me.start_time);
            assert!(!stat.ended);
        }
    }
}
