//! The process runner behind `shell_exec`: one command, its own process group and marker,
//! a filtered environment, capped output, and nothing left running when the call ends.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

#[cfg(unix)]
use super::cgroup::resolve_program;
use super::cgroup::{CallGroup, GATE_SCRIPT, GATE_SHELL};
use super::contain::{MARKER_VAR, become_subreaper, new_marker, stop_call};
use super::env::ShellEnv;

/// The marker appended to a stream that was cut.
pub const TRUNCATED_MARKER: &str = "\n[output truncated]";

/// How long the runner keeps waiting for the pipes after the shell exited or was killed and the
/// call's processes were stopped. A descendant that escaped may hold them open for ever; we
/// return what we have.
const DRAIN_AFTER_KILL: Duration = Duration::from_secs(1);

/// Read size for the output pipes.
const READ_CHUNK: usize = 16 * 1024;

/// A shell program and the arguments that go before the command text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellSpec {
    /// The program to start, e.g. `sh` or `powershell.exe`.
    pub command: String,
    /// Arguments placed before the command text, e.g. `["-c"]`.
    pub args: Vec<String>,
}

impl ShellSpec {
    /// `sh -c` on Unix; `powershell.exe -NoProfile -NonInteractive -Command` on Windows.
    pub fn platform_default() -> Self {
        if cfg!(windows) {
            Self {
                command: "powershell.exe".to_owned(),
                args: vec![
                    "-NoProfile".to_owned(),
                    "-NonInteractive".to_owned(),
                    "-Command".to_owned(),
                ],
            }
        } else {
            Self {
                command: "sh".to_owned(),
                args: vec!["-c".to_owned()],
            }
        }
    }

    /// The shell's short name: the last path component without a trailing `.exe` (any case).
    pub fn name(&self) -> String {
        let last = self
            .command
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or(self.command.as_str());
        match last.len().checked_sub(4) {
            Some(cut) if last.is_char_boundary(cut) && last[cut..].eq_ignore_ascii_case(".exe") => {
                last[..cut].to_owned()
            }
            _ => last.to_owned(),
        }
    }
}

impl Default for ShellSpec {
    fn default() -> Self {
        Self::platform_default()
    }
}

/// Everything `exec_shell` needs for one run.
#[derive(Debug, Clone)]
pub struct ShellExecArgs {
    /// The shell to run the command through.
    pub shell: ShellSpec,
    /// The command text, passed to the shell as one argument.
    pub command: String,
    /// The working folder.
    pub cwd: PathBuf,
    /// Time limit; when it passes the process tree is killed.
    pub timeout: Duration,
    /// Characters kept per stream before the rest is discarded.
    pub max_output_chars: usize,
    /// Cancels the run (and kills the process tree) when it fires.
    pub cancel: Option<CancellationToken>,
    /// Which of the daemon's environment variables the command sees.
    pub env: ShellEnv,
    /// The variables `env` filters; `None` is the daemon's own environment at the call.
    pub base_env: Option<Vec<(OsString, OsString)>>,
    /// Run the command in a cgroup of its own where one can be made (`shell_exec` always
    /// does); without, the marker scan alone finds its processes.
    pub cgroup: bool,
    /// The per-call helper to start the shell behind (Linux); `None` is the one the process
    /// installed ([`super::reaper::install`]), and without either the marker scan alone
    /// contains the call.
    pub helper: Option<super::reaper::Helper>,
}

/// What one run produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellResult {
    /// Standard output, cut at the character cap (with the marker) when `truncated`.
    pub stdout: String,
    /// Standard error, cut the same way.
    pub stderr: String,
    /// The exit code; `None` when timed out, aborted or ended by a signal.
    pub exit_code: Option<i32>,
    /// The signal that ended the shell, when one did and the runner did not send it.
    pub signal: Option<i32>,
    /// The time limit passed and the tree was killed.
    pub timed_out: bool,
    /// The run was cancelled (before the start, or while running) and the tree was killed.
    pub aborted: bool,
    /// At least one stream was cut.
    pub truncated: bool,
    /// Processes the command left running when the shell exited (background jobs, daemons),
    /// which the runner then killed.
    pub stopped: usize,
}

