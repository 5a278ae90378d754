//! Disposing a conversation inside a machine: an inner host started for that one request,
//! since the session's own inner host has already been closed when the host deletes it.

use std::sync::Arc;
use std::time::Duration;

use ahp::{Client, ClientConfig};
use serde_json::{Value, json};

use super::transport::{LineTransport, StderrTail};
use crate::agent::Agent;
use crate::machine::{ComputerPort, InnerStart};

/// How long the inner host has for the dispose, and then to end after its input closed.
const STEP: Duration = Duration::from_secs(3);

/// What names the conversation inside.
pub(crate) struct Inside<'a> {
    pub port: &'a Arc<dyn ComputerPort>,
    pub agent: &'a Arc<dyn Agent>,
    pub plugin: &'a str,
    pub provider: &'a str,
    pub machine: &'a str,
    pub backend_id: &'a str,
    pub timeout: Duration,
}

/// Asks an inner host to dispose the conversation; what goes wrong is a log line, since the
/// outer session goes whatever happens inside.
pub(crate) async fn dispose_inside(i: Inside<'_>) {
    if let Err(why) = ask(&i).await {
        tracing::info!(machine = %i.machine, "the conversation inside computer://{} was not disposed: {why}", i.machine);
    }
}

async fn ask(i: &Inside<'_>) -> Result<(), String> {
    let process = i
        .port
        .start_inner(
            i.machine,
            InnerStart {
                plugin: i.plugin.to_owned(),
                provider: i.provider.to_owned(),
                needs: i.agent.machine(),
                folder: None,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let tail = StderrTail::default();
    let _follower = tail.follow(process.stderr);
    let ended = process.ended;
    let client = Client::connect(
        LineTransport::new(process.stdin, process.stdout),
        ClientConfig::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let asked = async {
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
        let (root, _) = client
            .subscribe("ahp-root://".into())
            .await
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
        let channel = format!("{inner}:/{}", i.backend_id);
        tokio::time::timeout(
            STEP,
            client.request::<_, Value>("disposeSession", json!({ "channel": channel })),
        )
        .await
        .map_err(|_| "it did not answer disposeSession within 3 s".to_owned())?
        .map_err(|e| e.to_string())?;
        Ok(())
    };
    let result = asked.await;
    client.shutdown().await;
    if tokio::time::timeout(STEP, ended).await.is_err() {
        tracing::warn!(
            machine = %i.machine,
            "the host inside computer://{} did not end within 3 s of its input closing; it ends with the machine",
            i.machine
        );
    }
    result.map_err(|e| format!("{e}{}", tail.said()))
}
