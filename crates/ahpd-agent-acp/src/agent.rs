//! One agent record as an AHP agent: its sessions, listed and read back from the host's own
//! store, each run by a child of the record's command in a folder the host serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use ahp_types::state::{SessionConfigSchema, Turn};
use ahpd_sdk::plugin::SecretReader;
use ahpd_sdk::{
    Agent, AgentDescriptor, AgentError, PastSession, Session, SessionStart, util as sdk_util,
};
use async_trait::async_trait;

use crate::child::{self, Child, Pipes};
use crate::record::Spec;
use crate::session::AcpSession;
use crate::store::{Conversation, Store};

/// What the record's agent offered when a session last opened: its options and modes, from
/// which the settings schema is drawn (an agent says what it offers only once it runs).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Offered {
    config: Vec<acp::SessionConfigOption>,
    modes: Vec<acp::SessionMode>,
}

/// Everything a session needs to start its agent.
pub struct Launch {
    /// What the agent offered last, kept beside the conversations.
    pub offered: std::sync::Mutex<Offered>,
    /// What the record runs.
    pub spec: Spec,
    /// The record's conversations.
    pub store: Store,
    /// The daemon's vault.
    pub secrets: Arc<dyn SecretReader>,
    /// The folders the daemon serves; an agent runs only inside one.
    pub served: Vec<PathBuf>,
    /// The daemon's MCP servers, offered to every session.
    pub mcp: Option<ahpd_mcp::McpHub>,
}

impl Launch {
    fn offered_file(&self) -> PathBuf {
        self.store.dir().join("offered.json")
    }

    /// Reads what the agent offered in an earlier run.
    pub fn load_offered(&self) {
        if let Ok(text) = std::fs::read_to_string(self.offered_file())
            && let Ok(o) = serde_json::from_str::<Offered>(&text)
            && let Ok(mut slot) = self.offered.lock()
        {
            *slot = o;
        }
    }

    /// Keeps what a session's agent offers, for the schema of the next sessions.
    pub fn remember(
        &self,
        config: &[acp::SessionConfigOption],
        modes: Option<&acp::SessionModeState>,
    ) {
        let o = Offered {
            config: config.to_vec(),
            modes: modes.map(|m| m.available_modes.clone()).unwrap_or_default(),
        };
        if let Ok(text) = serde_json::to_vec(&o)
            && let Err(e) = crate::store::write_private(&self.offered_file(), &text)
        {
            tracing::warn!("cannot keep the agent's options: {e}");
        }
        if let Ok(mut slot) = self.offered.lock() {
            *slot = o;
        }
    }

    /// Starts the agent for conversation `id` in `cwd`; the error is one sentence.
    pub fn spawn(&self, id: &str, cwd: &Path) -> Result<(Child, Pipes), String> {
        let program = self.spec.locate(std::env::var_os("PATH").as_deref())?;
        let (state, fresh) = self
            .store
            .state_dir(id)
            .map_err(|e| format!("cannot make the agent's state folder: {e}"))?;
        if fresh && let Some(p) = self.spec.preset {
            seed(p, &state);
        }
        let vars = self.spec.variables(&state, self.secrets.as_ref())?;
        let env = crate::env::build(std::env::vars_os(), &vars);
        child::spawn(&program, &self.spec.args, cwd, env)
            .map_err(|e| format!("cannot start {}: {e}", self.spec.command))
    }

    /// The sign-in method to use, if any.
    pub fn auth_method(&self, _id: &str) -> Option<String> {
        self.spec.auth_method()
    }

