//! What the store benchmarks share: a runtime, records, events and messages, timing.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use cofold_agents::event::{Event, EventBody};
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{NewSession, RunRecord, RunRef, RunStatus, Store};
use cofold_agents::usage::ZERO_USAGE;
use cofold_store_file::{FileStore, FileStoreOptions};

pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

pub fn open(root: &Path) -> FileStore {
    FileStore::open(root, FileStoreOptions::default()).expect("open the store")
}

pub fn run_record(session_id: &str, run_id: &str) -> RunRecord {
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

pub fn delta(run: &RunRef, seq: u64) -> Event {
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
pub fn message(index: usize, size: usize) -> Message {
    let text = "lorem ipsum dolor sit amet ".repeat(size / 27 + 1);
    Message::user_text(&text[..size.saturating_sub(150)]).with_id(format!("m{index}"))
}

pub async fn new_session(store: &FileStore, id: &str, workspace: Option<String>) {
    let new = NewSession {
        session_id: id.into(),
        agent_id: "bench".into(),
        workspace,
    };
    store.create_session(new).await.expect("create_session");
}
