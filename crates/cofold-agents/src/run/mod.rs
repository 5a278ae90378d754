//! The run loop: `run`, `resume` and `compact`, each returning a [`RunHandle`] at
//! once and doing the work on a spawned task.
//!
//! A run's task owns a `Runner`: the agent, the store, the counters and the handle's shared
//! state. Every event goes through `Runner::emit`, which stores it, then publishes it to the
//! handle, then shows it to the `on_event` observer, so the stored list and the live stream are
//! the same sequence.

mod batch;
mod command_check;
mod event_log;
mod finish;
mod guard;
mod handle;
mod hold;
mod model_step;
mod offer;
mod pause;
mod resume;
mod run_store;
mod settle;
mod setup;
mod steer;
mod summary;
mod timers;
mod tool_call;

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use timers::Timers;

use crate::agent::Agent;
use crate::error::{AgentError, ErrorCode};
use crate::event::{Denial, Event, EventBody, OutcomeKind, RunOutcome, StopReason};
use crate::id::{Timestamp, new_id};
use crate::message::{Input, Message, MessageSource, Part, Role};
use crate::model::Usage;
use crate::store::{RunRef, Store};
use crate::tool::{AbortReason, AbortSignal, KvScopes};
use crate::usage::{ZERO_USAGE, micros_to_usd};

pub(crate) use command_check::OpenRequest;
pub use handle::RunHandle;
pub(crate) use handle::TaskSide;
pub(crate) use hold::Hold;
pub use run_store::STORE_GRACE;
pub use settle::settle_dead_runs;

/// How often a running run refreshes its writer lease.
pub const HEARTBEAT_MS: u64 = 10_000;

/// The marker written at every abort exit, as its own `user`/`system` message.
pub const INTERRUPT_MARKER: &str = "[Request interrupted by user]";

/// The result text of every call an abort cut off.
pub const INTERRUPT_TOOL_TEXT: &str = "[Request interrupted by user for tool use]";

/// The reason a cancel at a pause denies the open request with.
pub const TURN_STOPPED: &str = "The turn was stopped";

/// What [`run`] needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The session to run in; created when absent.
    pub session_id: String,
    /// The person's input.
    pub input: Input,
    /// The workspace stored on a session this run creates (ignored for an existing session).
    pub workspace: Option<String>,
    /// The host's model reference (`<provider>/<model>`), stored on the run record as given.
    pub model: Option<String>,
    /// The input message's id (default a new id).
    pub message_id: Option<String>,
    /// An external abort: when it fires, the run is cancelled with reason `signal`.
    pub signal: Option<AbortSignal>,
}

impl RunOptions {
    /// Options for `input` in `session_id`, everything else unset.
    pub fn new(session_id: impl Into<String>, input: impl Into<Input>) -> RunOptions {
        RunOptions {
            session_id: session_id.into(),
            input: input.into(),
            workspace: None,
            model: None,
            message_id: None,
            signal: None,
        }
    }
}

/// What [`resume`] needs.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The run's session.
    pub session_id: String,
    /// The run to resume.
    pub run_id: String,
    /// Replay only the stored events after this seq (default: all of them).
    pub after_seq: Option<u64>,
}

impl ResumeOptions {
    /// Options to resume `run_id` of `session_id`, replaying every stored event.
    pub fn new(session_id: impl Into<String>, run_id: impl Into<String>) -> ResumeOptions {
        ResumeOptions {
            session_id: session_id.into(),
            run_id: run_id.into(),
            after_seq: None,
        }
    }
}

/// What [`compact`] needs.
#[derive(Debug, Clone, Default)]
pub struct CompactOptions {
    /// The session to summarize.
    pub session_id: String,
    /// The id of the ask message (default a new id).
    pub message_id: Option<String>,
    /// An external abort, as for [`run`].
    pub signal: Option<AbortSignal>,
}

/// Starts a run of `agent` and returns its handle at once. Must be called inside a tokio runtime.
pub fn run(agent: &Agent, opts: RunOptions) -> RunHandle {
    let run_id = new_id();
    let (handle, side) = handle::new_handle(
        run_id,
        opts.session_id.clone(),
        agent.id().to_owned(),
        0,
        false,
    );
    let runner = Runner::new(agent, side, RunKind::Turn);
    let shared = runner.side.shared.clone();
    guard::spawn(
        agent,
        shared,
        RunKind::Turn,
        runner.start(setup::Start::Run(opts)),
    );
    handle
}

/// Summarizes a session's history in a run of its own. Must be called inside a tokio runtime.
pub fn compact(agent: &Agent, opts: CompactOptions) -> RunHandle {
    let run_id = new_id();
    let (handle, side) = handle::new_handle(
        run_id,
        opts.session_id.clone(),
        agent.id().to_owned(),
        0,
        false,
    );
    let runner = Runner::new(agent, side, RunKind::Compact);
    let shared = runner.side.shared.clone();
    guard::spawn(
        agent,
        shared,
        RunKind::Compact,
        runner.start(setup::Start::Compact(opts)),
    );
    handle
}

