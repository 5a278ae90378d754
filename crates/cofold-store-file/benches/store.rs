//! File store benchmarks (harness §13), each against a named baseline measured in the same run:
//!
//! - P1 `append_event` into runs already holding 100, 1,000 and 100,000 events; baseline: a raw
//!   append of the same line with `std::fs::OpenOptions::append`. O(1) means the 100,000 figure
//!   stays within 1.5× of the 100 figure.
//! - P2 `open_and_list_1000`: open a store and list 1,000 sessions spread over 10 workspaces and
//!   `sessions/`; baseline: `std::fs::read` of the same 1,000 `session.json` files.
//! - P3 `list_messages_10k`: load a 10,000-message session (about 500 bytes a message); baseline:
//!   `std::fs::read` of `messages.jsonl` and a split on `\n`.
//! - Resume of a 1 GB log (set `COFOLD_BENCH_HUGE=1`): a 1 GB event log and a 1 GB transcript; the
//!   resume reads the run, replays the tail of the events, appends the next one and loads a window
//!   of messages. Peak resident memory (VmHWM from /proc/self/status) is reported against the
//!   64 MB + window budget.
//!
//! Run with `cargo bench -p cofold-store-file --bench store`.

#![allow(missing_docs)]

use std::fs::{self, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cofold_agents::event::{Event, EventBody};
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{NewSession, RunRecord, RunRef, RunStatus, SessionQuery, Store};
use cofold_agents::usage::ZERO_USAGE;
use cofold_store_file::{FileStore, FileStoreOptions};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn open(root: &Path) -> FileStore {
    FileStore::open(root, FileStoreOptions::default()).expect("open the store")
}

fn run_record(session_id: &str, run_id: &str) -> RunRecord {
    let now = Timestamp::now();
    RunRecord {
        run_id: run_id.into(),
        session_id: session_id.into(),
        agent_id: "bench".into(),
        model: Some("p/m".into()),
        status: RunStatus::Running,
        created_at: now.clone(),
        updated_at: now,
        pending_request_id: None,
        usage: ZERO_USAGE,
        cost: None,
        steps: 0,
        denials: Vec::new(),
        input_message_id: None,
        last_message_id: None,
    }
}

fn delta(run: &RunRef, seq: u64) -> Event {
    Event {
        seq,
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        agent_id: "bench".into(),
        at: Timestamp::now(),
        body: EventBody::ModelDelta {
            step: 1,
            kind: cofold_agents::event::DeltaKind::Text,
            text: "a streamed fragment of an answer".into(),
        },
    }
}

/// A message of about `size` bytes once serialized.
fn message(index: usize, size: usize) -> Message {
    let text = "lorem ipsum dolor sit amet ".repeat(size / 27 + 1);
    Message::user_text(&text[..size.saturating_sub(150)]).with_id(format!("m{index}"))
}

async fn new_session(store: &FileStore, id: &str, workspace: Option<String>) {
    let new = NewSession {
        session_id: id.into(),
        agent_id: "bench".into(),
        workspace,
    };
    store.create_session(new).await.expect("create_session");
}

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

/// A line of /proc/self/status in kB.
fn status_kb(field: &str) -> u64 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn huge_resume(rt: &tokio::runtime::Runtime, root: &Path) {
    const GIB: u64 = 1 << 30;
    const WINDOW: usize = 200;
    println!("Resume of a 1 GB log");
    let run = RunRef::new("huge", "r1");
    let folder = rt.block_on(async {
        let store = open(root);
        new_session(&store, "huge", Some("/home/bench/huge".into())).await;
        store
            .create_run(run_record("huge", "r1"))
            .await
            .expect("create_run");
        store
            .session_dir("huge")
            .await
            .expect("look up")
            .expect("exists")
    });
    let started = Instant::now();
    let mut events = 0u64;
    {
        let mut out =
            BufWriter::new(fs::File::create(folder.join("runs/r1/events.jsonl")).expect("create"));
        let mut written = 0u64;
        while written < GIB {
            events += 1;
            let line = serde_json::to_vec(&delta(&run, events)).expect("JSON");
            out.write_all(&line).expect("write");
            out.write_all(b"\n").expect("write");
            written += line.len() as u64 + 1;
        }
        out.flush().expect("flush");
    }
    let mut messages = 0usize;
    {
        let mut out =
            BufWriter::new(fs::File::create(folder.join("messages.jsonl")).expect("create"));
        let mut written = 0u64;
        let template = message(0, 2000);
        while written < GIB {
            messages += 1;
            let mut one = template.clone();
            one.id = format!("m{messages}");
            let line = serde_json::to_vec(&one).expect("JSON");
            out.write_all(&line).expect("write");
            out.write_all(b"\n").expect("write");
            written += line.len() as u64 + 1;
        }
        out.flush().expect("flush");
    }
    println!(
        "  wrote {events} events and {messages} messages (1 GiB each) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Start the peak count from here: what generating the files used is not the resume's.
    let reset = fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = status_kb("VmRSS:");
    let started = Instant::now();
    let (replayed, window_bytes) = rt.block_on(async {
        let store = open(root);
        let record = store
            .get_run(&run)
            .await
            .expect("get_run")
            .expect("the run");
        assert_eq!(record.status, RunStatus::Running);
        let tail = store
            .list_events(&run, Some(events - 10))
            .await
            .expect("replay the tail");
        store
            .append_event(&delta(&run, events + 1))
            .await
            .expect("append after the log");
        let window = store
            .list_messages("huge", Some(WINDOW))
            .await
            .expect("the window");
        assert_eq!(window.len(), WINDOW);
        let bytes: usize = window
            .iter()
            .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
            .sum();
        (tail.len(), bytes)
    });
    let elapsed = started.elapsed();
    let peak = status_kb("VmHWM:");
    let budget_kb = 64 * 1024 + (window_bytes as u64).div_ceil(1024);
    println!(
        "  resume: replayed {replayed} events, appended 1, loaded a {WINDOW}-message window ({} kB) in {:.2} s",
        window_bytes / 1024,
        elapsed.as_secs_f64()
    );
    println!(
        "  resident memory: {} kB before, peak {} kB{} → growth {} kB; budget 64 MB + window = {} kB ({:.2}× budget)",
        before,
        peak,
        if reset {
            ""
        } else {
            " (peak since start: clear_refs unavailable)"
        },
        peak.saturating_sub(before),
        budget_kb,
        peak as f64 / budget_kb as f64
    );
}

fn main() {
    // `cargo bench` passes `--bench`; this binary takes no options of its own.
    let dir = tempfile::tempdir().expect("a temporary folder");
    let rt = runtime();
    if std::env::var_os("COFOLD_BENCH_HUGE").is_some() {
        huge_resume(&rt, &dir.path().join("huge"));
    } else {
        println!(
            "Resume of a 1 GB log: skipped (set COFOLD_BENCH_HUGE=1; writes 2 GiB to the temp folder)"
        );
    }
    p1_append(&rt, &dir.path().join("append"));
    p2_list(&rt, &dir.path().join("list"));
    p3_messages(&rt, &dir.path().join("messages"));
}