/// Runs one command through the shell in its own process group, with a time limit,
/// cancellation, per-stream character caps and the environment `env` allows.
///
/// Returns `Err` only when the shell cannot be started. On timeout or cancellation every process
/// of the call is killed (grandchildren, `setsid` and daemonized ones too; see the `contain`
/// module for how they are found and its limits), and the output gathered so far is kept. When
/// the shell exits, whatever it left running is killed and counted in [`ShellResult::stopped`].
/// Dropping the returned future while the command runs kills the call's processes as well.
pub async fn exec_shell(mut args: ShellExecArgs) -> std::io::Result<ShellResult> {
    let cancel = args.cancel.take().unwrap_or_default();
    if cancel.is_cancelled() {
        return Ok(ShellResult {
            aborted: true,
            ..ShellResult::default()
        });
    }

    let (mut child, mut guard) = start_shell(&mut args).await?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();

    let mut out = CappedText::new(args.max_output_chars);
    let mut err = CappedText::new(args.max_output_chars);
    let mut status: Option<ExitStatus> = None;
    let mut timed_out = false;
    let mut aborted = false;
    let stopped;
    {
        let out_reader = drain(stdout, &mut out);
        let err_reader = drain(stderr, &mut err);
        tokio::pin!(out_reader, err_reader);
        let (mut out_done, mut err_done) = (false, false);
        let deadline = tokio::time::sleep(args.timeout);
        tokio::pin!(deadline);

        // Phase one: read both pipes until the shell exits, the deadline or the cancel.
        while status.is_none() {
            tokio::select! {
                waited = child.wait() => {
                    // Reaped: from here on the pid may be reused, so never signal it alone.
                    // (A failed wait means there is no child left to wait for.)
                    guard.child_reaped();
                    status = Some(waited.unwrap_or_default());
                }
                () = &mut out_reader, if !out_done => out_done = true,
                () = &mut err_reader, if !err_done => err_done = true,
                () = &mut deadline => { timed_out = true; break; }
                () = cancel.cancelled() => { aborted = true; break; }
            }
        }

        // Whatever is still running belongs to the call and ends with it: background jobs after
        // a normal exit, everything after a timeout or a cancel.
        stopped = guard.stop().await;

        // Phase two: a bounded drain, so output written before the stop is kept.
        let settle = async {
            while status.is_none() || !out_done || !err_done {
                tokio::select! {
                    waited = child.wait(), if status.is_none() => {
                        guard.child_reaped();
                        status = Some(waited.unwrap_or_default());
                    }
                    () = &mut out_reader, if !out_done => out_done = true,
                    () = &mut err_reader, if !err_done => err_done = true,
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_AFTER_KILL, settle).await;
    }
    // The call's processes were stopped above; nothing is left for the guard to do.
    guard.disarm();

    let (exit_code, signal) = if timed_out || aborted {
        (None, None)
    } else if let Some(report) = &guard.report {
        // Behind the helper, the shell's own ending is the helper's word, not its exit code.
        (report.exit_code, report.signal)
    } else {
        status.map(exit_parts).unwrap_or((None, None))
    };
    let truncated = out.truncated || err.truncated;
    Ok(ShellResult {
        stdout: out.finish(),
        stderr: err.finish(),
        exit_code,
        signal,
        timed_out,
        aborted,
        truncated,
        stopped: if timed_out || aborted { 0 } else { stopped },
    })
}

/// Starts the call's shell in a group of its own (a cgroup when asked for and possible) and arms
/// the guard that stops whatever the call leaves running.
async fn start_shell(
    args: &mut ShellExecArgs,
) -> std::io::Result<(tokio::process::Child, TreeGuard)> {
    #[cfg(target_os = "linux")]
    if let Some(helper) = args
        .helper
        .clone()
        .or_else(|| super::reaper::installed().cloned())
        // A program replaced or removed since it was installed cannot be started again.
        .filter(|helper| helper.program.is_file())
    {
        return start_behind_helper(args, &helper);
    }
    become_subreaper();
    let marker = new_marker();
    let vars = match args.base_env.take() {
        Some(vars) => args.env.apply(vars),
        None => args.env.apply(std::env::vars_os()),
    };
    let group = if args.cgroup {
        CallGroup::create(&marker).map(Arc::new)
    } else {
        None
    };
    let gated = group.is_some() && can_gate(&args.shell.command, &vars);
    let mut command = shell_command(args, vars, &marker, gated);
    let mut child = command.spawn()?;
    if let (Some(group), Some(pid)) = (&group, child.id()) {
        group.adopt(pid);
    }
    if let Some(mut gate) = child.stdin.take() {
        // In the group now: let the shell through. A gate that died has nothing to open.
        let _ = gate.write_all(b"\n").await;
    }
    let guard = TreeGuard::new(child.id(), marker, group);
    Ok((child, guard))
}

/// Starts the shell behind the per-call helper (see the `reaper` module): the helper's standard
/// input is a socket to us, on which it is let through once it is in the call's cgroup (when
/// there is one) and on which it reports how the shell ended and what it stopped.
#[cfg(target_os = "linux")]
fn start_behind_helper(
    args: &mut ShellExecArgs,
    helper: &super::reaper::Helper,
) -> std::io::Result<(tokio::process::Child, TreeGuard)> {
    use std::io::Write as _;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    let marker = new_marker();
    let vars = match args.base_env.take() {
        Some(vars) => args.env.apply(vars),
        None => args.env.apply(std::env::vars_os()),
    };
    let group = if args.cgroup {
        CallGroup::create(&marker).map(Arc::new)
    } else {
        None
    };
    let (ours, theirs) = UnixStream::pair()?;
    let mut shell_args: Vec<OsString> = args.shell.args.iter().map(OsString::from).collect();
    shell_args.push(OsString::from(&args.command));
    let mut command = Command::new(&helper.program);
    command
        .args(helper.wrap(true, &OsString::from(&args.shell.command), &shell_args))
        .current_dir(&args.cwd)
        .env_clear()
        .envs(vars)
        .env(MARKER_VAR, &marker)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = command.spawn()?;
    // Our copy of the helper's end goes, so its closing is seen when the helpers are gone.
    drop(command);
    if let (Some(group), Some(pid)) = (&group, child.id()) {
        group.adopt(pid);
    }
    // In the group now: let the helper start the shell. A helper that died has nothing to open.
    let _ = (&ours).write_all(b"\n");
    let mut guard = TreeGuard::new(None, marker, group);
    guard.control = Some(ours);
    Ok((child, guard))
}

/// What the helper said about the call.
#[derive(Debug, Default)]
struct Report {
    exit_code: Option<i32>,
    signal: Option<i32>,
    stopped: usize,
}

/// Tells the helpers the call is over (they then end everything below them), and reads what
/// they report until both have gone, for at most `PATIENCE_FOR_HELPERS`.
#[cfg(unix)]
fn close_call(control: &std::os::unix::net::UnixStream) -> Report {
    use std::io::Read as _;
    let _ = control.shutdown(std::net::Shutdown::Write);
    let _ = control.set_read_timeout(Some(PATIENCE_FOR_HELPERS));
    let mut text = Vec::new();
    let mut buf = [0u8; 512];
    let deadline = std::time::Instant::now() + PATIENCE_FOR_HELPERS;
    while std::time::Instant::now() < deadline {
        match (&*control).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let mut report = Report::default();
    for line in String::from_utf8_lossy(&text).lines() {
        let (word, number) = line.split_once(' ').unwrap_or((line, ""));
        match (word, number.trim().parse::<i64>()) {
            ("exit", Ok(n)) => report.exit_code = i32::try_from(n).ok(),
            ("signal", Ok(n)) => report.signal = i32::try_from(n).ok(),
            ("stopped", Ok(n)) => report.stopped += usize::try_from(n).unwrap_or(0),
            _ => {}
        }
    }
    report
}

/// How long the runner waits for the helpers to end a call's processes and report.
const PATIENCE_FOR_HELPERS: Duration = Duration::from_secs(10);

/// The command that starts the shell on `args.command`: behind the gate when `gated` (so it joins
/// the call's group before it runs anything), with only the allowed variables and the marker.
fn shell_command(
    args: &ShellExecArgs,
    vars: Vec<(OsString, OsString)>,
    marker: &str,
    gated: bool,
) -> Command {
    let mut command = if gated {
        // The gate's `exec` finds the shell along the same PATH the direct start would use,
        // and the shell keeps the name it was given as its `$0`.
        let mut gate = Command::new(GATE_SHELL);
        gate.args(["-c", GATE_SCRIPT, "cofold-gate"])
            .arg(&args.shell.command);
        gate
    } else {
        Command::new(&args.shell.command)
    };
    command
        .args(&args.shell.args)
        .arg(&args.command)
        .current_dir(&args.cwd)
        .env_clear()
        .envs(vars)
        .env(MARKER_VAR, marker)
        .stdin(if gated { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    #[cfg(windows)]
    command.creation_flags(0x0800_0000); // CREATE_NO_WINDOW
    command
}

/// Whether the shell can start behind the gate: there is a `/bin/sh`, and the shell program can
/// be found (else it is started directly, so that failing to start gives the usual error).
#[cfg(unix)]
fn can_gate(program: &str, vars: &[(OsString, OsString)]) -> bool {
    if !std::path::Path::new(GATE_SHELL).is_file() {
        return false;
    }
    let path = vars
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_os_str());
    resolve_program(program, path).is_some()
}

#[cfg(not(unix))]
fn can_gate(_program: &str, _vars: &[(OsString, OsString)]) -> bool {
    false
}

fn exit_parts(status: ExitStatus) -> (Option<i32>, Option<i32>) {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return (None, Some(signal));
        }
    }
    (status.code(), None)
}

/// Reads a pipe to its end into `sink`. Read errors end the stream quietly: the process's
/// output is best effort, its exit status is what counts.
async fn drain<R: AsyncRead + Unpin>(pipe: Option<R>, sink: &mut CappedText) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => sink.push(&buf[..n]),
        }
    }
}

