//! One chat ↔ one cofold conversation: turns held behind the running run,
//! cancel and close, steering, and the task that maps a run's events to actions.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ahpd_sdk::{SessionContext, TurnRequest};
use cofold_agents::run::{RunHandle, run};
use serde_json::Value;

use crate::actions as act;
use crate::build::AgentCore;
use crate::edits::OpenEdits;
use crate::models::Copapo;
use crate::turns::{Carry, TurnMapper};

mod backend;
mod follow;
mod mcp_gate;
mod prepare;
mod reopen;
pub use crate::asks::{NOT_JSON, UNANSWERED};
pub use reopen::REPLACED;
pub(crate) use reopen::{Paused, read_paused};

/// Reason a stopped turn's run is cancelled with.
pub const STOP_REASON: &str = "the client stopped the turn";
/// Reason a closed session's run is cancelled with.
pub const CLOSE_REASON: &str = "the session closed";

struct Running {
    handle: Option<RunHandle>,
    /// Whether the run's model takes images (a steer's attachments are converted for it).
    images: bool,
    shown: Arc<AtomicBool>,
    steers: Arc<Mutex<VecDeque<String>>>,
    done: tokio::sync::watch::Receiver<bool>,
}

/// The last turn whose run ended in this process, kept so a failed one can be tried again.
struct Finished {
    turn: TurnRequest,
    /// The conversation's last message once the run ended: where a fork or rewind cuts.
    last_message: Option<String>,
    resumable: bool,
    carry: Carry,
}

/// What the task following one run holds.
struct Follow {
    handle: RunHandle,
    mapper: TurnMapper,
    shown: Arc<AtomicBool>,
    edits: Option<OpenEdits>,
    /// Open approval requests → their call ids (a reopened run starts with its pending one).
    requests: HashMap<String, String>,
    /// The run was reattached after a restart rather than started.
    reopened: bool,
    /// Whether the run's model takes images.
    images: bool,
}

/// A turn waiting to run, with the counters of an earlier attempt when it is a resume.
type Waiting = (TurnRequest, Arc<AtomicBool>, Option<Carry>);

#[derive(Default)]
struct State {
    closed: bool,
    running: Option<Running>,
    /// A store cut (resume) is going; turns wait for it.
    cutting: bool,
    waiting: VecDeque<Waiting>,
    last: Option<Finished>,
    /// Cut points of the turns this process watched end.
    cut_points: HashMap<String, String>,
    /// A cut the store refused: the next turn fails with it.
    refused_cut: Option<String>,
    /// The conversation's run that waits on a person, until the host's first call decides
    /// whether it is reopened or replaced.
    reopen: Option<Paused>,
    /// The reopened run's request put to the host again, while its run lasts: a turn handed
    /// before anyone answered it takes its place as it would have before the reopen.
    reasked: Option<reopen::Reasked>,
    /// The run of a stopped process settled when the session opened, until it is said to the
    /// clients watching or a turn comes first.
    settled: Option<Paused>,
    /// Turns a client stopped → the duration it gave, kept with the turn once its run ends.
    stops: HashMap<String, i64>,
}

/// Shared by the session object and its run tasks.
pub(crate) struct Core {
    agent: Arc<AgentCore>,
    ctx: SessionContext,
    backend_id: String,
    /// The session's id: its chats share one scratch folder under it.
    session_id: String,
    workspace: PathBuf,
    copapo: Copapo,
    state: Mutex<State>,
    settings: Mutex<serde_json::Map<String, Value>>,
    /// The session's MCP servers, when its agent uses any.
    mcp: std::sync::OnceLock<Arc<crate::mcp::SessionMcp>>,
    /// Turns held until the session's MCP servers have started.
    mcp_held: Mutex<Option<VecDeque<TurnRequest>>>,
    /// The person's answers about instruction files outside the served folders.
    project: crate::project::SessionProject,
    /// The session's `_meta` as this chat last said it.
    meta: Mutex<ahp_types::common::JsonObject>,
    /// What the session's turns changed in its folder.
    changes: Arc<crate::changes::SessionChanges>,
}

/// The cofold side of one AHP chat.
pub struct CofoldSession {
    core: Arc<Core>,
}

