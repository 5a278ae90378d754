//! A run paused on an approval, the way the answer and resume tests start, and the commands they
//! send to it.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::run_support::*;

use cofold_agents::agent::Agent;
use cofold_agents::event::Command;
use cofold_agents::run::{ResumeOptions, RunHandle, RunOptions, resume, run};
use cofold_agents::store::MemoryStore;
use cofold_agents::testing::{FakeModel, FakeStep};

pub fn approve(request_id: &str) -> Command {
    Command::Approve {
        request_id: request_id.into(),
        input: None,
        always_approve: None,
    }
}

pub fn reopen(agent: &Agent, run_id: &str, after_seq: Option<u64>) -> RunHandle {
    resume(
        agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: run_id.into(),
            after_seq,
        },
    )
}

pub struct Paused {
    pub model: FakeModel,
    pub store: Arc<MemoryStore>,
    pub runs: Arc<Mutex<Vec<Value>>>,
    pub agent: Agent,
    pub handle: RunHandle,
    pub request_id: String,
}

/// A run paused on `rm` in session `s`.
pub async fn paused_rm() -> Paused {
    paused_rm_then(FakeStep::text("done")).await
}

/// A run paused on `rm`, whose model answers `last` after the tool.
pub async fn paused_rm_then(last: FakeStep) -> Paused {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        last,
    ]);
    let store = memory();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let agent = builder(&model, store.clone())
        .tool(rm_tool(runs.clone()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    Paused {
        model,
        store,
        runs,
        agent,
        handle,
        request_id,
    }
}

/// The same agent over another store instance onto the same data: another process.
pub fn other_process(p: &Paused) -> Agent {
    let other = FaultStore::over(p.store.clone());
    builder(&p.model, other)
        .tool(rm_tool(p.runs.clone()))
        .build()
        .expect("agent")
}
