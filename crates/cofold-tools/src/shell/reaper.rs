//! The per-call helper that contains a command without relying on its goodwill (Linux).
//!
//! A host starts each command (and may start each stdio server) behind this helper rather than
//! directly: `<helper> [--report] -- PROGRAM ARGS…`. The helper makes itself a *child subreaper*
//! (`PR_SET_CHILD_SUBREAPER`), so every process below it whose parent exits is re-parented to it
//! rather than to init, whatever it did to its environment, session or process group. When
//! `PROGRAM` exits, or the helper's parent goes away, or (with `--report`) the host closes the
//! control socket, the helper kills everything below it with `SIGKILL` and reaps it, until the
//! kernel says it has no child left: then nothing it started can still run, since any
//! descendant would be its child or the child of one.
//!
//! The helper runs as two processes, the same program started twice, each a subreaper watching
//! the other: the outer one's child is the inner one, whose child is `PROGRAM`. A command that
//! kills the helper above it (its `$PPID`) hands its processes to the outer one, which then ends
//! them; a host that kills the outer one (as a stdio client does when it drops its server) leaves
//! the inner one seeing its parent gone, which ends them. A command that kills both helpers at
//! once escapes; so does anything started through another process (a service manager, an already
//! running server), which is not below the helper at all.
//!
//! With `--report`, standard input is a socket to the host: the outer helper waits for one line
//! on it before it starts anything (so the host can move it into a cgroup first), and the helpers
//! write `exit <code>` or `signal <number>` and `stopped <count>` lines on it before they exit.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// How a host starts the helper: a program and the arguments before the helper's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helper {
    /// The program (for a daemon, usually its own executable).
    pub program: PathBuf,
    /// The arguments that make the program the helper (for `ahpd`, `__contain`).
    pub args: Vec<OsString>,
}

impl Helper {
    /// The command line that runs `program args…` behind the helper.
    pub fn wrap(&self, report: bool, program: &OsString, args: &[OsString]) -> Vec<OsString> {
        let mut out: Vec<OsString> = self.args.clone();
        if report {
            out.push("--report".into());
        }
        out.push("--".into());
        out.push(program.clone());
        out.extend(args.iter().cloned());
        out
    }
}

static INSTALLED: OnceLock<Helper> = OnceLock::new();

/// Makes `helper` the one this process starts its commands behind (once; later calls are
/// ignored). Without one, commands are contained by the marker scan alone (see the `shell`
/// module).
pub fn install(helper: Helper) {
    let _ = INSTALLED.set(helper);
}

/// The helper installed, if any.
pub fn installed() -> Option<&'static Helper> {
    INSTALLED.get()
}

