//! Shared test plumbing: a host on a real loopback WebSocket, official clients, and a watcher
//! that feeds every envelope a client receives into a reducer-built mirror.

use std::sync::Arc;
use std::time::Duration;

use ahp::{
    Client, ClientConfig, ClientEventStream, SubscriptionEvent, Transport, TransportMessage,
};
use ahp_types::actions::{ActionEnvelope, ChatTurnStartedAction, StateAction};
use ahp_types::state::{Message, MessageKind, MessageOrigin, Snapshot, SnapshotState};
use ahp_ws::WebSocketTransport;
use ahpd_sdk::host::{Host, HostBuilder};
use ahpd_sdk::testing::{Mirror, ScriptedAgent};
use ahpd_sdk::transport::ws::{WsConfig, WsServer};
use serde_json::Value;

/// Long enough never to fire on a healthy host; only turns a hang into a failure.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct TestHost {
    pub host: Host,
    /// Kept so the listener lives as long as the test.
    pub _server: WsServer,
    pub url: String,
}

pub async fn start_with(
    agent: ScriptedAgent,
    f: impl FnOnce(HostBuilder) -> HostBuilder,
) -> TestHost {
    let builder = HostBuilder::new()
        .agent(Arc::new(agent))
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

pub async fn start() -> TestHost {
    start_with(ScriptedAgent::new(), |b| b).await
}

pub async fn client(url: &str) -> Client {
    let t = WebSocketTransport::connect(url).await.expect("connects");
    Client::connect(
        t,
        ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 4096,
        },
    )
    .await
    .expect("client starts")
}

/// The opening most tests share: `c` initializes as `id` (1.0.0, no initial subscriptions),
/// creates `session`, and subscribes to `channels`, whose snapshots seed the returned watch.
pub async fn open_session(c: &Client, id: &str, session: &str, channels: &[&str]) -> Watch {
    open_session_with(c, id, serde_json::json!({"channel": session}), channels).await
}

/// [`open_session`] with the `createSession` params spelled out (a provider, say).
pub async fn open_session_with(c: &Client, id: &str, create: Value, channels: &[&str]) -> Watch {
    // Watch before initialize, so not one event the host sends this client is missed.
    let mut w = Watch::new(c);
    c.initialize(id.into(), vec!["1.0.0".into()], vec![])
        .await
        .expect("initialize");
    let _: Value = c
        .request("createSession", create)
        .await
        .expect("createSession");
    for uri in channels {
        let (r, _) = c.subscribe((*uri).to_owned()).await.expect("subscribe");
        w.snapshot(&r.snapshot.expect("a state-bearing channel"));
    }
    w
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

pub fn turn_started(turn: &str, text: &str) -> StateAction {
    StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn.into(),
        started_at: ahpd_sdk::util::now_iso(),
        message: message(text),
        queued_message_id: None,
        meta: None,
    })
}

/// Everything one client receives, applied to a mirror as it arrives.
pub struct Watch {
    client: Client,
    events: ClientEventStream,
    pub mirror: Mirror,
    pub last_seq: u64,
    pub envelopes: Vec<ActionEnvelope>,
    pub notifications: Vec<(String, SubscriptionEvent)>,
    /// Each channel's snapshot `fromSeq`: its envelopes must come after it.
    from_seq: std::collections::HashMap<String, u64>,
}

impl Watch {
    pub fn new(client: &Client) -> Self {
        Self {
            client: client.clone(),
            events: client.events(),
            mirror: Mirror::default(),
            last_seq: 0,
            envelopes: Vec::new(),
            notifications: Vec::new(),
            from_seq: std::collections::HashMap::new(),
        }
    }

    pub fn snapshot(&mut self, snap: &Snapshot) {
        self.mirror.apply_snapshot(snap);
        self.from_seq
            .insert(snap.resource.clone(), snap.from_seq.max(0) as u64);
    }

    /// The checks every received envelope passes: a known action, and (unless rejected) a
    /// `serverSeq` above the last one and above its channel's snapshot.
    fn check(&mut self, env: &ActionEnvelope) {
        assert!(
            !matches!(env.action, StateAction::Unknown(_)),
            "an envelope decoded as Unknown: {env:?}"
        );
        if env.rejection_reason.is_none() {
            assert!(
                env.server_seq > self.last_seq,
                "serverSeq went from {} to {}",
                self.last_seq,
                env.server_seq
            );
            if let Some(from) = self.from_seq.get(&env.channel) {
                assert!(
                    env.server_seq > *from,
                    "envelope {} on {} is not after its snapshot's fromSeq {from}",
                    env.server_seq,
                    env.channel
                );
            }
            self.last_seq = env.server_seq;
        }
    }

    /// The next envelope (notifications are recorded on the way).
    pub async fn next(&mut self) -> ActionEnvelope {
        loop {
            let ev = tokio::time::timeout(PATIENCE, self.events.recv())
                .await
                .expect("an event arrives")
                .expect("client alive");
            match ev.event {
                SubscriptionEvent::Action(env) => {
                    self.check(&env);
                    self.mirror.apply(&env);
                    self.envelopes.push(env.clone());
                    return env;
                }
                other => self.notifications.push((ev.channel, other)),
            }
        }
    }

