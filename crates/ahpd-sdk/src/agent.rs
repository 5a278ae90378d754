//! The traits a backend implements: [`Agent`] (one provider) and [`Session`] (one chat's
//! conversation), with the values that pass between them and the host.
//!
//! A backend never edits protocol state. It emits actions through its [`SessionContext`]; the
//! host applies each one with the official reducers, numbers it and fans it out. Approvals,
//! questions and client-run tools are asked through the context and answered by the host.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ahp_types::actions::StateAction;
use ahp_types::commands::{CompletionItem, CompletionItemKind, SessionConfigValueItem};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    AgentCapabilities, ChatInputAnswer, ChatInputRequest, ChatInputResponseKind, Customization,
    FileEditCollection, Message, PendingMessage, ProtectedResourceMetadata, SessionConfigSchema,
    SessionModelInfo, ToolCallCancellationReason, ToolCallResult, ToolDefinition, ToolInput, Turn,
};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// What an agent says about itself; becomes its `AgentInfo` in the root state.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDescriptor {
    /// Unique provider id; also the URI scheme of its catalogue rows (`<provider>:/<id>`).
    pub provider: String,
    /// Name shown to people.
    pub display_name: String,
    /// One line about the agent (may be empty, never absent on the wire).
    pub description: String,
    /// Optional protocol capabilities such as several chats per session.
    pub capabilities: Option<AgentCapabilities>,
    /// Resources the agent needs a token for (`authenticate`).
    pub protected_resources: Option<Vec<ProtectedResourceMetadata>>,
    /// Whether chats of this agent answer composer completions.
    pub completions: bool,
}

impl AgentDescriptor {
    /// A descriptor with a provider id and display name and nothing else.
    pub fn new(provider: impl Into<String>, display_name: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            display_name: display_name.into(),
            description: String::new(),
            capabilities: None,
            protected_resources: None,
            completions: false,
        }
    }
}

/// A backend's refusal of a value or a request, in one sentence for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl Refusal {
    /// A refusal with this sentence.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Why [`Agent::create`] or [`Agent::delete`] did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The request itself was wrong (answered `-32602`).
    #[error("{0}")]
    Refused(String),
    /// The backend failed (answered `-32603`).
    #[error("{0}")]
    Failed(String),
    /// The agent does not support this operation.
    #[error("this agent does not support that operation")]
    Unsupported,
}

/// Models and customizations an agent reports when probed at start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Probe {
    /// Models a turn may pick.
    pub models: Vec<SessionModelInfo>,
    /// Customizations the agent offers.
    pub customizations: Option<Vec<Customization>>,
}

/// One stored conversation, as the catalogue lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PastSession {
    /// The backend id (the part after `<provider>:/`).
    pub id: String,
    /// Its title.
    pub title: String,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub modified_at: String,
    /// `file:` URIs of its working folders.
    pub working_directories: Vec<String>,
}

/// Where a fork copies a conversation up to; opaque to the host.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPoint {
    /// The turn the fork goes through.
    pub turn_id: String,
    /// Backend-specific position data.
    pub data: Value,
}

/// A fork's source: the conversation and the point to copy through.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkFrom {
    /// Backend id of the source conversation.
    pub backend_id: String,
    /// Where to copy through.
    pub point: ForkPoint,
}

/// Everything a backend needs to open one chat's conversation.
#[derive(Debug, Clone)]
pub struct SessionStart {
    /// The session channel URI, as the client spelled it.
    pub session_uri: String,
    /// The chat channel URI this conversation serves.
    pub chat_uri: String,
    /// The id to store the conversation under.
    pub backend_id: String,
    /// Continue this stored conversation instead of starting empty.
    pub resume: Option<String>,
    /// Start as a copy of another conversation through a turn (`createChat` with a fork
    /// source). The host has already put the copied turns in the new chat's state; the backend
    /// copies its own conversation so the next turn continues from there.
    pub fork: Option<ForkFrom>,
    /// The working folder, when the client named one.
    pub working_directory: Option<PathBuf>,
    /// Further folders the session may use.
    pub additional_directories: Vec<PathBuf>,
    /// Configuration values in force: the agent's defaults with the client's on top.
    pub settings: JsonObject,
    /// The channel back to the host.
    pub ctx: SessionContext,
}

/// A turn the host has already announced and hands to the backend to run.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    /// The turn id every action of this turn carries.
    pub turn_id: String,
    /// When the turn started, as its `chat/turnStarted` says: a backend that reads turns back
    /// from its own store keeps it so the turn reads back as clients saw it.
    pub started_at: String,
    /// The user's message (text, attachments, model selection).
    pub message: Message,
    /// Set when the turn came from the queue.
    pub queued_message_id: Option<String>,
    /// Configuration values in force for this turn.
    pub settings: JsonObject,
    /// The client that started it, when one did.
    pub client_id: Option<String>,
}

