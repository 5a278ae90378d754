//! One chat's ACP session: a worker task that owns the agent child, its connection and the
//! turn running in it. The [`Session`] the host holds only sends the worker commands, so every
//! host call returns at once.
//!
//! The child starts with the chat's first turn: `initialize`, `authenticate` when the record's
//! method is offered, then `session/load` of the stored conversation when the agent can load
//! sessions, else `session/new`. A second prompt waits behind the running one (ACP version 1
//! has no steering). What clients see of each turn is applied here too, with the official
//! reducers, and stored when the turn ends, so the conversation reads back without the agent.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema as acp;
use ahp::reducers::apply_action_to_chat;
use ahp_types::actions::*;
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::*;
use ahpd_sdk::{
    ApprovalOutcome, ApprovalRequest, Session, SessionContext, TurnRequest, util as sdk_util,
};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::child::Child;
use crate::connection::{self, Inbound, Peer};
use crate::launch::Launch;
use crate::mapping::TurnMap;
use crate::store::Conversation;

/// How long a child whose stdout closed may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// How long a close waits for the worker before dropping it (which kills the child too).
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// How long the agent may take to answer one request of its handshake.
const HANDSHAKE: Duration = Duration::from_secs(120);

/// A handshake request's answer, or the sentence for a missing one.
async fn within<T>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, agent_client_protocol::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(HANDSHAKE, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what} failed: {e}")),
        Err(_) => Err(format!("{what} got no answer in {} s", HANDSHAKE.as_secs())),
    }
}

enum Cmd {
    Begin(Box<TurnRequest>),
    Cancel(String),
    Configure(JsonObject),
    Close(oneshot::Sender<()>),
}

/// The host's handle on one ACP chat.
pub struct AcpSession {
    backend_id: String,
    tx: mpsc::UnboundedSender<Cmd>,
    worker: Option<JoinHandle<()>>,
}

impl AcpSession {
    /// Starts the worker for a conversation (the child starts with the first turn).
    pub fn start(
        launch: Arc<Launch>,
        ctx: SessionContext,
        conversation: Conversation,
        cwd: PathBuf,
        additional: Vec<PathBuf>,
        settings: JsonObject,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let backend_id = conversation.id.clone();
        let (inbound_tx, inbound_rx) = mpsc::unbounded_channel();
        let (answer_tx, answer_rx) = mpsc::unbounded_channel();
        let (saver, saver_task) = writer(launch.clone());
        let worker = Worker {
            launch,
            ctx,
            conv: conversation,
            cwd,
            additional,
            settings,
            agent: None,
            queue: VecDeque::new(),
            turn: None,
            inbound_tx,
            answer_tx,
            parked: HashMap::new(),
            next_ask: 0,
            chat: blank_chat(),
            told_new: false,
            saver: Some(saver),
            saver_task: Some(saver_task),
        };
        let handle = tokio::spawn(worker.run(rx, inbound_rx, answer_rx));
        Self {
            backend_id,
            tx,
            worker: Some(handle),
        }
    }
}

#[async_trait]
impl Session for AcpSession {
    fn backend_id(&self) -> String {
        self.backend_id.clone()
    }

    fn begin(&mut self, turn: TurnRequest) {
        let _ = self.tx.send(Cmd::Begin(Box::new(turn)));
    }

    fn cancel(&mut self, turn_id: &str) {
        let _ = self.tx.send(Cmd::Cancel(turn_id.to_owned()));
    }

    fn configure(&mut self, changes: &JsonObject) -> Result<(), ahpd_sdk::Refusal> {
        let _ = self.tx.send(Cmd::Configure(changes.clone()));
        Ok(())
    }

    async fn close(&mut self) {
        let (reply, done) = oneshot::channel();
        if self.tx.send(Cmd::Close(reply)).is_ok() {
            // A worker stuck in a handshake answers late; dropping it kills the child anyway.
            let _ = tokio::time::timeout(CLOSE_GRACE, done).await;
        }
        if let Some(w) = self.worker.take() {
            w.abort();
        }
    }
}

/// The agent child and what its handshake said.
struct Running {
    child: Child,
    peer: Peer,
    caps: acp::AgentCapabilities,
    session_id: acp::SessionId,
    config: Vec<acp::SessionConfigOption>,
    modes: Option<acp::SessionModeState>,
}

struct Active {
    req: TurnRequest,
    map: TurnMap,
    started: Instant,
    /// The host cancelled it; what the agent still sends is dropped.
    cancelled: bool,
    model: Option<String>,
}

struct Parked {
    turn_id: String,
    call_id: String,
    responder: Answer,
    options: Vec<acp::PermissionOption>,
    task: JoinHandle<()>,
}

/// A permission request's responder. The worker is shared across its awaits, so what it holds
/// must be `Sync`; the crate's responder is only `Send`.
struct Answer(std::sync::Mutex<Responder<acp::RequestPermissionResponse>>);

impl Answer {
    fn new(r: Responder<acp::RequestPermissionResponse>) -> Self {
        Self(std::sync::Mutex::new(r))
    }

