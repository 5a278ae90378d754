//! The run handle: the caller's side of a run.
//!
//! The handle and the run's task share one small state behind a mutex: the events published so
//! far, the status, the open request (if any), the queued steers and, once settled, the outcome.
//! A `watch` channel carries a change counter so streams and waiters wake without polling.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::error::{AgentError, ErrorCode};
use crate::event::{Command, Event, EventBody, RunOutcome, RunStatus};
use crate::id::Timestamp;
use crate::message::Part;
use crate::tool::{AbortController, AbortReason, Tool};

use super::command_check::{OpenRequest, check_command, steer_parts};
use super::event_log::{Log, Names};

/// What the run's task receives from a submit: the command and where to report how it went.
pub(crate) type Envelope = (Command, oneshot::Sender<Result<(), AgentError>>);

/// A steer waiting for the next model step, with its submit's reply.
pub(crate) struct QueuedSteer {
    pub(crate) parts: Vec<Part>,
    pub(crate) done: oneshot::Sender<Result<(), AgentError>>,
}

/// The request a paused run waits on, as the handle needs it to check a command.
enum Phase {
    /// No request is open.
    Running,
    /// A resume has not yet read its run; commands wait for it.
    Attaching,
    /// A request is open and commands are accepted.
    Paused(OpenRequest),
    /// A command for this request is being applied.
    Resolving(String),
}

struct State {
    events: Log,
    /// The seq after which this handle's events start (a resume's `after_seq`).
    after_seq: u64,
    status: RunStatus,
    phase: Phase,
    steers: VecDeque<QueuedSteer>,
    outcome: Option<RunOutcome>,
}

pub(crate) struct Shared {
    pub(crate) run_id: String,
    pub(crate) session_id: String,
    pub(crate) agent_id: String,
    pub(crate) abort: AbortController,
    /// Fired by `detach()`; the task leaves its pause when it sees it.
    pub(crate) detach: CancellationToken,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    commands: mpsc::UnboundedSender<Envelope>,
    /// What the run's task is doing now (a tool, a hook, the store), named if it panics there.
    doing: Mutex<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state itself stays consistent
        // because every change is a few plain assignments.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes what the task is doing now and returns the previous note.
    pub(crate) fn set_doing(&self, what: String) -> String {
        let mut doing = self.doing.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *doing, what)
    }

    /// What the task was last doing.
    pub(crate) fn doing(&self) -> String {
        self.doing.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn names(&self) -> Names<'_> {
        Names {
            run_id: &self.run_id,
            session_id: &self.session_id,
            agent_id: &self.agent_id,
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Adds a persisted event to the handle's log and wakes its readers.
    pub(crate) fn publish(&self, event: &Event) {
        self.lock().events.push(&self.names(), event);
        self.bump();
    }

    /// Installs the command acceptor for an open request and reports `awaiting`.
    pub(crate) fn open_request(&self, request: OpenRequest) {
        let mut state = self.lock();
        state.phase = Phase::Paused(request);
        state.status = RunStatus::Awaiting;
        drop(state);
        self.bump();
    }

    /// Marks the request as being resolved (so no second command is taken) before the task
    /// applies a cancel's automatic deny.
    pub(crate) fn begin_resolving(&self, request_id: &str) {
        self.lock().phase = Phase::Resolving(request_id.to_owned());
        self.bump();
    }

    /// Back to running with no open request.
    pub(crate) fn resume_running(&self) {
        let mut state = self.lock();
        state.phase = Phase::Running;
        state.status = RunStatus::Running;
        drop(state);
        self.bump();
    }

    /// Leaves the attaching phase of a resume with no open request (the run needed none).
    pub(crate) fn attached_without_request(&self) {
        let mut state = self.lock();
        if matches!(state.phase, Phase::Attaching) {
            state.phase = Phase::Running;
        }
        drop(state);
        self.bump();
    }

    /// Takes every queued steer, in order.
    pub(crate) fn take_steers(&self) -> Vec<QueuedSteer> {
        self.lock().steers.drain(..).collect()
    }

    /// Settles the handle: synthesizes a final `run.finished` when the list does not already end
    /// with one of the same status, refuses queued steers, and wakes every waiter.
    pub(crate) fn close(&self, outcome: RunOutcome) {
        let mut state = self.lock();
        if state.outcome.is_some() {
            return;
        }
        let needs_final = state.events.last_outcome_status() != Some(outcome.status());
        if needs_final {
            let seq = state.events.last_seq().unwrap_or(state.after_seq) + 1;
            let names = self.names();
            state.events.push(
                &names,
                &Event {
                    seq,
                    run_id: self.run_id.clone(),
                    session_id: self.session_id.clone(),
                    agent_id: self.agent_id.clone(),
                    at: Timestamp::now(),
                    body: EventBody::RunFinished {
                        outcome: outcome.clone(),
                    },
                },
            );
        }
        state.status = outcome.status();
        state.outcome = Some(outcome);
        state.phase = Phase::Running;
        let steers: Vec<_> = state.steers.drain(..).collect();
        drop(state);
        for steer in steers {
            let _ = steer.done.send(Err(not_running(&self.run_id)));
        }
        self.bump();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().outcome.is_some()
    }
}

fn not_running(run_id: &str) -> AgentError {
    AgentError::new(
        ErrorCode::NotRunning,
        format!("run {run_id} is not running"),
    )
}

/// The task's end of a handle: the shared state plus the command receiver.
pub(crate) struct TaskSide {
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: mpsc::UnboundedReceiver<Envelope>,
}

/// A task side for `shared` whose command channel is already closed: for settling a run whose
/// task is gone (its commands are refused `not_running`).
pub(crate) fn detached_side(shared: Arc<Shared>) -> TaskSide {
    let (_, commands) = mpsc::unbounded_channel();
    TaskSide { shared, commands }
}

/// Builds a handle and the task's side of it. `attaching` is true for a resume, whose commands
/// wait until it has read its run.
pub(crate) fn new_handle(
    run_id: String,
    session_id: String,
    agent_id: String,
    after_seq: u64,
    attaching: bool,
) -> (RunHandle, TaskSide) {
    let (changed, _) = watch::channel(0);
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        run_id,
        session_id,
        agent_id,
        abort: AbortController::new(),
        detach: CancellationToken::new(),
        state: Mutex::new(State {
            events: Log::default(),
            after_seq,
            status: RunStatus::Running,
            phase: if attaching {
                Phase::Attaching
            } else {
                Phase::Running
            },
            steers: VecDeque::new(),
            outcome: None,
        }),
        changed,
        commands: tx,
        doing: Mutex::new("the run loop".to_owned()),
    });
    (
        RunHandle {
            shared: shared.clone(),
        },
        TaskSide {
            shared,
            commands: rx,
        },
    )
}

