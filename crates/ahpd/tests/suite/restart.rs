//! A graceful restart with a question pending (daemon case 26): two cofold sessions with a
//! finished turn and a title each, the second with a turn waiting for the approval of a
//! `write_file`; the daemon is stopped with SIGTERM and started again on the same folders; the
//! client comes back with `reconnect` and its last server sequence, finds both sessions with
//! their turns and titles and the approval asked again, answers it, and the file is written.
//! The same holds across `ahpd restart` without `--force`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::client::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::commands::ReconnectResult;
use ahp_types::state::{
    ResponsePart, SessionInputRequest, SessionStatus, ToolCallConfirmationState, ToolCallState,
    TurnState,
};
use ahp_ws::WebSocketTransport;
use ahpd_sdk::testing::Mirror;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply};
use tokio::sync::Notify;

use super::support::*;
use super::term_support::{call, work};

/// Long enough never to pass on a healthy run; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// The client id both connections use, so the second is the first one coming back.
const CLIENT: &str = "suite";

const NOTE: &str = "kept across the restart\n";

/// The model: a plain answer to each question, and for the note a `write_file` call, then a
/// last answer once the call's result is in.
fn respond(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(at) = messages.iter().rposition(|m| m["role"] == "user") else {
        return Reply::api_error(400, "no user message");
    };
    let asked = text_of(&messages[at]);
    let answered = messages[at..].iter().any(|m| m["role"] == "tool");
    match asked.as_str() {
        "write the note" if answered => Reply::text_stream("note written"),
        "write the note" => call(
            "c-note",
            "write_file",
            json!({ "path": "note.txt", "content": NOTE }),
        ),
        other => Reply::text_stream(&format!("answer to {other}")),
    }
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// Every action envelope a client received, in order.
#[derive(Default)]
struct Feed {
    envelopes: Mutex<Vec<ActionEnvelope>>,
    changed: Notify,
}

impl Feed {
    fn follow(client: &Client) -> Arc<Feed> {
        let feed = Arc::new(Feed::default());
        let mut events = client.events();
        let writer = feed.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let SubscriptionEvent::Action(envelope) = event.event {
                    writer.envelopes.lock().unwrap().push(envelope);
                    writer.changed.notify_waiters();
                }
            }
        });
        feed
    }

    /// Waits for an envelope on `channel` whose action `found` accepts, and returns it.
    async fn until(
        &self,
        what: &str,
        channel: &str,
        found: impl Fn(&StateAction) -> bool,
    ) -> ActionEnvelope {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                let hit = self
                    .envelopes
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|e| e.channel == channel && found(&e.action))
                    .cloned();
                if let Some(envelope) = hit {
                    return envelope;
                }
                notified.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("waited too long for {what}"))
    }

    fn last_seq(&self) -> u64 {
        let envelopes = self.envelopes.lock().unwrap();
        envelopes.iter().map(|e| e.server_seq).max().unwrap_or(0)
    }

    fn all(&self) -> Vec<ActionEnvelope> {
        self.envelopes.lock().unwrap().clone()
    }
}

/// The reconnected client's view: the snapshots, then every envelope after its channel's
/// snapshot, applied once each with the reducers.
#[derive(Default)]
struct Follower {
    state: Mirror,
    from_seq: std::collections::HashMap<String, u64>,
    applied: usize,
}

impl Follower {
    fn snapshot(&mut self, snapshot: &ahp_types::state::Snapshot) {
        self.state.apply_snapshot(snapshot);
        let from = u64::try_from(snapshot.from_seq).unwrap_or(0);
        self.from_seq.insert(snapshot.resource.clone(), from);
    }

    fn catch_up(&mut self, feed: &Feed) {
        let all = feed.all();
        for envelope in &all[self.applied..] {
            let after = self.from_seq.get(&envelope.channel).copied();
            if after.is_some_and(|from| envelope.server_seq > from) {
                self.state.apply(envelope);
            }
        }
        self.applied = all.len();
    }