/// Text gathered from one stream: decoded incrementally as UTF-8 and cut after `cap` chars.
#[derive(Debug)]
pub(crate) struct CappedText {
    cap: usize,
    text: String,
    chars: usize,
    /// The start of a character split across reads.
    pending: Vec<u8>,
    truncated: bool,
}

impl CappedText {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            text: String::new(),
            chars: 0,
            pending: Vec::new(),
            truncated: false,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.truncated {
            return; // read and discarded, so the child never blocks on a full pipe
        }
        if self.pending.is_empty() {
            self.decode(bytes);
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(bytes);
            self.decode(&joined);
        }
    }

    fn decode(&mut self, mut input: &[u8]) {
        while !input.is_empty() && !self.truncated {
            match std::str::from_utf8(input) {
                Ok(valid) => {
                    self.add(valid);
                    input = &[];
                }
                Err(error) => {
                    let (valid, rest) = input.split_at(error.valid_up_to());
                    // `valid_up_to` marks a UTF-8 boundary, so this cannot fail.
                    self.add(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            self.add("\u{FFFD}");
                            input = &rest[bad..];
                        }
                        None => {
                            // An incomplete character at the end: wait for the next read.
                            self.pending = rest.to_vec();
                            input = &[];
                        }
                    }
                }
            }
        }
    }

    fn add(&mut self, s: &str) {
        let room = self.cap - self.chars;
        let mut count = 0;
        for (index, _) in s.char_indices() {
            if count == room {
                self.text.push_str(&s[..index]);
                self.chars += count;
                self.truncated = true;
                self.pending.clear();
                return;
            }
            count += 1;
        }
        self.text.push_str(s);
        self.chars += count;
    }

    pub(crate) fn finish(mut self) -> String {
        if !self.truncated && !self.pending.is_empty() {
            // The stream ended inside a character.
            self.pending.clear();
            self.add("\u{FFFD}");
        }
        if self.truncated {
            self.text.push_str(TRUNCATED_MARKER);
        }
        self.text
    }
}

