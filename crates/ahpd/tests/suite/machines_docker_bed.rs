//! What the real-engine cases share: a daemon with cofold and the computer plugin over a test
//! image, its client and model endpoint, and helpers to run commands and turns.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ahp::SessionSubscription;
use ahp::client::Client;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::{ListContainersOptions, ListVolumesOptions};
use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply, chunk};

use super::machines_docker::{Guard, configure, engine, glibc_image};
use super::support::{Daemon, Env, client};

/// One test's daemon, engine and model endpoint. Fields drop in order: the daemon stops, the
/// guard sweeps (reading the host id from the folder), the folder goes, and only then may the
/// next test use the engine.
pub struct Bed {
    pub client: Client,
    pub daemon: Daemon,
    _guard: Guard,
    pub env: Env,
    pub endpoint: Endpoint,
    pub docker: Docker,
    _serial: tokio::sync::OwnedMutexGuard<()>,
}

/// The engine's container names are global, and the cases name their machines alike (`box`),
/// so the tests that use a bed take the engine one at a time.
pub static ENGINE: std::sync::LazyLock<std::sync::Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(Default::default);

/// A scripted endpoint that answers `shell_exec` of `command` once, then `done` forever.
pub fn shell_endpoint(command: &str) -> Endpoint {
    Endpoint::builder()
        .reply(Reply::stream([
            chunk::tool_call(
                0,
                Some("c1"),
                Some("shell_exec"),
                &json!({ "command": command }).to_string(),
            ),
            chunk::finish("tool_calls"),
        ]))
        .fallback(Reply::stream([chunk::text("done"), chunk::finish("stop")]))
        .models(["m1"])
        .start()
        .expect("endpoint")
}

impl Bed {
    /// A daemon with cofold and the computer plugin over `image`, `options` laid over the
    /// suite's; `None` when no engine answers (the skip line is printed).
    pub async fn start(endpoint: Endpoint, image: Option<&str>, options: Value) -> Option<Bed> {
        let docker = engine().await?;
        let serial = ENGINE.clone().lock_owned().await;
        let image = match image {
            Some(i) => i.to_owned(),
            None => glibc_image(&docker).await,
        };
        let env = Env::new();
        configure(&env, &endpoint, &image, options);
        let guard = Guard {
            docker: docker.clone(),
            host_id_file: env.dir().join("host-id"),
        };
        let daemon = env.daemon(&["--port", "0"], "machines.log");
        let (client, _) = client(&daemon.address).await;
        Some(Bed {
            client,
            daemon,
            _guard: guard,
            env,
            endpoint,
            docker,
            _serial: serial,
        })
    }

