//! Shared plumbing: a temporary home and workspace, the scripted endpoint, a host serving the
//! cofold agent on a loopback WebSocket, and the official client whose reducer-built mirror is
//! compared with the host's snapshots.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::{Client, ClientConfig, ClientEventStream, SubscriptionEvent};
use ahp_types::actions::{ActionEnvelope, ChatTurnStartedAction, StateAction};
use ahp_types::commands::SubscribeResult;
use ahp_types::state::{
    ChatState, Message, MessageKind, MessageOrigin, ResponsePart, SnapshotState, ToolCallState,
};
use ahp_ws::WebSocketTransport;
use ahpd_agent_cofold::{CofoldAgent, EditPhase, Embedder, Environment, cofold_agent_with};
use ahpd_sdk::Agent;
use ahpd_sdk::host::{Host, HostBuilder};
use ahpd_sdk::testing::Mirror;
use ahpd_sdk::transport::ws::{WsConfig, WsServer};
use serde_json::{Value, json};
use testkit::chunk;
use testkit::{Endpoint, Frame, Reply};

/// Long enough never to fire on a healthy host; only turns a hang into a failure.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A temporary home, configuration folder and workspace, never the developer's own.
pub struct Place {
    pub _root: tempfile::TempDir,
    pub home: PathBuf,
    pub xdg: PathBuf,
    pub work: PathBuf,
}

impl Place {
    pub fn new() -> Place {
        let root = tempfile::tempdir().expect("temp dir");
        let base = root.path().canonicalize().expect("real path");
        let home = base.join("home");
        let xdg = base.join("xdg");
        let work = base.join("work");
        for d in [&home, &xdg, &work] {
            std::fs::create_dir_all(d).expect("folder");
        }
        Place {
            _root: root,
            home,
            xdg,
            work,
        }
    }

    pub fn env(&self) -> Environment {
        self.env_with(&[])
    }

    pub fn env_with(&self, extra: &[(&str, &str)]) -> Environment {
        let mut vars = HashMap::new();
        vars.insert("HOME".to_owned(), self.home.display().to_string());
        vars.insert("XDG_CONFIG_HOME".to_owned(), self.xdg.display().to_string());
        vars.insert("PATH".to_owned(), std::env::var("PATH").unwrap_or_default());
        for (k, v) in extra {
            vars.insert((*k).to_owned(), (*v).to_owned());
        }
        Environment {
            vars,
            home: self.home.clone(),
        }
    }

    /// Writes the copapo user file.
    pub fn copapo(&self, config: Value) {
        let dir = self.xdg.join("copapo");
        std::fs::create_dir_all(&dir).expect("folder");
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write");
    }

    pub fn embedder(&self) -> Embedder {
        Embedder {
            env: Some(self.env()),
            ..Embedder::default()
        }
    }
}

/// Edit notices an embedder receives.
pub type Notices = Arc<Mutex<Vec<(String, PathBuf, EditPhase)>>>;

pub fn notices_into(embedder: &mut Embedder) -> Notices {
    let notices: Notices = Arc::default();
    let sink = notices.clone();
    embedder.on_file_edit = Some(Arc::new(move |turn: &str, path: &Path, phase| {
        sink.lock()
            .expect("notices")
            .push((turn.to_owned(), path.to_path_buf(), phase));
    }));
    notices
}

/// The agent over options, in a place.
pub fn agent(options: Value, embedder: Embedder) -> CofoldAgent {
    cofold_agent_with(&options, embedder).expect("the agent builds")
}

/// A host serving these agents on loopback.
pub struct TestHost {
    pub host: Host,
    pub _server: WsServer,
    pub url: String,
}

pub async fn host(agents: Vec<Arc<dyn Agent>>) -> TestHost {
    host_with(agents, |b| b).await
}

pub async fn host_with(
    agents: Vec<Arc<dyn Agent>>,
    f: impl FnOnce(HostBuilder) -> HostBuilder,
) -> TestHost {
    let builder = HostBuilder::new()
        .agents(agents)
        .delta_window(Duration::ZERO);
    let host = f(builder).build().expect("host builds");
    let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listens");
    let url = format!("ws://{}", server.local_addr());
    TestHost {
        host,
        _server: server,
        url,
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

pub fn turn_started_with(turn: &str, message: Message) -> StateAction {
    StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn.into(),
        started_at: ahpd_sdk::util::now_iso(),
        message,
        queued_message_id: None,
        meta: None,
    })
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
    format!("{prefix}-{n}")
}