/// The helper's `main`: `prefix` is what was given before its own arguments (for `ahpd`,
/// `["__contain"]`), so that it can start its inner half the same way; `args` are the rest.
/// Returns the program's exit code (`128 + n` for a signal `n`), 125 when the helper itself
/// could not do its work and 127 when the program could not be started.
pub fn run(prefix: &[&str], args: Vec<OsString>) -> i32 {
    let mut report = false;
    let mut inner = false;
    let mut rest = args.into_iter();
    let mut program: Vec<OsString> = Vec::new();
    for arg in rest.by_ref() {
        match arg.to_str() {
            Some("--report") => report = true,
            Some("--inner") => inner = true,
            Some("--") => break,
            _ => {
                eprintln!("contain: unknown argument {}", arg.to_string_lossy());
                return 125;
            }
        }
    }
    program.extend(rest);
    if program.is_empty() {
        eprintln!("contain: no program to run after --");
        return 125;
    }
    imp::run(prefix, report, inner, program)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::collections::BTreeSet;
    use std::ffi::OsString;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{
        Pid, PidfdFlags, Signal, WaitOptions, getpid, getppid, kill_process, kill_process_group,
        pidfd_open, set_child_subreaper, wait,
    };

    /// How often the parent is looked at again where a pidfd cannot be had.
    const PARENT_POLL: Duration = Duration::from_millis(200);
    /// The pause between sweeps while killed processes are still dying.
    const SWEEP_PAUSE: Duration = Duration::from_millis(1);

    pub(super) fn run(prefix: &[&str], report: bool, inner: bool, program: Vec<OsString>) -> i32 {
        if let Err(error) = set_child_subreaper(Some(getpid())) {
            eprintln!("contain: cannot become a child subreaper: {error}");
            return 125;
        }
        let parent = getppid();
        // The control socket, when the host gave one: our standard input.
        let control: Option<UnixStream> = if report {
            let fd: OwnedFd = match std::io::stdin().as_fd().try_clone_to_owned() {
                Ok(fd) => fd,
                Err(error) => {
                    eprintln!("contain: no control socket: {error}");
                    return 125;
                }
            };
            let socket = UnixStream::from(fd);
            if !inner && !wait_for_go(&socket) {
                // The host went away before letting the call start: nothing to run.
                return 125;
            }
            Some(socket)
        } else {
            None
        };

        let mut command = if inner {
            let mut command = Command::new(&program[0]);
            command.args(&program[1..]);
            // The command runs in a group of its own, as it would without the helper; its
            // standard input is nothing when the host talks to us on ours.
            command.process_group(0);
            if report {
                command.stdin(Stdio::null());
            }
            command
        } else {
            let Ok(me) = std::env::current_exe() else {
                eprintln!("contain: cannot find its own program");
                return 125;
            };
            let mut command = Command::new(me);
            // A group of its own: a host that kills our group (as stdio clients do) kills us
            // alone, and the inner half, seeing us gone, ends what it started.
            command.process_group(0);
            command.args(prefix);
            if report {
                command.arg("--report");
            }
            command.arg("--inner").arg("--").args(&program);
            command
        };
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                eprintln!(
                    "contain: cannot start {}: {error}",
                    program[0].to_string_lossy()
                );
                if let Some(socket) = &control
                    && inner
                {
                    let _ = (&*socket).write_all(b"spawn-failed\n");
                }
                return 127;
            }
        };
        let child_pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(0));
        let reaped = Arc::new(AtomicBool::new(false));
        watch(parent, control.as_ref(), child_pid, reaped.clone());

        // Reap until our child has ended; orphans that end meanwhile are reaped on the way.
        let mut status = None;
        while status.is_none() {
            match wait(WaitOptions::empty()) {
                Ok(Some((pid, st))) if Some(pid) == child_pid => {
                    reaped.store(true, Ordering::SeqCst);
                    status = Some(st);
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        let stopped = sweep();
        let code = match status {
            Some(st) if st.exit_status().is_some() => {
                let code = st.exit_status().unwrap_or(0);
                if inner && let Some(socket) = &control {
                    let _ = (&*socket).write_all(format!("exit {code}\n").as_bytes());
                }
                code
            }
            Some(st) => {
                let signal = st.terminating_signal().unwrap_or(0);
                if inner && let Some(socket) = &control {
                    let _ = (&*socket).write_all(format!("signal {signal}\n").as_bytes());
                }
                128 + signal
            }
            None => 125,
        };
        if let Some(socket) = &control {
            let _ = (&*socket).write_all(format!("stopped {stopped}\n").as_bytes());
        }
        code
    }

    /// Reads the host's go-ahead, one byte at a time so nothing meant for later is consumed.
    fn wait_for_go(socket: &UnixStream) -> bool {
        let mut byte = [0u8; 1];
        loop {
            match (&*socket).read(&mut byte) {
                Ok(1) if byte[0] == b'\n' => return true,
                Ok(1) => {}
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                _ => return false,
            }
        }
    }

    /// Starts the thread that ends the child when the parent goes away or the host closes the
    /// control socket; the main thread then sees the child end and sweeps the rest.
    fn watch(
        parent: Option<Pid>,
        control: Option<&UnixStream>,
        child: Option<Pid>,
        reaped: Arc<AtomicBool>,
    ) {
        let control = control.and_then(|s| s.try_clone().ok());
        let parent_fd = parent.and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        std::thread::spawn(move || {
            let gone = || parent.is_some() && getppid() != parent;
            loop {
                let mut fds: Vec<PollFd<'_>> = Vec::new();
                if let Some(fd) = &parent_fd {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
                if let Some(socket) = &control {
                    fds.push(PollFd::from_borrowed_fd(socket.as_fd(), PollFlags::IN));
                }
                let timeout = Timespec {
                    tv_sec: 0,
                    tv_nsec: i64::try_from(PARENT_POLL.as_nanos()).unwrap_or(200_000_000),
                };
                let limit = if parent_fd.is_some() {
                    None
                } else {
                    Some(&timeout)
                };
                let _ = poll(&mut fds, limit);
                let parent_ended =
                    (parent_fd.is_some() && fds[0].revents().contains(PollFlags::IN)) || gone();
                let host_closed = control
                    .as_ref()
                    .is_some_and(|socket| closed(socket.as_fd()));
                drop(fds);
                if parent_ended || host_closed {
                    break;
                }
            }
            if !reaped.load(Ordering::SeqCst)
                && let Some(child) = child
            {
                let _ = kill_process_group(child, Signal::KILL);
                let _ = kill_process(child, Signal::KILL);
            }
        });
    }

    /// Whether the host's end of the socket is closed or has spoken: after the go-ahead the
    /// host never writes, so anything readable (the end of the stream included) means stop.
    fn closed(fd: BorrowedFd<'_>) -> bool {
        let mut probe = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut probe, Some(&zero)).unwrap_or(0) > 0
    }

    /// Our live children now, from `/proc` (an ended one waits to be reaped, not killed).
    fn children(me: i32) -> Vec<i32> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        // The command name is in parentheses and may hold anything.
                        let rest = stat.get(stat.rfind(')')? + 2..)?.to_owned();
                        let mut fields = rest.split(' ');
                        let state = fields.next()?;
                        let ppid = fields.next()?.parse::<i32>().ok()?;
                        Some(ppid == me && state != "Z" && state != "X")
                    })
                    .unwrap_or(false)
            })
            .collect()
    }

    /// Kills and reaps everything below us until the kernel says we have no child at all;
    /// returns how many processes were killed.
    fn sweep() -> usize {
        let me = getpid().as_raw_nonzero().get();
        let mut killed: BTreeSet<i32> = BTreeSet::new();
        loop {
            // Reap whatever has ended; no child at all means nothing below us is left.
            loop {
                match wait(WaitOptions::NOHANG) {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => return killed.len(),
                }
            }
            for pid in children(me) {
                if let Some(raw) = Pid::from_raw(pid) {
                    let _ = kill_process(raw, Signal::KILL);
                    killed.insert(pid);
                }
            }
            std::thread::sleep(SWEEP_PAUSE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::ffi::OsString;
    use std::process::Command;

    /// Elsewhere there is no subreaper: the program runs as a plain child.
    pub(super) fn run(
        _prefix: &[&str],
        _report: bool,
        _inner: bool,
        program: Vec<OsString>,
    ) -> i32 {
        match Command::new(&program[0]).args(&program[1..]).status() {
            Ok(status) => status.code().unwrap_or(1),
            Err(_) => 127,
        }
    }
}
