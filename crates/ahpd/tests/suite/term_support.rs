//! For the terminal client's tests: the cofold engine pointed at the scripted endpoint, a work
//! folder, a detached daemon stopped when the test ends, and the replies of a coding turn.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Reply, chunk};

use super::support::*;

/// The configuration: the cofold plugin on the endpoint, and a port nothing listens on (1 needs
/// root to bind), so only a daemon started by the test can answer.
pub fn configure(env: &Env, ep: &Endpoint) {
    let config = json!({
        "port": 1,
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    env.write_base(&config.to_string());
}

/// A work folder holding `a.txt`.
pub fn work(env: &Env) -> PathBuf {
    let dir = env.root.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
    dir.canonicalize().unwrap()
}

/// A streamed reply calling one tool.
pub fn call(id: &str, name: &str, input: Value) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::tool_call(
            0,
            Some(id),
            Some(name),
            &input.to_string(),
        )),
        Frame::Chunk(chunk::finish("tool_calls")),
        Frame::Chunk(chunk::usage(10, 5)),
    ])
}

/// `ahpd <command> --path <work> <args>` in a pseudo-terminal, in plain text so the
/// expectations need no escape codes.
pub fn in_pty(env: &Env, command: &str, work: &std::path::Path, args: &[&str]) -> Pty {
    let mut cmd = env.cmd();
    cmd.arg(command)
        .arg("--path")
        .arg(work)
        .args(args)
        .env("NO_COLOR", "1");
    Pty::spawn(cmd)
}

/// A streamed reply calling `ask_user` with `questions`.
pub fn ask_user(id: &str, questions: Value) -> Reply {
    call(id, "ask_user", json!({ "questions": questions }))
}

/// Read `a.txt`, edit it, run a command, then answer `answer`.
pub fn coding_turn(answer: &str) -> Vec<Reply> {
    vec![
        call("c1", "read_file", json!({ "path": "a.txt" })),
        call(
            "c2",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        call("c3", "shell_exec", json!({ "command": "cat a.txt" })),
        Reply::text_stream(answer),
    ]
}

/// A detached daemon (`ahpd start`), stopped when dropped.
pub struct Started<'a> {
    env: &'a Env,
    pub address: String,
}

impl<'a> Started<'a> {
    pub fn new(env: &'a Env) -> Started<'a> {
        let out = env.run(&["start", "--port", "0"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(env.dir().join("daemon.json")).unwrap())
                .unwrap();
        Started {
            env,
            address: record["address"].as_str().unwrap().to_owned(),
        }
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        let _ = self.env.run(&["stop"]);
    }
}

/// `ahpd run` with these arguments in the work folder.
pub fn run(env: &Env, work: &std::path::Path, args: &[&str]) -> std::process::Output {
    env.cmd()
        .arg("run")
        .arg("--path")
        .arg(work)
        .args(args)
        .output()
        .unwrap()
}

/// The session URI `ahpd run` named on standard error.
pub fn session_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session line in {stderr}"))
        .to_owned()
}

/// Long enough never to pass on a healthy run; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// The program's side of a pseudo-terminal and everything it wrote so far.
pub struct Pty {
    master: std::fs::File,
    seen: Arc<(Mutex<String>, Condvar)>,
    cursor: usize,
    pub child: Child,
}

impl Pty {
    pub fn spawn(mut cmd: std::process::Command) -> Pty {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let size = rustix::termios::Winsize {
            ws_row: 40,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&master, size).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        // The terminal is the program's controlling terminal, as in a shell, so Ctrl-C typed
        // on it is the SIGINT of the program's process group.
        #[allow(unsafe_code)]
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
                Ok(())
            });
        }
        let child = cmd
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .unwrap();
        let master = std::fs::File::from(master);
        let seen: Arc<(Mutex<String>, Condvar)> = Arc::default();
        let mut reader = master.try_clone().unwrap();
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The read fails once every holder of the terminal's other side has gone.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let (text, ready) = &*sink;
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
                ready.notify_all();
            }
        });
        Pty {
            master,
            seen,
            cursor: 0,
            child,
        }
    }

    /// Waits until `needle` appears after what earlier expectations consumed.
    pub fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        let (text, ready) = &*self.seen;
        let mut guard = text.lock().unwrap();
        loop {
            if let Some(at) = guard[self.cursor..].find(needle) {
                self.cursor += at + needle.len();
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{needle:?} never came; the screen after the last match:\n{}",
                &guard[self.cursor..]
            );
            guard = ready.wait_timeout(guard, left).unwrap().0;
        }
    }

    /// The first word starting with `prefix` on the screen so far.
    pub fn word_starting(&self, prefix: &str) -> String {
        let text = self.seen.0.lock().unwrap();
        let at = text
            .find(prefix)
            .unwrap_or_else(|| panic!("no {prefix} in {text}"));
        text[at..]
            .split(|c: char| c.is_whitespace())
            .next()
            .unwrap()
            .to_owned()
    }

    /// Bytes typed as they are (Ctrl-C is `\x03`, the up arrow `\x1b[A`).
    pub fn type_raw(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// Everything the program wrote so far, as bytes read back from the terminal.
    pub fn screen(&self) -> String {
        self.seen.0.lock().unwrap().clone()
    }

    /// Waits for the program to end; its exit code.
    pub fn wait(&mut self) -> Option<i32> {
        self.child.wait().unwrap().code()
    }

    pub fn send(&mut self, line: &str) {
        self.master.write_all(line.as_bytes()).unwrap();
        self.master.write_all(b"\r").unwrap();
        self.master.flush().unwrap();
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