impl Watch {
    /// Creates `cofold:/<id>` in `dir` with `config` and subscribes to it and its chat.
    pub async fn create(
        th: &TestHost,
        provider: &str,
        id: &str,
        dir: Option<&Path>,
        config: Value,
    ) -> Watch {
        let client = client(&th.url, "probe").await;
        let session = format!("{provider}:/{id}");
        let mut params = json!({ "channel": session, "config": config });
        if let Some(dir) = dir {
            params["workingDirectories"] = json!([ahpd_sdk::util::file_uri(dir)]);
        }
        let _: Value = client
            .request("createSession", params)
            .await
            .expect("createSession");
        Watch::subscribe(client, &session).await
    }

    /// Forks this watch's chat at `turn` into a new chat of the session and subscribes to it.
    pub async fn fork(&mut self, turn: &str) -> String {
        let chat = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
        let _: Value = self
            .client
            .request(
                "createChat",
                json!({
                    "channel": self.session, "chat": chat,
                    "source": { "kind": "fork", "chat": self.chat, "turnId": turn }
                }),
            )
            .await
            .expect("createChat");
        let (res, _sub): (SubscribeResult, _) = self
            .client
            .subscribe(chat.clone())
            .await
            .expect("subscribes");
        self.mirror
            .apply_snapshot(&res.snapshot.expect("a snapshot"));
        chat
    }

    /// A new, empty chat of this session, subscribed on this client.
    pub async fn new_chat(&mut self) -> String {
        let chat = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
        let _: Value = self
            .client
            .request(
                "createChat",
                json!({ "channel": self.session, "chat": chat }),
            )
            .await
            .expect("createChat");
        let (res, _sub): (SubscribeResult, _) = self
            .client
            .subscribe(chat.clone())
            .await
            .expect("subscribes");
        self.mirror
            .apply_snapshot(&res.snapshot.expect("a snapshot"));
        chat
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

    pub async fn next(&mut self) -> ActionEnvelope {
        loop {
            let ev = tokio::time::timeout(PATIENCE, self.events.recv())
                .await
                .expect("an event arrives")
                .expect("client alive");
            if let SubscriptionEvent::Action(env) = ev.event {
                assert!(
                    !matches!(env.action, StateAction::Unknown(_)),
                    "an envelope decoded as Unknown: {env:?}"
                );
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
        self.send_message(turn, message(text)).await;
    }

    pub async fn send_message(&mut self, turn: &str, message: Message) {
        self.client
            .dispatch(self.chat.clone(), turn_started_with(turn, message))
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

    /// The mirror of the session and its chat equals the host's snapshots.
    ///
    /// An action the host applied after the client's last round trip (or one the client saw
    /// before the snapshot was taken) can make the two differ for a moment on a loaded machine,
    /// so a difference is checked again after another round trip; only one that outlasts
    /// [`PATIENCE`] fails.
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

    /// The actions on the chat channel, in order.
    pub fn chat_actions(&self) -> Vec<&StateAction> {
        self.envelopes
            .iter()
            .filter(|e| e.channel == self.chat)
            .map(|e| &e.action)
            .collect()
    }

    /// The tool calls of the active turn, else of the last turn in the history.
    pub fn last_calls(&self) -> Vec<ToolCallState> {
        let chat = self.chat_state();
        chat.active_turn
            .as_ref()
            .map(|t| &t.response_parts)
            .or(chat.turns.last().map(|t| &t.response_parts))
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| match p {
                        ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A streamed reply calling one tool.
pub fn call(id: &str, name: &str, input: Value) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::tool_call(
            0,
            Some(id),
            Some(name),
            &input.to_string(),
        )),
        Frame::Chunk(chunk::finish("tool_calls")),
        Frame::Chunk(chunk::usage(10, 5)),
    ])
}

/// A streamed text answer.
pub fn text(answer: &str) -> Reply {
    Reply::text_stream(answer)
}

/// The scripted endpoint with these replies.
pub fn endpoint(replies: Vec<Reply>) -> Endpoint {
    Endpoint::with_replies(replies).expect("endpoint starts")
}

/// The text of every message of a chat request body, joined.
pub fn request_text(body: &Value) -> String {
    body["messages"].to_string()
}

/// Whether a tool named `name` is offered in a request body.
pub fn offered(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
