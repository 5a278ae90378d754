//! What a record's sessions share to start their agents: the program and its variables, the
//! state folder seeded from the preset, the daemon's MCP servers as the agent takes them, and
//! what the agent offered last (the settings schema comes from it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use ahpd_sdk::plugin::SecretReader;

use crate::child::{self, Child, Pipes};
use crate::record::Spec;
use crate::store::Store;

/// What the record's agent offered when a session last opened: its options and modes, from
/// which the settings schema is drawn (an agent says what it offers only once it runs).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Offered {
    /// The configuration options.
    pub(crate) config: Vec<acp::SessionConfigOption>,
    /// The session modes.
    pub(crate) modes: Vec<acp::SessionMode>,
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