    fn respond(self, outcome: acp::RequestPermissionOutcome) {
        let r = self.0.into_inner().unwrap_or_else(|p| p.into_inner());
        let _ = r.respond(acp::RequestPermissionResponse::new(outcome));
    }
}

struct Worker {
    launch: Arc<Launch>,
    ctx: SessionContext,
    conv: Conversation,
    cwd: PathBuf,
    additional: Vec<PathBuf>,
    settings: JsonObject,
    agent: Option<Running>,
    queue: VecDeque<TurnRequest>,
    turn: Option<Active>,
    inbound_tx: mpsc::UnboundedSender<Inbound>,
    answer_tx: mpsc::UnboundedSender<(u64, ApprovalOutcome)>,
    parked: HashMap<u64, Parked>,
    next_ask: u64,
    /// What clients see of the running turn, for the store.
    chat: ChatState,
    /// The chat has been told this is a new agent conversation.
    told_new: bool,
    saver: Option<mpsc::UnboundedSender<Conversation>>,
    saver_task: Option<JoinHandle<()>>,
}

/// Writes each conversation handed to it, the newest of a burst only, off the worker's task.
fn writer(launch: Arc<Launch>) -> (mpsc::UnboundedSender<Conversation>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Conversation>();
    let task = tokio::spawn(async move {
        while let Some(mut c) = rx.recv().await {
            while let Ok(newer) = rx.try_recv() {
                c = newer;
            }
            let launch = launch.clone();
            let written = tokio::task::spawn_blocking(move || launch.store.write(&c)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!("cannot store an ACP conversation: {e}"),
                Err(e) => tracing::error!("cannot store an ACP conversation: {e}"),
            }
        }
    });
    (tx, task)
}

fn blank_chat() -> ChatState {
    serde_json::from_value(json!({
        "resource": "", "title": "", "status": 0, "modifiedAt": sdk_util::now_iso(), "turns": [],
    }))
    .unwrap_or_else(|_| unreachable_chat())
}

// The literal above always parses; this keeps the worker free of a panic path.
fn unreachable_chat() -> ChatState {
    ChatState {
        resource: String::new(),
        title: String::new(),
        status: 0,
        activity: None,
        modified_at: String::new(),
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

fn millis(since: Instant) -> i64 {
    i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX)
}

fn error_part(kind: &str, message: String) -> ErrorResponsePart {
    ErrorResponsePart {
        error: ErrorInfo {
            error_type: kind.to_owned(),
            message,
            stack: None,
            meta: None,
        },
        resumable: None,
    }
}

fn confirmation_option(o: &acp::PermissionOption) -> ConfirmationOption {
    let approve = matches!(
        o.kind,
        acp::PermissionOptionKind::AllowOnce | acp::PermissionOptionKind::AllowAlways
    );
    ConfirmationOption {
        id: o.option_id.0.to_string(),
        label: o.name.clone(),
        kind: if approve {
            ConfirmationOptionKind::Approve
        } else {
            ConfirmationOptionKind::Deny
        },
        group: Some(if approve { 1 } else { 2 }),
    }
}

/// The agent's answer for a person's: the option they chose, else the one-time option of the
/// right side. An "always" option is never picked for them.
fn outcome_for(
    outcome: &ApprovalOutcome,
    options: &[acp::PermissionOption],
) -> acp::RequestPermissionOutcome {
    let of_kind = |kind: acp::PermissionOptionKind| {
        options
            .iter()
            .find(|o| o.kind == kind)
            .map(|o| o.option_id.clone())
    };
    let chosen = match outcome {
        ApprovalOutcome::Approved {
            option_id: Some(id),
            ..
        } if options.iter().any(|o| *o.option_id.0 == **id) => {
            Some(acp::PermissionOptionId::new(id.as_str()))
        }
        ApprovalOutcome::Approved { .. } => of_kind(acp::PermissionOptionKind::AllowOnce),
        ApprovalOutcome::Denied { .. } => of_kind(acp::PermissionOptionKind::RejectOnce),
        ApprovalOutcome::Cancelled => None,
    };
    match chosen {
        Some(id) => {
            acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id))
        }
        None => acp::RequestPermissionOutcome::Cancelled,
    }
}