/// A request for a person's approval of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The turn the call belongs to.
    pub turn_id: String,
    /// The backend's own id of the call (already started with `chat/toolCallStart`).
    pub tool_call_id: String,
    /// What the call will do, shown to the person.
    pub invocation_message: StringOrMarkdown,
    /// The call's input, when it is worth showing.
    pub tool_input: Option<ToolInput>,
    /// A title for the question.
    pub confirmation_title: Option<StringOrMarkdown>,
    /// File edits the call would make.
    pub edits: Option<FileEditCollection>,
}

/// How an approval ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalOutcome {
    /// Go ahead, possibly with input the person edited.
    Approved {
        /// Input the person edited, replacing the proposed input.
        edited_input: Option<String>,
        /// The option the person picked.
        option_id: Option<String>,
        /// Why the call may run, as the chat shows it: `setting` when the host allowed it
        /// without asking, else what the approving client said (`not-needed` when it said
        /// nothing).
        confirmed: ahp_types::state::ToolCallConfirmationReason,
    },
    /// Do not run the call.
    Denied {
        /// Why, when known.
        reason: Option<ToolCallCancellationReason>,
    },
    /// The turn ended, was cancelled or closed before anyone answered.
    Cancelled,
}

/// The choices the host offers with an approval it puts to a person, for a tool shown as
/// `display_name`. Public so a backend rebuilding a turn from its own store shows the same ones.
pub fn approval_options(display_name: &str) -> Vec<ahp_types::state::ConfirmationOption> {
    use ahp_types::state::{ConfirmationOption, ConfirmationOptionKind};
    vec![
        ConfirmationOption {
            id: "allow-once".into(),
            label: "Allow once".into(),
            kind: ConfirmationOptionKind::Approve,
            group: Some(1),
        },
        ConfirmationOption {
            id: "allow-session".into(),
            label: format!("Allow {display_name} for this session"),
            kind: ConfirmationOptionKind::Approve,
            group: Some(1),
        },
        ConfirmationOption {
            id: "deny".into(),
            label: "Deny".into(),
            kind: ConfirmationOptionKind::Deny,
            group: Some(2),
        },
    ]
}

/// How a question ended.
#[derive(Debug, Clone, PartialEq)]
pub struct InputOutcome {
    /// `accept`, `decline` or `cancel`.
    pub response: ChatInputResponseKind,
    /// The answers, keyed by question id, when accepted.
    pub answers: Option<HashMap<String, ChatInputAnswer>>,
}

/// A secret value (a pushed token, a vault entry). Its debug form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself; call only where it is used.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One provider of sessions. Object-safe: the host holds `Arc<dyn Agent>`.
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// Who the agent is.
    fn descriptor(&self) -> AgentDescriptor;

    /// The session configuration schema, one schema before and after creation. Every property
    /// needs `type` and `title`. By default the agent has no settings: an object schema with no
    /// properties.
    fn config_schema(&self, _working_directory: Option<&Path>) -> SessionConfigSchema {
        SessionConfigSchema {
            r#type: "object".into(),
            properties: Default::default(),
            required: None,
        }
    }

    /// Default values: only what is configured (nothing, by default).
    fn config_defaults(&self, _working_directory: Option<&Path>) -> JsonObject {
        JsonObject::new()
    }

    /// A pure check of values a client chose. Accepts everything unless overridden.
    fn validate_config(&self, _values: &JsonObject) -> Result<(), Refusal> {
        Ok(())
    }

    /// Open one chat's conversation.
    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError>;

    /// Whether the agent's loop and tools live in the host's process, so that in a machine it
    /// runs as a whole inner host (`ahpd --stdio`). `false` by default.
    fn runs_nested(&self) -> bool {
        false
    }

    /// The refusal of a `computer` value when the agent's schema has no such setting.
    fn machine_refusal(&self, value: &str) -> String {
        format!("this host has no computer plugin, so it cannot run a session in {value}")
    }

    /// What the agent asks of a machine it runs in, by need name. Asked whenever a machine is
    /// made or an inner host started, never cached, so paths are read at call time.
    fn machine(&self) -> std::collections::BTreeMap<String, crate::machine::MachineNeed> {
        std::collections::BTreeMap::new()
    }

    /// Models and customizations, asked once at start.
    async fn probe(&self) -> Probe {
        Probe::default()
    }

    /// Stored conversations to list in the catalogue.
    async fn list(&self) -> Vec<PastSession> {
        Vec::new()
    }

    /// One stored conversation, without listing them all.
    async fn find(&self, id: &str) -> Option<PastSession> {
        self.list().await.into_iter().find(|row| row.id == id)
    }

    /// The turns of a stored conversation, oldest first; `None` for an unknown id.
    async fn transcript(&self, _id: &str) -> Option<Vec<Turn>> {
        None
    }

    /// Whether a stored conversation may hold work its backend should take up as soon as a
    /// client looks at it rather than at its next turn: a run its process left behind, a run
    /// waiting on a person. The host then opens the chat's backend beside the subscribe that
    /// opened the session and calls [`Session::watched`] on it. `false` by default: a stored
    /// conversation's backend opens on its first turn or backend-bound command.
    async fn unfinished(&self, _id: &str) -> bool {
        false
    }

    /// Delete a stored conversation; an absent id counts as deleted.
    async fn delete(&self, _id: &str) -> Result<(), AgentError> {
        Err(AgentError::Unsupported)
    }

    /// Values for an `enumDynamic` configuration property.
    async fn config_completions(
        &self,
        _property: &str,
        _query: Option<&str>,
        _working_directory: Option<&Path>,
        _values: &JsonObject,
    ) -> Vec<SessionConfigValueItem> {
        Vec::new()
    }
}