impl CofoldSession {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        agent: Arc<AgentCore>,
        ctx: SessionContext,
        backend_id: String,
        session_id: String,
        workspace: PathBuf,
        copapo: Copapo,
        settings: serde_json::Map<String, Value>,
        paused: Option<Paused>,
        refused_fork: Option<String>,
    ) -> CofoldSession {
        let changes = Arc::new(crate::changes::SessionChanges::open(
            agent.store_root.as_deref(),
            &backend_id,
            &workspace,
            ctx.clone(),
        ));
        if changes.recorded() {
            changes.advertise();
        }
        CofoldSession {
            core: Arc::new(Core {
                changes,
                agent,
                ctx,
                backend_id,
                session_id,
                workspace,
                copapo,
                state: Mutex::new(State {
                    reopen: paused,
                    refused_cut: refused_fork,
                    ..State::default()
                }),
                settings: Mutex::new(settings),
                mcp: std::sync::OnceLock::new(),
                mcp_held: Mutex::new(None),
                project: crate::project::SessionProject::default(),
                meta: Mutex::new(ahp_types::common::JsonObject::new()),
            }),
        }
    }

    /// Gives the session its MCP servers (once, when it is created).
    pub(crate) fn attach_mcp(&self, mcp: Arc<crate::mcp::SessionMcp>) {
        let _ = self.core.mcp.set(mcp);
    }

    /// Settles a run left `running` by a process that is gone; called when a stored conversation
    /// is opened, before it takes any turn.
    pub(crate) async fn settle_dead(&self) {
        self.core.settle_dead().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic in another holder leaves the data as it was; carry on with it.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Core {
    /// Starts a turn now, or holds it behind the running run.
    fn begin(self: &Arc<Self>, turn: TurnRequest) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        // A run paused before a restart that nothing reopened yet, or reopened with its request
        // still unanswered: this turn takes its place.
        self.reopen(&mut state, Some(&turn));
        state.settled = None;
        if let Some(reasked) = state.reasked.take() {
            self.supersede(reasked, &turn.turn_id);
        }
        // Only the newest turn is shown: everything in front goes quiet.
        if let Some(running) = &state.running {
            running.shown.store(false, Ordering::SeqCst);
        }
        for (_, shown, _) in &state.waiting {
            shown.store(false, Ordering::SeqCst);
        }
        let shown = Arc::new(AtomicBool::new(true));
        if state.running.is_some() || state.cutting {
            state.waiting.push_back((turn, shown, None));
            return;
        }
        self.start(&mut state, turn, shown, None);
    }

    fn start(
        self: &Arc<Self>,
        state: &mut State,
        turn: TurnRequest,
        shown: Arc<AtomicBool>,
        carry: Option<Carry>,
    ) {
        let prepared = match state.refused_cut.take() {
            Some(sentence) => Err(sentence),
            None => self.prepare(&turn),
        };
        match prepared {
            Ok(prepared) => {
                let handle = run(&prepared.built.agent, prepared.options);
                let images = prepared.built.images;
                let mut mapper = prepared.mapper;
                if let Some(counters) = carry {
                    mapper.continue_from(counters);
                }
                self.launch(
                    state,
                    turn,
                    Follow {
                        handle,
                        mapper,
                        shown,
                        edits: prepared.edits,
                        requests: HashMap::new(),
                        reopened: false,
                        images,
                    },
                );
            }
            Err(sentence) => {
                if shown.load(Ordering::SeqCst) {
                    self.ctx
                        .emit(act::turn_error(&turn.turn_id, 0, &sentence, false));
                }
                // Nothing runs; the next waiting turn may go at once. A turn that never ran
                // carries no resume.
                state.running = None;
                state.last = None;
                if let Some((next, shown, carry)) = state.waiting.pop_front() {
                    self.start(state, next, shown, carry);
                }
            }
        }
    }

    /// Follows a started (or reattached) run on a task of its own until it ends, then lets the
    /// next waiting turn go.
    fn launch(self: &Arc<Self>, state: &mut State, turn: TurnRequest, follow: Follow) {
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        let steers = Arc::new(Mutex::new(VecDeque::new()));
        let handle = follow.handle.clone();
        let shown = follow.shown.clone();
        let images = follow.images;
        let task_core = self.clone();
        let task_steers = steers.clone();
        // A reattached run's turn was begun (and kept) by the process that started it.
        let header = (!follow.reopened).then(|| crate::turn_facts::Header {
            started_at: turn.started_at.clone(),
            message: turn.message.clone(),
        });
        tokio::spawn(async move {
            let store = task_core.agent.store.clone();
            if let Some(header) = &header {
                crate::turn_facts::started(
                    store.as_ref(),
                    &task_core.backend_id,
                    &turn.turn_id,
                    header,
                )
                .await;
            }
            let (resumable, carry, ending) = task_core
                .clone()
                .follow(turn.turn_id.clone(), follow, task_steers)
                .await;
            let last_message = task_core
                .agent
                .store
                .list_messages(&task_core.backend_id, Some(1))
                .await
                .ok()
                .and_then(|m| m.last().map(|m| m.id.clone()));
            let stop = lock(&task_core.state).stops.remove(&turn.turn_id);
            if let Some(duration) = stop {
                crate::turn_facts::stopped(
                    store.as_ref(),
                    &task_core.backend_id,
                    &turn.turn_id,
                    duration,
                )
                .await;
            }
            let _ = done_tx.send(true);
            task_core.finished(
                Finished {
                    turn,
                    last_message,
                    resumable,
                    carry,
                },
                ending,
            );
        });
        state.running = Some(Running {
            handle: Some(handle),
            images,
            shown,
            steers,
            done: done_rx,
        });
    }

    /// A run ended: the next waiting turn starts.
    fn finished(
        self: &Arc<Self>,
        finished: Finished,
        ending: Vec<ahp_types::actions::StateAction>,
    ) {
        let mut state = lock(&self.state);
        // Said under the lock, after nothing else of this run and before the next turn starts.
        for action in ending {
            self.ctx.emit(action);
        }
        state.running = None;
        state.reasked = None;
        if let Some(last) = &finished.last_message {
            state
                .cut_points
                .insert(finished.turn.turn_id.clone(), last.clone());
        }
        state.last = Some(finished);
        if state.closed {
            state.waiting.clear();
            return;
        }
        self.next_waiting(&mut state);
    }

    /// Cuts the conversation through `through`, or drops it all, before the next turn runs.
    async fn cut(self: Arc<Self>, through: Option<String>) {
        let store = &self.agent.store;
        let result = match &through {
            Some(id) => store.truncate(&self.backend_id, id).await.map(|_| ()),
            None => match store.delete_session(&self.backend_id).await {
                Err(e) if e.code != cofold_agents::error::ErrorCode::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        let mut state = lock(&self.state);
        state.cutting = false;
        state.last = None;
        if let Err(e) = result {
            state.refused_cut = Some(format!("{}: {}", self.agent.id, e.message));
        }
        if state.running.is_none() && !state.closed {
            self.next_waiting(&mut state);
        }
    }

    fn next_waiting(self: &Arc<Self>, state: &mut State) {
        if let Some((next, shown, carry)) = state.waiting.pop_front() {
            self.start(state, next, shown, carry);
        }
    }

    /// Cuts the store through the message before the failed turn's prompt (or drops the
    /// conversation when the prompt was its first message), then runs the prompt again.
    async fn resume(self: Arc<Self>, finished: Finished) {
        let store = &self.agent.store;
        let cut = async {
            let messages = store.list_messages(&self.backend_id, None).await?;
            let at = messages.iter().position(|m| m.id == finished.turn.turn_id);
            match at {
                Some(0) | None
                    if messages
                        .first()
                        .is_none_or(|m| m.id == finished.turn.turn_id) =>
                {
                    match store.delete_session(&self.backend_id).await {
                        Err(e) if e.code != cofold_agents::error::ErrorCode::NotFound => Err(e),
                        _ => Ok(()),
                    }
                }
                Some(i) => store
                    .truncate(&self.backend_id, &messages[i - 1].id)
                    .await
                    .map(|_| ()),
                None => Ok(()),
            }
        }
        .await;
        let mut state = lock(&self.state);
        state.cutting = false;
        if state.closed {
            return;
        }
        let shown = Arc::new(AtomicBool::new(state.waiting.is_empty()));
        match cut {
            Ok(()) => state
                .waiting
                .push_front((finished.turn, shown, Some(finished.carry))),
            Err(e) => {
                if shown.load(Ordering::SeqCst) {
                    self.ctx.emit(act::turn_error(
                        &finished.turn.turn_id,
                        0,
                        &e.message,
                        false,
                    ));
                }
            }
        }
        if state.running.is_none() {
            self.next_waiting(&mut state);
        }
    }

    /// The host's first call other than a turn reopens a paused run.
    fn reopen_pending(self: &Arc<Self>) {
        let mut state = lock(&self.state);
        if state.reopen.is_some() && !state.closed {
            self.reopen(&mut state, None);
        }
    }

    /// A client watches the chat: a paused run whose request is on record is reopened and
    /// asked again. One whose pause was never announced has nothing to ask; it stays held for
    /// the first call, so a turn can still take its place rather than wait behind it.
    fn reopen_watched(self: &Arc<Self>) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        self.show_settled(&mut state);
        if state.reopen.as_ref().is_some_and(Paused::asks) {
            self.reopen(&mut state, None);
        }
    }

    fn cancel_all(&self, reason: &str) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.end_all(reason, false)
    }

    /// Like [`Core::cancel_all`], except that a run waiting on a person is detached rather
    /// than cancelled: it writes nothing more, so the store keeps it `awaiting` with its
    /// request open, and the next process's session reopens it and asks again. A run doing
    /// anything else is cancelled with `reason`.
    fn let_go_all(&self, reason: &str) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.end_all(reason, true)
    }

    fn end_all(
        &self,
        reason: &str,
        keep_paused: bool,
    ) -> Option<tokio::sync::watch::Receiver<bool>> {
        let mut state = lock(&self.state);
        state.waiting.clear();
        let running = state.running.as_ref()?;
        running.shown.store(false, Ordering::SeqCst);
        if let Some(handle) = &running.handle {
            // `detach` succeeds only at a pause; a run past it (an answer being applied, a
            // tool running) is working and is cancelled like any other.
            let let_go = keep_paused && handle.detach();
            if !let_go {
                handle.cancel(Some(reason.to_owned()));
            }
        }
        Some(running.done.clone())
    }
}
