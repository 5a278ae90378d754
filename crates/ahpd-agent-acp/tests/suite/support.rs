//! Shared plumbing: a served folder, the engine built from a record, a host on a loopback
//! WebSocket, and the official client whose reducer-built mirror is compared with the host's
//! snapshots.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahp::{Client, ClientConfig, ClientEventStream, SubscriptionEvent};
use ahp_types::actions::{
    ActionEnvelope, ChatToolCallConfirmedAction, ChatTurnStartedAction, StateAction,
};
use ahp_types::commands::SubscribeResult;
use ahp_types::state::{
    ChatState, Message, MessageKind, MessageOrigin, ResponsePart, SnapshotState, ToolCallState,
};
use ahp_ws::WebSocketTransport;
use ahpd_agent_acp::AcpEngine;
use ahpd_sdk::host::{Host, HostBuilder};
use ahpd_sdk::plugin::{AgentRecord, Engine, SecretError, SecretReader};
use ahpd_sdk::testing::Mirror;
use ahpd_sdk::transport::ws::{WsConfig, WsServer};
use ahpd_sdk::{Agent, Secret, Session};
use serde_json::{Value, json};

/// Long enough never to fire on a healthy host; only turns a hang into a failure.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The fake agent program.
pub const FAKE: &str = env!("CARGO_BIN_EXE_fake-acp-agent");

/// A temporary served folder and a store.
pub struct Place {
    pub _root: tempfile::TempDir,
    pub work: PathBuf,
    pub store: PathBuf,
    pub base: PathBuf,
}

impl Place {
    pub fn new() -> Place {
        let root = tempfile::tempdir().expect("temp dir");
        let base = root.path().canonicalize().expect("real path");
        let work = base.join("work");
        let store = base.join("store");
        std::fs::create_dir_all(&work).expect("folder");
        Place {
            _root: root,
            work,
            store,
            base,
        }
    }
}

/// A vault with these entries.
pub struct Vault(pub Vec<(String, String)>);

impl SecretReader for Vault {
    fn read(&self, name: &str) -> Result<Secret, SecretError> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| Secret::new(v.clone()))
            .ok_or_else(|| SecretError {
                name: name.to_owned(),
                reason: format!("the vault has no secret {name}"),
            })
    }
}

/// The agent a record makes, serving `place.work`.
pub fn agent(place: &Place, id: &str, config: Value) -> Arc<dyn Agent> {
    agent_with(place, id, config, Vault(Vec::new()))
}

pub fn agent_with(place: &Place, id: &str, config: Value, vault: Vault) -> Arc<dyn Agent> {
    let engine = AcpEngine::new(place.store.clone(), vec![place.work.clone()]);
    let Value::Object(config) = config else {
        panic!("a config object")
    };
    engine
        .check_record("host", &config)
        .expect("the record fits");
    let record = AgentRecord {
        id: id.to_owned(),
        engine: "acp".into(),
        owner: "host".into(),
        name: id.to_owned(),
        description: None,
        icon: None,
        model: None,
        config,
    };
    engine
        .agent(&record, &json!({}), Arc::new(vault))
        .expect("the agent builds")
}

type Slot = Arc<std::sync::Mutex<Option<Box<dyn Session>>>>;

/// Keeps every session an agent opens, so a stop can close them all as the daemon's does
/// (the host library leaves that to the program that stops it).
struct Live {
    inner: Arc<dyn Agent>,
    open: Arc<std::sync::Mutex<Vec<Slot>>>,
}

/// One session, taken out by the stop.
struct Held(Slot);

fn take(slot: &Slot) -> Option<Box<dyn Session>> {
    slot.lock().ok()?.take()
}