/// The caller's handle on a run: its events, its outcome, its status, and the commands it takes.
///
/// Cheap to clone; every clone sees the same run.
#[derive(Clone)]
pub struct RunHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.shared.run_id)
            .field("session_id", &self.shared.session_id)
            .field("status", &self.status())
            .finish()
    }
}

impl RunHandle {
    /// The run's id (minted before anything ran).
    pub fn run_id(&self) -> &str {
        &self.shared.run_id
    }

    /// The session the run belongs to.
    pub fn session_id(&self) -> &str {
        &self.shared.session_id
    }

    /// Every event the handle holds from its first (seq 1, or `after_seq + 1` for a resume),
    /// then the live ones. Ends after the final `run.finished`; a pause's `run.finished` is
    /// mid-stream. Each call starts again from the first event.
    pub fn events(&self) -> impl Stream<Item = Event> + Send + 'static {
        let shared = self.shared.clone();
        let rx = shared.changed.subscribe();
        futures::stream::unfold((shared, rx, 0usize), |(shared, mut rx, index)| async move {
            loop {
                rx.borrow_and_update();
                {
                    let state = shared.lock();
                    if let Some(event) = state.events.get(&shared.names(), index) {
                        drop(state);
                        return Some((event, (shared, rx, index + 1)));
                    }
                    if state.outcome.is_some() {
                        return None;
                    }
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        })
    }

    /// The outcome once the run really ends (never at a pause). A detached handle resolves with
    /// the stored outcome, which may be `awaiting`.
    pub async fn outcome(&self) -> RunOutcome {
        let mut rx = self.shared.changed.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(outcome) = self.shared.lock().outcome.clone() {
                return outcome;
            }
            if rx.changed().await.is_err() {
                // The sender lives in `shared`, which we hold; this cannot happen, but waiting
                // forever would be the wrong answer if it did.
                return self.shared.lock().outcome.clone().unwrap_or_else(|| {
                    crate::run::failed_outcome(AgentError::internal(
                        "the run's handle lost its task",
                    ))
                });
            }
        }
    }

    /// `running`; `awaiting` while waiting at a pause; then the outcome's status.
    pub fn status(&self) -> RunStatus {
        self.shared.lock().status
    }

    /// Stops the run with `cancelled` (or, at a pause, denies the request with
    /// `The turn was stopped` first).
    pub fn cancel(&self, reason: Option<String>) {
        if !self.shared.is_closed() {
            self.shared.abort.abort(AbortReason::Cancel { reason });
        }
    }

