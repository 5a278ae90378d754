//! What the machine cases on `testkit::FakeEngine` share: a daemon (the real test build) whose
//! `@ahpd/computer` talks to a fake engine in this process, and client helpers. Inner hosts are
//! the same build, run by the fake's execs from the daemon's own build folder.

use std::path::Path;
use std::time::Duration;

use ahp::client::Client;
use serde_json::{Value, json};
use testkit::{FakeEngine, FakeImage};

use super::support::{Daemon, Env, client};

/// The image every case declares, standing in for a glibc image.
pub const IMAGE: &str = "ahpd-test/glibc:1";

/// A fake engine with [`IMAGE`], a private home, and the daemon once started.
pub struct Rig {
    pub engine: FakeEngine,
    pub env: Env,
}

impl Rig {
    pub fn new() -> Rig {
        let engine = FakeEngine::start().unwrap();
        engine.image(FakeImage::new(IMAGE));
        Rig {
            engine,
            env: Env::new(),
        }
    }

    /// The computer options of a case: the fake's socket, `pull: never`, [`IMAGE`], then `extra`.
    pub fn options(&self, extra: Value) -> Value {
        let mut o = json!({ "engine": self.engine.uri(), "pull": "never", "image": IMAGE });
        merge(&mut o, extra);
        o
    }

    /// Writes the base file: echo (and cofold when asked) and `@ahpd/computer` with `extra`.
    pub fn configure(&self, extra: Value) {
        self.configure_plugins(self.options(extra), false);
    }

    pub fn configure_plugins(&self, computer: Value, cofold: bool) {
        let mut plugins = vec![json!("@ahpd/agent-echo")];
        if cofold {
            plugins.push(json!({ "name": "@ahpd/agent-cofold", "options": { "memory": true } }));
        }
        plugins.push(json!({ "name": "@ahpd/computer", "options": computer }));
        self.env
            .write_base(&json!({ "plugins": plugins }).to_string());
    }

    /// The copapo file the daemon's cofold reads (`$XDG_CONFIG_HOME/copapo/config.json`).
    pub fn copapo(&self) -> std::path::PathBuf {
        self.env
            .root
            .path()
            .join("xdg")
            .join("copapo")
            .join("config.json")
    }