/// Reattaches to a stored run: replays its events and, for a paused run, waits for a command.
/// Must be called inside a tokio runtime. The agent's time limit counts from the resume.
pub fn resume(agent: &Agent, opts: ResumeOptions) -> RunHandle {
    resume_with_signal(agent, opts, None)
}

/// [`resume`] with an external abort, as [`RunOptions::signal`] is for [`run`]: when `signal`
/// fires, the resumed run is cancelled with reason `signal` (at a pause, its request is denied
/// first).
pub fn resume_with_signal(
    agent: &Agent,
    opts: ResumeOptions,
    signal: Option<AbortSignal>,
) -> RunHandle {
    let after = opts.after_seq.unwrap_or(0);
    let (handle, side) = handle::new_handle(
        opts.run_id.clone(),
        opts.session_id.clone(),
        agent.id().to_owned(),
        after,
        true,
    );
    let runner = Runner::new(agent, side, RunKind::Turn);
    let shared = runner.side.shared.clone();
    guard::spawn(agent, shared, RunKind::Turn, runner.resume(opts, signal));
    handle
}

/// A failed outcome with an empty tally.
pub(crate) fn failed_outcome(error: AgentError) -> RunOutcome {
    RunOutcome {
        kind: OutcomeKind::Failed {
            error: error.info(),
        },
        usage: ZERO_USAGE,
        steps: 0,
        cost: None,
        denials: Vec::new(),
    }
}

/// Whether this run is a turn or a `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunKind {
    Turn,
    Compact,
}

/// Why the loop stopped going round.
pub(crate) enum Exit {
    /// Finish the run with this outcome (update the record, emit `run.finished`).
    Finish(OutcomeKind),
    /// Something failed; finish `failed` (or `superseded` for a lost claim).
    Error(AgentError),
    /// Settle the handle with this outcome without writing anything.
    Settle(RunOutcome),
}

impl From<AgentError> for Exit {
    fn from(error: AgentError) -> Self {
        Exit::Error(error)
    }
}

pub(crate) type Flow<T> = Result<T, Exit>;

/// The loop's counters.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    pub(crate) usage: Usage,
    pub(crate) steps: u32,
    /// Micro-dollars; `None` when the model has no pricing.
    pub(crate) cost: Option<u64>,
    pub(crate) denials: Vec<Denial>,
    /// The next step record's index, shared by model and tool steps.
    pub(crate) step_index: u32,
    /// Calls that reached an executor.
    pub(crate) tool_calls: u32,
}

/// The state of one run's task.
pub(crate) struct Runner {
    pub(crate) agent: Agent,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) side: TaskSide,
    pub(crate) kind: RunKind,
    pub(crate) tally: Tally,
    /// The prompt and tools the model is offered.
    pub(crate) offer: offer::Offer,
    pub(crate) workspace: Option<String>,
    pub(crate) input_message_id: String,
    /// The next event's seq.
    pub(crate) next_seq: u64,
    /// The heartbeat and the abort watchers.
    pub(crate) timers: Timers,
    pub(crate) hold: Option<Hold>,
    /// Whether this run holds the writer claim (so finishing releases it).
    pub(crate) claimed: bool,
    /// The calls of the batch in progress.
    pub(crate) batch: batch::OpenBatch,
}

impl Runner {
    pub(crate) fn new(agent: &Agent, side: TaskSide, kind: RunKind) -> Runner {
        let store: Arc<dyn Store> = Arc::new(run_store::RunStore::new(
            agent.store().clone(),
            side.shared.abort.signal(),
            side.shared.clone(),
        ));
        let cost = agent.model().pricing().map(|_| 0);
        Runner {
            agent: agent.clone(),
            store,
            side,
            kind,
            tally: Tally {
                usage: ZERO_USAGE,
                steps: 0,
                cost,
                denials: Vec::new(),
                step_index: 0,
                tool_calls: 0,
            },
            offer: offer::Offer::default(),
            workspace: None,
            input_message_id: String::new(),
            next_seq: 1,
            timers: Timers::default(),
            hold: None,
            claimed: false,
            batch: batch::OpenBatch::default(),
        }
    }

    pub(crate) fn run_id(&self) -> &str {
        &self.side.shared.run_id
    }

    pub(crate) fn session_id(&self) -> &str {
        &self.side.shared.session_id
    }

    pub(crate) fn run_ref(&self) -> RunRef {
        RunRef::new(self.session_id(), self.run_id())
    }