#[async_trait::async_trait]
impl Session for Held {
    fn backend_id(&self) -> String {
        self.0
            .lock()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.backend_id()))
            .unwrap_or_default()
    }
    fn begin(&mut self, turn: ahpd_sdk::TurnRequest) {
        if let Ok(mut s) = self.0.lock()
            && let Some(s) = s.as_mut()
        {
            s.begin(turn);
        }
    }
    fn cancel(&mut self, turn_id: &str) {
        if let Ok(mut s) = self.0.lock()
            && let Some(s) = s.as_mut()
        {
            s.cancel(turn_id);
        }
    }
    fn configure(
        &mut self,
        changes: &ahp_types::common::JsonObject,
    ) -> Result<(), ahpd_sdk::Refusal> {
        match self.0.lock().ok().as_mut().and_then(|s| s.as_mut()) {
            Some(s) => s.configure(changes),
            None => Ok(()),
        }
    }
    async fn close(&mut self) {
        if let Some(mut s) = take(&self.0) {
            s.close().await;
        }
    }
}

#[async_trait::async_trait]
impl Agent for Live {
    fn descriptor(&self) -> ahpd_sdk::AgentDescriptor {
        self.inner.descriptor()
    }
    fn config_schema(&self, wd: Option<&Path>) -> ahp_types::state::SessionConfigSchema {
        self.inner.config_schema(wd)
    }
    async fn create(
        &self,
        start: ahpd_sdk::SessionStart,
    ) -> Result<Box<dyn Session>, ahpd_sdk::AgentError> {
        let s = self.inner.create(start).await?;
        let slot: Slot = Arc::new(std::sync::Mutex::new(Some(s)));
        if let Ok(mut open) = self.open.lock() {
            open.push(slot.clone());
        }
        Ok(Box::new(Held(slot)))
    }
    async fn list(&self) -> Vec<ahpd_sdk::PastSession> {
        self.inner.list().await
    }
    async fn transcript(&self, id: &str) -> Option<Vec<ahp_types::state::Turn>> {
        self.inner.transcript(id).await
    }
    async fn delete(&self, id: &str) -> Result<(), ahpd_sdk::AgentError> {
        self.inner.delete(id).await
    }
}

/// A host serving these agents on loopback.
pub struct TestHost {
    pub host: Host,
    pub _server: WsServer,
    pub url: String,
    open: Arc<std::sync::Mutex<Vec<Slot>>>,
}

pub async fn host(place: &Place, agents: Vec<Arc<dyn Agent>>) -> TestHost {
    let open: Arc<std::sync::Mutex<Vec<Slot>>> = Arc::default();
    let agents: Vec<Arc<dyn Agent>> = agents
        .into_iter()
        .map(|inner| {
            Arc::new(Live {
                inner,
                open: open.clone(),
            }) as Arc<dyn Agent>
        })
        .collect();
    let host = HostBuilder::new()
        .agents(agents)
        .path(place.work.clone())
        .delta_window(Duration::ZERO)
        .build()
        .expect("host builds");
    let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listens");
    let url = format!("ws://{}", server.local_addr());
    TestHost {
        host,
        _server: server,
        url,
        open,
    }
}

impl TestHost {
    /// Stops the host as the daemon does when it stops: every session closes.
    pub async fn stop(self) {
        self.host.shutdown();
        let slots: Vec<Slot> = self.open.lock().map(|o| o.clone()).unwrap_or_default();
        for slot in slots {
            if let Some(mut s) = take(&slot) {
                tokio::time::timeout(PATIENCE, s.close())
                    .await
                    .expect("the session closes");
            }
        }
    }
}

pub async fn client(url: &str, name: &str) -> Client {
    let t = WebSocketTransport::connect(url).await.expect("connects");
    let client = Client::connect(
        t,
        ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 8192,
        },
    )
    .await
    .expect("client starts");
    client
        .initialize(name.into(), vec!["1.0.0".into()], vec![])
        .await
        .expect("initializes");
    client
}

