//! A session's task: owns the session state, its chats' states and backends, and every parked
//! approval, question and client-tool call. Every change goes through a reducer first; only a
//! change is published.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use ahp::reducers::{ReduceOutcome, apply_action_to_chat, apply_action_to_session};
use ahp_types::actions::*;
use ahp_types::common::JsonObject;
use ahp_types::state::*;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::agent::{Agent, BackendMsg, Session, SessionContext, SharedSessionView, TurnRequest};
use crate::coalesce::Coalescer;
use crate::error::RpcError;
use crate::host::HostInner;
use crate::session::{ConnRef, SessionMsg};
use crate::util;

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
    /// Turns the active turn replaced; their approvals stay answerable.
    pub replaced: HashSet<String>,
    /// The turn and the parts a stray stream was already warned about, so a backend
    /// that keeps streaming into a missing part logs one warning, not one per delta.
    pub stray_warned: (String, HashSet<String>),
}

pub(crate) enum PendingKind {
    Approval {
        reply: oneshot::Sender<crate::agent::ApprovalOutcome>,
        tool_name: String,
    },
    Input {
        reply: oneshot::Sender<crate::agent::InputOutcome>,
        required: Vec<String>,
    },
    ClientTool {
        reply: oneshot::Sender<ToolCallResult>,
        client_id: String,
        tool_call_id: String,
        timer: Option<tokio::task::JoinHandle<()>>,
    },
}

pub(crate) struct Pending {
    pub chat: Arc<str>,
    pub turn_id: String,
    pub kind: PendingKind,
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
    pub pending: HashMap<String, Pending>,
    pub allow_session: HashSet<String>,
    pub title_locked: bool,
    pub created_at: String,
    pub working_directory: Option<std::path::PathBuf>,
    pub start_reply: Option<StartReply>,
    /// The `permissionMode` in force before VS Code's `autoApprove` first moved it.
    pub saved_permission_mode: Option<Value>,
    pub catalogue: Option<SessionSummary>,
    pub closed: bool,
    /// Dispatches waiting for a backend to open, in arrival order.
    pub parked: Vec<crate::parked::Parked>,
}

/// The turn and part a streamed action writes into (for a tool call's input, its call id).
fn stream_target(action: &StateAction) -> Option<(&str, &str)> {
    match action {
        StateAction::ChatDelta(a) => Some((&a.turn_id, &a.part_id)),
        StateAction::ChatReasoning(a) => Some((&a.turn_id, &a.part_id)),
        StateAction::ChatToolCallDelta(a) => Some((&a.turn_id, &a.tool_call_id)),
        _ => None,
    }
}

impl Chat {
    /// Whether this is the first stray stream into `part` of `turn` (it is then remembered).
    /// Only the latest turn's parts are kept.
    fn first_stray(&mut self, turn: &str, part: &str) -> bool {
        let (warned_turn, parts) = &mut self.stray_warned;
        if warned_turn != turn {
            turn.clone_into(warned_turn);
            parts.clear();
        }
        parts.insert(part.to_owned())
    }
}

/// Reasonable upper bound on waiting for a backend's `close`.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether a reducer's `Applied` may still leave the state equal, so it must be compared.
fn replace_style(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::SessionTitleChanged(_)
            | StateAction::SessionActiveClientSet(_)
            | StateAction::SessionActiveClientRemoved(_)
            | StateAction::SessionActivityChanged(_)
            | StateAction::SessionIsReadChanged(_)
            | StateAction::SessionIsArchivedChanged(_)
            | StateAction::SessionConfigChanged(_)
            | StateAction::SessionChatUpdated(_)
            | StateAction::SessionMetaChanged(_)
            | StateAction::SessionServerToolsChanged(_)
            | StateAction::ChatDraftChanged(_)
            | StateAction::ChatActivityChanged(_)
            | StateAction::ChatIsReadChanged(_)
            | StateAction::ChatIsArchivedChanged(_)
            | StateAction::ChatToolCallReady(_)
            | StateAction::ChatToolCallConfirmed(_)
            | StateAction::ChatToolCallComplete(_)
            | StateAction::ChatToolCallContentChanged(_)
            | StateAction::ChatQueuedMessagesReordered(_)
            | StateAction::ChatInputAnswerChanged(_)
    )
    // `chat/usage` is deliberately not here: a backend's usage report is published whenever
    // it applies to the running turn, even when it repeats the last one. The no-change rule
    // is about client dispatches, usage is not among the actions it names, and a turn's final usage
    // often equals the last streamed report; dropping it left clients that act on the report
    // (not on the state) without the turn's final figures. Clients cannot dispatch it.
}