/// One chat's conversation. The host calls every member but [`Session::close`] inline in the
/// session's task, so they must return promptly; long work runs on the backend's own tasks and
/// reports through the [`SessionContext`].
#[async_trait]
pub trait Session: Send + 'static {
    /// The id the conversation is stored under.
    fn backend_id(&self) -> String;

    /// Start this turn (or hold it until the run in front ends). The host has already said it.
    fn begin(&mut self, turn: TurnRequest);

    /// Stop that turn's run and the turns waiting behind it. Publish nothing for the cancel.
    fn cancel(&mut self, turn_id: &str);

    /// A client stopped that turn, saying it lasted `duration` milliseconds. A backend that
    /// reads turns back from its own store keeps the figure there; by default this is
    /// [`Session::cancel`].
    fn stopped(&mut self, turn_id: &str, duration: i64) {
        let _ = duration;
        self.cancel(turn_id);
    }

    /// Take a steering message into the running turn; `false` leaves it queued.
    fn steer(&mut self, _message: PendingMessage) -> bool {
        false
    }

    /// Apply accepted configuration changes to the next turn.
    fn configure(&mut self, changes: &JsonObject) -> Result<(), Refusal> {
        let keys: Vec<&str> = changes.keys().map(String::as_str).collect();
        Err(Refusal::new(format!(
            "this agent cannot change {} during a session",
            keys.join(", ")
        )))
    }

    /// Re-run an errored turn under its own id.
    fn resume_turn(&mut self, _turn_id: &str) -> Result<(), Refusal> {
        Err(Refusal::new("this agent cannot resume a turn"))
    }

    /// Cut the conversation through that turn (or to nothing) before the next turn runs.
    fn rewind(&mut self, _turn_id: Option<&str>) -> Result<(), Refusal> {
        Err(Refusal::new("this agent cannot rewind a conversation"))
    }

    /// Where a fork through this turn copies to.
    fn fork_point(&self, _turn_id: &str) -> Option<ForkPoint> {
        None
    }

    /// Composer completions.
    fn completions(
        &self,
        _kind: &CompletionItemKind,
        _text: &str,
        _offset: i64,
    ) -> Vec<CompletionItem> {
        Vec::new()
    }

    /// The backend was opened with no turn waiting for it (for the clients of a stored
    /// conversation with unfinished work, see [`Agent::unfinished`], or for a command or a new
    /// chat, after the held commands reached it): put to the host now what waits on a person,
    /// such as a request left open when the daemon stopped. Not called when a turn was waiting:
    /// the turn is handed over instead. Nothing by default.
    fn watched(&mut self) {}

    /// A client asked to start (`run`) or stop the MCP server the session's customization `id`
    /// stands for. The host has checked the id and applied the request; the backend follows
    /// with `session/mcpServerStateChanged` as the server's state changes.
    fn mcp_server(&mut self, _id: &str, _run: bool) -> Result<(), Refusal> {
        Err(Refusal::new("this agent runs no MCP servers"))
    }

    /// Stop everything. Anything published after this returns is dropped.
    async fn close(&mut self);
}

/// A message from a backend to its session's task.
// Emits dominate and are sent by value; boxing them would cost an allocation per delta.
#[allow(clippy::large_enum_variant)]
pub(crate) enum BackendMsg {
    Emit {
        chat: Arc<str>,
        action: StateAction,
    },
    Approval {
        chat: Arc<str>,
        request: ApprovalRequest,
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

/// A call of a tool a client runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientToolCall {
    /// The turn the call belongs to.
    pub turn_id: String,
    /// The backend's id of the call.
    pub tool_call_id: String,
    /// The client that runs it.
    pub client_id: String,
    /// The tool's name as the client announced it.
    pub tool_name: String,
    /// The input, as JSON text.
    pub input: String,
}

/// Session-wide values the host shares with every chat's context.
#[derive(Default)]
pub(crate) struct SharedSessionView {
    pub settings: Mutex<JsonObject>,
    pub client_tools: Mutex<Vec<(String, ToolDefinition)>>,
    /// Tokens pushed by `authenticate`, per client id then resource.
    pub credentials: Arc<Mutex<HashMap<String, HashMap<String, Secret>>>>,
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

    /// Ask a person to approve a tool call; resolves when someone answers or the turn ends.
    pub async fn ask_approval(&self, request: ApprovalRequest) -> ApprovalOutcome {
        let (reply, rx) = oneshot::channel();
        if self.is_closed()
            || self
                .inner
                .tx
                .send(BackendMsg::Approval {
                    chat: self.inner.chat_uri.clone(),
                    request,
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
                BackendMsg::Emit { action, .. } => ContextEvent::Emit(action),
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