    /// Applies what arrives until `done` holds of the mirror (checked first: the snapshots
    /// may already hold it).
    async fn until(&mut self, feed: &Feed, what: &str, done: impl Fn(&Mirror) -> bool) {
        let wait = async {
            loop {
                let notified = feed.changed.notified();
                self.catch_up(feed);
                if done(&self.state) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("waited too long for {what}"));
    }
}

async fn request(client: &Client, method: &str, params: Value) -> Value {
    client
        .request(method, params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e:?}"))
}

async fn dispatch(client: &Client, channel: &str, action: Value) {
    client
        .notify(
            "dispatchAction",
            json!({ "channel": channel, "clientSeq": 1, "action": action }),
        )
        .await
        .unwrap();
}

async fn start_turn(client: &Client, chat: &str, turn: &str, text: &str) {
    let action = json!({
        "type": "chat/turnStarted", "turnId": turn,
        "startedAt": ahpd_sdk::util::now_iso(),
        "message": { "text": text, "origin": { "kind": "user" } },
    });
    dispatch(client, chat, action).await;
}

fn completes(turn: &'static str) -> impl Fn(&StateAction) -> bool {
    move |a| matches!(a, StateAction::ChatTurnComplete(t) if t.turn_id == turn)
}

/// A cofold session in `work`, under permission mode `default`, subscribed with its chat.
async fn new_session(client: &Client, work: &Path) -> (String, String) {
    let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
    let params = json!({
        "channel": uri, "provider": "cofold",
        "workingDirectories": [ahpd_sdk::util::file_uri(work)],
        "config": { "permissionMode": "default" },
    });
    request(client, "createSession", params).await;
    let chat = ahpd_sdk::util::default_chat_uri(&uri);
    for channel in [&uri, &chat] {
        request(client, "subscribe", json!({ "channel": channel })).await;
    }
    (uri, chat)
}

/// Every `run.json` under `dir`, with the run's status.
fn run_statuses(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            run_statuses(&path, out);
        } else if path.file_name().is_some_and(|n| n == "run.json") {
            let run: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let status = run["status"].as_str().unwrap_or("").to_owned();
            out.push((path, status));
        }
    }
}

/// The runs of the cofold store in the test's home.
fn statuses(env: &Env) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    run_statuses(&env.home().join(".cofold"), &mut out);
    out
}

/// The sessions as the first daemon leaves them: their URIs, the approval it showed (as JSON)
/// and the client's last server sequence.
struct Before {
    sessions: [(String, String); 2],
    asked: Value,
    last_seq: u64,
}

async fn first_daemon(address: &str, work: &Path) -> Before {
    let (client, _) = client(address).await;
    let feed = Feed::follow(&client);
    let one = new_session(&client, work).await;
    start_turn(&client, &one.1, "t1", "first question").await;
    feed.until("the first turn", &one.1, completes("t1")).await;
    // A title chosen by a client, over the one the engine took from the first message.
    let titled = json!({ "type": "session/titleChanged", "title": "Planning notes" });
    dispatch(&client, &one.0, titled).await;
    feed.until(
        "the chosen title",
        &one.0,
        |a| matches!(a, StateAction::SessionTitleChanged(t) if t.title == "Planning notes"),
    )
    .await;

    let two = new_session(&client, work).await;
    start_turn(&client, &two.1, "t1", "second question").await;
    feed.until("the second turn", &two.1, completes("t1")).await;
    start_turn(&client, &two.1, "t2", "write the note").await;
    let asked = feed
        .until("the approval", &two.0, |a| {
            matches!(a, StateAction::SessionInputNeededSet(_))
        })
        .await;
    let StateAction::SessionInputNeededSet(set) = &asked.action else {
        unreachable!()
    };
    let asked = serde_json::to_value(&set.request).unwrap();
    // The newest server sequence the client holds, as a client keeps it to come back with.
    let last_seq = feed.last_seq();
    client.shutdown().await;
    Before {
        sessions: [one, two],
        asked,
        last_seq,
    }
}

