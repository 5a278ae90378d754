//! Shared helpers: a store in a temporary folder, records and events.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use cofold_agents::event::{Event, EventBody};
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{NewSession, RunRecord, RunRef, RunStatus, Store};
use cofold_agents::usage::ZERO_USAGE;
use cofold_store_file::{FileStore, FileStoreOptions};
use tempfile::TempDir;

pub struct Disk {
    pub dir: TempDir,
    pub store: FileStore,
}

impl Disk {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store =
            FileStore::open(dir.path(), FileStoreOptions::default()).expect("open the store");
        Self { dir, store }
    }

    /// A second instance over the same folder, with its own caches.
    pub fn reopen(&self) -> FileStore {
        FileStore::open(self.dir.path(), FileStoreOptions::default()).expect("open the store again")
    }

    pub async fn session_dir(&self, session_id: &str) -> PathBuf {
        self.store
            .session_dir(session_id)
            .await
            .expect("look up")
            .expect("the session exists")
    }
}

pub async fn session(store: &dyn Store, id: &str, workspace: Option<&str>) {
    let new = NewSession {
        session_id: id.into(),
        agent_id: "agent-a".into(),
        workspace: workspace.map(Into::into),
    };
    store.create_session(new).await.expect("create_session");
}

pub fn run_record(session_id: &str, run_id: &str, status: RunStatus) -> RunRecord {
    let now = Timestamp::now();
    RunRecord {
        run_id: run_id.into(),
        session_id: session_id.into(),
        agent_id: "agent-a".into(),
        model: None,
        status,
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

pub async fn run(store: &dyn Store, session_id: &str, run_id: &str, status: RunStatus) {
    store
        .create_run(run_record(session_id, run_id, status))
        .await
        .expect("create_run");
}

pub fn event(run: &RunRef, seq: u64) -> Event {
    Event {
        seq,
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        agent_id: "agent-a".into(),
        at: Timestamp::now(),
        body: EventBody::ModelStarted { step: 1 },
    }
}

pub fn message(id: &str) -> Message {
    Message::user_text(format!("text of {id}")).with_id(id)
}

pub fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

/// Every file under `root` with its bytes.
pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in fs::read_dir(&folder).expect("list") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.insert(
                    path.strip_prefix(root).expect("inside").to_path_buf(),
                    fs::read(&path).expect("read"),
                );
            }
        }
    }
    files
}