pub fn message(text: &str) -> Message {
    Message {
        text: text.into(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

/// One client watching one session and its default chat.
pub struct Watch {
    pub client: Client,
    events: ClientEventStream,
    pub mirror: Mirror,
    pub envelopes: Vec<ActionEnvelope>,
    pub session: String,
    pub chat: String,
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A session id unique within the test process.
pub fn fresh_id(prefix: &str) -> String {
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("{prefix}-{n}-{}", std::process::id())
}

impl Watch {
    /// Creates `<provider>:/<id>` in `dir` and subscribes to it and its chat.
    pub async fn create(th: &TestHost, provider: &str, id: &str, dir: &Path) -> Watch {
        let client = client(&th.url, "first").await;
        let session = format!("{provider}:/{id}");
        let params = json!({
            "channel": session,
            "workingDirectories": [ahpd_sdk::util::file_uri(dir)],
        });
        let _: Value = client
            .request("createSession", params)
            .await
            .expect("createSession");
        Watch::subscribe(client, &session).await
    }

    pub async fn subscribe(client: Client, session: &str) -> Watch {
        let events = client.events();
        let chat = ahpd_sdk::util::default_chat_uri(session);
        let mut mirror = Mirror::default();
        for uri in [session, chat.as_str()] {
            let (res, _sub): (SubscribeResult, _) =
                client.subscribe(uri.to_owned()).await.expect("subscribes");
            mirror.apply_snapshot(&res.snapshot.expect("a snapshot"));
        }
        Watch {
            client,
            events,
            mirror,
            envelopes: Vec::new(),
            session: session.to_owned(),
            chat,
        }
    }

    /// A second client on the same session.
    pub async fn join(th: &TestHost, session: &str, name: &str) -> Watch {
        Watch::subscribe(client(&th.url, name).await, session).await
    }

    pub async fn next(&mut self) -> ActionEnvelope {
        loop {
            let ev = tokio::time::timeout(PATIENCE, self.events.recv())
                .await
                .expect("an event arrives")
                .expect("client alive");
            if let SubscriptionEvent::Action(env) = ev.event {
                self.mirror.apply(&env);
                self.envelopes.push(env.clone());
                return env;
            }
        }
    }

    pub async fn until(&mut self, mut pred: impl FnMut(&StateAction) -> bool) -> ActionEnvelope {
        loop {
            let env = self.next().await;
            if pred(&env.action) {
                return env;
            }
        }
    }

    /// Sends a turn and waits for its echo.
    pub async fn send(&mut self, turn: &str, text: &str) {
        self.client
            .dispatch(
                self.chat.clone(),
                StateAction::ChatTurnStarted(ChatTurnStartedAction {
                    turn_id: turn.into(),
                    started_at: ahpd_sdk::util::now_iso(),
                    message: message(text),
                    queued_message_id: None,
                    meta: None,
                }),
            )
            .await
            .expect("dispatch");
        self.until(|a| matches!(a, StateAction::ChatTurnStarted(s) if s.turn_id == turn))
            .await;
    }

    /// Waits for the turn's ending action.
    pub async fn end(&mut self, turn: &str) -> StateAction {
        self.until(|a| match a {
            StateAction::ChatTurnComplete(a) => a.turn_id == turn,
            StateAction::ChatError(a) => a.turn_id == turn,
            StateAction::ChatTurnCancelled(a) => a.turn_id == turn,
            _ => false,
        })
        .await
        .action
    }

    /// Waits for a confirmation question and returns the tool call's id and its options.
    pub async fn question(&mut self) -> (String, Vec<ahp_types::state::ConfirmationOption>) {
        let env = self
            .until(|a| matches!(a, StateAction::ChatToolCallReady(r) if r.options.is_some()))
            .await;
        match env.action {
            StateAction::ChatToolCallReady(r) => (r.tool_call_id, r.options.unwrap_or_default()),
            _ => unreachable!(),
        }
    }

    /// Answers a confirmation with one of its options.
    pub async fn answer(&self, turn: &str, call: &str, option: &str, approve: bool) {
        self.client
            .dispatch(
                self.chat.clone(),
                StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
                    turn_id: turn.into(),
                    tool_call_id: call.into(),
                    meta: None,
                    approved: approve,
                    confirmed: approve
                        .then_some(ahp_types::state::ToolCallConfirmationReason::UserAction),
                    reason: (!approve)
                        .then_some(ahp_types::state::ToolCallCancellationReason::Denied),
                    edited_tool_input: None,
                    user_suggestion: None,
                    reason_message: None,
                    selected_option_id: Some(option.into()),
                }),
            )
            .await
            .expect("dispatch");
    }

    /// Cancels a turn.
    pub async fn cancel(&self, turn: &str) {
        self.client
            .dispatch(
                self.chat.clone(),
                StateAction::ChatTurnCancelled(ahp_types::actions::ChatTurnCancelledAction {
                    turn_id: turn.into(),
                    duration: 0,
                    meta: None,
                }),
            )
            .await
            .expect("dispatch");
    }

    /// Consumes everything sent before now.
    pub async fn sync(&mut self) {
        self.client.ping().await.expect("ping");
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::ZERO, self.events.recv()).await {
            if let SubscriptionEvent::Action(env) = ev.event {
                self.mirror.apply(&env);
                self.envelopes.push(env);
            }
        }
    }

    /// The mirror of the session and its chat equals the host's snapshots (checked again
    /// after another round trip while they differ, up to [`PATIENCE`]).
    pub async fn assert_mirror(&mut self, th: &TestHost) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            self.sync().await;
            let mut differences = Vec::new();
            for uri in [self.session.clone(), self.chat.clone()] {
                let snap = th.host.snapshot(&uri).await.expect("a snapshot");
                match &snap.state {
                    SnapshotState::Session(s) => {
                        if self.mirror.sessions.get(&uri) != Some(&**s) {
                            differences.push(format!(
                                "session differs:\n mirror {:?}\n host {s:?}",
                                self.mirror.sessions.get(&uri)
                            ));
                        }
                    }
                    SnapshotState::Chat(c) => {
                        if self.mirror.chats.get(&uri) != Some(&**c) {
                            differences.push(format!(
                                "chat differs:\n mirror {:?}\n host {c:?}",
                                self.mirror.chats.get(&uri)
                            ));
                        }
                    }
                    _ => panic!("unexpected snapshot"),
                }
            }
            if differences.is_empty() {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}",
                differences.join("\n")
            );
        }
    }

    pub fn chat_state(&self) -> &ChatState {
        &self.mirror.chats[&self.chat]
    }

    /// The chat's last finished turn.
    pub fn last_turn(&self) -> &ahp_types::state::Turn {
        self.chat_state().turns.last().expect("a finished turn")
    }

    /// The markdown of the last finished turn.
    pub fn last_text(&self) -> String {
        self.last_turn()
            .response_parts
            .iter()
            .filter_map(|p| match p {
                ResponsePart::Markdown(m) => Some(m.content.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The tool calls of the last finished turn.
    pub fn last_calls(&self) -> Vec<ToolCallState> {
        self.last_turn()
            .response_parts
            .iter()
            .filter_map(|p| match p {
                ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
                _ => None,
            })
            .collect()
    }

    /// The actions on the chat channel, in order.
    pub fn chat_actions(&self) -> Vec<&StateAction> {
        self.envelopes
            .iter()
            .filter(|e| e.channel == self.chat)
            .map(|e| &e.action)
            .collect()
    }
}

/// Whether the peers may be missing: only when `AHPD_OFFLINE=1` says so.
pub fn offline() -> bool {
    std::env::var("AHPD_OFFLINE").is_ok_and(|v| v == "1")
}

/// The program of a peer installed by `.ci/run` into `target/acp-venv-<name>`; `None` (the
/// test skips, saying so) only offline. A peer that is missing otherwise fails the test.
pub fn peer(venv: &str, program: &str) -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let path = target.join(format!("acp-venv-{venv}/bin/{program}"));
    if path.is_file() {
        return Some(path);
    }
    if offline() {
        eprintln!("skipped: {program} is not installed and AHPD_OFFLINE=1");
        return None;
    }
    panic!(
        "{} is missing: .ci/run installs it (PYENV_VERSION=3.13.0 python3 -m venv target/acp-venv-{venv} …); set AHPD_OFFLINE=1 only when PyPI cannot be reached",
        path.display()
    );
}
