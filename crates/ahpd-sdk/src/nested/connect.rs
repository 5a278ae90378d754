//! Reaching the inner host of a session in a machine: starting it through the machine's
//! port, connecting over its standard streams, and opening (or resuming) the conversation
//! inside, with the sentences that say what failed.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::{Client, ClientConfig, ClientError};
use ahp_types::common::JsonObject;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use serde_json::{Value, json};

use super::transport::{LineTransport, StderrTail};
use crate::agent::{Agent, SessionContext};
use crate::nested::machine::{ComputerPort, InnerEnd, InnerStart};
use crate::util::file_uri;

/// Everything needed to (re)start the inner host of one session.
pub(super) struct Link {
    pub(super) port: Arc<dyn ComputerPort>,
    pub(super) agent: Arc<dyn Agent>,
    pub(super) plugin: String,
    pub(super) provider: String,
    pub(super) machine: String,
    pub(super) backend_id: String,
    pub(super) settings: JsonObject,
    pub(super) folder: Option<PathBuf>,
    pub(super) timeout: Duration,
    pub(super) ctx: SessionContext,
}

/// A live connection to an inner host.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) events: ahp::ClientEventStream,
    pub(super) ended: Shared<BoxFuture<'static, InnerEnd>>,
    pub(super) tail: StderrTail,
    pub(super) session: String,
    pub(super) chat: String,
    /// `(inner prefix, host prefix)` of working folder URIs, when they differ.
    pub(super) remap: Option<(String, String)>,
}

/// Seconds for a sentence: whole when whole, else with the decimals needed.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", d.as_secs())
    } else {
        format!("{s}")
    }
}

/// Starts an inner host and opens (or resumes) the conversation in it.
// Long: each step of reaching the inner host has its own failure sentence, said in order.
pub(super) async fn connect(
    link: &Link,
    resume: bool,
    mutable: &Arc<Mutex<Vec<String>>>,
) -> Result<Conn, String> {
    let id = &link.machine;
    let process = link
        .port
        .start_inner(
            id,
            InnerStart {
                plugin: link.plugin.clone(),
                provider: link.provider.clone(),
                needs: link.agent.machine(),
                folder: link.folder.clone(),
                leave_unfinished: false,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let tail = StderrTail::default();
    let follower = tail.follow(process.stderr);
    let ended = process.ended.shared();
    let inner_dir = process.working_directory.clone();
    let client = Client::connect(
        LineTransport::new(process.stdin, process.stdout),
        ClientConfig {
            default_request_timeout: None,
            ..ClientConfig::default()
        },
    )
    .await
    .map_err(|e| format!("the host inside computer://{id} cannot be reached: {e}"))?;
    let events = client.events();
    let init = client.initialize(
        format!("ahpd-nested-{id}"),
        vec!["1.0.0".into()],
        Vec::new(),
    );
    let answered = tokio::select! {
        r = tokio::time::timeout(link.timeout, init) => match r {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(_)) => Err(None),
            Err(_) => {
                client.shutdown().await;
                return Err(format!(
                    "the host inside computer://{id} did not answer initialize within {} s",
                    seconds(link.timeout)
                ));
            }
        },
        end = ended.clone() => Err(Some(end)),
    };
    let result = match answered {
        Ok(r) => r,
        Err(end) => {
            let end = match end {
                Some(e) => e,
                None => ended.clone().await,
            };
            let _ = tokio::time::timeout(Duration::from_secs(1), follower).await;
            return Err(format!(
                "the host inside computer://{id} ended before it answered: {}{}",
                end.how(),
                tail.said()
            ));
        }
    };
    if result.protocol_version != "1.0.0" {
        client.shutdown().await;
        return Err(format!(
            "the host inside computer://{id} speaks AHP {}, and this host offered 1.0.0",
            result.protocol_version
        ));
    }
    let (session, chat) =
        match open_inside(&client, link, resume, mutable, inner_dir.as_deref()).await {
            Ok(found) => found,
            Err(sentence) => {
                client.shutdown().await;
                return Err(sentence);
            }
        };
    let remap = match (&inner_dir, &link.folder) {
        (Some(inside), Some(host)) if std::path::Path::new(inside) != host.as_path() => {
            Some((file_uri(std::path::Path::new(inside)), file_uri(host)))
        }
        _ => None,
    };
    Ok(Conn {
        client,
        events,
        ended,
        tail,
        session,
        chat,
        remap,
    })
}

/// Picks the inner provider, then creates (or resumes) the conversation inside and subscribes
/// its session and chat; their URIs.
// Long: the inner provider, conversation and subscriptions are opened in order, each with its own
// failure sentence.
async fn open_inside(
    client: &Client,
    link: &Link,
    resume: bool,
    mutable: &Arc<Mutex<Vec<String>>>,
    inner_dir: Option<&str>,
) -> Result<(String, String), String> {
    let id = &link.machine;
    let failed = |what: &str, e: ClientError| -> String {
        format!("the host inside computer://{id} refused {what}: {e}")
    };
    let (root, _) = client
        .subscribe("ahp-root://".into())
        .await
        .map_err(|e| failed("the root subscription", e))?;
    let root = serde_json::to_value(&root).unwrap_or(Value::Null);
    let agents: Vec<String> = root["snapshot"]["state"]["agents"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x["provider"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let inner_provider = if agents.contains(&link.provider) {
        link.provider.clone()
    } else if agents.len() == 1 {
        agents[0].clone()
    } else {
        return Err(format!(
            "the host inside computer://{id} serves no agent called {}",
            link.provider
        ));
    };
    let session = format!("{inner_provider}:/{}", link.backend_id);
    let mut snapshot = None;
    if resume {
        match client.subscribe(session.clone()).await {
            Ok((s, _)) => snapshot = Some(s),
            Err(ClientError::Rpc(e)) if e.code == -32001 => {}
            Err(e) => return Err(failed("the session", e)),
        }
    }
    let snapshot = match snapshot {
        Some(s) => s,
        None => {
            let mut dirs = Vec::new();
            if let Some(d) = inner_dir {
                dirs.push(file_uri(std::path::Path::new(d)));
            }
            let _: Value = client
                .request(
                    "createSession",
                    json!({
                        "channel": session,
                        "provider": inner_provider,
                        "config": link.settings,
                        "workingDirectories": dirs,
                    }),
                )
                .await
                .map_err(|e| match e {
                    ClientError::Rpc(r) => r.message,
                    other => other.to_string(),
                })?;
            client
                .subscribe(session.clone())
                .await
                .map_err(|e| failed("the session", e))?
                .0
        }
    };
    let state = serde_json::to_value(&snapshot).unwrap_or(Value::Null);
    let state = &state["snapshot"]["state"];
    if let Ok(mut m) = mutable.lock() {
        *m = state["config"]["schema"]["properties"]
            .as_object()
            .map(|p| {
                p.iter()
                    .filter(|(_, v)| v["sessionMutable"] == Value::Bool(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
    }
    let chat = state["defaultChat"]
        .as_str()
        .or_else(|| state["chats"][0]["resource"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("the host inside computer://{id} opened a session with no chat"))?;
    client
        .subscribe(chat.clone())
        .await
        .map_err(|e| failed("the chat", e))?;
    Ok((session, chat))
}