/// Stops the call's processes when the run ends, and when it is dropped before it ended.
struct TreeGuard {
    pid: Option<u32>,
    marker: String,
    group: Option<Arc<CallGroup>>,
    child_alive: bool,
    armed: bool,
    /// The socket to the per-call helper, when the shell runs behind one.
    #[cfg(unix)]
    control: Option<std::os::unix::net::UnixStream>,
    /// What the helper reported, once the call was stopped.
    report: Option<Report>,
}

impl TreeGuard {
    fn new(pid: Option<u32>, marker: String, group: Option<Arc<CallGroup>>) -> Self {
        Self {
            pid,
            marker,
            group,
            child_alive: true,
            armed: true,
            #[cfg(unix)]
            control: None,
            report: None,
        }
    }

    fn child_reaped(&mut self) {
        self.child_alive = false;
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Kills every process of the call (the shell too while it runs) off the async threads, and
    /// says how many besides the shell there were.
    async fn stop(&mut self) -> usize {
        #[cfg(unix)]
        if let Some(control) = self.control.take() {
            // The helpers end everything below them first; the group and marker scan after
            // them only catch what left both (a cgroup's stragglers, a marked orphan).
            let (marker, group) = (self.marker.clone(), self.group.clone());
            let stopping = move || {
                let report = close_call(&control);
                let extra = stop_call(&marker, None, false, group.as_deref());
                (report, extra)
            };
            if let Ok((report, extra)) = tokio::task::spawn_blocking(stopping).await {
                let count = report.stopped + extra;
                self.report = Some(report);
                return count;
            }
            return 0;
        }
        let (marker, pid, alive) = (self.marker.clone(), self.pid, self.child_alive);
        let group = self.group.clone();
        let stopping = move || stop_call(&marker, pid, alive, group.as_deref());
        match tokio::task::spawn_blocking(stopping).await {
            Ok(count) => count,
            // The blocking pool is gone (the runtime is shutting down): stop them here.
            Err(_) => stop_call(
                &self.marker,
                self.pid,
                self.child_alive,
                self.group.as_deref(),
            ),
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(control) = self.control.take() {
            close_call(&control);
        }
        if self.armed {
            stop_call(
                &self.marker,
                self.pid,
                self.child_alive,
                self.group.as_deref(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_strip_folders_and_exe() {
        let spec = |command: &str| ShellSpec {
            command: command.to_owned(),
            args: vec![],
        };
        assert_eq!(spec("sh").name(), "sh");
        assert_eq!(spec("/bin/bash").name(), "bash");
        assert_eq!(spec("C:\\Windows\\PowerShell.EXE").name(), "PowerShell");
        assert_eq!(spec("pwsh").name(), "pwsh");
    }

    #[test]
    fn a_character_split_across_reads_survives() {
        let mut text = CappedText::new(10);
        let bytes = "aé😀".as_bytes();
        for byte in bytes {
            text.push(std::slice::from_ref(byte));
        }
        assert_eq!(text.finish(), "aé😀");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut text = CappedText::new(10);
        text.push(b"a\xffb");
        text.push(b"\xe2\x82"); // an incomplete character at the very end
        assert_eq!(text.finish(), "a\u{FFFD}b\u{FFFD}");
    }

    #[test]
    fn the_cap_counts_characters_and_adds_the_marker() {
        let mut text = CappedText::new(3);
        text.push("ééé".as_bytes());
        assert!(!text.truncated);
        text.push("é".as_bytes());
        assert!(text.truncated);
        assert_eq!(text.finish(), "ééé\n[output truncated]");
    }
}
