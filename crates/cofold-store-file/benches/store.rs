//! File store benchmarks, each against a named baseline measured in the same run:
//!
//! - P1 `append_event` into runs already holding 100, 1,000 and 100,000 events; baseline: a raw
//!   append of the same line with `std::fs::OpenOptions::append`. O(1) means the 100,000 figure
//!   stays within 1.5× of the 100 figure.
//! - P2 `open_and_list_1000`: open a store and list 1,000 sessions spread over 10 workspaces and
//!   `sessions/`; baseline: `std::fs::read` of the same 1,000 `session.json` files.
//! - P3 `list_messages_10k`: load a 10,000-message session (about 500 bytes a message); baseline:
//!   `std::fs::read` of `messages.jsonl` and a split on `\n`.
//!
//! The resume of a long session is the `resume` bench. Run with
//! `cargo bench -p cofold-store-file --bench store`.

#![allow(missing_docs)]

mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cofold_agents::message::Message;
use cofold_agents::store::{RunRef, SessionQuery, Store};

use common::{delta, median, message, micros, millis, new_session, open, run_record, runtime};

/// Writes `count` events straight into a run's log, as a long run would have left it.
fn fill_events(folder: &Path, run: &RunRef, count: u64) {
    let file = fs::File::create(folder.join("events.jsonl")).expect("create events.jsonl");
    let mut out = BufWriter::new(file);
    for seq in 1..=count {
        serde_json::to_writer(&mut out, &delta(run, seq)).expect("write");
        out.write_all(b"\n").expect("write");
    }
    out.flush().expect("flush");
}

fn p1_append(rt: &tokio::runtime::Runtime, root: &Path) {
    println!("P1 append_event (median of 2000 appends each)");
    let sizes = [100u64, 1_000, 100_000];
    let mut figures = Vec::new();
    for (at, &size) in sizes.iter().enumerate() {
        let session_id = format!("append-{size}");
        let run = RunRef::new(session_id.clone(), "r1");
        let folder = rt.block_on(async {
            let store = open(root);
            new_session(&store, &session_id, None).await;
            store
                .create_run(run_record(&session_id, "r1"))
                .await
                .expect("create_run");
            store
                .session_dir(&session_id)
                .await
                .expect("look up")
                .expect("exists")
                .join("runs/r1")
        });
        fill_events(&folder, &run, size);
        let store = open(root);
        let mut next = size + 1;
        // The first append reads the log once to learn the last seq; it is not what P1 measures.
        rt.block_on(store.append_event(&delta(&run, next)))
            .expect("warm-up append");
        next += 1;
        let mut samples = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let event = delta(&run, next);
            let started = Instant::now();
            rt.block_on(store.append_event(&event)).expect("append");
            samples.push(started.elapsed());
            next += 1;
        }
        let store_median = median(samples);
        // Baseline: the same line appended by hand.
        let raw = folder.join(format!("raw-{at}.jsonl"));
        fs::copy(folder.join("events.jsonl"), &raw).expect("copy the log");
        let mut line = serde_json::to_vec(&delta(&run, next)).expect("JSON");
        line.push(b'\n');
        let mut samples = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let started = Instant::now();
            let mut file = OpenOptions::new().append(true).open(&raw).expect("open");
            file.write_all(&line).expect("write");
            drop(file);
            samples.push(started.elapsed());
        }
        let raw_median = median(samples);
        println!(
            "  {size:>7} events: store {:>8.1} µs/append, raw append {:>6.1} µs ({:.1}× baseline)",
            micros(store_median),
            micros(raw_median),
            micros(store_median) / micros(raw_median)
        );
        figures.push(store_median);
    }
    println!(
        "  growth 100 → 100,000 events: {:.2}× (P1 asks ≤ 1.5×); 1,000 → 100,000: {:.2}×",
        micros(figures[2]) / micros(figures[0]),
        micros(figures[2]) / micros(figures[1])
    );
}

fn p2_list(rt: &tokio::runtime::Runtime, root: &Path) {
    println!("P2 open_and_list_1000 (median of 20)");
    let files: Vec<PathBuf> = rt.block_on(async {
        let store = open(root);
        let mut files = Vec::new();
        for index in 0..1000 {
            let workspace = match index % 11 {
                10 => None,
                slot => Some(format!("/home/bench/project-{slot}")),
            };
            let id = format!("session-{index:04}");
            new_session(&store, &id, workspace).await;
            files.push(
                store
                    .session_dir(&id)
                    .await
                    .expect("look up")
                    .expect("exists")
                    .join("session.json"),
            );
        }
        files
    });
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let store = open(root);
        let listed = rt
            .block_on(store.list_sessions(SessionQuery::default()))
            .expect("list");
        samples.push(started.elapsed());
        assert_eq!(listed.len(), 1000);
    }
    let store_median = median(samples);
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let mut bytes = 0;
        for file in &files {
            bytes += fs::read(file).expect("read").len();
        }
        samples.push(started.elapsed());
        assert!(bytes > 0);
    }
    let raw_median = median(samples);
    println!(
        "  store {:.2} ms (P2 asks < 200 ms), baseline fs::read × 1000 {:.2} ms ({:.1}× baseline)",
        millis(store_median),
        millis(raw_median),
        millis(store_median) / millis(raw_median)
    );
}

fn p3_messages(rt: &tokio::runtime::Runtime, root: &Path) {
    println!("P3 list_messages_10k (median of 20)");
    let path = rt.block_on(async {
        let store = open(root);
        new_session(&store, "long", None).await;
        assert!(store.claim_writer("long", "r1").await.expect("claim"));
        for batch in 0..100 {
            let messages: Vec<Message> = (0..100).map(|i| message(batch * 100 + i, 500)).collect();
            store
                .append_messages("long", "r1", &messages)
                .await
                .expect("append");
        }
        store
            .session_dir("long")
            .await
            .expect("look up")
            .expect("exists")
            .join("messages.jsonl")
    });
    let size = fs::metadata(&path).expect("stat").len();
    let store = open(root);
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let messages = rt
            .block_on(store.list_messages("long", None))
            .expect("list");
        samples.push(started.elapsed());
        assert_eq!(messages.len(), 10_000);
    }
    let store_median = median(samples);
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let bytes = fs::read(&path).expect("read");
        let lines = bytes
            .split(|byte| *byte == b'\n')
            .filter(|line| !line.is_empty())
            .count();
        samples.push(started.elapsed());
        assert_eq!(lines, 10_000);
    }
    let raw_median = median(samples);
    println!(
        "  {} bytes ({} bytes a message): store {:.2} ms (P3 asks < 100 ms), baseline read+split {:.2} ms ({:.1}× baseline)",
        size,
        size / 10_000,
        millis(store_median),
        millis(raw_median),
        millis(store_median) / millis(raw_median)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no options of its own.
    let dir = tempfile::tempdir().expect("a temporary folder");
    let rt = runtime();
    p1_append(&rt, &dir.path().join("append"));
    p2_list(&rt, &dir.path().join("list"));
    p3_messages(&rt, &dir.path().join("messages"));
}