    /// Stops the daemon and starts it again on the same folders; the client is new.
    pub async fn restart(&mut self) {
        // A graceful stop (SIGTERM), as a person's restart would be.
        let pid = rustix::process::Pid::from_raw(self.daemon.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = self.daemon.child.wait().unwrap();
        assert!(
            status.success(),
            "the daemon stopped with {status}\n{}",
            self.log()
        );
        self.daemon = self.env.daemon(&["--port", "0"], "machines-2.log");
        let (client, _) = client(&self.daemon.address).await;
        self.client = client;
    }

    pub fn host_id(&self) -> String {
        std::fs::read_to_string(self.env.dir().join("host-id"))
            .expect("the daemon's host id")
            .trim()
            .to_owned()
    }

    /// `resourceWrite computer://<id>` with `body`.
    pub async fn make(&self, id: &str, body: Value) -> Result<Value, ahp::ClientError> {
        self.client
            .request(
                "resourceWrite",
                json!({ "channel": "ahp-root://", "uri": format!("computer://{id}"),
                        "data": body.to_string(), "encoding": "utf-8", "createOnly": true }),
            )
            .await
    }

    /// A cofold session in `computer`, bypassing approvals; its URI and `computer` value.
    pub async fn session(&self, computer: &str, folder: Option<&Path>) -> (String, String) {
        let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
        let dirs: Vec<String> = folder.map(ahpd_sdk::util::file_uri).into_iter().collect();
        let created: Result<Value, _> = self
            .client
            .request(
                "createSession",
                json!({
                    "channel": uri, "provider": "cofold", "workingDirectories": dirs,
                    "config": { "computer": computer, "permissionMode": "bypassPermissions" },
                }),
            )
            .await;
        assert!(
            created.is_ok(),
            "createSession: {created:?}\nlog:\n{}",
            self.log()
        );
        let (state, _) = self.client.subscribe(uri.clone()).await.expect("subscribe");
        let state = serde_json::to_value(&state).unwrap();
        let computer = state["snapshot"]["state"]["config"]["values"]["computer"]
            .as_str()
            .expect("the session names its machine")
            .to_owned();
        (uri, computer)
    }

    pub async fn dispose(&self, uri: &str) {
        let _: Value = self
            .client
            .request("disposeSession", json!({ "channel": uri }))
            .await
            .expect("dispose");
    }

    pub fn log(&self) -> String {
        self.daemon.log_text()
    }

    /// Names of this daemon's containers and volumes still on the engine.
    pub async fn leftovers(&self) -> (Vec<String>, Vec<String>) {
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("ahpd.host={}", self.host_id())],
        );
        let containers = self
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .collect();
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(filters),
            }))
            .await
            .unwrap()
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name)
            .collect();
        (containers, volumes)
    }

    pub async fn exists(&self, id: &str) -> bool {
        self.docker.inspect_container(id, None).await.is_ok()
    }
}

/// Runs `cmd` in container `id` as its user; standard output and error, and the exit code.
pub async fn exec(docker: &Docker, id: &str, cmd: &[&str]) -> (String, i64) {
    let e = docker
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                ..Default::default()
            },
        )
        .await
        .expect("exec create");
    let mut out = String::new();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&e.id, None).await.expect("exec start")
    {
        while let Some(Ok(chunk)) = output.next().await {
            out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    let code = docker
        .inspect_exec(&e.id)
        .await
        .ok()
        .and_then(|x| x.exit_code)
        .unwrap_or(-1);
    (out, code)
}

/// Starts turn `turn` on `chat` and collects its actions until it ends, calling `seen` on each.
pub async fn turn<F: AsyncFnMut(&Value)>(
    client: &Client,
    sub: &mut SessionSubscription,
    chat: &str,
    turn: &str,
    text: &str,
    mut seen: F,
) -> Vec<Value> {
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": fastrand::u32(..), "action": {
                "type": "chat/turnStarted", "turnId": turn,
                "startedAt": ahpd_sdk::util::now_iso(),
                "message": { "text": text, "origin": { "kind": "user" } },
            }}),
        )
        .await
        .expect("start turn");
    let mut all = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = sub.recv().await {
            if let ahp::SubscriptionEvent::Action(env) = ev {
                let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                if v["turnId"] != turn {
                    continue;
                }
                seen(&v).await;
                let end = matches!(
                    v["type"].as_str(),
                    Some("chat/turnComplete" | "chat/error" | "chat/turnCancelled")
                );
                all.push(v);
                if end {
                    break;
                }
            }
        }
    })
    .await;
    assert!(done.is_ok(), "turn {turn} did not end; saw {all:#?}");
    all
}

pub async fn chat_of(bed: &Bed, uri: &str) -> (String, SessionSubscription) {
    let chat = ahpd_sdk::util::default_chat_uri(uri);
    let (_, sub) = bed
        .client
        .subscribe(chat.clone())
        .await
        .expect("subscribe chat");
    (chat, sub)
}

pub fn ended_with(actions: &[Value], kind: &str) -> bool {
    actions.last().and_then(|a| a["type"].as_str()) == Some(kind)
}
