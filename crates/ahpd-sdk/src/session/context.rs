//! [`SessionContext`]: a backend's channel to the host for one chat, through which it emits
//! actions and asks for approvals, answers and client-run tools.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ahp_types::actions::StateAction;
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ChatInputRequest, ChatInputResponseKind, ConfirmationOption, ToolCallResult, ToolDefinition,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::session::exchange::{
    ApprovalOutcome, ApprovalRequest, ClientToolCall, InputOutcome, Secret,
};

/// A message from a backend to its session's task.
// Emits dominate and are sent by value; boxing them would cost an allocation per delta.
#[allow(clippy::large_enum_variant)]
pub(crate) enum BackendMsg {
    Emit {
        chat: Arc<str>,
        action: StateAction,
    },
    /// A `changeset/*` action for one of the chat's changeset channels.
    Changeset {
        chat: Arc<str>,
        channel: String,
        action: StateAction,
    },
    Approval {
        chat: Arc<str>,
        request: ApprovalRequest,
        /// The backend's own choices, offered instead of the host's.
        options: Option<Vec<ConfirmationOption>>,
        reply: oneshot::Sender<ApprovalOutcome>,
    },
    Input {
        chat: Arc<str>,
        turn_id: String,
        request: ChatInputRequest,
        reply: oneshot::Sender<InputOutcome>,
    },
    ClientTool {
        chat: Arc<str>,
        call: ClientToolCall,
        reply: oneshot::Sender<ToolCallResult>,
    },
}

/// Session-wide values the host shares with every chat's context.
#[derive(Default)]
pub(crate) struct SharedSessionView {
    pub settings: Mutex<JsonObject>,
    pub client_tools: Mutex<Vec<(String, ToolDefinition)>>,
    /// Tokens pushed by `authenticate`, per client id then resource.
    pub credentials: Arc<Mutex<HashMap<String, HashMap<String, Secret>>>>,
    /// Where the session's conversation lives when it runs in a machine: `(machine, inner
    /// provider)`, kept in its record.
    pub nested: Mutex<Option<(String, String)>>,
}

/// A backend's channel to the host for one chat. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct SessionContext {
    inner: Arc<CtxInner>,
}

struct CtxInner {
    tx: mpsc::UnboundedSender<BackendMsg>,
    session_uri: String,
    chat_uri: Arc<str>,
    closed: AtomicBool,
    view: Arc<SharedSessionView>,
    /// The client that started the turn running now, for [`SessionContext::credential`].
    turn_client: Mutex<Option<String>>,
}

impl std::fmt::Debug for SessionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionContext")
            .field("session_uri", &self.inner.session_uri)
            .field("chat_uri", &self.inner.chat_uri)
            .finish_non_exhaustive()
    }
}

impl SessionContext {
    pub(crate) fn new(
        tx: mpsc::UnboundedSender<BackendMsg>,
        session_uri: String,
        chat_uri: Arc<str>,
        view: Arc<SharedSessionView>,
    ) -> Self {
        Self {
            inner: Arc::new(CtxInner {
                tx,
                session_uri,
                chat_uri,
                closed: AtomicBool::new(false),
                view,
                turn_client: Mutex::new(None),
            }),
        }
    }

