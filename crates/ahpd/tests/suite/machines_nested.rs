//! The nested proxy without a container engine: a `ComputerPort` whose "machine" is this host,
//! starting the real `ahpd --stdio` (the test build, with the echo engine) as the inner host. An
//! outer host built in this process carries sessions to it through `NestedAgent`, driven by the
//! official client. These run in every CI run.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp::client::{Client, ClientConfig};
use ahpd_sdk::ahp_types::commands::SessionConfigValueItem;
use ahpd_sdk::ahp_types::state::SessionConfigPropertySchema;
use ahpd_sdk::machine::{
    ComputerPort, InnerEnd, InnerProcess, InnerStart, KeptSession, MachineError, PrepareRequest,
};
use ahpd_sdk::nested::NestedAgent;
use ahpd_sdk::{Agent, AgentDescriptor, AgentError, HostBuilder, Session, SessionStart};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::support::{BIN, ECHO, rt};

/// What the fake machine runs as its inner host.
#[derive(Clone)]
enum Inner {
    /// The real `ahpd --stdio` with the echo engine.
    Ahpd,
    /// A shell line (a host that fails or never answers).
    Shell(&'static str),
}

struct LocalPort {
    inner: Inner,
    config: tempfile::TempDir,
    events: Mutex<Vec<String>>,
}

#[async_trait]
impl ComputerPort for LocalPort {
    fn setting(&self) -> SessionConfigPropertySchema {
        serde_json::from_value(json!({
            "type": "string", "title": "Computer", "default": "",
            "sessionMutable": false, "enumDynamic": true
        }))
        .unwrap()
    }

    async fn completions(&self, _p: &str, _q: Option<&str>) -> Vec<SessionConfigValueItem> {
        Vec::new()
    }

    async fn prepare(&self, req: PrepareRequest) -> Result<String, MachineError> {
        match req.value.strip_prefix("computer://") {
            Some("box") => Ok("box".into()),
            _ => Err(MachineError::Refused(format!(
                "there is no computer called {}",
                req.value
            ))),
        }
    }

    async fn enter(&self, id: &str, _s: &str) {
        self.events.lock().unwrap().push(format!("enter {id}"));
    }

    async fn leave(&self, id: &str, _s: &str) {
        self.events.lock().unwrap().push(format!("leave {id}"));
    }

    async fn start_inner(
        &self,
        _id: &str,
        start: InnerStart,
    ) -> Result<InnerProcess, MachineError> {
        let mut cmd = match &self.inner {
            Inner::Ahpd => {
                let mut c = tokio::process::Command::new(BIN);
                c.args(["--stdio", "--plugin", &start.plugin]);
                if start.leave_unfinished {
                    c.arg("--leave-unfinished");
                }
                c
            }
            Inner::Shell(line) => {
                let mut c = tokio::process::Command::new("sh");
                c.args(["-c", line]);
                c
            }
        };
        cmd.env_clear()
            .env("HOME", self.config.path())
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| MachineError::Failed(e.to_string()))?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        Ok(InnerProcess {
            stdin: Box::pin(stdin),
            stdout: Box::pin(stdout),
            stderr: Box::pin(stderr),
            working_directory: None,
            ended: Box::pin(async move {
                use std::os::unix::process::ExitStatusExt as _;
                let status = child.wait().await.ok();
                InnerEnd {
                    code: status.and_then(|s| s.code()).map(i64::from),
                    signal: status
                        .and_then(|s| s.signal())
                        .map(|n| ahpd_sdk::machine::signal_name(i64::from(n))),
                    ..InnerEnd::default()
                }
            }),
        })
    }

    async fn adopt(&self, _kept: Vec<KeptSession>) {}
}

/// The outer agent: runs nested, never on the host.
struct Outer;

#[async_trait]
impl Agent for Outer {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor::new("echo", "Echo outside")
    }

    async fn create(&self, _s: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        Err(AgentError::Refused(
            "this agent runs only in a machine".into(),
        ))
    }

    fn runs_nested(&self) -> bool {
        true
    }

    fn machine(&self) -> BTreeMap<String, ahpd_sdk::machine::MachineNeed> {
        BTreeMap::new()
    }
}