    /// The daemon's MCP servers as the agent takes them: HTTP ones only when it says it can
    /// reach them; a disabled server is left out, and so is one that cannot be started here
    /// (a wrong entry, an unreadable secret, an unset variable), with a warning.
    pub fn mcp_servers(&self, caps: &acp::McpCapabilities) -> Vec<acp::McpServer> {
        use ahpd_mcp::Target;
        let Some(hub) = &self.mcp else {
            return Vec::new();
        };
        let reader = self.secrets.clone();
        let secrets: ahpd_mcp::SecretResolver = std::sync::Arc::new(move |name: &str| {
            reader
                .read(name)
                .map(|s| s.expose().to_owned())
                .map_err(|e| e.to_string())
        });
        let mut out = Vec::new();
        for (name, spec) in hub.configured() {
            if !spec.enabled {
                continue;
            }
            let launch = match spec.launch(&secrets) {
                Ok(launch) => launch,
                Err(why) => {
                    tracing::warn!("the MCP server {name} is not offered to the agent: {why}");
                    continue;
                }
            };
            match launch.target {
                Target::Stdio {
                    command, args, env, ..
                } => {
                    let vars = env
                        .into_iter()
                        .map(|(k, v)| acp::EnvVariable::new(k, v))
                        .collect();
                    out.push(acp::McpServer::Stdio(
                        acp::McpServerStdio::new(name.clone(), command)
                            .args(args)
                            .env(vars),
                    ));
                }
                Target::Http { url, headers } => {
                    if !caps.http {
                        continue;
                    }
                    let hs = headers
                        .into_iter()
                        .map(|(k, v)| acp::HttpHeader::new(k, v))
                        .collect();
                    out.push(acp::McpServer::Http(
                        acp::McpServerHttp::new(name.clone(), url).headers(hs),
                    ));
                }
            }
        }
        out
    }
}

/// Copies the preset's settings from the user's home and writes its own files where none came.
fn seed(p: &crate::presets::Preset, state: &Path) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for s in p.seed {
        let Some(home) = &home else { break };
        let from = home.join(s.from_home);
        let to = state.join(s.to_state);
        if from.is_file() {
            if let Some(parent) = to.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            if let Err(e) = std::fs::copy(&from, &to) {
                tracing::warn!("cannot copy {} for the agent: {e}", from.display());
            }
        }
    }
    for (path, text) in p.files {
        let to = state.join(path);
        if to.exists() {
            continue;
        }
        if let Some(parent) = to.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(e) = std::fs::write(&to, text) {
            tracing::warn!("cannot write {} for the agent: {e}", to.display());
        }
    }
}

fn choices(o: &acp::SessionConfigOption) -> Option<(Vec<String>, Vec<String>)> {
    let acp::SessionConfigKind::Select(s) = &o.kind else {
        return None;
    };
    let items: Vec<&acp::SessionConfigSelectOption> = match &s.options {
        acp::SessionConfigSelectOptions::Ungrouped(items) => items.iter().collect(),
        acp::SessionConfigSelectOptions::Grouped(groups) => {
            groups.iter().flat_map(|g| g.options.iter()).collect()
        }
        _ => Vec::new(),
    };
    Some((
        items.iter().map(|i| i.value.0.to_string()).collect(),
        items.iter().map(|i| i.name.clone()).collect(),
    ))
}

/// The settings a session takes: `model` and `permissionMode` for the agent's model and mode
/// options (its legacy modes when it has no mode option), `acp.<id>` for each other option.
fn schema_properties(o: &Offered) -> serde_json::Value {
    use serde_json::json;
    let mut props = serde_json::Map::new();
    let of = |cat: acp::SessionConfigOptionCategory| {
        o.config.iter().find(|c| c.category.as_ref() == Some(&cat))
    };
    let select = |title: &str, values: Vec<String>, labels: Vec<String>| json!({"type": "string", "title": title, "enum": values, "enumLabels": labels});
    props.insert(
        "model".into(),
        match of(acp::SessionConfigOptionCategory::Model).and_then(choices) {
            Some((v, l)) => select("Model", v, l),
            None => json!({"type": "string", "title": "Model", "description": "A model the agent offers"}),
        },
    );
    let mode = match of(acp::SessionConfigOptionCategory::Mode).and_then(choices) {
        Some((v, l)) => Some(select("Mode", v, l)),
        None if !o.modes.is_empty() => Some(select(
            "Mode",
            o.modes.iter().map(|m| m.id.0.to_string()).collect(),
            o.modes.iter().map(|m| m.name.clone()).collect(),
        )),
        None => None,
    };
    if let Some(mode) = mode {
        props.insert("permissionMode".into(), mode);
    }
    for c in &o.config {
        if matches!(
            c.category,
            Some(acp::SessionConfigOptionCategory::Model | acp::SessionConfigOptionCategory::Mode)
        ) {
            continue;
        }
        let prop = match (&c.kind, choices(c)) {
            (_, Some((v, l))) => select(&c.name, v, l),
            (acp::SessionConfigKind::Boolean(_), None) => {
                json!({"type": "boolean", "title": c.name})
            }
            _ => continue,
        };
        props.insert(format!("acp.{}", c.id.0), prop);
    }
    serde_json::Value::Object(props)
}

