//! Finding and stopping a call's processes; the rules and their limits are in the `shell`
//! module's documentation.
//!
//! One detail lives only here: while a process is in the middle of an `exec`, the kernel shows an
//! empty environment and command line for it, so an orphan of the daemon showing neither is looked
//! at again before the scans conclude that nothing of the call is left.

use super::cgroup::CallGroup;

/// The environment variable carrying a call's marker.
pub const MARKER_VAR: &str = "COFOLD_SHELL_CALL";

/// A marker no other call of this process, nor of another process, carries.
pub(crate) fn new_marker() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let count = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}-{count}-{nanos}", std::process::id())
}

/// Makes the daemon the child subreaper of everything it starts, once per process.
pub(crate) fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if let Err(error) = rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            {
                tracing::warn!(%error, "cannot become a child subreaper; orphans of commands go to init");
            }
        });
    }
}

/// Kills every process of the call marked `marker` but the shell itself (`shell`, whose exit
/// the runner waits for and reaps), and the shell too when `shell_alive`. Returns how many
/// processes other than the shell were found alive and killed.
#[cfg(target_os = "linux")]
pub(crate) fn stop_call(
    marker: &str,
    shell: Option<u32>,
    shell_alive: bool,
    group: Option<&CallGroup>,
) -> usize {
    // The running shell's process group is certainly the call's: it goes first, in one signal.
    if shell_alive && let Some(pid) = shell {
        kill_tree(pid, true);
    }
    linux::stop_call(marker, shell, shell_alive, group)
}

/// Without `/proc`, the command's process group is what can be found: kill it.
#[cfg(all(unix, not(target_os = "linux")))]
pub(crate) fn stop_call(
    _marker: &str,
    shell: Option<u32>,
    shell_alive: bool,
    _group: Option<&CallGroup>,
) -> usize {
    if let Some(pid) = shell {
        kill_tree(pid, shell_alive);
    }
    0
}

/// Windows: `taskkill /T` on the shell's tree.
#[cfg(windows)]
pub(crate) fn stop_call(
    _marker: &str,
    shell: Option<u32>,
    shell_alive: bool,
    _group: Option<&CallGroup>,
) -> usize {
    if let Some(pid) = shell {
        kill_tree(pid, shell_alive);
    }
    0
}

/// Sends SIGKILL to the whole group led by `pid`; falls back to the child alone, but only
/// while it has not been reaped (a reaped pid may already belong to someone else).
#[cfg(unix)]
pub(crate) fn kill_tree(pid: u32, child_alive: bool) {
    use rustix::process::{Pid, Signal, kill_process, kill_process_group};
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if kill_process_group(pid, Signal::KILL).is_err() && child_alive {
        let _ = kill_process(pid, Signal::KILL);
    }
}

