//! One question to a conversation inside a machine, asked through an inner host started for it:
//! its transcript when a past session is opened, its disposal when the session is deleted. The
//! session's own inner host is not running then (the session is closed or not yet opened), and
//! the one started here leaves the conversation's unfinished work alone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ahp::{Client, ClientConfig, ClientError, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::state::Turn;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::transport::{LineTransport, StderrTail};
use crate::agent::Agent;
use crate::nested::machine::{ComputerPort, InnerEnd, InnerStart};
use crate::util::file_uri;

/// How long the inner host has for each request, and then to end after its input closed.
const STEP: Duration = Duration::from_secs(3);

/// At most this many older pages are fetched for a transcript, so a host answering with
/// cursors for ever cannot hold the opening of a session.
const MAX_PAGES: usize = 1000;

/// What names the conversation inside.
pub(crate) struct Inside<'a> {
    pub port: &'a Arc<dyn ComputerPort>,
    pub agent: &'a Arc<dyn Agent>,
    pub plugin: &'a str,
    pub provider: &'a str,
    pub machine: &'a str,
    pub backend_id: &'a str,
    /// The session's folder on this host, so the inner one's URIs read as it.
    pub folder: Option<PathBuf>,
    pub timeout: Duration,
}

/// An inner host started for one question, initialized, with the conversation's URI in it.
struct Reached {
    client: Client,
    ended: BoxFuture<'static, InnerEnd>,
    tail: StderrTail,
    /// The conversation's session URI inside.
    channel: String,
    /// `(inner prefix, host prefix)` of working folder URIs, when they differ.
    remap: Option<(String, String)>,
}

/// Asks an inner host to dispose the conversation; what goes wrong is a log line, since the
/// outer session goes whatever happens inside.
pub(crate) async fn dispose_inside(i: Inside<'_>) {
    let result = match reach(&i).await {
        Ok(r) => {
            let asked = tokio::time::timeout(
                STEP,
                r.client
                    .request::<_, Value>("disposeSession", json!({ "channel": r.channel })),
            )
            .await
            .map_err(|_| "it did not answer disposeSession within 3 s".to_owned())
            .and_then(|a| a.map(|_| ()).map_err(|e| e.to_string()));
            finish(r, i.machine, asked).await
        }
        Err(why) => Err(why),
    };
    if let Err(why) = result {
        tracing::info!(machine = %i.machine, "the conversation inside computer://{} was not disposed: {why}", i.machine);
    }
}

/// The conversation's turns as the host inside keeps them, oldest first; `None` (with a log
/// line) when they cannot be had.
pub(crate) async fn transcript_inside(i: Inside<'_>) -> Option<Vec<Turn>> {
    let result = match reach(&i).await {
        Ok(r) => {
            let turns = turns(&r.client, &r.channel, r.remap.as_ref()).await;
            finish(r, i.machine, turns).await
        }
        Err(why) => Err(why),
    };
    match result {
        Ok(turns) => Some(turns),
        Err(why) => {
            tracing::info!(machine = %i.machine, "the turns inside computer://{} could not be read: {why}", i.machine);
            None
        }
    }
}