#[test]
fn after_a_graceful_restart_a_reconnecting_client_gets_its_sessions_and_the_pending_approval() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::builder()
        .strict_tool_pairing()
        .respond_with(|request| respond(&request.json))
        .start()
        .unwrap();
    let config = json!({
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    env.write_base(&config.to_string());

    let daemon = env.daemon(&["--port", "0"], "first.log");
    let before = rt().block_on(first_daemon(&daemon.address, &work));
    let first_log = daemon.log.clone();
    assert_eq!(daemon.stop(), 0, "the graceful stop exits 0");
    let log = std::fs::read_to_string(&first_log).unwrap();
    assert!(log.contains("sessions closed"), "the stop finished:\n{log}");
    assert!(
        !work.join("note.txt").exists(),
        "nothing approved the write"
    );
    // The run waiting on a person is left as it was, not cancelled: only it, in the second
    // session's conversation, still waits.
    let id_two = before.sessions[1].0.trim_start_matches("cofold:/");
    let runs = statuses(&env);
    let waiting: Vec<&PathBuf> = runs
        .iter()
        .filter(|(_, s)| s == "awaiting")
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        waiting.len(),
        1,
        "one run still waits after the stop: {runs:?}"
    );
    assert!(
        waiting[0].to_string_lossy().contains(id_two),
        "the waiting run is the second session's: {runs:?}"
    );

    let daemon = env.daemon(&["--port", "0"], "second.log");
    rt().block_on(second_daemon(&daemon.address, &before, &work));
    assert_eq!(
        std::fs::read_to_string(work.join("note.txt")).unwrap(),
        NOTE,
        "the approved write ran"
    );
    let runs = statuses(&env);
    assert!(
        runs.iter().all(|(_, s)| s == "completed"),
        "every run ended completed: {runs:?}"
    );
    for body in ep.chat_bodies() {
        assert_eq!(testkit::tool_pairing_fault(&body), None, "{body}");
    }
    assert_eq!(daemon.stop(), 0);
}