fn changed<S: Clone + PartialEq>(
    state: &mut S,
    action: &StateAction,
    reduce: fn(&mut S, &StateAction) -> ReduceOutcome,
) -> Result<bool, ReduceOutcome> {
    if replace_style(action) {
        let before = state.clone();
        match reduce(state, action) {
            ReduceOutcome::Applied => Ok(*state != before),
            other => Err(other),
        }
    } else {
        match reduce(state, action) {
            ReduceOutcome::Applied => Ok(true),
            other => Err(other),
        }
    }
}

/// As `changed`, for a chat, without copying or comparing its ended turns. The reducers of
/// the replace-style chat actions work on the active turn and the chat's own fields and never
/// read or change `turns`; copying the whole transcript for each of them made every tool call,
/// activity or draft change cost time in proportion to the chat's length.
fn chat_changed(state: &mut ChatState, action: &StateAction) -> Result<bool, ReduceOutcome> {
    if let StateAction::ChatToolCallDelta(delta) = action {
        // Streamed tool input arrives in many small deltas; comparing copies of the running turn
        // for each one cost time in proportion to the input streamed so far.
        let changes = tool_delta_changes(state, delta);
        return match apply_action_to_chat(state, action) {
            ReduceOutcome::Applied => Ok(changes),
            other => Err(other),
        };
    }
    if !replace_style(action) {
        return changed(state, action, apply_action_to_chat);
    }
    let mut turns = std::mem::take(&mut state.turns);
    let result = changed(state, action, apply_action_to_chat);
    // Anything a reducer appended to the (empty) list goes after the real turns, and counts
    // as a change.
    let mut added = std::mem::take(&mut state.turns);
    let grew = !added.is_empty();
    turns.append(&mut added);
    state.turns = turns;
    result.map(|changed| changed || grew)
}

/// Whether a tool-input delta changes the call it names: only a call still streaming its input
/// takes one, and then only what the delta carries that differs.
fn tool_delta_changes(state: &ChatState, delta: &ChatToolCallDeltaAction) -> bool {
    let Some(turn) = state.active_turn.as_ref().filter(|t| t.id == delta.turn_id) else {
        return false;
    };
    turn.response_parts.iter().any(|part| match part {
        ResponsePart::ToolCall(call) => match &call.tool_call {
            ToolCallState::Streaming(s) if s.tool_call_id == delta.tool_call_id => {
                delta
                    .content
                    .as_ref()
                    .is_some_and(|c| !c.is_empty() || s.partial_input.is_none())
                    || delta
                        .meta
                        .as_ref()
                        .is_some_and(|m| s.meta.as_ref() != Some(m))
                    || delta
                        .invocation_message
                        .as_ref()
                        .is_some_and(|i| s.invocation_message.as_ref() != Some(i))
            }
            _ => false,
        },
        _ => false,
    })
}

pub(crate) fn chat_summary_of(state: &ChatState) -> ChatSummary {
    ChatSummary {
        resource: state.resource.clone(),
        title: state.title.clone(),
        status: state.status,
        activity: state.activity.clone(),
        modified_at: state.modified_at.clone(),
        changes: state.changes.clone(),
        origin: state.origin.clone(),
        movable: state.movable,
        interactivity: state.interactivity,
        working_directories: state.working_directories.clone(),
    }
}

