//! The traits a backend implements: [`Agent`] (one provider) and [`Session`] (one chat's
//! conversation), with the values that pass between them and the host.
//!
//! A backend never edits protocol state. It emits actions through its [`SessionContext`]; the
//! host applies each one with the official reducers, numbers it and fans it out. Approvals,
//! questions and client-run tools are asked through the context and answered by the host.

use std::path::{Path, PathBuf};

use ahp_types::commands::{
    CompletionItem, CompletionItemKind, InvokeChangesetOperationResult, SessionConfigValueItem,
};
use ahp_types::common::JsonObject;
use ahp_types::state::{
    AgentCapabilities, Customization, Message, PendingMessage, ProtectedResourceMetadata,
    SessionConfigSchema, SessionModelInfo, Turn,
};
use async_trait::async_trait;
use serde_json::Value;

pub use crate::session::context::SessionContext;
#[cfg(feature = "testing")]
pub use crate::session::context::{ContextEvent, ContextProbe};
pub use crate::session::exchange::{
    ApprovalOutcome, ApprovalRequest, ClientToolCall, InputOutcome, Secret, approval_options,
};

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

/// What a changeset operation resolves to: the result, or the sentence the request is refused
/// with.
pub type OperationFuture =
    futures::future::BoxFuture<'static, Result<InvokeChangesetOperationResult, Refusal>>;

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
    fn machine(&self) -> std::collections::BTreeMap<String, crate::nested::machine::MachineNeed> {
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

    /// The state of one of this chat's changesets (`<chat URI>/changes/…`), for a client that
    /// subscribes to it; `None` when there is no such changeset. Later changes are published
    /// with [`SessionContext::emit_changeset`].
    fn changeset(&self, _channel: &str) -> Option<ahp_types::state::ChangesetState> {
        None
    }

    /// Runs an operation the changeset offers. The host has checked that the operation is in
    /// the changeset's list and takes the target. `None` when the channel is not this chat's.
    fn changeset_operation(
        &mut self,
        _params: ahp_types::commands::InvokeChangesetOperationParams,
    ) -> Option<OperationFuture> {
        None
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

    /// Stop everything. Anything published after this returns is dropped. This is the end of the
    /// chat's backend for good: the session or chat is disposed, the session is unloaded (never
    /// while a turn or a question is open), nobody wanted the backend, or the program ends
    /// without coming back (a process that stops to start again calls [`Session::suspend`]).
    async fn close(&mut self);

    /// The process serving the session stops, gracefully, and a later one will serve the
    /// conversation again (a daemon's stop or restart; the host itself never calls this, the
    /// program that stops it does). Stop what is working, as [`Session::close`] does, but leave
    /// a turn that only waits on a person (an approval or a question) as the backend's store
    /// keeps it, so that the next process finds it as it would after a crash: its
    /// [`Agent::unfinished`] answers `true`, and [`Session::watched`] puts the question to the
    /// host again. Anything published after this returns is dropped. By default this is
    /// [`Session::close`], which suits a backend that keeps nothing across processes.
    async fn suspend(&mut self) {
        self.close().await;
    }
}
