//! One agent process: started in a process group of its own so that it and whatever it starts
//! (a language server, a shell, an `npx` wrapper's real program) end together, its stderr's
//! last lines kept to say why it died, its exit reported once.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

/// How many lines of stderr are kept for the error a death turns into.
const TAIL_LINES: usize = 12;
/// Longest stderr line kept, in bytes; the rest is cut.
const TAIL_LINE_MAX: usize = 400;

/// A running agent process.
pub struct Child {
    pid: Option<i32>,
    /// `None` while it runs, then how it ended.
    exit: watch::Receiver<Option<String>>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// The pipes the ACP connection runs over.
pub struct Pipes {
    /// The agent's stdin.
    pub stdin: ChildStdin,
    /// The agent's stdout.
    pub stdout: ChildStdout,
}

/// Starts `program` in `cwd` with exactly the environment `env`.
pub fn spawn(
    program: &Path,
    args: &[String],
    cwd: &Path,
    env: Vec<(OsString, OsString)>,
) -> std::io::Result<(Child, Pipes)> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let pid = child.id().and_then(|p| i32::try_from(p).ok());
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the agent's stdin was not piped"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("the agent's stdout was not piped"))?;
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let stderr_done = child.stderr.take().map(|stderr| {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut line = line;
                if line.len() > TAIL_LINE_MAX {
                    let mut cut = TAIL_LINE_MAX;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                    line.push('…');
                }
                if let Ok(mut t) = tail.lock() {
                    if t.len() == TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        })
    });
    let (tx, exit) = watch::channel(None);
    tokio::spawn(async move {
        let status = child.wait().await;
        // The stderr of a dying process is read to its end before the death is told, so the
        // error names the last thing it said.
        if let Some(done) = stderr_done {
            let _ = done.await;
        }
        let _ = tx.send(Some(match status {
            Ok(s) => describe(s),
            Err(e) => format!("could not be waited for ({e})"),
        }));
    });
    Ok((Child { pid, exit, tail }, Pipes { stdin, stdout }))
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        (None, None) => "ended".to_owned(),
    }
}

impl Child {
    /// Resolves with how the process ended.
    pub async fn exited(&self) -> String {
        let mut rx = self.exit.clone();
        loop {
            if let Some(s) = rx.borrow_and_update().clone() {
                return s;
            }
            if rx.changed().await.is_err() {
                return "ended".to_owned();
            }
        }
    }

    /// How it ended, if it has.
    pub fn exit_status(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// The last lines it wrote on stderr.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Kill the process and everything in its group.
    pub fn kill_tree(&self) {
        if let Some(pid) = self.pid.and_then(rustix::process::Pid::from_raw) {
            // The group may be gone already; nothing to report then.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Child {
    // Whatever the agent left running in its group ends with it, even after it exited itself.
    fn drop(&mut self) {
        self.kill_tree();
    }
}
