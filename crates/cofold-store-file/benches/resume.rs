//! Resume of a dead run in a compacted session, whose cost must not follow the length of the
//! history: a transcript and an event log of `COFOLD_BENCH_LOG_MB` MB each (default 64; 1024 for
//! the 1 GB case, which needs some minutes to build), 24 model
//! steps, and the claim of a process that has exited (the builder, a child process). In another
//! fresh process, the resume judges the claim dead, replays the tail of the events, reads the steps
//! and the context (the summary and what follows it), takes the claim and settles the run. Its time
//! is set against reading both logs once, and its peak resident memory (VmHWM) against the 64 MB
//! budget; appending a synced message to the big transcript is set against appending to a
//! one-message one and against a raw append with `fdatasync`.
//!
//! Run with `cargo bench -p cofold-store-file --bench resume`.

#![allow(missing_docs)]

mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{
    ModelStep, RunRef, RunStatus, RunUpdate, StepPatch, StepRecord, StepStatus, Store,
};

use common::{delta, median, message, micros, millis, new_session, open, run_record, runtime};

/// A line of /proc/self/status in kB.
fn status_kb(field: &str) -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

const ROLE_ENV: &str = "COFOLD_BENCH_ROLE";
const ROOT_ENV: &str = "COFOLD_BENCH_ROOT";
const SIZE_ENV: &str = "COFOLD_BENCH_LOG_MB";
/// Messages after the summary: the context a resumed run needs.
const CONTEXT_TAIL: usize = 40;

fn step_request(index: usize) -> serde_json::Value {
    // A model request carries the conversation it sent; 64 kB stands for a modest one.
    serde_json::json!({ "messages": [{ "text": "x".repeat(64 * 1024) }], "step": index })
}

/// Builds, in `root`, the session a daemon killed during a long turn leaves: a compacted
/// transcript and a running run's event log of `bytes` each, a few dozen steps, and the claim of
/// a process that has ended (this one: the parent reads the claim after this child exits).
fn build_session(rt: &tokio::runtime::Runtime, root: &Path, bytes: u64) -> (usize, u64) {
    let run = RunRef::new("big", "r1");
    let store = open(root);
    let folder = rt.block_on(async {
        new_session(&store, "big", Some("/home/bench/big".into())).await;
        store
            .create_run(run_record("big", "r1"))
            .await
            .expect("create_run");
        assert!(store.claim_writer("big", "r1").await.expect("claim"));
        store
            .session_dir("big")
            .await
            .expect("look up")
            .expect("exists")
    });
    let mut events = 0u64;
    {
        let file = fs::File::create(folder.join("runs/r1/events.jsonl")).expect("create");
        let mut out = BufWriter::new(file);
        let mut written = 0u64;
        while written < bytes {
            events += 1;
            let line = serde_json::to_vec(&delta(&run, events)).expect("JSON");
            out.write_all(&line).expect("write");
            out.write_all(b"\n").expect("write");
            written += line.len() as u64 + 1;
        }
        out.flush().expect("flush");
    }
    let mut messages = 0usize;
    let mut covered = Vec::new();
    {
        let file = fs::File::create(folder.join("messages.jsonl")).expect("create");
        let mut out = BufWriter::new(file);
        let mut written = 0u64;
        let template = message(0, 2000);
        while written < bytes {
            messages += 1;
            let mut one = template.clone();
            one.id = format!("m{messages}");
            covered.push(one.id.clone());
            let line = serde_json::to_vec(&one).expect("JSON");
            out.write_all(&line).expect("write");
            out.write_all(b"\n").expect("write");
            written += line.len() as u64 + 1;
        }
        out.flush().expect("flush");
    }
    // The summary and the turn after it go through the store, as a run stores them.
    let mut summary = Message::user_text("Summary of the conversation so far:\n\nwork goes on");
    summary.source = cofold_agents::message::MessageSource::Summary;
    summary.summarizes = Some(covered);
    summary.id = "summary".into();
    let tail: Vec<Message> = (0..CONTEXT_TAIL)
        .map(|n| message(1_000_000_000 + n, 2000))
        .collect();
    rt.block_on(async {
        store
            .append_messages("big", "r1", &[summary])
            .await
            .expect("the summary");
        store
            .append_messages("big", "r1", &tail)
            .await
            .expect("the tail");
        for index in 0..24 {
            let step = StepRecord::Model(ModelStep {
                session_id: "big".into(),
                run_id: "r1".into(),
                index,
                invocation_id: format!("i{index}"),
                status: StepStatus::Started,
                request: Some(step_request(index as usize)),
                reply: None,
                detail: None,
                started_at: Timestamp::now(),
                ended_at: None,
            });
            store.append_step(&step).await.expect("a step");
            if index < 23 {
                let patch = StepPatch {
                    status: Some(StepStatus::Completed),
                    reply: Some(serde_json::json!({ "usage": { "input": 10, "output": 5 } })),
                    ended_at: Some(Timestamp::now()),
                    ..StepPatch::default()
                };
                store
                    .update_step(&run, &format!("i{index}"), &patch)
                    .await
                    .expect("close the step");
            }
        }
    });
    // The claim stays: this process ends holding it, as a killed daemon does.
    (messages + CONTEXT_TAIL + 1, events)
}

