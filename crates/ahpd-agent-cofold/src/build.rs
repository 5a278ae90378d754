//! The per-turn cofold agent: instructions, model, context, tools and policy,
//! rebuilt from the settings in force when a turn starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cofold_agents::agent::{Agent as CofoldRuntime, PartialContext};
use cofold_agents::ask::ask_user_tool;
use cofold_agents::model::{ModelParams, ReasoningEffort, ReasoningParams};
use cofold_agents::policy::{InsideFn, ModeContext, PermissionMode, Policy, explained, policy_of};
use cofold_agents::secrets::Secrets;
use cofold_agents::store::Store;
use cofold_tools::paths::resolve_within;
use cofold_tools::private::PrivateSet;
use cofold_tools::standard::{StandardArgs, standard_capabilities};
use cofold_tools::web::ClientSource;
use serde_json::Value;

use crate::models::{
    ClientError, ConnectionError, Copapo, Shared, auto_compact_point, resolve_connection,
};
use crate::options::{CofoldOptions, DEFAULT_INSTRUCTIONS, Embedder, Environment};

/// What one agent (one record) shares with all its sessions.
pub struct AgentCore {
    /// The agent (record) id: provider id and prefix of its explicit base's models.
    pub id: String,
    /// The display name.
    pub name: String,
    /// The options in force (record over plugin).
    pub options: CofoldOptions,
    /// Values only an embedder passes.
    pub embedder: Embedder,
    /// The environment.
    pub env: crate::options::Environment,
    /// The store every session of the agent uses.
    pub store: Arc<dyn Store>,
    /// The file store's root, when the store is on disk.
    pub store_root: Option<PathBuf>,
    /// Transports and catalogue answers, shared by the process.
    pub shared: Arc<Shared>,
    /// The agent-level copapo reading (layers 1 and 3).
    pub copapo: Copapo,
    /// The sessions that hold MCP servers.
    pub(crate) mcp_sessions: crate::mcp::Sessions,
}

/// Values of one turn: the settings in force and the message's chosen model.
#[derive(Debug, Clone, Default)]
pub struct TurnSettings {
    /// The reference in force.
    pub reference: Option<String>,
    /// The session's explicit base, over the agent's.
    pub base_url: Option<String>,
    /// The session's instructions.
    pub instructions: Option<String>,
    /// The permission mode named, when one of the six.
    pub mode: Option<PermissionMode>,
    /// The thinking level.
    pub level: Option<String>,
}

