//! The daemon killed (SIGKILL) at many points of a coding turn of the cofold engine and started
//! again on the same folders each time: the conversation stays listed and readable, keeps every
//! message stored before the kill exactly once, only ever sends the model a valid conversation,
//! and takes a new turn.
//!
//! The turn reads a file, edits it (an approval the test answers as a client), runs a shell
//! command that sleeps (an approval too), asks the person a question (answered by the test as
//! a client) and answers. The points are reached by waiting on what
//! the daemon does: a model request held by the scripted endpoint before or in the middle of its
//! answer, an approval or the question left unanswered, the command's marker file, the end of the turn, and the
//! n-th change of the session folder's files after the turn began.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::client::{Client, SubscriptionEvent};
use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Gate, Reply, chunk, tool_pairing_fault};
use tokio::sync::Notify;

use super::support::*;
use super::term_support::work;

/// Long enough never to pass on a healthy run; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// Where a model request is held.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    /// Before any byte of the answer to the n-th request of the turn.
    Before(usize),
    /// After the answer's first chunks (a tool call or some text), before its end.
    During(usize),
}

/// Where the daemon is killed.
#[derive(Clone, Copy, Debug)]
enum Point {
    Held(Hold),
    /// While the approval of the edit (0) or the command (1) waits on the client.
    Approval(usize),
    /// While the question waits on the client.
    Question,
    /// While the shell command runs.
    Command,
    /// Once the turn has ended.
    AfterTurn,
    /// Right after the n-th observed change of the session folder's files since the turn began.
    Writes(usize),
}

/// The model requests of the coding turn: read, edit, shell, question, answer.
const STEPS: usize = 5;

fn plan() -> Vec<Point> {
    let mut points = Vec::new();
    for step in 0..STEPS {
        points.push(Point::Held(Hold::Before(step)));
        points.push(Point::Held(Hold::During(step)));
    }
    points.extend([
        Point::Approval(0),
        Point::Approval(1),
        Point::Question,
        Point::Command,
        Point::AfterTurn,
    ]);
    // More than are needed: how many changes a poll sees depends on the machine's pace.
    points.extend((1..=12).map(Point::Writes));
    points
}