/// `taskkill /T /F` ends the tree; the child alone is the fallback.
#[cfg(windows)]
pub(crate) fn kill_tree(pid: u32, child_alive: bool) {
    let ended = std::process::Command::new("taskkill")
        .args(["/pid", &pid.to_string(), "/T", "/F"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    if !ended && child_alive {
        let _ = std::process::Command::new("taskkill")
            .args(["/pid", &pid.to_string(), "/F"])
            .status();
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::{Duration, Instant};

    use rustix::process::{Pid, Signal, WaitOptions, kill_process, waitpid};

    use super::{CallGroup, MARKER_VAR};

    /// How long the scans go on before giving up on a tree that keeps forking, and how long
    /// killed processes are waited for to be reaped. A killed process needs a moment to exit;
    /// the scans between look again every `PAUSE`.
    const PATIENCE: Duration = Duration::from_secs(5);
    const PAUSE: Duration = Duration::from_millis(2);

    /// Clean scans in a row, `PAUSE` apart, that end the search when no cgroup holds the call.
    /// One clean scan was not enough: under load a double fork (`setsid sh -c 'sleep … &'`)
    /// twice left its `sleep` running after a single clean scan, in full test runs (which state
    /// of the chain hid it from that scan was not found); a short quiet spell catches it.
    const QUIET_SCANS: u32 = 3;

    /// One process as `/proc/<pid>/stat` shows it.
    struct Proc {
        state: u8,
        ppid: i32,
        pgrp: i32,
        session: i32,
    }

    impl Proc {
        fn alive(&self) -> bool {
            !matches!(self.state, b'Z' | b'X' | b'x')
        }
    }

    fn stat(pid: i32) -> Option<Proc> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold anything; the fields after the last
        // `)` are plain numbers.
        let rest = text.get(text.rfind(')')? + 2..)?;
        let mut fields = rest.split(' ');
        let state = *fields.next()?.as_bytes().first()?;
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let session = fields.next()?.parse().ok()?;
        Some(Proc {
            state,
            ppid,
            pgrp,
            session,
        })
    }

    fn empty(file: &str) -> bool {
        std::fs::read(file).map_or(true, |bytes| bytes.is_empty())
    }

    /// Whether the process's environment holds the marker; `None` when it shows none at all
    /// (unreadable, or empty as during an `exec`).
    fn marked(pid: i32, entry: &[u8]) -> Option<bool> {
        match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(environ) if !environ.is_empty() => {
                Some(environ.split(|b| *b == 0).any(|var| var == entry))
            }
            _ => None,
        }
    }

    fn all_pids() -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// What one scan found.
    struct Scan {
        /// The live processes of the call.
        ours: BTreeSet<i32>,
        /// Some child of the daemon (an orphan re-parented to it) showed no environment: it may
        /// be in the middle of an `exec`, when the kernel shows an empty one for a moment.
        unsure: bool,
        /// The process groups and sessions of the call's marked processes.
        groups: BTreeSet<i32>,
        sessions: BTreeSet<i32>,
        /// The daemon's children that have ended and wait to be reaped, with their group and
        /// session.
        zombies: Vec<(i32, i32, i32)>,
    }

    /// The live processes of the call, found in one scan.
    fn find(entry: &[u8], own: &Proc, me: i32, group: Option<&CallGroup>) -> Scan {
        let procs: BTreeMap<i32, Proc> = all_pids()
            .into_iter()
            .filter(|pid| *pid != me)
            .filter_map(|pid| Some((pid, stat(pid)?)))
            .collect();
        let mut ours: BTreeSet<i32> = group
            .map(CallGroup::pids)
            .unwrap_or_default()
            .into_iter()
            .filter(|pid| *pid != me && procs.get(pid).is_some_and(Proc::alive))
            .collect();
        let mut unsure = false;
        for (pid, proc) in &procs {
            if !proc.alive() {
                continue;
            }
            match marked(*pid, entry) {
                Some(true) => {
                    ours.insert(*pid);
                }
                Some(false) => {}
                // Neither environment nor command line: a child between `fork` and the end of
                // its `exec`, whose marker shows again in a moment. (A process that really has
                // no environment still has a command line.)
                None => unsure |= proc.ppid == me && empty(&format!("/proc/{pid}/cmdline")),
            }
        }
        let groups: BTreeSet<i32> = ours
            .iter()
            .filter_map(|pid| procs.get(pid))
            .map(|proc| proc.pgrp)
            .filter(|group| *group != own.pgrp)
            .collect();
        let sessions: BTreeSet<i32> = ours
            .iter()
            .filter_map(|pid| procs.get(pid))
            .map(|proc| proc.session)
            .filter(|session| *session != own.session)
            .collect();
        for (pid, proc) in &procs {
            if proc.alive() && (groups.contains(&proc.pgrp) || sessions.contains(&proc.session)) {
                ours.insert(*pid);
            }
        }
        // Descendants, to a fixed point: a child may be listed before its parent.
        loop {
            let before = ours.len();
            for (pid, proc) in &procs {
                if proc.alive() && ours.contains(&proc.ppid) {
                    ours.insert(*pid);
                }
            }
            if ours.len() == before {
                let zombies = procs
                    .iter()
                    .filter(|(_, proc)| proc.ppid == me && !proc.alive())
                    .map(|(pid, proc)| (*pid, proc.pgrp, proc.session))
                    .collect();
                return Scan {
                    ours,
                    unsure,
                    groups,
                    sessions,
                    zombies,
                };
            }
        }
    }

    pub(super) fn stop_call(
        marker: &str,
        shell: Option<u32>,
        shell_alive: bool,
        group: Option<&CallGroup>,
    ) -> usize {
        let entry = format!("{MARKER_VAR}={marker}").into_bytes();
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let Some(own) = stat(me) else {
            return 0;
        };
        let shell = shell.and_then(|pid| i32::try_from(pid).ok());
        let mut killed: BTreeSet<i32> = BTreeSet::new();
        if let Some(group) = group {
            // Counted before the group is killed in one stroke (forks in flight included).
            killed.extend(group.pids().into_iter().filter(|pid| *pid != me));
            group.kill();
        }
        // The shell leads its own process group; orphans of the call stay in it.
        let mut groups: BTreeSet<i32> = shell.into_iter().collect();
        let mut sessions: BTreeSet<i32> = BTreeSet::new();
        let mut zombies = Vec::new();
        let start = Instant::now();
        let mut quiet = 0;
        while start.elapsed() < PATIENCE {
            let scan = find(&entry, &own, me, group);
            groups.extend(scan.groups);
            sessions.extend(scan.sessions);
            zombies = scan.zombies;
            let mut found = scan.ours;
            if !shell_alive && let Some(shell) = shell {
                // Reaped already: the number may be someone else's by now.
                found.remove(&shell);
            }
            if found.is_empty() {
                quiet = if scan.unsure { 0 } else { quiet + 1 };
                // With a cgroup every process of the call is in its list, forks in flight too.
                if group.is_some() && quiet > 0 || quiet >= QUIET_SCANS {
                    break;
                }
                std::thread::sleep(PAUSE);
                continue;
            }
            quiet = 0;
            for pid in &found {
                if let Some(pid) = Pid::from_raw(*pid) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
            killed.extend(found);
            // SIGKILL is delivered asynchronously; the next scan sees who is still dying.
            std::thread::sleep(PAUSE);
        }
        reap(&killed, shell, me);
        reap_exited(&zombies, shell, &groups, &sessions);
        killed.iter().filter(|pid| Some(**pid) != shell).count()
    }

    /// Reaps the call's orphans that exited on their own before the stop (a double fork whose
    /// grandchild already ended): they were re-parented to the daemon, and nothing else waits
    /// for them. Only zombies in one of the call's process groups or sessions are taken, never
    /// the shell, so no child the runtime waits for is touched.
    fn reap_exited(
        zombies: &[(i32, i32, i32)],
        shell: Option<i32>,
        groups: &BTreeSet<i32>,
        sessions: &BTreeSet<i32>,
    ) {
        for &(raw, group, session) in zombies {
            let of_call = groups.contains(&group) || sessions.contains(&session);
            if Some(raw) != shell
                && of_call
                && let Some(pid) = Pid::from_raw(raw)
            {
                let _ = waitpid(Some(pid), WaitOptions::NOHANG);
            }
        }
    }

    /// Reaps the killed processes that ended up the daemon's children (re-parented to it as the
    /// subreaper), never the shell, whose `wait` belongs to the runner.
    fn reap(killed: &BTreeSet<i32>, shell: Option<i32>, me: i32) {
        let mut waiting: Vec<i32> = killed
            .iter()
            .copied()
            .filter(|pid| Some(*pid) != shell)
            .collect();
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            waiting.retain(|raw| {
                let Some(pid) = Pid::from_raw(*raw) else {
                    return false;
                };
                match waitpid(Some(pid), WaitOptions::NOHANG) {
                    Ok(Some(_)) => false,
                    // Ours but not ended yet: look again.
                    Ok(None) => true,
                    // Not our child now; it may become one when its dying parent is gone.
                    Err(_) => match stat(*raw) {
                        Some(proc) => {
                            proc.ppid != me
                                && (killed.contains(&proc.ppid)
                                    || stat(proc.ppid).is_none_or(|parent| !parent.alive()))
                        }
                        None => false,
                    },
                }
            });
            if waiting.is_empty() {
                return;
            }
            std::thread::sleep(PAUSE);
        }
    }
}