/// The prompt's blocks: the text, then each attachment as the agent's prompt capabilities
/// allow, else named in words.
fn prompt_blocks(message: &Message, caps: &acp::PromptCapabilities) -> Vec<acp::ContentBlock> {
    let mut blocks = vec![acp::ContentBlock::Text(acp::TextContent::new(
        message.text.clone(),
    ))];
    let mut named = Vec::new();
    for a in message.attachments.iter().flatten() {
        match a {
            MessageAttachment::Simple(s) => {
                if let Some(text) = &s.model_representation {
                    blocks.push(acp::ContentBlock::Text(acp::TextContent::new(format!(
                        "{}:\n{text}",
                        s.label
                    ))));
                }
            }
            MessageAttachment::Resource(r) => {
                blocks.push(acp::ContentBlock::ResourceLink(acp::ResourceLink::new(
                    r.label.clone(),
                    r.uri.clone(),
                )));
            }
            MessageAttachment::EmbeddedResource(e) => {
                let image = e.content_type.starts_with("image/");
                let audio = e.content_type.starts_with("audio/");
                if image && caps.image {
                    blocks.push(acp::ContentBlock::Image(acp::ImageContent::new(
                        e.data.clone(),
                        e.content_type.clone(),
                    )));
                } else if audio && caps.audio {
                    blocks.push(acp::ContentBlock::Audio(acp::AudioContent::new(
                        e.data.clone(),
                        e.content_type.clone(),
                    )));
                } else if !image && !audio && caps.embedded_context {
                    blocks.push(acp::ContentBlock::Resource(acp::EmbeddedResource::new(
                        acp::EmbeddedResourceResource::BlobResourceContents(
                            acp::BlobResourceContents::new(
                                e.data.clone(),
                                format!("attachment:{}", e.label),
                            ),
                        ),
                    )));
                } else {
                    named.push(format!("{} ({})", e.label, e.content_type));
                }
            }
            _ => {}
        }
    }
    if !named.is_empty() {
        blocks.push(acp::ContentBlock::Text(acp::TextContent::new(format!(
            "(Attached but not sent, as this agent does not take them: {}.)",
            named.join(", ")
        ))));
    }
    blocks
}