/// What a resume of the dead run reads and writes, in a fresh process so its peak memory is the
/// resume's own. Prints `figures <seconds> <peak kB> <start kB> <context> <replayed> <append µs>`.
fn resume_child(root: &Path) {
    let rt = runtime();
    let start_kb = status_kb("VmHWM:");
    let started = Instant::now();
    let run = RunRef::new("big", "r1");
    // Each stage's time and the peak memory after it, printed for the parent.
    let mut stages: Vec<(&str, Duration, u64)> = Vec::new();
    let mut last_mark = Instant::now();
    let mut mark = |name: &'static str| {
        stages.push((name, last_mark.elapsed(), status_kb("VmHWM:")));
        last_mark = Instant::now();
    };
    let (context, replayed) = rt.block_on(async {
        let store = open(root);
        let session = store
            .get_session("big")
            .await
            .expect("get")
            .expect("the session");
        assert_eq!(session.active_writer_run_id.as_deref(), Some("r1"));
        let dead = store.dead_writer("big").await.expect("dead_writer");
        assert_eq!(dead.as_deref(), Some("r1"), "the builder has exited");
        let record = store
            .get_run(&run)
            .await
            .expect("get_run")
            .expect("the run");
        assert_eq!(record.status, RunStatus::Running);
        mark("session, dead claim, run");
        let last = store.last_event_seq(&run).await.expect("last seq");
        let tail = store
            .list_events(&run, Some(last.saturating_sub(100)))
            .await
            .expect("replay the tail");
        mark("last seq, event tail");
        let steps = store.list_steps(&run).await.expect("steps");
        assert_eq!(steps.len(), 24);
        drop(steps);
        mark("steps");
        assert!(
            store
                .claim_writer("big", "r1")
                .await
                .expect("take the dead claim")
        );
        mark("claim");
        let context = store
            .list_context_messages("big")
            .await
            .expect("the context");
        mark("context");
        // Settle: close the open step, store a marker message, the last event, the status.
        store
            .update_step(
                &run,
                "i23",
                &StepPatch {
                    status: Some(StepStatus::Failed),
                    ended_at: Some(Timestamp::now()),
                    ..StepPatch::default()
                },
            )
            .await
            .expect("close the open step");
        store
            .append_messages("big", "r1", &[message(2_000_000_000, 300)])
            .await
            .expect("append");
        store
            .append_event(&delta(&run, last + 1))
            .await
            .expect("append after the log");
        let mut update = RunUpdate::new(run.clone());
        update.status = Some(RunStatus::Failed);
        store.update_run(update).await.expect("settle");
        mark("settle (synced writes)");
        (context.len(), tail.len())
    });
    for (name, took, peak) in &stages {
        println!("stage {:.1} {peak} {name}", millis(*took));
    }
    let elapsed = started.elapsed();
    let peak = status_kb("VmHWM:");
    // Appending to the big transcript, for comparison with a small one in the parent.
    let store = open(root);
    let mut samples = Vec::new();
    for n in 0..20 {
        let one = message(2_100_000_000 + n, 300);
        let started = Instant::now();
        rt.block_on(store.append_messages("big", "r1", &[one]))
            .expect("append");
        samples.push(started.elapsed());
    }
    println!(
        "figures {} {peak} {start_kb} {context} {replayed} {}",
        elapsed.as_secs_f64(),
        micros(median(samples))
    );
}

/// Reads a file once from start to end, as the baseline of a resume.
fn read_once(path: &Path) -> u64 {
    use std::io::Read;
    let mut file = fs::File::open(path).expect("open");
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let read = file.read(&mut buffer).expect("read");
        if read == 0 {
            return total;
        }
        total += read as u64;
    }
}