    pub async fn until(&mut self, mut pred: impl FnMut(&ActionEnvelope) -> bool) -> ActionEnvelope {
        loop {
            let env = self.next().await;
            if pred(&env) {
                return env;
            }
        }
    }

    /// The next protocol notification of the given kind.
    pub async fn notification(
        &mut self,
        mut pred: impl FnMut(&SubscriptionEvent) -> bool,
    ) -> SubscriptionEvent {
        if let Some(i) = self.notifications.iter().position(|(_, n)| pred(n)) {
            return self.notifications.remove(i).1;
        }
        loop {
            let ev = tokio::time::timeout(PATIENCE, self.events.recv())
                .await
                .expect("an event arrives")
                .expect("client alive");
            match ev.event {
                SubscriptionEvent::Action(env) => {
                    self.last_seq = self.last_seq.max(env.server_seq);
                    self.mirror.apply(&env);
                    self.envelopes.push(env);
                }
                other if pred(&other) => return other,
                other => self.notifications.push((ev.channel, other)),
            }
        }
    }

    /// Consume everything the host sent this client before now: a ping's reply is queued
    /// behind every earlier frame, and the client fans events out before it resolves replies.
    pub async fn sync(&mut self) {
        self.client.ping().await.expect("ping");
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::ZERO, self.events.recv()).await {
            match ev.event {
                SubscriptionEvent::Action(env) => {
                    self.check(&env);
                    self.mirror.apply(&env);
                    self.envelopes.push(env);
                }
                other => self.notifications.push((ev.channel, other)),
            }
        }
    }
}

/// Every listed channel of the mirror equals a fresh snapshot from the host.
pub async fn assert_mirror(th: &TestHost, watch: &mut Watch, uris: &[&str]) {
    for uri in uris {
        let snap = th
            .host
            .snapshot(uri)
            .await
            .unwrap_or_else(|| panic!("no snapshot of {uri}"));
        watch.sync().await;
        match &snap.state {
            SnapshotState::Session(s) => assert_eq!(
                watch.mirror.sessions.get(*uri),
                Some(&**s),
                "session {uri} differs"
            ),
            SnapshotState::Chat(c) => assert_eq!(
                watch.mirror.chats.get(*uri),
                Some(&**c),
                "chat {uri} differs"
            ),
            SnapshotState::Root(r) => {
                assert_eq!(watch.mirror.root.as_ref(), Some(&**r), "root differs")
            }
            _ => panic!("unexpected snapshot kind"),
        }
    }
}

/// A raw JSON-RPC connection for frames the official client would never send.
pub struct Raw {
    t: WebSocketTransport,
}

impl Raw {
    pub async fn connect(url: &str) -> Self {
        Self {
            t: WebSocketTransport::connect(url).await.expect("connects"),
        }
    }

    pub async fn send(&mut self, text: &str) {
        self.t
            .send(TransportMessage::Text(text.into()))
            .await
            .expect("sends");
    }

    pub async fn recv(&mut self) -> Option<Value> {
        let m = tokio::time::timeout(PATIENCE, self.t.recv())
            .await
            .expect("a frame arrives")
            .ok()??;
        match m {
            TransportMessage::Text(s) => {
                Some(serde_json::from_str(&s).expect("host frames are JSON"))
            }
            TransportMessage::Binary(b) => {
                Some(serde_json::from_slice(&b).expect("host frames are JSON"))
            }
            TransportMessage::Parsed(p) => Some(serde_json::to_value(p).expect("encodes")),
        }
    }

    /// Send a request and return the reply with that id (skipping notifications).
    pub async fn call(&mut self, text: &str) -> Value {
        self.send(text).await;
        loop {
            let v = self.recv().await.expect("a reply");
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    pub async fn init(&mut self, client_id: &str) -> Value {
        let req = serde_json::json!({"jsonrpc": "2.0", "id": 1000, "method": "initialize",
            "params": {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id}});
        self.call(&req.to_string()).await
    }
}

/// Warnings the host logged, as (the `chat` field, the message), recorded by a process-wide
/// subscriber that [`capture_warnings`] installs once.
static WARNINGS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

struct WarnCapture;

#[derive(Default)]
struct WarnFields {
    chat: String,
    message: String,
}

impl tracing::field::Visit for WarnFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "chat" => self.chat = format!("{value:?}"),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

impl tracing::Subscriber for WarnCapture {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        // WARN and ERROR only (a more verbose level compares greater).
        *meta.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = WarnFields::default();
        event.record(&mut fields);
        if let Ok(mut w) = WARNINGS.lock() {
            w.push((fields.chat, fields.message));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Start recording the host's warnings (idempotent; the first caller installs the recorder).
pub fn capture_warnings() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(WarnCapture)
            .expect("no other global subscriber in this test binary");
    });
}

/// Whether a warning about `chat` whose message contains `needle` was logged.
pub fn warned(chat: &str, needle: &str) -> bool {
    warnings(chat, needle) > 0
}

/// How many warnings recorded for `chat` contain `needle`.
pub fn warnings(chat: &str, needle: &str) -> usize {
    WARNINGS
        .lock()
        .map(|w| {
            w.iter()
                .filter(|(c, m)| c == chat && m.contains(needle))
                .count()
        })
        .unwrap_or(0)
}