/// An ACP agent record.
pub struct AcpAgent {
    pub(crate) descriptor: AgentDescriptor,
    pub(crate) launch: Arc<Launch>,
}

impl AcpAgent {
    /// The folder a session runs in: the one it names, which must be inside a served folder,
    /// else the first served folder.
    fn folder(&self, named: Option<&Path>) -> Result<PathBuf, AgentError> {
        let served = &self.launch.served;
        match named {
            Some(dir) => {
                let dir = std::fs::canonicalize(dir).map_err(|e| {
                    AgentError::Refused(format!("the folder {} cannot be used: {e}", dir.display()))
                })?;
                let inside = served.iter().any(|root| {
                    std::fs::canonicalize(root).is_ok_and(|root| dir.starts_with(root))
                });
                if inside {
                    Ok(dir)
                } else {
                    Err(AgentError::Refused(format!(
                        "{} is outside the folders this host serves, and an ACP agent runs only inside them",
                        dir.display()
                    )))
                }
            }
            None => served.first().cloned().ok_or_else(|| {
                AgentError::Refused(
                    "this host serves no folder, and an ACP agent runs only inside one".into(),
                )
            }),
        }
    }
}

#[async_trait]
impl Agent for AcpAgent {
    fn descriptor(&self) -> AgentDescriptor {
        self.descriptor.clone()
    }

    fn config_schema(&self, _working_directory: Option<&Path>) -> SessionConfigSchema {
        let offered = self
            .launch
            .offered
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        let properties = serde_json::from_value(schema_properties(&offered)).unwrap_or_default();
        SessionConfigSchema {
            r#type: "object".into(),
            properties,
            required: None,
        }
    }

    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        let id = start
            .resume
            .clone()
            .unwrap_or_else(|| start.backend_id.clone());
        if !crate::store::plain_id(&id) {
            return Err(AgentError::Refused(format!(
                "{id:?} is not an ACP conversation id"
            )));
        }
        let stored = self.launch.store.read(&id);
        let named = start.working_directory.clone().or_else(|| {
            stored
                .as_ref()
                .and_then(|c| c.working_directories.first())
                .and_then(|u| sdk_util::path_of(u))
        });
        let cwd = self.folder(named.as_deref())?;
        let mut additional = Vec::new();
        for d in &start.additional_directories {
            additional.push(self.folder(Some(d))?);
        }
        let now = sdk_util::now_iso();
        let conversation = stored.unwrap_or_else(|| Conversation {
            id: id.clone(),
            title: String::new(),
            created_at: now.clone(),
            modified_at: now,
            working_directories: vec![sdk_util::file_uri(&cwd)],
            acp_session_id: None,
            loadable: false,
            turns: Vec::new(),
        });
        Ok(Box::new(AcpSession::start(
            self.launch.clone(),
            start.ctx,
            conversation,
            cwd,
            additional,
            start.settings,
        )))
    }

    async fn list(&self) -> Vec<PastSession> {
        self.launch.store.list()
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        self.launch.store.read(id).map(|c| c.turns)
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        self.launch
            .store
            .delete(id)
            .map_err(|e| AgentError::Failed(format!("cannot delete {id}: {e}")))
    }
}
