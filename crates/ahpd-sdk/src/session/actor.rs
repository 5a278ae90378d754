//! A session's task: owns the session state, its chats' states and backends, and every parked
//! approval, question and client-tool call. Every change goes through a reducer first; only a
//! change is published.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use ahp::reducers::apply_action_to_session;
use ahp_types::actions::*;
use ahp_types::common::JsonObject;
use ahp_types::state::*;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::agent::{Agent, Session, TurnRequest};
use crate::error::RpcError;
use crate::inner::HostInner;
use crate::session::asks::Asks;
use crate::session::coalesce::Coalescer;
use crate::session::context::{BackendMsg, SessionContext, SharedSessionView};
use crate::session::held::Held;
use crate::session::reduce::{changed, chat_changed, stream_target};
use crate::session::turns::TurnBook;
use crate::session::{ConnRef, SessionMsg};

pub(crate) enum Backend {
    None,
    Creating(Vec<TurnRequest>),
    Ready(Box<dyn Session>),
}

pub(crate) struct Chat {
    pub uri: Arc<str>,
    pub state: ChatState,
    pub backend: Backend,
    pub ctx: SessionContext,
    pub backend_id: String,
    /// Whether the backend must be opened on a stored conversation.
    pub resume: bool,
    /// Older transcript turns not loaded into state, oldest first.
    pub older: Vec<Turn>,
    /// Cursors this chat issued, and whether each was used.
    pub cursors: HashMap<String, bool>,
    pub coalescer: Coalescer,
    /// The turns the running one replaced, and the stray streams already warned about.
    pub turns: TurnBook,
    /// The changesets of this chat someone watches, as the reducer keeps them.
    pub changesets: HashMap<String, ahp_types::state::ChangesetState>,
    /// Changeset requests waiting for the backend to open.
    pub changeset_waiting: Vec<crate::session::held::Waiting>,
}

/// Who waits for `createSession` to finish: the reply, the creator, its progress token.
pub(crate) type StartReply = (
    oneshot::Sender<Result<(), RpcError>>,
    ConnRef,
    Option<String>,
);

pub(crate) struct Actor {
    pub inner: Arc<HostInner>,
    pub uri: Arc<str>,
    pub agent: Arc<dyn Agent>,
    pub state: SessionState,
    pub chats: HashMap<Arc<str>, Chat>,
    pub default_chat: Arc<str>,
    pub view: Arc<SharedSessionView>,
    pub backend_tx: mpsc::UnboundedSender<BackendMsg>,
    pub self_tx: mpsc::WeakSender<SessionMsg>,
    /// Approvals, questions and client-tool calls a backend waits on.
    pub asks: Asks,
    pub title_locked: bool,
    pub created_at: String,
    pub working_directory: Option<std::path::PathBuf>,
    pub start_reply: Option<StartReply>,
    /// The `permissionMode` in force before VS Code's `autoApprove` first moved it.
    pub saved_permission_mode: Option<Value>,
    pub catalogue: Option<SessionSummary>,
    pub closed: bool,
    /// Dispatches waiting for a backend to open, in arrival order.
    pub parked: Held,
}

/// Reasonable upper bound on waiting for a backend's `close`.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

impl Actor {
    pub(crate) fn new_chat(
        &self,
        uri: &str,
        state: ChatState,
        backend_id: String,
        resume: bool,
    ) -> Chat {
        let uri: Arc<str> = Arc::from(uri);
        Chat {
            ctx: SessionContext::new(
                self.backend_tx.clone(),
                self.uri.to_string(),
                uri.clone(),
                self.view.clone(),
            ),
            uri,
            state,
            backend: Backend::None,
            backend_id,
            resume,
            older: Vec::new(),
            cursors: HashMap::new(),
            coalescer: Coalescer::new(self.inner.options.delta_window),
            turns: TurnBook::default(),
            changesets: HashMap::new(),
            changeset_waiting: Vec::new(),
        }
    }

    pub(crate) async fn run(
        mut self,
        mut rx: mpsc::Receiver<SessionMsg>,
        mut backend_rx: mpsc::UnboundedReceiver<BackendMsg>,
    ) {
        loop {
            let deadline = self
                .chats
                .values()
                .filter_map(|c| c.coalescer.deadline())
                .min();
            tokio::select! {
                biased;
                Some(msg) = backend_rx.recv() => self.on_backend(msg),
                msg = rx.recv() => match msg {
                    Some(msg) => {
                        if self.on_msg(msg).await {
                            break;
                        }
                    }
                    None => break,
                },
                _ = sleep_until_opt(deadline), if deadline.is_some() => self.flush_due(),
            }
        }
    }