/// `ahpd restart` without `--force` while a turn waits on a person: it is not refused, and
/// the question is still there after it, as after a stop and a start.
#[test]
fn ahpd_restart_without_force_keeps_the_pending_approval() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::builder()
        .strict_tool_pairing()
        .respond_with(|request| respond(&request.json))
        .start()
        .unwrap();
    let config = json!({
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    env.write_base(&config.to_string());
    let address = || {
        let record: Value =
            serde_json::from_str(&std::fs::read_to_string(env.dir().join("daemon.json")).unwrap())
                .unwrap();
        let address = record["address"].as_str().unwrap().to_owned();
        (
            format!("{address}/?tkn={}", default_token(&env)),
            record["pid"].clone(),
        )
    };

    let out = env.run(&["start", "--port", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (first, first_pid) = address();
    let before = rt().block_on(first_daemon(&first, &work));
    let out = env.run(&["restart"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a turn waiting on a person does not refuse the restart: {}",
        text(&out.stderr)
    );
    let (second, second_pid) = address();
    assert_ne!(first_pid, second_pid, "a new daemon runs");
    assert!(
        !work.join("note.txt").exists(),
        "nothing approved the write"
    );
    let runs = statuses(&env);
    assert!(
        runs.iter().any(|(_, s)| s == "awaiting"),
        "the waiting run was suspended, not cancelled: {runs:?}"
    );
    rt().block_on(second_daemon(&second, &before, &work));
    assert_eq!(
        std::fs::read_to_string(work.join("note.txt")).unwrap(),
        NOTE
    );
    assert_eq!(env.run(&["stop"]).status.code(), Some(0));
}

async fn second_daemon(address: &str, before: &Before, work: &Path) {
    let [(one, chat_one), (two, chat_two)] = &before.sessions;
    let transport = WebSocketTransport::connect(address).await.unwrap();
    let config = ClientConfig {
        subscription_buffer: 4096,
        ..ClientConfig::default()
    };
    let client = Client::connect(transport, config).await.unwrap();
    let feed = Feed::follow(&client);
    let channels = vec![one.clone(), chat_one.clone(), two.clone(), chat_two.clone()];
    let last_seq = i64::try_from(before.last_seq).unwrap();
    let reply = client
        .reconnect(CLIENT.into(), last_seq, channels)
        .await
        .unwrap();
    let ReconnectResult::Snapshot(result) = reply else {
        panic!("a new daemon cannot replay what the old one published: {reply:?}");
    };
    assert_eq!(
        result.snapshots.len(),
        4,
        "every channel is back: {result:?}"
    );
    let mut mirror = Follower::default();
    for snapshot in &result.snapshots {
        mirror.snapshot(snapshot);
    }
    assert_snapshots(&mirror.state, before);

    // The question, asked again as the first daemon asked it: in the snapshot, or (as the
    // engine opens beside the reconnect) in the actions right after it.
    mirror
        .until(&feed, "the approval asked again", |m| {
            m.sessions[two]
                .input_needed
                .as_ref()
                .is_some_and(|n| !n.is_empty())
        })
        .await;
    let needed = mirror.state.sessions[two].input_needed.clone().unwrap();
    assert_eq!(
        serde_json::to_value(&needed).unwrap(),
        json!([before.asked]),
        "the same request as before the restart"
    );
    assert_pending(&mirror.state, two, chat_two);
    let row = listed_row(&client, two).await;
    assert_eq!(
        row["status"].as_u64().unwrap() as u32 & SessionStatus::InputNeeded.bits(),
        SessionStatus::InputNeeded.bits(),
        "{row}"
    );

    // Answered through the reconnected client, the turn goes on and writes the file.
    let approve = json!({
        "type": "chat/toolCallConfirmed", "turnId": "t2", "toolCallId": "c-note",
        "approved": true, "selectedOptionId": "allow-once",
    });
    dispatch(&client, chat_two, approve).await;
    mirror
        .until(&feed, "the note's turn", |m| {
            m.chats[chat_two].turns.len() == 2
        })
        .await;
    let mirror = &mirror.state;
    let turns = &mirror.chats[chat_two].turns;
    let ids: Vec<&str> = turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2"]);
    assert_eq!(turns[1].state, TurnState::Complete, "{:?}", turns[1]);
    assert!(work.join("note.txt").exists());
    assert!(
        mirror.sessions[two]
            .input_needed
            .as_ref()
            .is_none_or(Vec::is_empty),
        "nothing is asked any more"
    );
    client.shutdown().await;
}

/// The snapshots: both sessions with their titles, and each chat with its finished turn.
fn assert_snapshots(mirror: &Mirror, before: &Before) {
    let [(one, chat_one), (two, chat_two)] = &before.sessions;
    assert_eq!(mirror.sessions[one].title, "Planning notes");
    assert_eq!(mirror.sessions[two].title, "second question");
    for (chat, question) in [(chat_one, "first question"), (chat_two, "second question")] {
        let turns = &mirror.chats[chat].turns;
        assert_eq!(turns.len(), 1, "{chat}: {turns:?}");
        assert_eq!(turns[0].id, "t1");
        assert_eq!(turns[0].message.text, question);
        assert_eq!(turns[0].state, TurnState::Complete);
        let text: String = turns[0]
            .response_parts
            .iter()
            .filter_map(|p| match p {
                ResponsePart::Markdown(m) => Some(m.content.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, format!("answer to {question}"));
    }
}

/// The second session's state holds the approval of `write_file` for turn `t2`, and its chat
/// shows that turn running with the call waiting for confirmation.
fn assert_pending(mirror: &Mirror, session: &str, chat: &str) {
    let needed = mirror.sessions[session]
        .input_needed
        .clone()
        .unwrap_or_default();
    assert_eq!(needed.len(), 1, "{needed:?}");
    let SessionInputRequest::ToolConfirmation(request) = &needed[0] else {
        panic!("a tool confirmation: {needed:?}");
    };
    assert_eq!(request.id, "tool:c-note");
    assert_eq!(request.chat, chat);
    assert_eq!(request.turn_id, "t2");
    let ToolCallConfirmationState::PendingConfirmation(call) = &request.tool_call else {
        panic!("pending confirmation: {request:?}");
    };
    assert_eq!(call.tool_call_id, "c-note");
    assert_eq!(call.tool_name, "write_file");
    let input = serde_json::to_value(&call.tool_input).unwrap();
    assert!(input.to_string().contains("note.txt"), "{input}");

    let state = &mirror.chats[chat];
    let active = state.active_turn.as_ref().expect("turn t2 is running");
    assert_eq!(active.id, "t2");
    assert_eq!(active.message.text, "write the note");
    let pending = active.response_parts.iter().any(|p| {
        matches!(p, ResponsePart::ToolCall(tc) if matches!(
            &tc.tool_call,
            ToolCallState::PendingConfirmation(s) if s.tool_call_id == "c-note"
        ))
    });
    assert!(pending, "the call waits for confirmation: {active:?}");
}
