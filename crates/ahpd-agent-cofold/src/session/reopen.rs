//! Reopening a run that was waiting on a person when the daemon stopped.
//!
//! `create` reads the conversation's newest run; when it waits on a person, the session holds it
//! until the host's first call. A turn handed first takes its place: the run is reattached
//! unseen, its request denied with `The turn was replaced by a newer message` (a notice on the new
//! turn says so), the run is cancelled should it ask anything more (nobody would see the ask),
//! and the turn runs once that run has ended. Any other first call reopens it: the turn is said again with its
//! parts replayed from the stored events, the run is reattached with cofold's `resume()` after
//! the last stored event, and the pending request is put to the host once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::state::{Message, MessageKind, MessageOrigin, ModelSelection};
use ahpd_sdk::TurnRequest;
use cofold_agents::event::{Command, Event, EventBody};
use cofold_agents::run::{ResumeOptions, resume, settle_dead_runs};
use cofold_agents::store::{RunRecord, RunRef, RunStatus, Store};
use futures::StreamExt;

use super::{Core, Follow, State};
use crate::actions as act;

/// What the newest run's request is answered with when a turn takes its place.
pub const REPLACED: &str = "The turn was replaced by a newer message";

/// A run of the conversation that waits on a person, as the store holds it.
pub(crate) struct Paused {
    run_id: String,
    turn_id: String,
    text: String,
    started_at: String,
    model: Option<String>,
    events: Vec<Event>,
    /// The request the run record says it waits on: the events may lack it when the daemon
    /// stopped between recording the pause and announcing it.
    request_id: Option<String>,
}

impl Paused {
    /// The turn the run answers, as the host is handed turns.
    fn turn(&self, settings: serde_json::Map<String, serde_json::Value>) -> TurnRequest {
        TurnRequest {
            turn_id: self.turn_id.clone(),
            started_at: self.started_at.clone(),
            message: Message {
                text: self.text.clone(),
                origin: MessageOrigin {
                    kind: MessageKind::User,
                },
                attachments: None,
                model: self
                    .model
                    .clone()
                    .map(|id| ModelSelection { id, config: None }),
                agent: None,
                meta: None,
            },
            queued_message_id: None,
            settings,
            client_id: None,
        }
    }

    /// The request still open at the end of the stored events.
    fn pending(&self) -> Option<&EventBody> {
        let mut answered = HashSet::new();
        for event in self.events.iter().rev() {
            match &event.body {
                EventBody::ApprovalResolved { request_id, .. }
                | EventBody::InputResolved { request_id, .. }
                | EventBody::InputDeclined { request_id, .. } => {
                    answered.insert(request_id.clone());
                }
                EventBody::ApprovalRequested { request_id, .. }
                | EventBody::InputRequested { request_id, .. }
                    if !answered.contains(request_id) =>
                {
                    return Some(&event.body);
                }
                _ => {}
            }
        }
        None
    }

    /// Whether the stored events name the request the run waits on, so it can be asked again.
    pub(crate) fn asks(&self) -> bool {
        self.pending().is_some()
    }

    fn last_seq(&self) -> u64 {
        self.events.last().map_or(0, |e| e.seq)
    }
}

/// The conversation's newest run when it waits on a person. A store that cannot say is read as
/// having none: the session then works as if nothing were paused.
pub(crate) async fn read_paused(store: &dyn Store, session_id: &str) -> Option<Paused> {
    let runs = store.list_runs(session_id, None).await.ok()?;
    let newest = runs.into_iter().max_by(|a, b| {
        a.created_at
            .to_string()
            .cmp(&b.created_at.to_string())
            .then(a.updated_at.to_string().cmp(&b.updated_at.to_string()))
    })?;
    if newest.status != RunStatus::Awaiting {
        return None;
    }
    read_run(store, session_id, newest).await
}

/// A run of the conversation with its turn's input and its stored events.
async fn read_run(store: &dyn Store, session_id: &str, newest: RunRecord) -> Option<Paused> {
    let turn_id = newest.input_message_id.clone()?;
    let run = RunRef {
        session_id: session_id.to_owned(),
        run_id: newest.run_id.clone(),
    };
    let events = store.list_events(&run, None).await.ok()?;
    let messages = store.list_messages(session_id, None).await.ok()?;
    let input = messages.iter().find(|m| m.id == turn_id)?;
    Some(Paused {
        request_id: newest.pending_request_id.clone(),
        run_id: newest.run_id,
        turn_id,
        text: cofold_agents::message::text_of(input),
        started_at: input.created_at.to_string(),
        model: newest.model,
        events,
    })
}