    /// A key identifying the agent's store instance, for the in-process hold.
    pub(crate) fn store_key(&self) -> usize {
        Arc::as_ptr(self.agent.store()) as *const () as usize
    }

    /// Runs `work` (a hook, the policy, a capability) under the note `what`, unless the run is
    /// stopped first: `None` then, and `work` is dropped where it stands.
    pub(crate) async fn unless_stopped<T>(
        &self,
        what: String,
        work: impl Future<Output = T>,
    ) -> Option<T> {
        let before = self.side.shared.set_doing(what);
        let signal = self.signal();
        let done = tokio::select! {
            biased;
            _ = signal.cancelled() => None,
            value = work => Some(value),
        };
        self.side.shared.set_doing(before);
        done
    }

    pub(crate) fn signal(&self) -> AbortSignal {
        self.side.shared.abort.signal()
    }

    pub(crate) fn kv(&self) -> KvScopes {
        KvScopes::new(
            self.store.clone(),
            self.agent.id(),
            self.agent.shared_namespace(),
            self.workspace.as_deref(),
        )
    }

    /// The outcome of `kind` with the current tally.
    pub(crate) fn outcome(&self, kind: OutcomeKind) -> RunOutcome {
        RunOutcome {
            kind,
            usage: self.tally.usage,
            steps: self.tally.steps,
            cost: self.tally.cost.map(micros_to_usd),
            denials: self.tally.denials.clone(),
        }
    }

    /// Stores an event, then publishes it, then shows it to the observer.
    pub(crate) async fn emit(&mut self, body: EventBody) -> Result<(), AgentError> {
        let event = Event {
            seq: self.next_seq,
            run_id: self.run_id().to_owned(),
            session_id: self.session_id().to_owned(),
            agent_id: self.agent.id().to_owned(),
            at: Timestamp::now(),
            body,
        };
        self.store.append_event(&event).await?;
        self.next_seq += 1;
        self.side.shared.publish(&event);
        if let Err(message) = self.agent.hooks().on_event(&event) {
            self.agent.warn(&format!(
                "onEvent observer threw on {}: {message}",
                event.type_name()
            ));
        }
        Ok(())
    }

    /// Appends messages to the transcript as this run, and notes which open calls they answer.
    pub(crate) async fn append(&mut self, messages: &[Message]) -> Result<(), AgentError> {
        self.store
            .append_messages(self.session_id(), self.run_id(), messages)
            .await?;
        self.batch.answered(messages);
        Ok(())
    }

    /// A message written by the loop now.
    pub(crate) fn message(role: Role, source: MessageSource, parts: Vec<Part>) -> Message {
        Message {
            id: new_id(),
            role,
            parts,
            source,
            created_at: Timestamp::now(),
            summarizes: None,
        }
    }

    /// Starts (or restarts) the heartbeat.
    pub(crate) fn start_heartbeat(&mut self) {
        // The agent's own store: the beat runs beside the task and must not touch its notes.
        let store = self.agent.store().clone();
        let (session, run) = (self.session_id().to_owned(), self.run_id().to_owned());
        self.timers.start_heartbeat(store, session, run);
    }

    pub(crate) fn stop_heartbeat(&mut self) {
        self.timers.stop_heartbeat();
    }

    /// The outcome of the abort that fired.
    pub(crate) fn abort_outcome(&self) -> OutcomeKind {
        match self.signal().reason() {
            Some(AbortReason::Timeout) => OutcomeKind::Stopped {
                reason: StopReason::Timeout,
            },
            Some(AbortReason::Cancel { reason }) => OutcomeKind::Cancelled { reason },
            None => OutcomeKind::Cancelled { reason: None },
        }
    }

    /// Writes the interrupt marker and exits with the abort outcome.
    pub(crate) async fn interrupt(&mut self) -> Exit {
        let marker = Runner::message(
            Role::User,
            MessageSource::System,
            vec![Part::text(INTERRUPT_MARKER)],
        );
        match self.append(&[marker]).await {
            Ok(()) => Exit::Finish(self.abort_outcome()),
            Err(error) => Exit::Error(error),
        }
    }
}

/// Whether a store error means another process holds the run now.
pub(crate) fn is_takeover(error: &AgentError) -> bool {
    matches!(error.code, ErrorCode::SeqGap | ErrorCode::WriterMismatch)
}

/// The error summary kept on a failed model step.
pub(crate) fn error_detail(error: &AgentError) -> Value {
    serde_json::to_value(error.info()).unwrap_or(Value::Null)
}

/// The outcome status of a run record's stored `run.finished`, if any.
pub(crate) fn stored_outcome(events: &[Event]) -> Option<RunOutcome> {
    events
        .iter()
        .rev()
        .find_map(|e| e.finished_outcome().cloned())
}