fn resume_bench(rt: &tokio::runtime::Runtime, root: &Path) {
    let megabytes: u64 = std::env::var(SIZE_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    println!(
        "Resume of a dead run in a compacted session ({megabytes} MB transcript + {megabytes} MB event log; set {SIZE_ENV})"
    );
    let started = Instant::now();
    // Built in a child that exits holding the claim, as a killed daemon would.
    let status = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .env(ROLE_ENV, "build")
        .env(ROOT_ENV, root)
        .env(SIZE_ENV, megabytes.to_string())
        .status()
        .expect("run the builder");
    assert!(status.success(), "the builder failed");
    println!("  built in {:.1} s", started.elapsed().as_secs_f64());
    let folder = root.join("workspaces/-home-bench-big/sessions/big");
    let transcript = folder.join("messages.jsonl");
    let events = folder.join("runs/r1/events.jsonl");
    // Baseline: reading both logs once, start to end (both are in the page cache, as for the
    // resume).
    let mut samples = Vec::new();
    let mut bytes = 0;
    for _ in 0..3 {
        let started = Instant::now();
        bytes = read_once(&transcript) + read_once(&events);
        samples.push(started.elapsed());
    }
    let baseline = median(samples);
    let output = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .env(ROLE_ENV, "resume")
        .env(ROOT_ENV, root)
        .output()
        .expect("run the resume");
    assert!(
        output.status.success(),
        "the resume failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    for stage in text.lines().filter_map(|line| line.strip_prefix("stage ")) {
        let mut parts = stage.splitn(3, ' ');
        let (took, peak, name) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or_default(),
        );
        println!("    {name}: {took} ms, peak {peak} kB after it");
    }
    let figures: Vec<f64> = text
        .lines()
        .find_map(|line| line.strip_prefix("figures "))
        .expect("the resume's figures")
        .split_whitespace()
        .map(|f| f.parse().expect("a number"))
        .collect();
    let (seconds, peak, start, context, replayed, big_append) = (
        figures[0], figures[1], figures[2], figures[3], figures[4], figures[5],
    );
    println!(
        "  resume: context of {context} messages, {replayed} events replayed, settled, in {:.1} ms; reading the {} MB of logs once: {:.1} ms ({:.3}× baseline; {:.3} s per 100 MB, the budget is ≤ 1 s)",
        seconds * 1e3,
        bytes >> 20,
        millis(baseline),
        seconds / baseline.as_secs_f64(),
        seconds / (bytes as f64 / 100e6)
    );
    println!(
        "  resident memory of the resuming process: peak {peak} kB (at start {start} kB); the budget is ≤ 65536 kB ({:.2}× budget)",
        peak / 65536.0
    );
    // Appending a message: the big transcript against a fresh one-message session.
    let store = open(root);
    let small = rt.block_on(async {
        new_session(&store, "small", None).await;
        store
            .create_run(run_record("small", "r1"))
            .await
            .expect("create_run");
        assert!(store.claim_writer("small", "r1").await.expect("claim"));
        let mut samples = Vec::new();
        for n in 0..20 {
            let started = Instant::now();
            store
                .append_messages("small", "r1", &[message(n, 300)])
                .await
                .expect("append");
            samples.push(started.elapsed());
        }
        median(samples)
    });
    // Baseline: one line appended by hand and `fdatasync`ed, the least a durable append costs.
    let raw = root.join("raw.jsonl");
    let mut line = serde_json::to_vec(&message(7, 300)).expect("JSON");
    line.push(b'\n');
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&raw)
            .expect("open");
        file.write_all(&line).expect("write");
        file.sync_data().expect("sync");
        samples.push(started.elapsed());
    }
    let raw_synced = median(samples);
    println!(
        "  append_messages (synced): {:.0} µs on the {} MB transcript, {:.0} µs on a 1-message one ({:.2}×); raw append + fdatasync {:.0} µs ({:.1}× baseline)",
        big_append,
        megabytes,
        micros(small),
        big_append / micros(small),
        micros(raw_synced),
        big_append / micros(raw_synced)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no options of its own.
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("build") => {
            let root = PathBuf::from(std::env::var_os(ROOT_ENV).expect("the root"));
            let megabytes: u64 = std::env::var(SIZE_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(64);
            build_session(&runtime(), &root, megabytes << 20);
            return;
        }
        Ok("resume") => {
            let root = PathBuf::from(std::env::var_os(ROOT_ENV).expect("the root"));
            resume_child(&root);
            return;
        }
        _ => {}
    }
    let dir = tempfile::tempdir().expect("a temporary folder");
    resume_bench(&runtime(), &dir.path().join("resume"));
}