/// What the scripted model does; shared with the endpoint's responder.
#[derive(Default)]
struct Script {
    hold: Option<(Hold, Gate)>,
    marks: PathBuf,
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The answer to a chat request: `pong` to a ping, and the steps of the coding turn `work N`
/// chosen by how many tool results follow its message.
fn respond(script: &Mutex<Script>, body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let Some(at) = messages.iter().rposition(|m| m["role"] == "user") else {
        return Reply::api_error(400, "no user message");
    };
    let asked = text_of(&messages[at]);
    if !asked.starts_with("work ") {
        return Reply::text_stream("pong");
    }
    let n = asked.trim_start_matches("work ").trim().to_owned();
    let step = messages[at..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .count();
    let mut script = script.lock().unwrap();
    let marker = script.marks.join(format!("w{n}"));
    let (head, tail): (Vec<Value>, Vec<Value>) = match step {
        0 => tool_call(
            &format!("w{n}-read"),
            "read_file",
            json!({ "path": "a.txt" }),
        ),
        1 => tool_call(
            &format!("w{n}-edit"),
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": format!("hello {n}") }),
        ),
        2 => tool_call(
            &format!("w{n}-shell"),
            "shell_exec",
            json!({ "command": format!("echo started > '{}'; sleep 1; echo slept", marker.display()) }),
        ),
        3 => tool_call(
            &format!("w{n}-ask"),
            "ask_user",
            json!({ "questions": [{ "id": "colour", "question": "Which colour?" }] }),
        ),
        _ => (
            vec![chunk::role(), chunk::text("done ")],
            vec![chunk::text(&n), chunk::finish("stop"), chunk::usage(10, 5)],
        ),
    };
    let mut frames: Vec<Frame> = head.into_iter().map(Frame::Chunk).collect();
    let held = script.hold.take();
    let before = match held {
        Some((Hold::During(s), gate)) if s == step => {
            frames.push(Frame::Gate(gate));
            None
        }
        Some((Hold::Before(s), gate)) if s == step => Some(gate),
        other => {
            script.hold = other;
            None
        }
    };
    frames.extend(tail.into_iter().map(Frame::Chunk));
    let reply = Reply::stream(frames);
    match before {
        Some(gate) => reply.held(&gate),
        None => reply,
    }
}

fn tool_call(id: &str, name: &str, input: Value) -> (Vec<Value>, Vec<Value>) {
    (
        vec![
            chunk::role(),
            chunk::tool_call(0, Some(id), Some(name), &input.to_string()),
        ],
        vec![chunk::finish("tool_calls"), chunk::usage(10, 5)],
    )
}

/// What the client saw of the chat.
#[derive(Default)]
struct Seen {
    completed: HashSet<String>,
    errors: Vec<String>,
    /// The tool whose approval the test leaves waiting, and whether it was asked.
    leave: Option<String>,
    left_waiting: bool,
    /// The turn whose approvals are answered.
    answering: Option<String>,
}

struct Watch {
    seen: Mutex<Seen>,
    changed: Notify,
}

impl Watch {
    async fn until(&self, what: &str, done: impl Fn(&Seen) -> bool) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                {
                    let seen = self.seen.lock().unwrap();
                    assert!(seen.errors.is_empty(), "a turn failed: {:?}", seen.errors);
                    if done(&seen) {
                        return;
                    }
                }
                notified.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .unwrap_or_else(|_| panic!("waited too long for {what}"));
    }
}

/// Follows every action the client receives: answers the approvals of the turn being worked
/// (except the one left waiting) and notes turns that end.
fn follow(client: &Client, chat: String, watch: Arc<Watch>) {
    let mut events = client.events();
    let client = client.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let SubscriptionEvent::Action(envelope) = event.event else {
                continue;
            };
            let action = serde_json::to_value(&envelope.action).unwrap();
            let mut answer = None;
            let mut question = None;
            {
                let mut seen = watch.seen.lock().unwrap();
                match action["type"].as_str().unwrap_or("") {
                    "chat/turnComplete" => {
                        seen.completed
                            .insert(action["turnId"].as_str().unwrap_or("").to_owned());
                    }
                    "chat/turnError" => seen.errors.push(action.to_string()),
                    "session/inputNeededSet" if action["request"]["kind"] == "chatInput" => {
                        if seen.leave.as_deref() == Some("ask_user") {
                            seen.left_waiting = true;
                        } else {
                            let id = action["request"]["request"]["id"].as_str().unwrap_or("");
                            question = Some(id.to_owned());
                        }
                    }
                    "session/inputNeededSet" if action["request"]["kind"] == "toolConfirmation" => {
                        let request = &action["request"];
                        let turn = request["turnId"].as_str().unwrap_or("").to_owned();
                        let tool = request["toolCall"]["toolName"].as_str().unwrap_or("");
                        // A run paused before a restart may go on once a new turn declined
                        // its request: its later approvals are answered too.
                        if seen.answering.as_deref() == Some(turn.as_str())
                            && seen.leave.as_deref() == Some(tool)
                        {
                            seen.left_waiting = true;
                        } else {
                            let call = request["toolCall"]["toolCallId"]
                                .as_str()
                                .unwrap_or("")
                                .to_owned();
                            answer = Some((turn, call));
                        }
                    }
                    _ => {}
                }
            }
            watch.changed.notify_waiters();
            if let Some(request) = question {
                let _ = dispatch_action(
                    &client,
                    &chat,
                    json!({
                        "type": "chat/inputCompleted", "requestId": request,
                        "response": "accept",
                        "answers": { "colour": {
                            "state": "submitted",
                            "value": { "kind": "text", "value": "blue" },
                        } },
                    }),
                )
                .await;
            }
            if let Some((turn, call)) = answer {
                let _ = dispatch_action(
                    &client,
                    &chat,
                    json!({
                        "type": "chat/toolCallConfirmed", "turnId": turn,
                        "toolCallId": call, "approved": true,
                        "selectedOptionId": "allow-once",
                    }),
                )
                .await;
            }
        }
    });
}

/// Dispatches `action` to `chat` as a notification: no reply is awaited.
async fn dispatch_action(
    client: &Client,
    chat: &str,
    action: Value,
) -> Result<(), ahp::ClientError> {
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": 1, "action": action }),
        )
        .await
}

async fn start_turn(client: &Client, chat: &str, turn: &str, text: &str) {
    dispatch_action(
        client,
        chat,
        json!({
            "type": "chat/turnStarted", "turnId": turn,
            "startedAt": ahpd_sdk::util::now_iso(),
            "message": { "text": text, "origin": { "kind": "user" } },
        }),
    )
    .await
    .unwrap();
}