    /// Handle one mailbox message; `true` ends the task.
    async fn on_msg(&mut self, msg: SessionMsg) -> bool {
        match msg {
            SessionMsg::Start {
                conn,
                active_client,
                progress,
                reply,
            } => self.start(conn, active_client, progress, reply),
            SessionMsg::Subscribe {
                conn,
                channel,
                reply,
            } if crate::changesets::owner_chat(&channel).is_some() => {
                self.subscribe_changeset(conn, channel, reply)
            }
            SessionMsg::Subscribe {
                conn,
                channel,
                reply,
            } => {
                // The subscriber gave up waiting (its request's time limit): it must not stay
                // subscribed to a channel it has no snapshot of.
                if reply.is_closed() {
                    return false;
                }
                if reply.send(self.subscribe(conn, &channel)).is_err() {
                    self.inner.hub.unsubscribe(conn, &channel);
                }
            }
            SessionMsg::ChangesetOperation { params, reply } => {
                self.changeset_operation(*params, reply)
            }
            SessionMsg::Snapshot { channel, reply } => {
                self.flush_all();
                let seq = self.inner.hub.current_seq();
                let _ = reply.send(self.snapshot_at(&channel, seq));
            }
            SessionMsg::Dispatch {
                conn,
                channel,
                client_seq,
                action,
            } => self.dispatch(conn, &channel, client_seq, action),
            SessionMsg::Unsubscribed { client_id } | SessionMsg::ClientGone { client_id } => {
                self.client_left(&client_id)
            }
            SessionMsg::CreateChat {
                conn,
                params,
                reply,
            } => self.create_chat(conn, *params, reply),
            SessionMsg::DisposeChat { channel, reply } => {
                let r = self.dispose_chat(&channel).await;
                let _ = reply.send(r);
            }
            SessionMsg::FetchTurns {
                channel,
                cursor,
                reply,
            } => {
                let _ = reply.send(self.fetch_turns(&channel, cursor));
            }
            SessionMsg::Completions { params, reply } => {
                let items = match self.chats.get(params.channel.as_str()).map(|c| &c.backend) {
                    Some(Backend::Ready(s)) => {
                        s.completions(&params.kind, &params.text, params.offset)
                    }
                    _ => Vec::new(),
                };
                warn_unanchored_completions(&items);
                let _ = reply.send(items);
            }
            SessionMsg::Dispose { reply } => {
                self.dispose().await;
                let _ = reply.send(());
                return true;
            }
            SessionMsg::Unload { reply } => {
                let done = self.unload().await;
                let _ = reply.send(done);
                return done;
            }
            SessionMsg::OpenBackend => self.open_backend(),
            SessionMsg::BackendReady { chat, result } => self.backend_ready(chat, result),
            SessionMsg::ClientToolTimeout { entry } => self.client_tool_timeout(&entry),
        }
        false
    }

    // ── state changes ───────────────────────────────────────────────────────────────────

    /// Apply a session action; publish it when it changed the state.
    pub(crate) fn apply_session(
        &mut self,
        action: &StateAction,
        origin: Option<&ActionOrigin>,
    ) -> bool {
        match changed(&mut self.state, action, apply_action_to_session) {
            Ok(true) => {
                self.inner.hub.publish(&self.uri, action, origin);
                self.sync_catalogue();
                if Self::remembers(action) {
                    self.remember();
                }
                true
            }
            Ok(false) => false,
            Err(outcome) => {
                tracing::debug!(session = %self.uri, ?outcome, "a session action changed nothing");
                false
            }
        }
    }

    /// Apply a chat action (after flushing coalesced deltas); publish it when it changed.
    pub(crate) fn apply_chat(
        &mut self,
        chat: &Arc<str>,
        action: &StateAction,
        origin: Option<&ActionOrigin>,
    ) -> bool {
        self.flush_chat(chat);
        self.apply_chat_now(chat, action, origin)
    }