    pub(crate) fn mark_closed(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_turn_client(&self, client: Option<String>) {
        if let Ok(mut slot) = self.inner.turn_client.lock() {
            *slot = client;
        }
    }

    /// Publish an action. `chat/*` actions go to this chat, `session/*` to its session. Never
    /// blocks; actions of one context keep their order. Dropped once the context is closed.
    pub fn emit(&self, action: StateAction) {
        if self.is_closed() {
            return;
        }
        let _ = self.inner.tx.send(BackendMsg::Emit {
            chat: self.inner.chat_uri.clone(),
            action,
        });
    }

    /// Publish a `changeset/*` action on one of this chat's changeset channels
    /// (`<chat URI>/changes/…`). Only watched channels take it; the next subscriber asks
    /// [`crate::Session::changeset`] for the state instead.
    pub fn emit_changeset(&self, channel: &str, action: StateAction) {
        if self.is_closed() {
            return;
        }
        let _ = self.inner.tx.send(BackendMsg::Changeset {
            chat: self.inner.chat_uri.clone(),
            channel: channel.to_owned(),
            action,
        });
    }

    /// Ask a person to approve a tool call; resolves when someone answers or the turn ends.
    pub async fn ask_approval(&self, request: ApprovalRequest) -> ApprovalOutcome {
        self.ask(request, None).await
    }

    /// Ask a person to approve a tool call offering the backend's own choices (an ACP agent's
    /// permission options) instead of the host's. The answer names the chosen option's id in
    /// [`ApprovalOutcome::Approved`]; a denial carries no id, so the backend picks its own
    /// refusal. A session rule that allows the tool answers with no option id.
    pub async fn ask_approval_with_options(
        &self,
        request: ApprovalRequest,
        options: Vec<ConfirmationOption>,
    ) -> ApprovalOutcome {
        self.ask(request, Some(options)).await
    }

    async fn ask(
        &self,
        request: ApprovalRequest,
        options: Option<Vec<ConfirmationOption>>,
    ) -> ApprovalOutcome {
        let (reply, rx) = oneshot::channel();
        if self.is_closed()
            || self
                .inner
                .tx
                .send(BackendMsg::Approval {
                    chat: self.inner.chat_uri.clone(),
                    request,
                    options,
                    reply,
                })
                .is_err()
        {
            return ApprovalOutcome::Cancelled;
        }
        rx.await.unwrap_or(ApprovalOutcome::Cancelled)
    }

    /// Ask the person a question; resolves with their response (`cancel` if the turn ends).
    pub async fn ask_input(&self, turn_id: &str, request: ChatInputRequest) -> InputOutcome {
        let cancelled = InputOutcome {
            response: ChatInputResponseKind::Cancel,
            answers: None,
        };
        let (reply, rx) = oneshot::channel();
        if self.is_closed()
            || self
                .inner
                .tx
                .send(BackendMsg::Input {
                    chat: self.inner.chat_uri.clone(),
                    turn_id: turn_id.to_owned(),
                    request,
                    reply,
                })
                .is_err()
        {
            return cancelled;
        }
        rx.await.unwrap_or(cancelled)
    }

    /// Have a client run one of its tools; resolves with its result (a failure result when the
    /// client leaves, the turn ends or the host's timeout passes).
    pub async fn call_client_tool(&self, call: ClientToolCall) -> ToolCallResult {
        let failed = |msg: &str| ToolCallResult {
            success: false,
            past_tense_message: StringOrMarkdown::Plain(msg.to_owned()),
            content: None,
            structured_content: None,
            error: Some(Value::String(msg.to_owned())),
        };
        let (reply, rx) = oneshot::channel();
        if self.is_closed()
            || self
                .inner
                .tx
                .send(BackendMsg::ClientTool {
                    chat: self.inner.chat_uri.clone(),
                    call,
                    reply,
                })
                .is_err()
        {
            return failed("The session closed before the client ran the tool.");
        }
        rx.await
            .unwrap_or_else(|_| failed("The session closed before the client ran the tool."))
    }

    /// Tools the session's active clients offer, as `(clientId, definition)` pairs.
    pub fn client_tools(&self) -> Vec<(String, ToolDefinition)> {
        self.inner
            .view
            .client_tools
            .lock()
            .map(|tools| tools.clone())
            .unwrap_or_default()
    }

    /// The token the client that started the running turn pushed for `resource`, if any.
    pub fn credential(&self, resource: &str) -> Option<Secret> {
        let client = self.inner.turn_client.lock().ok()?.clone()?;
        let creds = self.inner.view.credentials.lock().ok()?;
        creds.get(&client)?.get(resource).cloned()
    }

    /// Configuration values in force.
    pub fn settings(&self) -> JsonObject {
        self.inner
            .view
            .settings
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The session's channel URI.
    pub fn session_uri(&self) -> &str {
        &self.inner.session_uri
    }

    /// This chat's channel URI.
    pub fn chat_uri(&self) -> &str {
        &self.inner.chat_uri
    }

    /// Tells the host the session's conversation lives in `machine`, served there by
    /// `inner_provider`, so its record keeps them.
    pub(crate) fn note_nested(&self, machine: &str, inner_provider: &str) {
        if let Ok(mut n) = self.inner.view.nested.lock() {
            *n = Some((machine.to_owned(), inner_provider.to_owned()));
        }
    }

    /// Whether the host closed this chat; emissions are dropped from then on.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }
}

#[cfg(feature = "testing")]
pub use detached::{ContextEvent, ContextProbe};

#[cfg(feature = "testing")]
mod detached {
    //! A context with no host behind it, so an engine can unit-test what it emits and asks.
    use super::*;

    /// What a backend did through a detached context.
    #[derive(Debug)]
    #[allow(clippy::large_enum_variant)]
    pub enum ContextEvent {
        /// An emitted action.
        Emit(StateAction),
        /// An approval request with the means to answer it.
        Approval(ApprovalRequest, oneshot::Sender<ApprovalOutcome>),
        /// A question with the means to answer it.
        Input(String, ChatInputRequest, oneshot::Sender<InputOutcome>),
        /// A client-tool call with the means to answer it.
        ClientTool(ClientToolCall, oneshot::Sender<ToolCallResult>),
    }

    /// Receives everything a detached context's backend does.
    pub struct ContextProbe {
        rx: mpsc::UnboundedReceiver<BackendMsg>,
        ctx: std::sync::Weak<CtxInner>,
        view: Arc<SharedSessionView>,
    }

    impl ContextProbe {
        /// The next thing the backend did; `None` once every context clone is gone.
        pub async fn next(&mut self) -> Option<ContextEvent> {
            Some(match self.rx.recv().await? {
                // A changeset action arrives as an emitted one: its channel is the probe's
                // chat's.
                BackendMsg::Emit { action, .. } | BackendMsg::Changeset { action, .. } => {
                    ContextEvent::Emit(action)
                }
                BackendMsg::Approval { request, reply, .. } => {
                    ContextEvent::Approval(request, reply)
                }
                BackendMsg::Input {
                    turn_id,
                    request,
                    reply,
                    ..
                } => ContextEvent::Input(turn_id, request, reply),
                BackendMsg::ClientTool { call, reply, .. } => ContextEvent::ClientTool(call, reply),
            })
        }

        /// Set the configuration values the context reports.
        pub fn set_settings(&self, settings: JsonObject) {
            if let Ok(mut s) = self.view.settings.lock() {
                *s = settings;
            }
        }

        /// Close the context, as the host does when it closes the chat.
        pub fn close(&self) {
            if let Some(inner) = self.ctx.upgrade() {
                inner.closed.store(true, Ordering::SeqCst);
            }
        }
    }

    impl SessionContext {
        /// A context with no host: everything the backend does arrives at the probe.
        pub fn detached(session_uri: &str, chat_uri: &str) -> (SessionContext, ContextProbe) {
            let (tx, rx) = mpsc::unbounded_channel();
            let view = Arc::new(SharedSessionView::default());
            let ctx = SessionContext::new(
                tx,
                session_uri.to_owned(),
                Arc::from(chat_uri),
                view.clone(),
            );
            let weak = Arc::downgrade(&ctx.inner);
            (
                ctx,
                ContextProbe {
                    rx,
                    ctx: weak,
                    view,
                },
            )
        }
    }
}