impl Worker {
    async fn run(
        mut self,
        mut cmds: mpsc::UnboundedReceiver<Cmd>,
        mut inbound: mpsc::UnboundedReceiver<Inbound>,
        mut answers: mpsc::UnboundedReceiver<(u64, ApprovalOutcome)>,
    ) {
        loop {
            tokio::select! {
                cmd = cmds.recv() => match cmd {
                    None => break,
                    Some(Cmd::Close(reply)) => {
                        self.shutdown();
                        self.flush().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(cmd) => self.command(cmd, &mut inbound, &mut cmds).await,
                },
                Some(ev) = inbound.recv() => self.inbound(ev).await,
                Some((key, outcome)) = answers.recv() => self.answered(key, outcome),
            }
            while self.saver.is_some() && self.turn.is_none() && !self.queue.is_empty() {
                self.next_turn(&mut inbound, &mut cmds).await;
            }
            if self.saver.is_none() {
                // Closed while a turn was starting.
                return;
            }
        }
        self.shutdown();
        self.flush().await;
    }

    async fn command(
        &mut self,
        cmd: Cmd,
        inbound: &mut mpsc::UnboundedReceiver<Inbound>,
        cmds: &mut mpsc::UnboundedReceiver<Cmd>,
    ) {
        match cmd {
            Cmd::Begin(t) => self.queue.push_back(*t),
            Cmd::Cancel(id) => self.cancel(&id),
            Cmd::Configure(changes) => {
                for (k, v) in changes {
                    self.settings.insert(k, v);
                }
            }
            Cmd::Close(reply) => {
                self.shutdown();
                self.flush().await;
                let _ = reply.send(());
            }
        }
        let _ = (inbound, cmds);
    }

    fn shutdown(&mut self) {
        for (_, p) in self.parked.drain() {
            p.task.abort();
            p.responder
                .respond(acp::RequestPermissionOutcome::Cancelled);
        }
        if let Some(a) = self.agent.take() {
            a.child.kill_tree();
        }
    }

    fn emit(&mut self, action: StateAction) {
        apply_action_to_chat(&mut self.chat, &action);
        self.ctx.emit(action);
    }

    /// Applies to the stored mirror what the host published itself.
    fn mirror(&mut self, action: &StateAction) {
        apply_action_to_chat(&mut self.chat, action);
    }

    fn cancel(&mut self, turn_id: &str) {
        self.queue.retain(|t| t.turn_id != turn_id);
        let Some(turn) = self.turn.as_mut().filter(|t| t.req.turn_id == turn_id) else {
            return;
        };
        if turn.cancelled {
            return;
        }
        turn.cancelled = true;
        // Parked questions are answered `cancelled` before the agent hears the cancel.
        let keys: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, p)| p.turn_id == turn_id)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some(p) = self.parked.remove(&k) {
                p.task.abort();
                p.responder
                    .respond(acp::RequestPermissionOutcome::Cancelled);
            }
        }
        if let Some(a) = &self.agent {
            let _ = a
                .peer
                .send_notification(acp::CancelNotification::new(a.session_id.clone()));
        }
    }

    /// Starts the next queued turn: the agent first, if it is not running.
    async fn next_turn(
        &mut self,
        inbound: &mut mpsc::UnboundedReceiver<Inbound>,
        cmds: &mut mpsc::UnboundedReceiver<Cmd>,
    ) {
        let Some(req) = self.queue.pop_front() else {
            return;
        };
        let started = Instant::now();
        let turn_id = req.turn_id.clone();
        self.mirror(&StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: req.started_at.clone(),
            message: req.message.clone(),
            queued_message_id: None,
            meta: None,
        }));
        self.turn = Some(Active {
            map: TurnMap::new(&turn_id),
            req,
            started,
            cancelled: false,
            model: None,
        });
        if self.agent.is_none() {
            let opened = self.open_agent(inbound).await;
            // Commands that came while the agent started (a cancel of this very turn).
            while let Ok(cmd) = cmds.try_recv() {
                match cmd {
                    Cmd::Close(reply) => {
                        self.shutdown();
                        self.flush().await;
                        let _ = reply.send(());
                        self.turn = None;
                        return;
                    }
                    other => Box::pin(self.command(other, inbound, cmds)).await,
                }
            }
            if let Err(message) = opened {
                self.end_turn_error("agent-start", message);
                return;
            }
        }
        let cancelled = self.turn.as_ref().is_some_and(|t| t.cancelled);
        if cancelled {
            self.finish_cancelled();
            return;
        }
        if let Err(message) = self.apply_settings().await {
            self.end_turn_error("config", message);
            return;
        }
        let Some(agent) = &self.agent else {
            return;
        };
        let Some(turn) = &self.turn else {
            return;
        };
        let blocks = prompt_blocks(&turn.req.message, &agent.caps.prompt_capabilities);
        let request = acp::PromptRequest::new(agent.session_id.clone(), blocks);
        let peer = agent.peer.clone();
        let tx = self.inbound_tx.clone();
        tokio::spawn(async move {
            let result = peer.send_request(request).block_task().await;
            let _ = tx.send(Inbound::PromptDone { turn_id, result });
        });
    }

    /// Spawns the agent and opens its session; the error is the sentence the turn ends with.
    async fn open_agent(
        &mut self,
        inbound: &mut mpsc::UnboundedReceiver<Inbound>,
    ) -> Result<(), String> {
        let launch = self.launch.clone();
        let (child, pipes) = launch.spawn(&self.conv.id, &self.cwd)?;
        let peer = match connection::connect(pipes, self.inbound_tx.clone()).await {
            Ok(p) => p,
            Err(e) => return Err(self.death_sentence(&child, &e).await),
        };
        let init = acp::InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1)
            .client_capabilities(acp::ClientCapabilities::new())
            .client_info(acp::Implementation::new("ahpd", env!("CARGO_PKG_VERSION")));
        let init = match within("initialize", peer.send_request(init).block_task()).await {
            Ok(r) => r,
            Err(e) => return Err(self.startup_error(&child, &peer, e).await),
        };
        if let Some(method) = launch.auth_method(&self.conv.id)
            && init.auth_methods.iter().any(|m| *m.id().0 == *method)
        {
            let auth = acp::AuthenticateRequest::new(method.clone());
            if let Err(e) = within("authenticate", peer.send_request(auth).block_task()).await {
                return Err(format!("the agent refused the sign-in {method}: {e}"));
            }
        }
        let caps = init.agent_capabilities.clone();
        let mut additional = self.additional.clone();
        if caps.session_capabilities.additional_directories.is_none() {
            additional.clear();
        }
        let mcp = launch.mcp_servers(&caps.mcp_capabilities);
        let mut opened = None;
        let mut why_new = "this agent cannot load a session".to_owned();
        if caps.load_session
            && let Some(id) = self.conv.acp_session_id.clone()
        {
            let load = acp::LoadSessionRequest::new(acp::SessionId::new(id.as_str()), &self.cwd)
                .mcp_servers(mcp.clone())
                .additional_directories(additional.clone());
            match within("session/load", peer.send_request(load).block_task()).await {
                Ok(r) => {
                    opened = Some((acp::SessionId::new(id.as_str()), r.config_options, r.modes))
                }
                Err(e) => {
                    tracing::warn!(session = %self.conv.id, "the agent could not load its session ({e}); starting a new one");
                    why_new = format!("the agent could not load it ({e})");
                }
            }
        }
        let (session_id, config, modes) = match opened {
            Some(o) => o,
            None => {
                let resumed = !self.conv.turns.is_empty();
                let new = acp::NewSessionRequest::new(&self.cwd)
                    .mcp_servers(mcp)
                    .additional_directories(additional);
                let r = match within("session/new", peer.send_request(new).block_task()).await {
                    Ok(r) => r,
                    Err(e) => return Err(self.startup_error(&child, &peer, e).await),
                };
                if resumed && !self.told_new {
                    self.told_new = true;
                    self.note_new_conversation(&why_new);
                }
                (r.session_id, r.config_options, r.modes)
            }
        };
        // A loaded session replays its history as updates before the answer; the host's own
        // record already holds those turns.
        while let Ok(ev) = inbound.try_recv() {
            match ev {
                Inbound::Permission(_, responder) => {
                    let _ = responder.respond(acp::RequestPermissionResponse::new(
                        acp::RequestPermissionOutcome::Cancelled,
                    ));
                }
                Inbound::Closed(e) => {
                    return Err(self
                        .death_sentence(&child, e.as_deref().unwrap_or("its output closed"))
                        .await);
                }
                _ => {}
            }
        }
        self.conv.acp_session_id = Some(session_id.0.to_string());
        self.conv.loadable = caps.load_session;
        self.launch
            .remember(config.as_deref().unwrap_or_default(), modes.as_ref());
        self.agent = Some(Running {
            child,
            peer,
            caps,
            session_id,
            config: config.unwrap_or_default(),
            modes,
        });
        self.save();
        Ok(())
    }

    /// Tells the running turn that the agent starts over: it cannot load its old session.
    fn note_new_conversation(&mut self, why: &str) {
        let Some(turn) = &self.turn else { return };
        let part = ResponsePart::Markdown(MarkdownResponsePart {
            id: format!("{}.note", turn.req.turn_id),
            content: format!(
                "*This turn starts a new agent conversation, as {}; the earlier turns stay here to read.*\n\n",
                crate::text::plain(why)
            ),
        });
        let action = StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: turn.req.turn_id.clone(),
            part,
            meta: None,
        });
        self.emit(action);
    }

    /// Sets the model and the agent's options the turn's settings ask for.
    async fn apply_settings(&mut self) -> Result<(), String> {
        let Some(turn) = &self.turn else {
            return Ok(());
        };
        let mut wanted: Vec<(String, serde_json::Value)> = Vec::new();
        let model = turn
            .req
            .message
            .model
            .as_ref()
            .map(|m| m.id.clone())
            .or_else(|| {
                self.settings
                    .get("model")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
            });
        let settings: Vec<(String, serde_json::Value)> = turn
            .req
            .settings
            .iter()
            .chain(self.settings.iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let Some(agent) = &mut self.agent else {
            return Ok(());
        };
        if let Some(model) = &model {
            let option = agent
                .config
                .iter()
                .find(|o| o.category == Some(acp::SessionConfigOptionCategory::Model));
            match option {
                Some(o) => {
                    wanted.push((o.id.0.to_string(), serde_json::Value::from(model.clone())))
                }
                None => {
                    return Err(format!(
                        "this agent offers no model choice, so it cannot run the model {model}"
                    ));
                }
            }
        }
        if let Some(mode) = settings
            .iter()
            .find(|(k, _)| k == "permissionMode")
            .and_then(|(_, v)| v.as_str())
        {
            if let Some(o) = agent
                .config
                .iter()
                .find(|o| o.category == Some(acp::SessionConfigOptionCategory::Mode))
                && select_values(o).iter().any(|v| v == mode)
            {
                wanted.push((o.id.0.to_string(), serde_json::Value::from(mode)));
            } else if let Some(modes) = &mut agent.modes
                && modes.available_modes.iter().any(|m| &*m.id.0 == mode)
                && &*modes.current_mode_id.0 != mode
            {
                let req = acp::SetSessionModeRequest::new(
                    agent.session_id.clone(),
                    acp::SessionModeId::new(mode),
                );
                agent
                    .peer
                    .send_request(req)
                    .block_task()
                    .await
                    .map_err(|e| format!("the agent cannot switch to the mode {mode}: {e}"))?;
                modes.current_mode_id = acp::SessionModeId::new(mode);
            }
        }
        for (k, v) in &settings {
            if let Some(id) = k.strip_prefix("acp.") {
                wanted.push((id.to_owned(), v.clone()));
            }
        }
        for (id, value) in wanted {
            let Some(option) = agent.config.iter().find(|o| *o.id.0 == *id) else {
                return Err(format!("the agent has no option {id}"));
            };
            let current = current_value(option);
            if current.as_ref() == Some(&value) {
                continue;
            }
            let v = match &value {
                serde_json::Value::Bool(b) => acp::SessionConfigOptionValue::Boolean { value: *b },
                serde_json::Value::String(s) => acp::SessionConfigOptionValue::ValueId {
                    value: acp::SessionConfigValueId::new(s.as_str()),
                },
                other => {
                    return Err(format!("the agent's option {id} cannot take {other}"));
                }
            };
            let req = acp::SetSessionConfigOptionRequest::new(
                agent.session_id.clone(),
                acp::SessionConfigId::new(id.as_str()),
                v,
            );
            match agent.peer.send_request(req).block_task().await {
                Ok(r) => agent.config = r.config_options,
                Err(e) => {
                    return Err(format!(
                        "the agent could not set {id} to {value}: {e}; the turn did not run rather than run with another value"
                    ));
                }
            }
        }
        if let Some(turn) = &mut self.turn {
            turn.model = model;
        }
        Ok(())
    }

    async fn inbound(&mut self, ev: Inbound) {
        match ev {
            Inbound::Update(n) => self.update(*n),
            Inbound::Permission(req, responder) => self.permission(*req, responder),
            Inbound::PromptDone { turn_id, result } => self.prompt_done(&turn_id, result).await,
            Inbound::Closed(e) => self.closed(e).await,
        }
    }

    fn update(&mut self, n: acp::SessionNotification) {
        let Some(agent) = &mut self.agent else {
            return;
        };
        if n.session_id != agent.session_id {
            return;
        }
        match &n.update {
            acp::SessionUpdate::ConfigOptionUpdate(u) => {
                agent.config = u.config_options.clone();
                self.launch.remember(&agent.config, agent.modes.as_ref());
                return;
            }
            acp::SessionUpdate::CurrentModeUpdate(u) => {
                if let Some(m) = &mut agent.modes {
                    m.current_mode_id = u.current_mode_id.clone();
                }
                return;
            }
            acp::SessionUpdate::SessionInfoUpdate(u) => {
                if let agent_client_protocol::schema::MaybeUndefined::Value(title) = &u.title
                    && !title.trim().is_empty()
                {
                    self.conv.title = title.clone();
                    self.ctx.emit(StateAction::SessionTitleChanged(
                        SessionTitleChangedAction {
                            title: title.clone(),
                        },
                    ));
                }
                return;
            }
            _ => {}
        }
        let Some(turn) = self.turn.as_mut().filter(|t| !t.cancelled) else {
            return;
        };
        let actions = turn.map.update(&n.update);
        for a in actions {
            self.emit(a);
        }
    }

    fn permission(
        &mut self,
        req: acp::RequestPermissionRequest,
        responder: Responder<acp::RequestPermissionResponse>,
    ) {
        let cancelled =
            || acp::RequestPermissionResponse::new(acp::RequestPermissionOutcome::Cancelled);
        let same_session = self
            .agent
            .as_ref()
            .is_some_and(|a| a.session_id == req.session_id);
        let Some(turn) = self.turn.as_mut().filter(|t| !t.cancelled && same_session) else {
            let _ = responder.respond(cancelled());
            return;
        };
        let (actions, call) = turn.map.asking(&req.tool_call);
        let turn_id = turn.req.turn_id.clone();
        for a in actions {
            self.emit(a);
        }
        let options: Vec<ConfirmationOption> =
            req.options.iter().map(confirmation_option).collect();
        let input = req
            .tool_call
            .fields
            .raw_input
            .as_ref()
            .map(|v| ToolInput::Inline(v.to_string()));
        let title = req
            .tool_call
            .fields
            .title
            .clone()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| call.id.clone());
        let request = ApprovalRequest {
            turn_id: turn_id.clone(),
            tool_call_id: call.id.clone(),
            invocation_message: StringOrMarkdown::Plain(title.clone()),
            tool_input: input.clone(),
            confirmation_title: None,
            edits: req
                .tool_call
                .fields
                .content
                .as_deref()
                .and_then(crate::mapping::edits_of),
            // The agent asks in its own words; it gives no risk of its own, and its input is
            // not ours to change.
            risk_assessment: None,
            editable: None,
            meta: None,
        };
        self.mirror(&StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: turn_id.clone(),
            tool_call_id: call.id.clone(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: request.invocation_message.clone(),
            tool_input: input,
            confirmation_title: None,
            risk_assessment: None,
            edits: request.edits.clone(),
            editable: None,
            confirmed: None,
            options: Some(options.clone()),
        }));
        let key = self.next_ask;
        self.next_ask += 1;
        let ctx = self.ctx.clone();
        let tx = self.answer_tx.clone();
        let task = tokio::spawn(async move {
            let outcome = ctx.ask_approval_with_options(request, options).await;
            let _ = tx.send((key, outcome));
        });
        self.parked.insert(
            key,
            Parked {
                turn_id,
                call_id: call.id.clone(),
                responder: Answer::new(responder),
                options: req.options,
                task,
            },
        );
    }

    fn answered(&mut self, key: u64, outcome: ApprovalOutcome) {
        let Some(p) = self.parked.remove(&key) else {
            return;
        };
        let answer = outcome_for(&outcome, &p.options);
        // The stored mirror takes the answer the clients saw.
        if let Some(turn) = &self.turn
            && turn.req.turn_id == p.turn_id
            && pending(&self.chat, &p.turn_id, &p.call_id)
        {
            let call_id = p.call_id.clone();
            let (approved, option, confirmed, reason) = match &outcome {
                ApprovalOutcome::Approved {
                    option_id,
                    confirmed,
                    ..
                } => (true, option_id.clone(), Some(confirmed.clone()), None),
                ApprovalOutcome::Denied { reason, .. } => (false, None, None, *reason),
                ApprovalOutcome::Cancelled => (false, None, None, None),
            };
            if !matches!(outcome, ApprovalOutcome::Cancelled) {
                self.mirror(&StateAction::ChatToolCallConfirmed(
                    ChatToolCallConfirmedAction {
                        turn_id: p.turn_id.clone(),
                        tool_call_id: call_id,
                        meta: None,
                        approved,
                        confirmed,
                        reason,
                        edited_tool_input: None,
                        user_suggestion: None,
                        reason_message: None,
                        selected_option_id: option,
                    },
                ));
            }
        }
        p.responder.respond(answer);
    }

    async fn prompt_done(
        &mut self,
        turn_id: &str,
        result: Result<acp::PromptResponse, agent_client_protocol::Error>,
    ) {
        let Some(turn) = self.turn.as_ref().filter(|t| t.req.turn_id == turn_id) else {
            return;
        };
        if turn.cancelled {
            self.finish_cancelled();
            return;
        }
        let response = match result {
            Ok(r) => r,
            Err(e) => {
                let gone = self.agent.as_ref().is_some_and(|a| {
                    a.peer.is_incoming_closed() || a.child.exit_status().is_some()
                });
                if gone {
                    // The death is told by `closed`, with the exit status.
                    self.closed(None).await;
                } else {
                    self.end_turn_error("agent", format!("The agent failed the prompt: {e}"));
                }
                return;
            }
        };
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if let Some(usage) = &response.usage {
            let action = turn.map.final_usage(usage, turn.model.clone());
            self.emit(action);
        }
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let reason = match response.stop_reason {
            acp::StopReason::EndTurn => None,
            acp::StopReason::MaxTokens => Some((
                "max_tokens",
                "The agent stopped: the model reached its token limit.",
            )),
            acp::StopReason::MaxTurnRequests => Some((
                "max_turn_requests",
                "The agent stopped: the turn reached its limit of model requests.",
            )),
            acp::StopReason::Refusal => Some(("refusal", "The agent refused to go on.")),
            acp::StopReason::Cancelled => {
                // The agent stopped the turn by itself.
                let closing = turn.map.close(false);
                for a in closing {
                    self.emit(a);
                }
                let duration = self.turn.as_ref().map_or(0, |t| millis(t.started));
                self.emit(StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
                    turn_id: turn_id.to_owned(),
                    duration,
                    meta: None,
                }));
                self.end_turn();
                return;
            }
            _ => Some((
                "agent",
                "The agent stopped for a reason this host does not know.",
            )),
        };
        match reason {
            None => {
                let closing = turn.map.close(true);
                let duration = millis(turn.started);
                for a in closing {
                    self.emit(a);
                }
                self.emit(StateAction::ChatTurnComplete(ChatTurnCompleteAction {
                    turn_id: turn_id.to_owned(),
                    duration,
                    meta: None,
                }));
                self.end_turn();
            }
            Some((kind, sentence)) => self.end_turn_error(kind, sentence.to_owned()),
        }
    }

    /// The agent's output closed: it died or is about to.
    async fn closed(&mut self, error: Option<String>) {
        let Some(agent) = self.agent.take() else {
            return;
        };
        for (_, p) in self.parked.drain() {
            p.task.abort();
        }
        let sentence = self
            .death_sentence(
                &agent.child,
                error.as_deref().unwrap_or("its output closed"),
            )
            .await;
        drop(agent);
        match &self.turn {
            Some(t) if t.cancelled => self.finish_cancelled(),
            Some(_) => self.end_turn_error("agent-exit", sentence),
            None => tracing::warn!(session = %self.conv.id, "{sentence}"),
        }
    }

    /// The sentence a failed handshake turns into: the death, when the agent died of it.
    async fn startup_error(&self, child: &Child, peer: &Peer, e: String) -> String {
        if peer.is_incoming_closed() || child.exit_status().is_some() {
            self.death_sentence(child, &e).await
        } else {
            format!("The agent could not start its session: {e}.")
        }
    }

    /// The sentence a child's end turns into: how it ended and the last of its stderr.
    async fn death_sentence(&self, child: &Child, what: &str) -> String {
        let status = match tokio::time::timeout(EXIT_GRACE, child.exited()).await {
            Ok(s) => s,
            Err(_) => {
                child.kill_tree();
                format!("stopped answering ({what}) and was killed")
            }
        };
        let tail = child.stderr_tail();
        let tail = crate::text::plain(&tail.join("\n"));
        if tail.trim().is_empty() {
            format!("The agent {status}; it wrote nothing on stderr.")
        } else {
            format!("The agent {status}. The last lines of its stderr:\n{tail}")
        }
    }

    fn end_turn_error(&mut self, kind: &str, message: String) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let closing = turn.map.close(false);
        let duration = millis(turn.started);
        let turn_id = turn.req.turn_id.clone();
        for a in closing {
            self.emit(a);
        }
        self.emit(StateAction::ChatError(ChatErrorAction {
            turn_id,
            duration,
            part: error_part(kind, message),
            meta: None,
        }));
        self.end_turn();
    }

    /// The host cancelled the turn and said so; the store takes the same end.
    fn finish_cancelled(&mut self) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let action = StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
            turn_id: turn.req.turn_id.clone(),
            duration: millis(turn.started),
            meta: None,
        });
        self.mirror(&action);
        self.end_turn();
    }

    /// Stores the ended turn and clears it.
    fn end_turn(&mut self) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        if let Some(done) = self
            .chat
            .turns
            .iter()
            .rev()
            .find(|t| t.id == turn.req.turn_id)
        {
            let done = done.clone();
            self.conv.turns.retain(|t| t.id != done.id);
            self.conv.turns.push(done);
        }
        self.chat.turns.clear();
        if self.conv.title.is_empty() {
            self.conv.title = sdk_util::title_from(&turn.req.message.text);
        }
        self.save();
    }

    /// Hands the conversation to the writer; the worker never waits on the disk.
    fn save(&mut self) {
        self.conv.modified_at = sdk_util::now_iso();
        if let Some(tx) = &self.saver {
            let _ = tx.send(self.conv.clone());
        }
    }

    /// Closes the writer and waits until what it was handed is on disk.
    async fn flush(&mut self) {
        self.saver = None;
        if let Some(task) = self.saver_task.take() {
            let _ = task.await;
        }
    }
}