async fn outer(inner: Inner, timeout: Duration) -> (Client, Arc<LocalPort>) {
    let port = Arc::new(LocalPort {
        inner,
        config: tempfile::tempdir().unwrap(),
        events: Mutex::new(Vec::new()),
    });
    let agent = NestedAgent::new(Arc::new(Outer), port.clone(), Some(ECHO.into()), timeout);
    let host = HostBuilder::new().agent(Arc::new(agent)).build().unwrap();
    let (peer, client_half) = ahpd_sdk::transport::memory::pair(4096, 16 << 20);
    tokio::spawn(async move { host.accept(peer).await });
    let client = Client::connect(client_half, ClientConfig::default())
        .await
        .unwrap();
    client
        .initialize("nested".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    (client, port)
}

async fn create(client: &Client, computer: &str) -> (String, Result<Value, ahp::ClientError>) {
    let uri = format!("echo:/{}", uuid::Uuid::new_v4());
    let r = client
        .request(
            "createSession",
            json!({ "channel": uri, "provider": "echo", "config": { "computer": computer } }),
        )
        .await;
    (uri, r)
}

fn message(r: &Result<Value, ahp::ClientError>) -> String {
    match r {
        Err(ahp::ClientError::Rpc(e)) => e.message.clone(),
        other => format!("{other:?}"),
    }
}

/// An echo session in a machine: every delta as the inner host made it, then `leave` on dispose.
#[test]
fn echo_session_in_a_machine_forwards_the_inner_turn() {
    rt().block_on(async {
        let (client, port) = outer(Inner::Ahpd, Duration::from_secs(30)).await;
        let (uri, r) = create(&client, "computer://box").await;
        assert!(r.is_ok(), "{}", message(&r));
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (_, mut sub) = client.subscribe(chat.clone()).await.unwrap();
        client
            .notify(
                "dispatchAction",
                json!({ "channel": chat, "clientSeq": 1, "action": {
                    "type": "chat/turnStarted", "turnId": "t1",
                    "startedAt": ahpd_sdk::util::now_iso(),
                    "message": { "text": "hello from outside", "origin": { "kind": "user" } },
                }}),
            )
            .await
            .unwrap();
        let mut seen = Vec::new();
        while let Some(ev) = sub.recv().await {
            if let ahp::SubscriptionEvent::Action(env) = ev {
                let v = serde_json::to_value(&env.action).unwrap();
                let end = v["type"] == "chat/turnComplete" || v["type"] == "chat/error";
                seen.push(v);
                if end {
                    break;
                }
            }
        }
        let text = serde_json::to_string(&seen).unwrap();
        assert!(text.contains("chat/turnComplete"), "{text}");
        let deltas: String = seen
            .iter()
            .filter(|a| a["type"] == "chat/delta")
            .filter_map(|a| a["content"].as_str())
            .collect();
        assert!(deltas.contains("hello from outside"), "{text}");
        let _: Value = client
            .request("disposeSession", json!({ "channel": uri }))
            .await
            .unwrap();
        let events = port.events.lock().unwrap().clone();
        assert_eq!(events, vec!["enter box".to_owned(), "leave box".to_owned()]);
    });
}

/// An inner host that exits at once, one that never answers, and an unknown machine.
#[test]
fn inner_host_failures_are_sentences() {
    rt().block_on(async {
        let (client, _) = outer(Inner::Shell("echo boom >&2; exit 3"), Duration::from_secs(30)).await;
        let (_, r) = create(&client, "computer://box").await;
        assert_eq!(
            message(&r),
            "the host inside computer://box ended before it answered: it exited with code 3; it said: boom"
        );
        let (client, _) = outer(Inner::Shell("exec sleep 30"), Duration::from_millis(50)).await;
        let (_, r) = create(&client, "computer://box").await;
        assert_eq!(
            message(&r),
            "the host inside computer://box did not answer initialize within 0.05 s"
        );
        let (_, r) = create(&client, "computer://nope").await;
        assert!(message(&r).contains("there is no computer called computer://nope"), "{}", message(&r));
    });
}

/// A `computer` value for an agent with no machines port is refused, never run on the host.
#[test]
fn computer_without_a_plugin_is_refused() {
    rt().block_on(async {
        let host = HostBuilder::new().agent(Arc::new(Outer)).build().unwrap();
        let (peer, half) = ahpd_sdk::transport::memory::pair(64, 1 << 20);
        tokio::spawn(async move { host.accept(peer).await });
        let client = Client::connect(half, ClientConfig::default())
            .await
            .unwrap();
        client
            .initialize("n".into(), vec!["1.0.0".into()], vec![])
            .await
            .unwrap();
        let (_, r) = create(&client, "computer://box").await;
        assert!(
            message(&r).contains(
                "this host has no computer plugin, so it cannot run a session in computer://box"
            ),
            "{}",
            message(&r)
        );
    });
}
