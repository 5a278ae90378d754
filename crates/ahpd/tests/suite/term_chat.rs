//! `ahpd chat` in a pseudo-terminal: a message, an approval answered `y`, the reply, a steered
//! turn and a stopped one.

use std::io::{Read, Write};
use std::process::Child;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use testkit::{Endpoint, Frame, Gate, Reply, chunk};

use super::support::*;
use super::term_support::*;

/// Long enough never to pass on a healthy run; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// The program's side of a pseudo-terminal and everything it wrote so far.
struct Pty {
    master: std::fs::File,
    seen: Arc<(Mutex<String>, Condvar)>,
    cursor: usize,
    child: Child,
}

impl Pty {
    fn spawn(mut cmd: std::process::Command) -> Pty {
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
    fn expect(&mut self, needle: &str) {
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

    fn send(&mut self, line: &str) {
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

#[test]
fn chat_asks_an_approval_steers_and_stops_in_a_terminal() {
    let env = Env::new();
    let work = work(&env);
    let steer_gate = Gate::new();
    let stop_gate = Gate::new();
    let ep = Endpoint::with_replies(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        Reply::text_stream("edited it"),
        call("c2", "read_file", json!({ "path": "a.txt" })).held(&steer_gate),
        Reply::text_stream("steered answer"),
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::text("partial words")),
            Frame::Gate(stop_gate.clone()),
            Frame::Chunk(chunk::text(" never shown")),
            Frame::Chunk(chunk::finish("stop")),
        ]),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut cmd = env.cmd();
    cmd.arg("chat")
        .arg("--path")
        .arg(&work)
        .args(["--mode", "default"]);
    // Plain text, so the expectations need no escape codes.
    cmd.env("NO_COLOR", "1");
    let mut pty = Pty::spawn(cmd);

    pty.expect("you> ");
    pty.send("change hello to goodbye");
    pty.expect("approve? edit_file a.txt");
    pty.expect("-hello");
    pty.expect("+goodbye");
    pty.expect("[y] yes once");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "hello\n",
        "nothing written before the answer"
    );
    pty.send("y");
    pty.expect("• edit_file a.txt: ok");
    pty.expect("edited it");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "goodbye\n"
    );

    // A line typed while a turn runs steers it.
    pty.expect("you> ");
    pty.send("read it back");
    rt().block_on(steer_gate.reached());
    pty.send("only the first line");
    pty.expect("(steering: only the first line)");
    steer_gate.open();
    pty.expect("steered answer");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 5);
    assert!(
        bodies[4]["messages"]
            .to_string()
            .contains("only the first line"),
        "the steering message reached the next step"
    );

    // /stop ends a running turn.
    pty.expect("you> ");
    pty.send("talk");
    pty.expect("partial words");
    pty.send("/stop");
    pty.expect("(stopped)");
    stop_gate.open();
    pty.expect("you> ");
    pty.send("/quit");
    let status = pty.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