fn pending(chat: &ChatState, turn_id: &str, call_id: &str) -> bool {
    let Some(turn) = chat.active_turn.as_ref().filter(|t| t.id == turn_id) else {
        return false;
    };
    turn.response_parts.iter().any(|p| match p {
        ResponsePart::ToolCall(tc) => matches!(
            &tc.tool_call,
            ToolCallState::PendingConfirmation(s) if s.tool_call_id == call_id
        ),
        _ => false,
    })
}

fn select_values(o: &acp::SessionConfigOption) -> Vec<String> {
    match &o.kind {
        acp::SessionConfigKind::Select(s) => match &s.options {
            acp::SessionConfigSelectOptions::Ungrouped(items) => {
                items.iter().map(|i| i.value.0.to_string()).collect()
            }
            acp::SessionConfigSelectOptions::Grouped(groups) => groups
                .iter()
                .flat_map(|g| g.options.iter().map(|i| i.value.0.to_string()))
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

fn current_value(o: &acp::SessionConfigOption) -> Option<serde_json::Value> {
    match &o.kind {
        acp::SessionConfigKind::Select(s) => {
            Some(serde_json::Value::from(s.current_value.0.to_string()))
        }
        acp::SessionConfigKind::Boolean(b) => Some(serde_json::Value::from(b.current_value)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Vec<acp::PermissionOption> {
        vec![
            acp::PermissionOption::new("once", "Allow once", acp::PermissionOptionKind::AllowOnce),
            acp::PermissionOption::new(
                "session",
                "Allow for this session",
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new("no", "Reject", acp::PermissionOptionKind::RejectOnce),
        ]
    }

    fn selected(o: acp::RequestPermissionOutcome) -> Option<String> {
        match o {
            acp::RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            _ => None,
        }
    }

    #[test]
    fn an_always_option_is_only_ever_the_persons_choice() {
        let approved = |id: Option<&str>| ApprovalOutcome::Approved {
            edited_input: None,
            option_id: id.map(str::to_owned),
            confirmed: ToolCallConfirmationReason::UserAction,
        };
        let o = options();
        assert_eq!(
            selected(outcome_for(&approved(Some("session")), &o)).as_deref(),
            Some("session")
        );
        // A session rule, or an id the agent did not offer, is the one-time allow.
        assert_eq!(
            selected(outcome_for(&approved(None), &o)).as_deref(),
            Some("once")
        );
        assert_eq!(
            selected(outcome_for(&approved(Some("allow-session")), &o)).as_deref(),
            Some("once")
        );
        assert_eq!(
            selected(outcome_for(
                &ApprovalOutcome::Denied {
                    reason: None,
                    message: None,
                },
                &o
            ))
            .as_deref(),
            Some("no")
        );
        assert_eq!(selected(outcome_for(&ApprovalOutcome::Cancelled, &o)), None);
        // With no one-time allow, a rule answers `cancelled` rather than "always".
        let only_always = vec![o[1].clone()];
        assert_eq!(selected(outcome_for(&approved(None), &only_always)), None);
    }

    #[test]
    fn attachments_go_as_the_agent_takes_them_else_by_name() {
        let mut m = Message {
            text: "look".into(),
            origin: MessageOrigin {
                kind: MessageKind::User,
            },
            attachments: Some(vec![MessageAttachment::EmbeddedResource(
                MessageEmbeddedResourceAttachment {
                    label: "shot.png".into(),
                    range: None,
                    display_kind: None,
                    meta: None,
                    data: "aGk=".into(),
                    content_type: "image/png".into(),
                    selection: None,
                },
            )]),
            model: None,
            agent: None,
            meta: None,
        };
        let none = acp::PromptCapabilities::new();
        let blocks = prompt_blocks(&m, &none);
        assert_eq!(blocks.len(), 2);
        match &blocks[1] {
            acp::ContentBlock::Text(t) => assert!(t.text.contains("shot.png (image/png)"), "{t:?}"),
            other => panic!("{other:?}"),
        }
        let images = acp::PromptCapabilities::new().image(true);
        let blocks = prompt_blocks(&m, &images);
        assert!(matches!(&blocks[1], acp::ContentBlock::Image(i) if i.mime_type == "image/png"));
        m.attachments = None;
        assert_eq!(prompt_blocks(&m, &images).len(), 1);
    }
}