    /// Leaves a pause without answering: the handle closes with the stored outcome and the
    /// request stays open for a later `resume`. Only while waiting at a pause; otherwise does
    /// nothing and returns false.
    pub fn detach(&self) -> bool {
        let mut state = self.shared.lock();
        if state.outcome.is_some() || !matches!(state.phase, Phase::Paused(_)) {
            return false;
        }
        state.phase = Phase::Running;
        drop(state);
        self.shared.detach.cancel();
        true
    }

    /// The tool of the call waiting at `request_id`, for describing the call to the person
    /// before they answer (see [`Tool::preview`]). `None` once the request is answered, when the
    /// run is not waiting at it, or when the resumed run no longer offers the tool. A resumed
    /// run still reading its records is waited for.
    pub async fn paused_tool(&self, request_id: &str) -> Option<Tool> {
        let mut rx = self.shared.changed.subscribe();
        loop {
            rx.borrow_and_update();
            {
                let state = self.shared.lock();
                if state.outcome.is_some() {
                    return None;
                }
                match &state.phase {
                    Phase::Paused(open) if open.request_id == request_id => {
                        return open.tool.clone();
                    }
                    Phase::Attaching => {}
                    _ => return None,
                }
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Sends a command. `steer` resolves once the message is in the transcript; `approve`,
    /// `deny` and `answer` once the resolution is persisted. Any command to a closed handle
    /// fails `not_running`.
    pub async fn submit(&self, command: Command) -> Result<(), AgentError> {
        if self.shared.is_closed() {
            return Err(not_running(&self.shared.run_id));
        }
        match command {
            Command::Cancel { reason } => {
                self.cancel(reason);
                Ok(())
            }
            Command::Steer { text, parts } => self.steer(text, parts).await,
            command => self.resolve(command).await,
        }
    }

    async fn steer(&self, text: String, parts: Option<Vec<Part>>) -> Result<(), AgentError> {
        self.queue_steer(text, parts)?.await
    }

    /// Queues a steering message before returning, so the next model step finds it however
    /// tasks are scheduled; the future returned resolves once the message is written into the
    /// conversation, or fails when the run ends first. `submit` with [`Command::Steer`] does the
    /// same in one step for a caller that need not know when the message is queued.
    pub fn queue_steer(
        &self,
        text: String,
        parts: Option<Vec<Part>>,
    ) -> Result<
        impl std::future::Future<Output = Result<(), AgentError>> + Send + 'static,
        AgentError,
    > {
        if self.shared.is_closed() {
            return Err(not_running(&self.shared.run_id));
        }
        let message_parts = steer_parts(text, parts)?;
        let (done, wait) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if state.outcome.is_some() {
                return Err(not_running(&self.shared.run_id));
            }
            state.steers.push_back(QueuedSteer {
                parts: message_parts,
                done,
            });
        }
        let run_id = self.shared.run_id.clone();
        Ok(async move { wait.await.unwrap_or_else(|_| Err(not_running(&run_id))) })
    }

    async fn resolve(&self, command: Command) -> Result<(), AgentError> {
        let mut rx = self.shared.changed.subscribe();
        let wait = loop {
            rx.borrow_and_update();
            if let Some(ready) = self.try_send(&command) {
                break ready?;
            }
            if rx.changed().await.is_err() {
                return Err(not_running(&self.shared.run_id));
            }
        };
        wait.await
            .unwrap_or_else(|_| Err(not_running(&self.shared.run_id)))
    }

    /// Checks the command against the open request and hands it to the task; `None` while a
    /// resume is still attaching.
    fn try_send(
        &self,
        command: &Command,
    ) -> Option<Result<oneshot::Receiver<Result<(), AgentError>>, AgentError>> {
        let mut state = self.shared.lock();
        if state.outcome.is_some() {
            return Some(Err(not_running(&self.shared.run_id)));
        }
        let open = match &state.phase {
            Phase::Attaching => return None,
            Phase::Running => {
                return Some(Err(AgentError::not_found(format!(
                    "run {} has no open request",
                    self.shared.run_id
                ))));
            }
            Phase::Resolving(id) => {
                return Some(Err(AgentError::not_found(format!(
                    "request {id} is already being resolved"
                ))));
            }
            Phase::Paused(open) => open,
        };
        if let Err(error) = check_command(open, command) {
            return Some(Err(error));
        }
        state.phase = Phase::Resolving(open.request_id.clone());
        let (reply, wait) = oneshot::channel();
        if self.shared.commands.send((command.clone(), reply)).is_err() {
            return Some(Err(not_running(&self.shared.run_id)));
        }
        Some(Ok(wait))
    }
}