    pub(crate) fn apply_chat_now(
        &mut self,
        chat: &Arc<str>,
        action: &StateAction,
        origin: Option<&ActionOrigin>,
    ) -> bool {
        let Some(slot) = self.chats.get_mut(chat) else {
            return false;
        };
        match chat_changed(&mut slot.state, action) {
            Ok(true) => {
                self.inner.hub.publish(chat, action, origin);
                // Streaming text never changes a chat's title, status or activity.
                if !matches!(
                    action,
                    StateAction::ChatDelta(_)
                        | StateAction::ChatReasoning(_)
                        | StateAction::ChatToolCallDelta(_)
                ) {
                    self.sync_chat_summary(chat);
                }
                true
            }
            Ok(false) => false,
            Err(outcome) => {
                match stream_target(action) {
                    // A backend streaming into a part it never created: said once
                    // per part and turn, since a backend still streaming after a cancel would
                    // otherwise log a line per delta.
                    Some((turn, part)) if slot.turns.first_stray(turn, part) => {
                        tracing::warn!(chat = %chat, turn, part, ?outcome, "a streamed action matched no part of the running turn and was not published; later ones for this part are not logged");
                    }
                    Some(_) => {}
                    None => {
                        tracing::debug!(chat = %chat, ?outcome, "a chat action changed nothing and was not published");
                    }
                }
                false
            }
        }
    }

    // ── backend calls, contained ────────────────────────────────────────────────────────

    /// Run a backend member; a panic ends the chat's turn with an internal error and drops
    /// the backend so it is reopened on the next turn.
    pub(crate) fn with_backend<R>(
        &mut self,
        chat: &Arc<str>,
        f: impl FnOnce(&mut dyn Session) -> R,
    ) -> Option<R> {
        let slot = self.chats.get_mut(chat)?;
        let Backend::Ready(session) = &mut slot.backend else {
            return None;
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| f(session.as_mut()))) {
            Ok(r) => Some(r),
            Err(_) => {
                tracing::error!(chat = %chat, "the backend panicked; the chat's turn ends with an internal error");
                slot.backend = Backend::None;
                slot.resume = true;
                let turn = slot.state.active_turn.as_ref().map(|t| t.id.clone());
                if let Some(turn) = turn {
                    self.fail_turn(
                        chat,
                        &turn,
                        "internal",
                        "The agent failed unexpectedly while running this turn.",
                    );
                }
                None
            }
        }
    }

    // ── settings ────────────────────────────────────────────────────────────────────────

    pub(crate) fn settings(&self) -> JsonObject {
        self.state
            .config
            .as_ref()
            .map(|c| c.values.clone())
            .unwrap_or_default()
    }

    pub(crate) fn refresh_settings_view(&self) {
        if let Ok(mut s) = self.view.settings.lock() {
            *s = self.settings();
        }
    }

    pub(crate) fn refresh_client_tools(&self) {
        let tools: Vec<(String, ToolDefinition)> = self
            .state
            .active_clients
            .iter()
            .flat_map(|c| {
                c.tools
                    .iter()
                    .map(move |t| (c.client_id.clone(), t.clone()))
            })
            .collect();
        if let Ok(mut slot) = self.view.client_tools.lock() {
            *slot = tools;
        }
    }

    pub(crate) fn set_active_client(
        &mut self,
        client: SessionActiveClient,
        origin: Option<&ActionOrigin>,
    ) -> bool {
        let action = StateAction::SessionActiveClientSet(SessionActiveClientSetAction {
            active_client: client,
        });
        let changed = self.apply_session(&action, origin);
        self.refresh_client_tools();
        changed
    }

    /// A client stopped watching or its grace ran out: remove it from `activeClients` and fail
    /// its running client-tool calls.
    fn client_left(&mut self, client_id: &str) {
        if self
            .state
            .active_clients
            .iter()
            .any(|c| c.client_id == client_id)
        {
            let action =
                StateAction::SessionActiveClientRemoved(SessionActiveClientRemovedAction {
                    client_id: client_id.to_owned(),
                });
            self.apply_session(&action, None);
            self.refresh_client_tools();
        }
        for k in self.asks.of_client(client_id) {
            self.settle(
                &k,
                &format!("The client {client_id} that runs this tool is no longer here."),
            );
        }
    }
}

/// Rule 24: VS Code keeps a completion item only when its attachment's `_meta` names a
/// slash command (`command`) or a skill (`uri`); others vanish there without an error, so the
/// backend's author hears about them here. They are still sent: other clients may use them.
fn warn_unanchored_completions(items: &[ahp_types::commands::CompletionItem]) {
    let unanchored = items
        .iter()
        .filter(|item| {
            let attachment = serde_json::to_value(&item.attachment).unwrap_or(Value::Null);
            let meta = &attachment["_meta"];
            meta.get("command").is_none() && meta.get("uri").is_none()
        })
        .count();
    if unanchored > 0 {
        tracing::warn!(
            unanchored,
            "completion items without _meta.command or _meta.uri on their attachment; VS Code drops them"
        );
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