/// Starts the inner host, initializes it and names the conversation in it.
async fn reach(i: &Inside<'_>) -> Result<Reached, String> {
    let process = i
        .port
        .start_inner(
            i.machine,
            InnerStart {
                plugin: i.plugin.to_owned(),
                provider: i.provider.to_owned(),
                needs: i.agent.machine(),
                folder: i.folder.clone(),
                // This host ends once it has answered; a run it reattached would end with it
                // (a pending approval stopped, a call made twice). The session's own inner
                // host takes that work up at its next turn.
                leave_unfinished: true,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let tail = StderrTail::default();
    let _follower = tail.follow(process.stderr);
    let remap = match (&process.working_directory, &i.folder) {
        (Some(inside), Some(host)) if std::path::Path::new(inside) != host.as_path() => {
            Some((file_uri(std::path::Path::new(inside)), file_uri(host)))
        }
        _ => None,
    };
    let client = Client::connect(
        LineTransport::new(process.stdin, process.stdout),
        ClientConfig::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let reached = Reached {
        client,
        ended: process.ended,
        tail,
        channel: String::new(),
        remap,
    };
    match name(&reached.client, i).await {
        Ok(channel) => Ok(Reached { channel, ..reached }),
        Err(why) => finish(reached, i.machine, Err(why)).await,
    }
}

/// Initializes the inner host and picks its provider; the conversation's URI inside.
async fn name(client: &Client, i: &Inside<'_>) -> Result<String, String> {
    tokio::time::timeout(
        i.timeout,
        client.initialize(
            format!("ahpd-nested-{}", i.machine),
            vec!["1.0.0".into()],
            Vec::new(),
        ),
    )
    .await
    .map_err(|_| "it did not answer initialize".to_owned())?
    .map_err(|e| e.to_string())?;
    let (root, _) = tokio::time::timeout(STEP, client.subscribe("ahp-root://".into()))
        .await
        .map_err(|_| "it did not answer the root subscription within 3 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let root = serde_json::to_value(&root).unwrap_or(Value::Null);
    let agents: Vec<&str> = root["snapshot"]["state"]["agents"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["provider"].as_str()).collect())
        .unwrap_or_default();
    let inner = if agents.contains(&i.provider) {
        i.provider
    } else if let [only] = agents.as_slice() {
        *only
    } else {
        return Err(format!("it serves no agent called {}", i.provider));
    };
    Ok(format!("{inner}:/{}", i.backend_id))
}

/// Closes the inner host's input and waits a while for it to end; `result` goes through.
async fn finish<T: Send>(
    r: Reached,
    machine: &str,
    result: Result<T, String>,
) -> Result<T, String> {
    r.client.shutdown().await;
    if tokio::time::timeout(STEP, r.ended).await.is_err() {
        tracing::warn!(
            machine = %machine,
            "the host inside computer://{machine} did not end within 3 s of its input closing; it ends with the machine"
        );
    }
    result.map_err(|e| format!("{e}{}", r.tail.said()))
}

/// The conversation's turns: the chat's window, then the older pages before it.
async fn turns(
    client: &Client,
    channel: &str,
    remap: Option<&(String, String)>,
) -> Result<Vec<Turn>, String> {
    let mut events = client.events();
    let session = match tokio::time::timeout(STEP, client.subscribe(channel.to_owned())).await {
        Err(_) => return Err("it did not answer the session subscription within 3 s".into()),
        // Nothing of it inside: the conversation has no turns yet.
        Ok(Err(ClientError::Rpc(e))) if e.code == -32001 => return Ok(Vec::new()),
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok((s, _))) => serde_json::to_value(&s).unwrap_or(Value::Null),
    };
    let state = &session["snapshot"]["state"];
    let chat = state["defaultChat"]
        .as_str()
        .or_else(|| state["chats"][0]["resource"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| "it holds the session with no chat".to_owned())?;
    let (snapshot, _) = tokio::time::timeout(STEP, client.subscribe(chat.clone()))
        .await
        .map_err(|_| "it did not answer the chat subscription within 3 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let snapshot = serde_json::to_value(&snapshot).unwrap_or(Value::Null);
    let window = &snapshot["snapshot"]["state"];
    let mut turns: Vec<Turn> =
        serde_json::from_value(window["turns"].clone()).map_err(|e| e.to_string())?;
    let mut cursor = window["turnsNextCursor"].as_str().map(str::to_owned);
    let mut pages = 0;
    while let Some(c) = cursor.take() {
        pages += 1;
        if pages > MAX_PAGES {
            break;
        }
        let (older, next) = older_page(client, &mut events, &chat, c).await?;
        turns.splice(0..0, older);
        cursor = next;
    }
    let text = serde_json::to_string(&turns).map_err(|e| e.to_string())?;
    match remap {
        Some((inside, host)) if text.contains(inside.as_str()) => {
            serde_json::from_str(&text.replace(inside.as_str(), host)).map_err(|e| e.to_string())
        }
        _ => Ok(turns),
    }
}

/// One older page of the chat: the host inside loads it into the chat (`chat/turnsLoaded`)
/// before it answers `fetchTurns`.
async fn older_page(
    client: &Client,
    events: &mut ahp::ClientEventStream,
    chat: &str,
    cursor: String,
) -> Result<(Vec<Turn>, Option<String>), String> {
    tokio::time::timeout(
        STEP,
        client.request::<_, Value>("fetchTurns", json!({ "channel": chat, "cursor": cursor })),
    )
    .await
    .map_err(|_| "it did not answer fetchTurns within 3 s".to_owned())?
    .map_err(|e| e.to_string())?;
    let loaded = async {
        while let Some(ev) = events.recv().await {
            if let SubscriptionEvent::Action(envelope) = ev.event
                && envelope.channel == chat
                && let StateAction::ChatTurnsLoaded(a) = envelope.action
            {
                return Some((a.turns, a.turns_next_cursor));
            }
        }
        None
    };
    tokio::time::timeout(STEP, loaded)
        .await
        .ok()
        .flatten()
        .ok_or_else(|| "it answered fetchTurns without loading turns".to_owned())
}