fn setting(settings: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    settings
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl TurnSettings {
    /// Reads the settings a turn runs with.
    pub fn read(
        settings: &serde_json::Map<String, Value>,
        message_model: Option<&ahp_types::state::ModelSelection>,
        core: &AgentCore,
        copapo: &Copapo,
    ) -> TurnSettings {
        let reference = message_model
            .map(|m| m.id.trim().to_owned())
            .filter(|m| !m.is_empty())
            .or_else(|| setting(settings, "model"))
            .or_else(|| core.options.model.clone())
            .or_else(|| copapo.model.clone());
        let level = message_model
            .and_then(|m| m.config.as_ref())
            .and_then(|c| c.get("thinkingLevel"))
            .and_then(Value::as_str)
            .filter(|l| ["off", "low", "medium", "high"].contains(l))
            .map(str::to_owned)
            .or_else(|| setting(settings, "effortLevel"));
        let mode = setting(settings, "permissionMode")
            .and_then(|m| serde_json::from_value(Value::String(m)).ok());
        TurnSettings {
            reference,
            base_url: setting(settings, "baseUrl").or_else(|| core.options.base_url.clone()),
            instructions: setting(settings, "instructions"),
            mode,
            level,
        }
    }
}

/// What a session adds to a turn's agent: tools from outside cofold, the names they take,
/// and the hooks that raise edit notices.
#[derive(Default)]
pub struct TurnExtras {
    /// Names already taken by tools from outside cofold; cofold's own leave them out.
    pub taken_names: Vec<String>,
    /// Hooks around the run.
    pub hooks: Option<Arc<dyn cofold_agents::hooks::Hooks>>,
    /// Tools from outside cofold (clients' tools).
    pub tools: Vec<cofold_agents::tool::Tool>,
    /// Capabilities put ahead of the standard ones (the project's instructions).
    pub capabilities: Vec<Arc<dyn cofold_agents::capability::Capability>>,
    /// Records what the standard tools change.
    pub recorder: Option<cofold_changes::TurnRecorder>,
    /// The names of the tools the person approved in advance (a trusted MCP server's): the
    /// mode does not ask about them, though it still refuses what it refuses.
    pub approved: Vec<String>,
}

/// Why a turn's agent cannot be built. Each message is the one sentence the turn fails with,
/// naming the agent.
#[derive(Debug, thiserror::Error)]
pub enum TurnAgentError {
    /// The copapo configuration could not be read.
    #[error("{agent}: {reason}")]
    Configuration {
        /// The agent's id.
        agent: String,
        /// What is wrong with the file.
        reason: String,
    },
    /// No endpoint fits the turn's model reference.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// The model client could not be made.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The agent's `tools` option does not have the documented shape.
    #[error("{agent}: {source}")]
    Tools {
        /// The agent's id.
        agent: String,
        /// The section's own sentence.
        source: cofold_tools::standard::ToolsConfigError,
    },
    /// The tools and policy did not assemble into an agent (a tool name given twice).
    #[error("{0}")]
    Assembly(String),
}

/// Everything a turn's run needs besides its input.
pub struct TurnAgent {
    /// The cofold agent.
    pub agent: CofoldRuntime,
    /// The reference in force (stored on the run).
    pub reference: String,
    /// The memory folder, when there is one.
    pub memory_dir: Option<PathBuf>,
    /// Whether the model takes images (its catalogue entry says so).
    pub images: bool,
}

/// The web tools' client source: `network`'s proxy and certificates, with the proxy variables
/// read from the agent's environment when `network` names no other.
fn web_client(mut network: cofold_openai::Network, env: &Environment) -> ClientSource {
    if network.env.is_none() {
        network.env = Some(env.vars.clone());
    }
    ClientSource::new(move || {
        cofold_openai::net::client_builder(&network)
            .map_err(|e| cofold_tools::web::SourceError(e.message.clone()))
    })
}

fn effort_of(level: Option<&str>) -> Option<ReasoningEffort> {
    match level? {
        "low" => Some(ReasoningEffort::Low),
        "medium" => Some(ReasoningEffort::Medium),
        "high" => Some(ReasoningEffort::High),
        _ => None,
    }
}

impl AgentCore {
    /// The memory folder of a workspace: `<store>/memory/<workspace slug>/`.
    pub fn memory_dir(&self, workspace: &Path) -> Option<PathBuf> {
        let root = self.store_root.as_ref()?;
        Some(root.join("memory").join(cofold_store_file::workspace_slug(
            &workspace.to_string_lossy(),
        )))
    }

    /// The endpoint the agent's configured reference resolves to, for keys and the resource.
    pub fn agent_endpoint(&self, copapo: &Copapo) -> Option<String> {
        if let Some(base) = &self.options.base_url {
            return Some(base.clone());
        }
        let reference = self.options.model.clone().or_else(|| copapo.model.clone());
        resolve_connection(&self.id, reference.as_deref(), None, copapo, &[])
            .ok()
            .map(|c| c.base_url)
    }

    /// Builds the cofold agent of one turn, or says why the turn fails.
    // Long: the runtime is assembled in one place so the order of tools (the extras, ask_user,
    // then the standard capabilities that yield to their names) stays visible.
    pub fn turn_agent(
        &self,
        turn: &TurnSettings,
        copapo: &Copapo,
        workspace: &Path,
        credential: Option<String>,
        extras: TurnExtras,
    ) -> Result<TurnAgent, TurnAgentError> {
        let TurnExtras {
            taken_names,
            hooks,
            tools: extra_tools,
            capabilities: first_capabilities,
            recorder,
            approved,
        } = extras;
        let host_tool_names = taken_names.as_slice();
        if let Some(error) = &copapo.error {
            return Err(TurnAgentError::Configuration {
                agent: self.id.clone(),
                reason: error.clone(),
            });
        }
        let instructions = self.instructions(turn, copapo);
        let effort = effort_of(turn.level.as_deref());
        let params = ModelParams {
            reasoning: effort.map(|e| ReasoningParams {
                effort: Some(e),
                max_tokens: None,
            }),
            ..ModelParams::default()
        };
        let secrets = self.turn_secrets(copapo, credential.as_deref());
        let private = Arc::new(self.turn_private());
        let model = self.turn_model(turn, copapo, credential, &params, effort.is_some())?;
        let (adapter, reference, window, images, network) = (
            model.adapter,
            model.reference,
            model.window,
            model.images,
            model.network,
        );
        let point = auto_compact_point(
            window,
            self.options.auto_compact_tokens,
            self.options.auto_compact_at,
        );
        let memory_dir = self.memory_dir(workspace);
        let tools_config = self
            .options
            .tools_config()
            .map_err(|source| TurnAgentError::Tools {
                agent: self.id.clone(),
                source,
            })?;
        let capabilities = standard_capabilities(
            &tools_config,
            StandardArgs {
                workspace: workspace.to_path_buf(),
                memory_dir: memory_dir.clone(),
                // Commands get the agent's environment (the process's, unless an embedder
                // gave another), filtered by `tools.shell.env`.
                env: Some(self.env.vars.clone().into_iter().collect()),
                web_client: Some(web_client(network, &self.env)),
                private: Some(private.clone()),
            },
        );
        let mut builder = CofoldRuntime::builder("cofold", instructions, adapter)
            .store(self.store.clone())
            .secrets(secrets)
            .params(params)
            .context(PartialContext {
                max_tokens: Some(window),
                auto_compact_tokens: Some(point.max(1)),
                ..PartialContext::default()
            });
        if let Some(hooks) = hooks {
            builder = builder.hooks(hooks);
        }
        for tool in extra_tools {
            builder = builder.tool(tool);
        }
        if !host_tool_names.iter().any(|n| n == "ask_user") {
            let ask = ask_user_tool(None, None).map_err(|e| TurnAgentError::Assembly(e.message))?;
            builder = builder.tool(ask);
        }
        for capability in first_capabilities {
            builder = builder.capability(capability);
        }
        for capability in capabilities {
            let capability = match &recorder {
                Some(r) => Arc::new(cofold_changes::Recorded::new(capability, r.clone()))
                    as Arc<dyn cofold_agents::capability::Capability>,
                None => capability,
            };
            builder = builder.capability_excluding(capability, host_tool_names.to_vec());
        }
        let policy = self.turn_policy(turn, workspace, private, approved);
        let agent = builder
            .policy(policy)
            .build()
            .map_err(|e| TurnAgentError::Assembly(e.message))?;
        Ok(TurnAgent {
            agent,
            reference,
            memory_dir,
            images,
        })
    }

    /// The turn's instructions: the session's, else the record's, else copapo's, else the
    /// default.
    fn instructions(&self, turn: &TurnSettings, copapo: &Copapo) -> String {
        turn.instructions
            .clone()
            .or_else(|| self.options.instructions.clone())
            .or_else(|| copapo.instructions.clone())
            .unwrap_or_else(|| DEFAULT_INSTRUCTIONS.to_owned())
    }

    /// The approval policy: the embedder's, else the turn's permission mode with the
    /// workspace as what is inside. Either way an ask says why when the call shows a reason
    /// (the person sees it as the question's risk assessment).
    ///
    /// A call whose `path` (else `cwd`) lands in one of the person's private places (a
    /// credential store, the daemon's or the engine's own files), by its resolved target or by
    /// its file identity, is asked about in every mode but `bypassPermissions`, and refused
    /// where the mode never asks.
    fn turn_policy(
        &self,
        turn: &TurnSettings,
        workspace: &Path,
        private: Arc<PrivateSet>,
        approved: Vec<String>,
    ) -> Arc<dyn Policy> {
        let root = workspace.to_path_buf();
        let inside: InsideFn = Arc::new(move |path: &Path| resolve_within(&root, path).inside);
        let policy = match &self.embedder.policy {
            Some(policy) => policy.clone(),
            None => {
                let judged = workspace.to_path_buf();
                policy_of(
                    turn.mode.unwrap_or(PermissionMode::Auto),
                    ModeContext {
                        inside: inside.clone(),
                        is_edit: Some(Arc::new(|tool: &cofold_agents::tool::Tool| {
                            tool.effects().writes
                        })),
                        private: Some(Arc::new(
                            move |_: &cofold_agents::tool::Tool, input: &Value| {
                                let named = ["path", "cwd"]
                                    .iter()
                                    .find_map(|key| input.get(*key).and_then(Value::as_str))?;
                                let resolved = resolve_within(&judged, Path::new(named));
                                let kind = private
                                    .judge(&resolved.absolute)
                                    .or_else(|| private.judge(&resolved.real))?;
                                Some(format!(
                                    "{} ({kind})",
                                    cofold_tools::paths::display_path(&judged, &resolved.absolute)
                                ))
                            },
                        )),
                        approved: Some(Arc::new(move |tool: &cofold_agents::tool::Tool| {
                            approved.iter().any(|name| name == tool.name())
                        })),
                    },
                )
            }
        };
        explained(policy, inside)
    }

    /// The secrets no tool call may carry: the daemon's (its token, the vault's values) and
    /// the model keys this agent knows (the turn's credential, the providers' keys, the
    /// record's own key).
    fn turn_secrets(&self, copapo: &Copapo, credential: Option<&str>) -> Secrets {
        let daemon = self
            .embedder
            .guard
            .as_ref()
            .map(|g| g.secrets())
            .unwrap_or_default();
        let keys = copapo
            .providers
            .iter()
            .filter_map(|p| p.api_key.clone())
            .chain(credential.map(str::to_owned))
            .chain(self.options.api_key.clone())
            .chain(
                ["COFOLD_API_KEY", "COPAPO_API_KEY"]
                    .iter()
                    .filter_map(|name| self.env.vars.get(*name).cloned()),
            );
        daemon.with(keys.map(|key| ("a model provider's key", key)))
    }

    /// The private places of this agent's sessions: the daemon's set, and always the
    /// credential stores under the home folder and the engine's own store.
    fn turn_private(&self) -> PrivateSet {
        let mut set = crate::guard::default_private(&self.env.home, self.store_root.as_deref());
        if let Some(guard) = &self.embedder.guard {
            set = set.with_set(&guard.private());
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use cofold_tools::web::{Fetch, FetchRequest, ReqwestFetch};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A loopback listener answering `200 ok`; the first line of each request it saw.
    async fn listener() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                record.lock().expect("lock").push(line);
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            }
        });
        (port, seen)
    }

    fn env(vars: &[(&str, String)]) -> Environment {
        Environment {
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<HashMap<_, _>>(),
            home: PathBuf::from("/"),
        }
    }

    /// A request pinned to loopback, as web_fetch sends it after its check.
    async fn send(source: ClientSource, port: u16) -> Result<u16, String> {
        let request = FetchRequest {
            method: reqwest::Method::GET,
            url: format!("http://site.invalid:{port}/")
                .parse()
                .expect("parses"),
            headers: Vec::new(),
            body: None,
            connect_to: Some(vec!["127.0.0.1".parse().expect("parses")]),
        };
        let response = ReqwestFetch::with_source(source).fetch(request).await;
        response.map(|r| r.status).map_err(|e| e.reason())
    }

    #[tokio::test]
    async fn the_web_tools_read_the_agents_proxy_variables() {
        let (proxy, proxied) = listener().await;
        let (port, direct) = listener().await;
        let proxy_url = format!("http://127.0.0.1:{proxy}");
        let through = web_client(
            cofold_openai::Network::default(),
            &env(&[("http_proxy", proxy_url.clone())]),
        );
        assert_eq!(send(through, port).await, Ok(200));
        assert_eq!(
            *proxied.lock().expect("lock"),
            [format!("GET http://site.invalid:{port}/ HTTP/1.1")]
        );
        assert!(direct.lock().expect("lock").is_empty());

        let exempt = web_client(
            cofold_openai::Network::default(),
            &env(&[
                ("HTTP_PROXY", proxy_url),
                ("NO_PROXY", "site.invalid".to_owned()),
            ]),
        );
        assert_eq!(send(exempt, port).await, Ok(200));
        assert_eq!(*direct.lock().expect("lock"), ["GET / HTTP/1.1"]);
        assert_eq!(proxied.lock().expect("lock").len(), 1);
    }

    #[tokio::test]
    async fn an_unreadable_extra_ca_file_is_the_fetchs_sentence() {
        let network = cofold_openai::Network {
            extra_ca_certs: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..cofold_openai::Network::default()
        };
        let sent = send(web_client(network, &env(&[])), 9).await;
        assert!(
            sent.as_ref()
                .is_err_and(|e| e.starts_with("extraCaCerts /nonexistent/ca.pem cannot be read")),
            "{sent:?}"
        );
    }
}