impl Core {
    /// Settles the conversation's run whose process is gone (its open calls answered, its status
    /// `interrupted`, the claim released), so a session read back after a crash is sound the moment
    /// it is opened rather than when the stale claim ages out. A paused run is left to [`reopen`];
    /// a holder that may be alive is never touched.
    ///
    /// [`reopen`]: Core::reopen
    pub(super) async fn settle_dead(self: &Arc<Self>) {
        let store = self.agent.store.clone();
        let dead = match store.dead_writer(&self.backend_id).await {
            Ok(Some(run_id)) => run_id,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(session = %self.backend_id, "cannot tell whether the writer is alive: {}", error.message);
                return;
            }
        };
        // The settling run needs the conversation's agent (its model's pricing, its tools); it
        // is built as for a turn with the session's settings and no input.
        let turn = TurnRequest {
            turn_id: cofold_agents::id::new_id(),
            started_at: cofold_agents::id::Timestamp::now().to_string(),
            message: Message {
                text: String::new(),
                origin: MessageOrigin {
                    kind: MessageKind::User,
                },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            queued_message_id: None,
            settings: super::lock(&self.settings).clone(),
            client_id: None,
        };
        let prepared = match self.prepare(&turn) {
            Ok(prepared) => prepared,
            Err(sentence) => {
                tracing::warn!(session = %self.backend_id, "the run of a stopped process is left unsettled: {sentence}");
                return;
            }
        };
        match settle_dead_runs(&prepared.built.agent, &self.backend_id).await {
            Ok(Some(_)) => {
                // Kept to be said again to the clients watching (see `show_settled`).
                let run = RunRef {
                    session_id: self.backend_id.clone(),
                    run_id: dead,
                };
                if let Ok(Some(record)) = store.get_run(&run).await {
                    let settled = read_run(store.as_ref(), &self.backend_id, record).await;
                    super::lock(&self.state).settled = settled;
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(session = %self.backend_id, "the run of a stopped process is left unsettled: {}", error.message);
            }
        }
    }

    /// Says the turn of a run settled when the session opened, as it ended: started again with
    /// its parts rebuilt from the stored events and ended with the run's failure (the daemon
    /// stopped). Done for the clients the host opened the session for; a turn handed first
    /// drops it, since the host then shows that turn as the running one, and the settled turn
    /// reads back from the store as failed the next time the session opens.
    pub(super) fn show_settled(self: &Arc<Self>, state: &mut State) {
        let Some(settled) = state.settled.take() else {
            return;
        };
        let turn = settled.turn(super::lock(&self.settings).clone());
        let mut mapper = match self.prepare(&turn) {
            Ok(prepared) => prepared.mapper,
            Err(sentence) => {
                self.ctx.emit(started(&settled));
                self.ctx
                    .emit(act::turn_error(&turn.turn_id, 0, &sentence, false));
                return;
            }
        };
        self.ctx.emit(started(&settled));
        for event in &settled.events {
            for action in mapper.map(event) {
                self.ctx.emit(action);
            }
        }
        self.ctx.emit(act::activity(None));
    }

    /// Reattaches the paused run, if the session still holds one. `replaced_by` is the turn the
    /// host handed first, which takes the run's place; without it the run's turn is said again.
    pub(super) fn reopen(self: &Arc<Self>, state: &mut State, replaced_by: Option<&TurnRequest>) {
        let Some(paused) = state.reopen.take() else {
            return;
        };
        let settings = super::lock(&self.settings).clone();
        let turn = paused.turn(settings);
        let shown = replaced_by.is_none();
        let prepared = match self.prepare(&turn) {
            Ok(prepared) => prepared,
            Err(sentence) => {
                // Nothing can reattach the run; say why on its turn when it is the one shown.
                if shown {
                    self.ctx.emit(started(&paused));
                    self.ctx
                        .emit(act::turn_error(&turn.turn_id, 0, &sentence, false));
                }
                return;
            }
        };
        let handle = resume(
            &prepared.built.agent,
            ResumeOptions {
                session_id: self.backend_id.clone(),
                run_id: paused.run_id.clone(),
                after_seq: Some(paused.last_seq()),
            },
        );
        let images = prepared.built.images;
        let mut mapper = prepared.mapper;
        if shown {
            self.ctx.emit(started(&paused));
        }
        let mut requests = self.replay(&paused, &mut mapper, shown);
        let pending = paused.pending().cloned();
        if shown {
            self.ctx.emit(act::activity(Some("Waiting on you")));
        }
        match (&pending, replaced_by) {
            (Some(body), None) => {
                state.reasked = Some(Reasked {
                    handle: handle.clone(),
                    request_id: request_of(body).unwrap_or_default(),
                    what: what_of(body),
                    turn_id: turn.turn_id.clone(),
                });
                self.raise(
                    &handle,
                    body,
                    &mapper,
                    &turn.turn_id,
                    &mut requests,
                    &prepared.edits,
                );
            }
            (pending, Some(replacing)) => {
                self.replaced_on_reopen(&paused, pending.as_ref(), &handle, replacing);
            }
            (None, None) => {}
        }
        self.launch(
            state,
            turn,
            Follow {
                handle,
                mapper,
                shown: Arc::new(AtomicBool::new(shown)),
                edits: prepared.edits,
                requests,
                reopened: true,
                images,
            },
        );
    }

    /// Rebuilds the turn's parts from the stored events (said only when `shown`); the
    /// approvals still open among them, request → call (their asks were put before the
    /// restart).
    fn replay(
        &self,
        paused: &Paused,
        mapper: &mut crate::turns::TurnMapper,
        shown: bool,
    ) -> HashMap<String, String> {
        let mut requests = HashMap::new();
        for event in &paused.events {
            match &event.body {
                EventBody::ApprovalRequested {
                    request_id,
                    call_id,
                    ..
                } => {
                    requests.insert(request_id.clone(), call_id.clone());
                }
                EventBody::ApprovalResolved { request_id, .. } => {
                    requests.remove(request_id);
                }
                _ => {}
            }
            let actions = mapper.map(event);
            if shown {
                for action in actions {
                    self.ctx.emit(action);
                }
            }
        }
        requests
    }

    /// A turn took the reopened run's place: the run's request is declined, and the new turn
    /// says what became of it.
    fn replaced_on_reopen(
        self: &Arc<Self>,
        paused: &Paused,
        pending: Option<&EventBody>,
        handle: &cofold_agents::run::RunHandle,
        replacing: &TurnRequest,
    ) {
        let (request_id, what) = match pending.and_then(request_of) {
            Some(request_id) => (
                request_id,
                pending.map_or_else(|| "The request".to_owned(), what_of),
            ),
            None => (
                paused.request_id.clone().unwrap_or_default(),
                "The request".to_owned(),
            ),
        };
        // Said on the new turn, so the person knows what became of the request.
        self.ctx
            .emit(act::notice(&replacing.turn_id, &declined_notice(&what)));
        self.supersede(
            Reasked {
                handle: handle.clone(),
                request_id,
                what,
                turn_id: String::new(),
            },
            "",
        );
    }
}

/// A reopened run's request put to the host (its turn shown), or held unseen for a turn that
/// takes its place.
pub(crate) struct Reasked {
    handle: cofold_agents::run::RunHandle,
    request_id: String,
    /// How the notice names the request.
    what: String,
    /// The reopened turn when it is shown; empty when it never was.
    turn_id: String,
}

impl Core {
    /// Declines the reopened run's request for the turn `replacing` (whose notice is said here
    /// when the reopened turn was shown; otherwise the caller has said it), and cancels the run
    /// should it ask anything more. A request the host answered meanwhile is left as answered:
    /// the turn then waits behind the run like any turn handed to a busy chat.
    pub(super) fn supersede(self: &Arc<Self>, reasked: Reasked, replacing: &str) {
        let Reasked {
            handle,
            request_id,
            what,
            turn_id,
        } = reasked;
        let core = self.clone();
        let replacing = replacing.to_owned();
        // `resume()` takes the answer before it has finished reading the run.
        tokio::spawn(async move {
            let mut events = Box::pin(handle.events());
            let deny = Command::Deny {
                request_id: request_id.clone(),
                reason: Some(REPLACED.to_owned()),
            };
            match handle.submit(deny).await {
                Ok(()) if !turn_id.is_empty() => {
                    core.ctx
                        .emit(act::notice(&replacing, &declined_notice(&what)));
                    // The shown turn ends for the host, which withdraws the request it still
                    // shows; the run goes on unseen.
                    core.ctx.emit(StateAction::ChatTurnCancelled(
                        ahp_types::actions::ChatTurnCancelledAction {
                            turn_id,
                            duration: 0,
                            meta: None,
                        },
                    ));
                }
                Ok(()) => {}
                Err(error) if !turn_id.is_empty() => {
                    // Answered meanwhile: nothing was declined, and the run goes on as asked.
                    tracing::debug!("the reopened request was answered first: {}", error.message);
                    return;
                }
                Err(error) => {
                    tracing::warn!("the replaced run's request stays open: {}", error.message);
                }
            }
            // The run may go on to answer, but not to ask again: unseen, its next approval or
            // question would wait on nobody while the newer turn waits behind it. It is
            // cancelled at such an ask.
            while let Some(event) = events.next().await {
                if let EventBody::ApprovalRequested {
                    request_id: asked, ..
                }
                | EventBody::InputRequested {
                    request_id: asked, ..
                } = &event.body
                    && *asked != request_id
                {
                    handle.cancel(Some(REPLACED.to_owned()));
                    break;
                }
            }
        });
    }
}

/// The request an ask event puts.
fn request_of(body: &EventBody) -> Option<String> {
    match body {
        EventBody::ApprovalRequested { request_id, .. }
        | EventBody::InputRequested { request_id, .. } => Some(request_id.clone()),
        _ => None,
    }
}

/// How a notice names the request an ask event puts.
fn what_of(body: &EventBody) -> String {
    match body {
        EventBody::ApprovalRequested { name, .. } => format!("The approval of \"{name}\""),
        EventBody::InputRequested { .. } => "The question".to_owned(),
        _ => "The request".to_owned(),
    }
}

fn declined_notice(what: &str) -> String {
    format!(
        "{what} left waiting when the daemon stopped was declined: a newer message replaced it."
    )
}

/// The reopened turn said again, as it started.
fn started(paused: &Paused) -> StateAction {
    StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: paused.turn_id.clone(),
        started_at: paused.started_at.clone(),
        message: paused.turn(serde_json::Map::new()).message,
        queued_message_id: None,
        meta: None,
    })
}
