//! The store conformance suite (runtime cases, section K of docs/acceptance.md): one set of checks every [`Store`] must pass.
//!
//! A store crate runs it with [`store_conformance_tests!`](crate::store_conformance_tests), giving a
//! function that builds a fresh [`StoreFixture`] per test:
//!
//! ```ignore
//! fn fixture() -> StoreFixture { StoreFixture::new(MemoryStore::new()) }
//! cofold_agents::store_conformance_tests!(fixture);
//! ```

mod cuts;
mod kv;
mod runs;
mod sessions;

pub use cuts::*;
pub use kv::*;
pub use runs::*;
pub use sessions::*;

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use serde_json::json;

use crate::error::{AgentError, ErrorCode};
use crate::event::{Event, EventBody};
use crate::id::Timestamp;
use crate::message::Message;
use crate::status::Denial;
use crate::usage::ZERO_USAGE;

use super::{NewSession, RunRecord, RunRef, RunStatus, Store};

/// A store under test, and how to open a second handle over the same data.
pub struct StoreFixture {
    store: Arc<dyn Store>,
    reopen: Box<dyn Fn() -> Arc<dyn Store> + Send + Sync>,
    // Whatever must outlive the store, such as its temporary folder.
    _guard: Box<dyn Any + Send + Sync>,
}

impl StoreFixture {
    /// A fixture whose "second handle" is the same store (an in-memory store has no other).
    pub fn new(store: impl Store + 'static) -> Self {
        let store: Arc<dyn Store> = Arc::new(store);
        let again = Arc::clone(&store);
        Self {
            store,
            reopen: Box::new(move || Arc::clone(&again)),
            _guard: Box::new(()),
        }
    }

    /// A fixture with a function that opens a fresh handle over the same data, and a guard kept
    /// alive as long as the fixture (a temporary folder, say).
    pub fn with_reopen(
        store: Arc<dyn Store>,
        reopen: impl Fn() -> Arc<dyn Store> + Send + Sync + 'static,
        guard: impl Any + Send + Sync,
    ) -> Self {
        Self {
            store,
            reopen: Box::new(reopen),
            _guard: Box::new(guard),
        }
    }

    /// The store under test.
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// Another handle over the same data.
    pub fn reopen(&self) -> Arc<dyn Store> {
        (self.reopen)()
    }
}

/// Runs one async check to completion on a fresh current-thread runtime.
pub fn block_on<F: Future<Output = ()>>(check: F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime builds");
    runtime.block_on(check);
}

/// Expands to one `#[test]` per conformance check, each on a fresh fixture from `$make()`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@each $make;
            claim_and_append, last_message_id_follows_appends, session_without_workspace,
            workspace_is_kept, session_created_twice, list_sessions_filters_and_orders,
            delete_session_rules, heartbeat_rules, event_sequence, wrong_session_for_runs,
            run_created_twice, full_run_record_round_trips, run_updates, cost_is_absent_until_written,
            denials_default_and_update, list_runs_order_and_filter, steps_merge, reads_are_copies,
            truncate_seeded_session, truncate_refusals, fork_seeded_session, fork_refusals,
            requests_under_their_run, kv_scopes, kv_odd_keys, kv_values_are_copies, session_usage_rows
        );
    };
    (@each $make:expr; $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                let fixture = ($make)();
                $crate::store::conformance::block_on($crate::store::conformance::$check(&fixture));
            }
        )+
    };
}

// Helpers shared by the checks.

pub(crate) const AGENT: &str = "agent-a";

pub(crate) fn ok<T>(result: Result<T, AgentError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(err) => panic!("{what} failed: {} ({})", err.message, err.code),
    }
}

pub(crate) fn expect_code<T: Debug>(result: Result<T, AgentError>, code: ErrorCode, what: &str) {
    match result {
        Ok(value) => panic!("{what}: expected {code}, got Ok({value:?})"),
        Err(err) => assert_eq!(
            err.code, code,
            "{what}: expected {code}, got {} ({})",
            err.code, err.message
        ),
    }
}

pub(crate) fn message(id: &str) -> Message {
    Message::user_text(format!("text of {id}")).with_id(id)
}

pub(crate) async fn session(store: &dyn Store, id: &str, workspace: Option<&str>) {
    let new = NewSession {
        session_id: id.to_owned(),
        agent_id: AGENT.to_owned(),
        workspace: workspace.map(str::to_owned),
    };
    ok(store.create_session(new).await, "create_session");
}

pub(crate) fn run_record(session_id: &str, run_id: &str, status: RunStatus) -> RunRecord {
    let now = Timestamp::now();
    RunRecord {
        run_id: run_id.to_owned(),
        session_id: session_id.to_owned(),
        agent_id: AGENT.to_owned(),
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

pub(crate) async fn run(store: &dyn Store, session_id: &str, run_id: &str, status: RunStatus) {
    ok(
        store
            .create_run(run_record(session_id, run_id, status))
            .await,
        "create_run",
    );
}

/// Claims, appends the messages and releases, as one run would.
pub(crate) async fn write_as(store: &dyn Store, session_id: &str, run_id: &str, ids: &[&str]) {
    assert!(
        ok(store.claim_writer(session_id, run_id).await, "claim_writer"),
        "{run_id} could not claim"
    );
    let messages: Vec<Message> = ids.iter().map(|id| message(id)).collect();
    ok(
        store.append_messages(session_id, run_id, &messages).await,
        "append_messages",
    );
    ok(
        store.release_writer(session_id, run_id).await,
        "release_writer",
    );
}

pub(crate) fn event(run: &RunRef, seq: u64) -> Event {
    Event {
        seq,
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        agent_id: AGENT.to_owned(),
        at: Timestamp::now(),
        body: EventBody::ModelStarted {
            step: u32::try_from(seq).unwrap_or(u32::MAX),
        },
    }
}

pub(crate) fn denial(call_id: &str) -> Denial {
    serde_json::from_value(
        json!({ "callId": call_id, "name": "shell", "reason": "no", "by": "user" }),
    )
    .expect("a denial builds from its JSON form")
}

pub(crate) fn ids(messages: &[Message]) -> Vec<String> {
    messages.iter().map(|message| message.id.clone()).collect()
}