pub(crate) fn empty_chat(uri: &str, title: &str) -> ChatState {
    ChatState {
        resource: uri.to_owned(),
        title: title.to_owned(),
        status: SessionStatus::Idle.bits(),
        activity: None,
        modified_at: util::now_iso(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

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
            replaced: HashSet::new(),
            stray_warned: (String::new(), HashSet::new()),
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
            } => {
                let _ = reply.send(self.subscribe(conn, &channel));
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

    fn apply_chat_now(
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
                    Some((turn, part)) if slot.first_stray(turn, part) => {
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

    // ── subscriptions and snapshots ─────────────────────────────────────────────────────

    fn snapshot_at(&self, channel: &str, seq: u64) -> Option<Snapshot> {
        let state = if channel == &*self.uri {
            SnapshotState::Session(Box::new(self.state.clone()))
        } else {
            SnapshotState::Chat(Box::new(self.chats.get(channel)?.state.clone()))
        };
        Some(Snapshot {
            resource: channel.to_owned(),
            state,
            from_seq: seq as i64,
        })
    }

    fn subscribe(&mut self, conn: u64, channel: &str) -> Result<Snapshot, RpcError> {
        if channel != &*self.uri && !self.chats.contains_key(channel) {
            return Err(RpcError::session_not_found(channel));
        }
        // Pending merged deltas go out first so the snapshot and the stream agree.
        self.flush_all();
        let seq = self.inner.hub.subscribe(conn, channel);
        self.snapshot_at(channel, seq)
            .ok_or_else(|| RpcError::session_not_found(channel))
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

    /// Hand a turn to the chat's backend, opening the backend first when needed.
    pub(crate) fn begin(&mut self, chat: &Arc<str>, turn: TurnRequest) {
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        slot.ctx.set_turn_client(turn.client_id.clone());
        match &mut slot.backend {
            Backend::Ready(_) => {
                self.with_backend(chat, |s| s.begin(turn));
            }
            Backend::Creating(q) => q.push(turn),
            Backend::None => {
                slot.backend = Backend::Creating(vec![turn]);
                self.spawn_create(chat.clone(), None);
            }
        }
    }

    /// End a turn with `chat/error` from the host.
    pub(crate) fn fail_turn(
        &mut self,
        chat: &Arc<str>,
        turn_id: &str,
        error_type: &str,
        message: &str,
    ) {
        let duration = self
            .chats
            .get(chat)
            .and_then(|c| c.state.active_turn.as_ref())
            .filter(|t| t.id == turn_id)
            .and_then(|t| util::millis_since(&t.started_at))
            .unwrap_or(0)
            .max(0);
        let action = StateAction::ChatError(ChatErrorAction {
            turn_id: turn_id.to_owned(),
            duration,
            part: ErrorResponsePart {
                error: ErrorInfo {
                    error_type: error_type.to_owned(),
                    message: message.to_owned(),
                    stack: None,
                    meta: None,
                },
                resumable: None,
            },
            meta: None,
        });
        self.apply_chat(chat, &action, None);
        self.turn_ended(chat, turn_id, true);
    }

    // ── coalescing ──────────────────────────────────────────────────────────────────────

    fn flush_due(&mut self) {
        let now = Instant::now();
        let due: Vec<Arc<str>> = self
            .chats
            .iter()
            .filter(|(_, c)| c.coalescer.deadline().is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for chat in due {
            self.flush_chat(&chat);
        }
    }

    pub(crate) fn flush_chat(&mut self, chat: &Arc<str>) {
        let merged = match self.chats.get_mut(chat) {
            Some(slot) => slot.coalescer.take(),
            None => None,
        };
        if let Some(action) = merged {
            self.apply_chat_now(chat, &action, None);
        }
    }

    pub(crate) fn flush_all(&mut self) {
        let chats: Vec<Arc<str>> = self.chats.keys().cloned().collect();
        for chat in chats {
            self.flush_chat(&chat);
        }
    }

    /// A delta from the backend: published at once or merged, per the coalescing window.
    pub(crate) fn delta(&mut self, chat: &Arc<str>, action: StateAction) {
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        match slot.coalescer.offer(action) {
            crate::coalesce::Offer::PublishNow(actions) => {
                for a in actions {
                    self.apply_chat_now(chat, &a, None);
                }
            }
            crate::coalesce::Offer::Held => {}
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
        let entries: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| matches!(&p.kind, PendingKind::ClientTool { client_id: c, .. } if c == client_id))
            .map(|(k, _)| k.clone())
            .collect();
        for k in entries {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::common::StringOrMarkdown;

    fn ended(id: &str) -> Turn {
        Turn {
            id: id.to_owned(),
            started_at: Some("2026-01-01T00:00:00.000Z".into()),
            duration: Some(1),
            message: Message {
                text: format!("question {id}"),
                origin: MessageOrigin {
                    kind: MessageKind::User,
                },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            response_parts: Vec::new(),
            usage: None,
            state: TurnState::Complete,
        }
    }

    fn read(is_read: bool) -> StateAction {
        StateAction::ChatIsReadChanged(ChatIsReadChangedAction { is_read })
    }

    /// The transcript is left out of the comparison, not out of the state: a replace-style
    /// action is still told apart from a repeat, and the turns come back untouched.
    #[test]
    fn replace_style_chat_actions_compare_without_losing_turns() {
        let mut state = empty_chat("ahp-chat:/c", "c");
        state.turns = (0..3).map(|i| ended(&format!("t{i}"))).collect();
        let before = state.turns.clone();
        assert_eq!(chat_changed(&mut state, &read(true)), Ok(true));
        assert_eq!(chat_changed(&mut state, &read(true)), Ok(false));
        assert_eq!(chat_changed(&mut state, &read(false)), Ok(true));
        assert_eq!(state.turns, before);
    }

    fn delta(call: &str, content: Option<&str>, meta: Option<Value>) -> StateAction {
        StateAction::ChatToolCallDelta(ChatToolCallDeltaAction {
            turn_id: "t".into(),
            tool_call_id: call.into(),
            meta: meta.and_then(|m| m.as_object().cloned()),
            content: content.map(str::to_owned),
            invocation_message: None,
        })
    }

    /// A tool-input delta says whether it changed the chat without a copy to compare with; what
    /// it says must agree with comparing copies.
    #[test]
    fn tool_input_deltas_report_a_change_exactly_when_they_make_one() {
        let mut state = empty_chat("ahp-chat:/c", "c");
        let mut message = ended("t").message;
        message.text = "go".into();
        let setup = [
            StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id: "t".into(),
                started_at: "2026-01-01T00:00:00.000Z".into(),
                message,
                queued_message_id: None,
                meta: None,
            }),
            StateAction::ChatToolCallStart(ChatToolCallStartAction {
                turn_id: "t".into(),
                tool_call_id: "c".into(),
                meta: None,
                tool_name: "write".into(),
                display_name: "Write".into(),
                intention: None,
                contributor: None,
            }),
        ];
        for action in &setup {
            assert_eq!(chat_changed(&mut state, action), Ok(true));
        }
        let meta = serde_json::json!({"k": 1});
        let steps = [
            (delta("c", Some(""), None), true),
            (delta("c", Some(""), None), false),
            (delta("c", Some("{\"pa"), None), true),
            (delta("c", None, None), false),
            (delta("c", None, Some(meta.clone())), true),
            (delta("c", None, Some(meta)), false),
        ];
        for (action, expected) in steps {
            let before = state.clone();
            let said = chat_changed(&mut state, &action);
            assert_eq!(said, Ok(state != before), "{action:?}");
            assert_eq!(said, Ok(expected), "{action:?}");
        }
        // Once the input is complete, a late delta changes nothing.
        let ready = StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: "t".into(),
            tool_call_id: "c".into(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain("write".into()),
            tool_input: None,
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: None,
            options: None,
        });
        assert_eq!(chat_changed(&mut state, &ready), Ok(true));
        let before = state.clone();
        assert_eq!(
            chat_changed(&mut state, &delta("c", Some("x"), None)),
            Ok(false)
        );
        assert_eq!(state, before);
        // A delta for a call that does not exist is the rule-7 case: not applied.
        assert!(chat_changed(&mut state, &delta("ghost", Some("x"), None)).is_err());
    }
}
