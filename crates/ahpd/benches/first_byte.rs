//! Time from `ahpd run "PROMPT"` starting to the first byte of the reply on its standard output,
//! with a scripted model that answers at once: with the host built in the process (no daemon),
//! and against a daemon started beforehand (`ahpd start`). The baseline is the same binary
//! printing `--version`, spawned the same way: what starting the process costs at all.
//! Run with `cargo bench -p ahpd --bench first_byte`; the goal is under 50 ms for both.

#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{Endpoint, Reply};

const RUNS: usize = 20;

struct Place {
    root: tempfile::TempDir,
}

impl Place {
    fn new(ep: &Endpoint) -> Place {
        let root = tempfile::tempdir().unwrap();
        for d in ["home", "xdg/ahpd", "work"] {
            std::fs::create_dir_all(root.path().join(d)).unwrap();
        }
        let config = serde_json::json!({
            "port": 1,
            "plugins": [{
                "name": "@ahpd/agent-cofold",
                "options": { "baseUrl": ep.base_url(), "model": "m" }
            }]
        });
        std::fs::write(root.path().join("xdg/ahpd/config.json"), config.to_string()).unwrap();
        Place { root }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ahpd"));
        c.env_clear()
            .env("HOME", self.root.path().join("home"))
            .env("XDG_CONFIG_HOME", self.root.path().join("xdg"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.root.path().join("work"))
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        c
    }
}

/// Spawns `args` and returns the time to the first byte on standard output; waits for the exit.
fn first_byte(place: &Place, args: &[&str]) -> Duration {
    let start = Instant::now();
    let mut child = place
        .cmd()
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(out.read(&mut byte).unwrap(), 1, "no output from {args:?}");
    let took = start.elapsed();
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    assert!(child.wait().unwrap().success(), "{args:?} failed");
    took
}

fn median(place: &Place, args: &[&str]) -> Duration {
    // One unmeasured run warms the page cache and writes the engine's first records.
    first_byte(place, args);
    let mut times: Vec<Duration> = (0..RUNS).map(|_| first_byte(place, args)).collect();
    times.sort();
    times[RUNS / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn row(name: &str, took: Duration, base: Duration) {
    println!(
        "{name:<44} {:>10}   {:>6.1}× the baseline   goal < 50 ms: {}",
        ms(took),
        took.as_secs_f64() / base.as_secs_f64(),
        if took < Duration::from_millis(50) {
            "met"
        } else {
            "missed"
        }
    );
}

fn main() {
    let ep = Endpoint::builder()
        .fallback(Reply::text_stream("hi"))
        .start()
        .unwrap();
    let place = Place::new(&ep);
    let base = median(&place, &["--version"]);
    println!("median of {RUNS} runs each, first byte on standard output");
    println!("{:<44} {:>10}", "baseline: ahpd --version", ms(base));
    let in_process = median(&place, &["run", "say hi"]);
    row("ahpd run, host in-process", in_process, base);
    let started = place.cmd().args(["start", "--port", "0"]).status().unwrap();
    assert!(started.success());
    let daemon = median(&place, &["run", "say hi"]);
    let _ = place.cmd().arg("stop").stdout(Stdio::null()).status();
    row("ahpd run, against a running daemon", daemon, base);
}