    pub fn write_copapo(&self, text: &str) {
        let p = self.copapo();
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Writes an agent record before the daemon starts.
    pub fn record(&self, id: &str, engine: &str, config: Value) {
        let dir = self.env.dir().join("agents");
        std::fs::create_dir_all(&dir).unwrap();
        let r =
            json!({ "id": id, "engine": engine, "owner": "host", "name": id, "config": config });
        std::fs::write(dir.join(format!("{id}.json")), r.to_string()).unwrap();
    }

    pub fn vault_set(&self, name: &str, value: &str) {
        let out = self.env.run_with_input(&["vault", "set", name], value);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the daemon (logging at `level`) and connects the official client.
    pub async fn start(&self, log: &str) -> (Daemon, Client) {
        self.start_with(log, "info", &[]).await
    }

    pub async fn start_with(
        &self,
        log: &str,
        level: &str,
        vars: &[(&str, &str)],
    ) -> (Daemon, Client) {
        let mut cmd = self.env.cmd();
        cmd.env("RUST_LOG", level);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let daemon = self.env.daemon_with(cmd, &["--port", "0"], log);
        let (c, _) = client(&daemon.address).await;
        (daemon, c)
    }

    pub fn host_id(&self) -> String {
        std::fs::read_to_string(self.env.dir().join("host-id"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The create bodies the engine got for machines (not the seeding helpers).
    pub fn creates(&self) -> Vec<Value> {
        self.engine
            .requests_to("POST", |p| p == "/containers/create")
            .into_iter()
            .filter(|r| {
                !r.param("name")
                    .unwrap_or("")
                    .starts_with("ahpd-state-seed-")
            })
            .filter_map(|r| r.body)
            .collect()
    }

    /// The exec-create bodies the engine got.
    pub fn exec_bodies(&self) -> Vec<Value> {
        self.engine
            .requests_to("POST", |p| {
                p.ends_with("/exec") && p.starts_with("/containers/")
            })
            .into_iter()
            .filter_map(|r| r.body)
            .collect()
    }
}

pub fn merge(into: &mut Value, extra: Value) {
    if let (Some(o), Value::Object(extra)) = (into.as_object_mut(), extra) {
        for (k, v) in extra {
            o.insert(k, v);
        }
    }
}

/// The code and message of a failed request.
pub fn rpc(r: &Result<Value, ahp::ClientError>) -> (i64, String) {
    match r {
        Err(ahp::ClientError::Rpc(e)) => (e.code as i64, e.message.clone()),
        other => (0, format!("{other:?}")),
    }
}

pub async fn write(
    client: &Client,
    uri: &str,
    data: &str,
    create_only: bool,
) -> Result<Value, ahp::ClientError> {
    client
        .request(
            "resourceWrite",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": uri, "data": data,
                    "encoding": "utf-8", "createOnly": create_only }),
        )
        .await
}

/// Makes `computer://<id>` from a body.
pub async fn make(client: &Client, id: &str, body: Value) -> Result<Value, ahp::ClientError> {
    write(client, &format!("computer://{id}"), &body.to_string(), true).await
}

/// Reads a resource and parses its JSON.
pub async fn read(client: &Client, uri: &str) -> Result<Value, ahp::ClientError> {
    let r: Value = client
        .request(
            "resourceRead",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": uri }),
        )
        .await?;
    Ok(serde_json::from_str(r["data"].as_str().unwrap_or("null")).unwrap_or(r["data"].clone()))
}

pub async fn list(client: &Client, uri: &str) -> Result<Value, ahp::ClientError> {
    client
        .request(
            "resourceList",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": uri }),
        )
        .await
}

pub async fn delete(client: &Client, uri: &str) -> Result<Value, ahp::ClientError> {
    client
        .request(
            "resourceDelete",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "uri": uri }),
        )
        .await
}

/// Creates a session of `provider` with these settings, in `folder` when given.
pub async fn create_session(
    client: &Client,
    provider: &str,
    config: Value,
    folder: Option<&Path>,
) -> (String, Result<Value, ahp::ClientError>) {
    let uri = format!("{provider}:/{}", uuid::Uuid::new_v4());
    let mut params = json!({ "channel": uri, "provider": provider, "config": config });
    if let Some(f) = folder {
        params["workingDirectories"] = json!([ahpd_sdk::util::file_uri(f)]);
    }
    let r = client.request("createSession", params).await;
    (uri, r)
}

/// The session's state snapshot.
pub async fn session_state(client: &Client, uri: &str) -> Value {
    let (state, _) = client
        .subscribe(uri.to_owned())
        .await
        .expect("subscribe session");
    serde_json::to_value(&state).unwrap()["snapshot"]["state"].clone()
}

/// A started turn on the session's default chat: its actions until it ends.
pub struct Turn {
    pub sub: ahp::SessionSubscription,
    pub chat: String,
}

pub async fn begin_turn(client: &Client, session: &str, turn: &str, text: &str) -> Turn {
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let (_, sub) = client
        .subscribe(chat.clone())
        .await
        .expect("subscribe chat");
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": 1, "action": {
                "type": "chat/turnStarted", "turnId": turn,
                "startedAt": ahpd_sdk::util::now_iso(),
                "message": { "text": text, "origin": { "kind": "user" } },
            }}),
        )
        .await
        .expect("start turn");
    Turn { sub, chat }
}

impl Turn {
    /// Actions until one of type `until` (or a turn's end when `None`).
    pub async fn until(&mut self, until: Option<&str>) -> Vec<Value> {
        let mut seen = Vec::new();
        let done = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(ev) = self.sub.recv().await {
                if let ahp::SubscriptionEvent::Action(env) = ev {
                    let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                    let t = v["type"].as_str().unwrap_or("").to_owned();
                    seen.push(v);
                    let end = match until {
                        Some(u) => t == u,
                        None => matches!(
                            t.as_str(),
                            "chat/turnComplete" | "chat/error" | "chat/turnCancelled"
                        ),
                    };
                    if end {
                        return;
                    }
                }
            }
        })
        .await;
        assert!(done.is_ok(), "the turn did not end; saw {seen:#?}");
        seen
    }
}

/// One whole turn.
pub async fn turn(client: &Client, session: &str, turn_id: &str, text: &str) -> Vec<Value> {
    begin_turn(client, session, turn_id, text)
        .await
        .until(None)
        .await
}

/// The text the deltas of a turn carried.
pub fn deltas(actions: &[Value]) -> String {
    actions
        .iter()
        .filter(|a| a["type"] == "chat/delta")
        .filter_map(|a| a["content"].as_str())
        .collect()
}

/// The `K=V` variables of a JSON body's `Env`.
pub fn env_of(body: &Value) -> Vec<String> {
    body["Env"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub fn binds_of(body: &Value) -> Vec<String> {
    body["HostConfig"]["Binds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