/// Every file under `dir` with its length.
fn shape(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.metadata() {
            Ok(meta) if meta.is_dir() => out.extend(shape(&path)),
            Ok(meta) => {
                out.insert(path, meta.len());
            }
            Err(_) => {}
        }
    }
    out
}

/// The first file named `name` under `dir`.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

/// The stored messages, each whole line parsed; a torn last line is not a stored message.
fn stored(messages: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(messages).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(line) {
            Ok(message) => out.push(message),
            // A line torn by a kill is no stored message; the store reads past it as well.
            Err(error) => eprintln!(
                "line {} of {} is left out: {error}",
                at + 1,
                messages.display()
            ),
        }
    }
    out
}

fn ids(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// No message and no tool result is stored twice.
fn assert_no_duplicates(messages: &[Value]) {
    let mut seen = HashSet::new();
    for id in ids(messages) {
        assert!(seen.insert(id.clone()), "message {id} is stored twice");
    }
    let mut results = HashSet::new();
    for message in messages {
        for part in message["parts"].as_array().into_iter().flatten() {
            if part["type"] == "toolResult" {
                let call = part["callId"].as_str().unwrap_or("").to_owned();
                assert!(
                    results.insert(call.clone()),
                    "call {call} is answered twice"
                );
            }
        }
    }
}

/// The status of every run of the session folder holding `messages`.
fn run_statuses(messages: &Path) -> Vec<String> {
    let runs = messages.parent().unwrap().join("runs");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(runs).into_iter().flatten().flatten() {
        if let Ok(text) = std::fs::read_to_string(entry.path().join("run.json")) {
            let run: Value = serde_json::from_str(&text).unwrap();
            out.push(run["status"].as_str().unwrap_or("").to_owned());
        }
    }
    out
}

#[test]
fn killing_the_daemon_anywhere_in_a_coding_turn_loses_nothing_and_blocks_nothing() {
    let env = Env::new();
    let work = work(&env);
    let marks = env.root.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let script = Arc::new(Mutex::new(Script {
        hold: None,
        marks: marks.clone(),
    }));
    let responder = script.clone();
    let ep = Endpoint::builder()
        .strict_tool_pairing()
        .respond_with(move |request| respond(&responder, &request.json))
        .start()
        .unwrap();
    let config = json!({
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    env.write_base(&config.to_string());
    let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
    let chat = ahpd_sdk::util::default_chat_uri(&uri);

    let _log = LogOnFailure(env.root.path().join("crash.log"));
    let mut messages_file: Option<PathBuf> = None;
    let mut before_kill: Vec<String> = Vec::new();
    let mut reached: Vec<String> = Vec::new();
    let points = plan();
    for (i, point) in points.iter().copied().enumerate() {
        let mut daemon = env.daemon(&["--port", "0"], "crash.log");
        let killed_at = rt().block_on(async {
            let (client, _) = client(&daemon.address).await;
            let watch = Arc::new(Watch {
                seen: Mutex::new(Seen::default()),
                changed: Notify::new(),
            });
            follow(&client, chat.clone(), watch.clone());
            if i == 0 {
                let _: Value = client
                    .request(
                        "createSession",
                        json!({
                            "channel": uri, "provider": "cofold",
                            "workingDirectories": [ahpd_sdk::util::file_uri(&work)],
                            "config": { "permissionMode": "default" },
                        }),
                    )
                    .await
                    .unwrap();
            } else {
                // Listed, and its transcript reads back.
                let list: Value = client
                    .request(
                        "listSessions",
                        json!({ "channel": ahp_types::ROOT_RESOURCE_URI }),
                    )
                    .await
                    .unwrap();
                assert!(
                    list["items"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r["resource"] == uri),
                    "after kill {i} the session is not listed: {list}"
                );
            }
            let _: Value = client
                .request("subscribe", json!({ "channel": uri }))
                .await
                .unwrap();
            let snapshot: Value = client
                .request("subscribe", json!({ "channel": chat }))
                .await
                .unwrap();
            let turns = snapshot["snapshot"]["state"]["turns"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if i > 0 {
                assert!(
                    !turns.is_empty(),
                    "after kill {i} the transcript reads back empty: {snapshot}"
                );
            }

            // A new turn completes.
            let ping = format!("p{i}");
            start_turn(&client, &chat, &ping, &format!("ping {i}")).await;
            watch
                .until(&format!("turn {ping}"), |s| s.completed.contains(&ping))
                .await;
            let file = messages_file
                .get_or_insert_with(|| find(env.root.path(), "messages.jsonl").unwrap())
                .clone();
            if i > 0 {
                // Nothing stored before the kill was lost or stored again, and the dead run
                // was settled.
                let now = stored(&file);
                assert_no_duplicates(&now);
                let now_ids = ids(&now);
                assert!(
                    now_ids.starts_with(&before_kill),
                    "after kill {i} the stored messages changed:\nbefore {before_kill:?}\nnow {now_ids:?}"
                );
                let statuses = run_statuses(&file);
                assert!(
                    !statuses.iter().any(|s| s == "running"),
                    "after kill {i} a run is still running: {statuses:?}"
                );
            }
            for body in ep.chat_bodies() {
                assert_eq!(tool_pairing_fault(&body), None, "after kill {i}: {body}");
            }

            // The coding turn, killed at the point.
            let turn = format!("w{i}");
            {
                let mut seen = watch.seen.lock().unwrap();
                seen.answering = Some(turn.clone());
                seen.leave = match point {
                    Point::Approval(0) => Some("edit_file".to_owned()),
                    Point::Approval(_) => Some("shell_exec".to_owned()),
                    Point::Question => Some("ask_user".to_owned()),
                    _ => None,
                };
            }
            let gate = Gate::new();
            if let Point::Held(hold) = point {
                script.lock().unwrap().hold = Some((hold, gate.clone()));
            }
            let folder = file.parent().unwrap().to_owned();
            let start = shape(&folder);
            start_turn(&client, &chat, &turn, &format!("work {i}")).await;
            let hit = match point {
                Point::Held(_) => {
                    tokio::time::timeout(PATIENCE, gate.reached())
                        .await
                        .expect("the held model request");
                    true
                }
                Point::Approval(_) | Point::Question => {
                    watch.until("the ask", |s| s.left_waiting).await;
                    true
                }
                Point::Command => {
                    let marker = marks.join(format!("w{i}"));
                    until_file(&marker).await;
                    true
                }
                Point::AfterTurn => {
                    watch.until("the turn", |s| s.completed.contains(&turn)).await;
                    true
                }
                Point::Writes(n) => writes(&folder, start, n, &watch, &turn).await,
            };
            daemon.child.kill().unwrap();
            daemon.child.wait().unwrap();
            gate.open();
            hit.then(|| format!("{point:?}"))
        });
        if let Some(label) = killed_at {
            reached.push(label);
        }
        before_kill = ids(&stored(messages_file.as_ref().unwrap()));
        drop(daemon);
    }
    // The last kill is checked by one more start.
    let daemon = env.daemon(&["--port", "0"], "crash.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let watch = Arc::new(Watch {
            seen: Mutex::new(Seen::default()),
            changed: Notify::new(),
        });
        follow(&client, chat.clone(), watch.clone());
        let _: Value = client
            .request("subscribe", json!({ "channel": chat }))
            .await
            .unwrap();
        start_turn(&client, &chat, "last", "ping last").await;
        watch
            .until("the last turn", |s| s.completed.contains("last"))
            .await;
    });
    let now = stored(messages_file.as_ref().unwrap());
    assert_no_duplicates(&now);
    assert!(ids(&now).starts_with(&before_kill));
    for body in ep.chat_bodies() {
        assert_eq!(tool_pairing_fault(&body), None, "{body}");
    }
    eprintln!("kill points reached ({}): {reached:?}", reached.len());
    assert!(
        reached.len() >= 20,
        "only {} kill points were reached: {reached:?}",
        reached.len()
    );
}

/// Waits until `path` exists.
async fn until_file(path: &Path) {
    let wait = async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .unwrap_or_else(|_| panic!("{} never appeared", path.display()));
}

/// Waits for the `n`-th change of the files under `folder` from `start` on; false when the turn
/// ended first.
async fn writes(
    folder: &Path,
    start: BTreeMap<PathBuf, u64>,
    n: usize,
    watch: &Watch,
    turn: &str,
) -> bool {
    let wait = async {
        let mut last = start;
        let mut count = 0;
        loop {
            let now = shape(folder);
            if now != last {
                count += 1;
                last = now;
                if count >= n {
                    return true;
                }
            }
            if watch.seen.lock().unwrap().completed.contains(turn) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("the session folder to change")
}

/// Prints the daemons' log when the test fails, as the folder holding it goes with the test.
struct LogOnFailure(PathBuf);

impl Drop for LogOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.0).unwrap_or_default();
            eprintln!("daemon log:\n{log}");
        }
    }
}
