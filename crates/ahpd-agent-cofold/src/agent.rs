//! `CofoldAgent`: the `Agent` of one record.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahp_types::common::JsonObject;
use ahp_types::state::{
    ProtectedResourceMetadata, SessionConfigPropertySchema, SessionConfigSchema, SessionModelInfo,
    Turn,
};
use ahpd_sdk::agent::{AgentDescriptor, AgentError, PastSession, Probe, Refusal, SessionStart};
use ahpd_sdk::{Agent, Session};
use cofold_agents::policy::{PermissionMode, mode_description};
use cofold_agents::store::{MemoryStore, NewSession, RunStatus, SessionQuery, Store};
use cofold_store_file::{FileStore, FileStoreOptions};
use serde_json::{Value, json};

use crate::build::AgentCore;
use crate::models::{KeySource, Shared, read_copapo, resource_of, thinking_levels};
use crate::options::{CofoldOptions, Embedder, Environment};
use crate::session::CofoldSession;
use crate::transcript;

const MODES: [&str; 6] = [
    "default",
    "acceptEdits",
    "plan",
    "auto",
    "bypassPermissions",
    "dontAsk",
];
const LEVELS: [&str; 4] = ["off", "low", "medium", "high"];

/// One endpoint the probe lists: prefix, base URL, key, headers and transport settings.
type Listed = (
    String,
    String,
    KeySource,
    Vec<(String, String)>,
    cofold_openai::ProviderSettings,
);

/// The cofold engine's agent for one record.
pub struct CofoldAgent {
    core: Arc<AgentCore>,
    description: String,
}

/// Why an agent could not be built over its options.
#[derive(Debug, thiserror::Error)]
pub enum AgentBuildError {
    /// The file store would not open.
    #[error("{agent}: the store at {} cannot be opened: {reason}", root.display())]
    Store {
        /// The agent's id.
        agent: String,
        /// The store's root folder.
        root: PathBuf,
        /// The store's own sentence.
        reason: String,
    },
    /// The options do not have the documented shape.
    #[error("{agent}: {source}")]
    Options {
        /// The agent's id.
        agent: String,
        /// What does not fit.
        source: crate::options::OptionsError,
    },
}

/// Builds the default agent (`cofold`, `Cofold`) over plugin options.
pub fn cofold_agent(options: &Value) -> Result<CofoldAgent, AgentBuildError> {
    cofold_agent_with(options, Embedder::default())
}

/// Builds the default agent with values only an embedder passes.
pub fn cofold_agent_with(
    options: &Value,
    embedder: Embedder,
) -> Result<CofoldAgent, AgentBuildError> {
    CofoldAgent::new(
        "cofold",
        "Cofold",
        "",
        options,
        embedder,
        Arc::new(Shared::default()),
    )
}

impl CofoldAgent {
    /// An agent with this id, name and description over already-resolved options.
    pub fn new(
        id: &str,
        name: &str,
        description: &str,
        options: &Value,
        embedder: Embedder,
        shared: Arc<Shared>,
    ) -> Result<CofoldAgent, AgentBuildError> {
        let env = embedder.env.clone().unwrap_or_else(Environment::process);
        let options = CofoldOptions::from_value(options, &env).map_err(|source| {
            AgentBuildError::Options {
                agent: id.to_owned(),
                source,
            }
        })?;
        let (store, store_root): (Arc<dyn Store>, Option<PathBuf>) = if options.memory {
            (Arc::new(MemoryStore::new()), None)
        } else {
            let root = options.store.clone().unwrap_or_else(|| env.cofold_home());
            let store =
                FileStore::open(root.clone(), FileStoreOptions::default()).map_err(|e| {
                    AgentBuildError::Store {
                        agent: id.to_owned(),
                        root: root.clone(),
                        reason: e.message,
                    }
                })?;
            (Arc::new(store), Some(root))
        };
        let copapo = read_copapo(&env, None);
        Ok(CofoldAgent {
            core: Arc::new(AgentCore {
                id: id.to_owned(),
                name: name.to_owned(),
                options,
                embedder,
                env,
                store,
                store_root,
                shared,
                copapo,
                mcp_sessions: crate::mcp::Sessions::default(),
            }),
            description: description.to_owned(),
        })
    }

    fn resource(&self) -> String {
        self.core
            .options
            .resource
            .clone()
            .unwrap_or_else(|| resource_of(self.core.agent_endpoint(&self.core.copapo).as_deref()))
    }
}

/// An enum property's values, labels, descriptions and default.
type Choices<'a> = (&'a [&'a str], Vec<String>, Vec<String>, &'a str);

fn property(
    kind: &str,
    title: &str,
    mutable: bool,
    choices: Option<Choices<'_>>,
) -> SessionConfigPropertySchema {
    let (values, labels, descriptions, default) = match choices {
        Some((values, labels, descriptions, default)) => (
            Some(values.iter().map(|v| json!(v)).collect()),
            Some(labels),
            Some(descriptions),
            Some(json!(default)),
        ),
        None => (None, None, None, None),
    };
    SessionConfigPropertySchema {
        r#type: kind.to_owned(),
        title: title.to_owned(),
        description: None,
        default,
        r#enum: values,
        enum_labels: labels,
        enum_descriptions: descriptions,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(mutable),
    }
}

/// The refusals of a session's configuration values: unknown keys and values outside their schema.
pub(crate) fn check_config(agent_id: &str, values: &JsonObject) -> Result<(), Refusal> {
    for (key, value) in values {
        let text = || value.as_str();
        match key.as_str() {
            "model" | "instructions" => {
                if !value.is_string() {
                    return Err(Refusal::new(format!("{agent_id}: {key} takes a string")));
                }
            }
            "baseUrl" => {
                let ok = text().is_some_and(|t| {
                    url::Url::parse(t)
                        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
                });
                if !ok {
                    return Err(Refusal::new(format!(
                        "{agent_id}: baseUrl takes an http or https URL"
                    )));
                }
            }
            "permissionMode" => {
                if !text().is_some_and(|t| MODES.contains(&t)) {
                    return Err(Refusal::new(format!(
                        "{agent_id}: permissionMode takes one of default, acceptEdits, plan, auto, bypassPermissions, dontAsk"
                    )));
                }
            }
            "effortLevel" => {
                if !text().is_some_and(|t| LEVELS.contains(&t)) {
                    return Err(Refusal::new(format!(
                        "{agent_id}: effortLevel takes one of off, low, medium, high"
                    )));
                }
            }
            _ => {
                return Err(Refusal::new(format!(
                    "{agent_id}: {key} is not a config key this agent takes"
                )));
            }
        }
    }
    Ok(())
}

/// The session's id from its URI (`<scheme>:/<id>`), the chat's own id when the URI names
/// none.
fn session_id_of(session_uri: &str, backend_id: &str) -> String {
    session_uri
        .split_once(':')
        .map(|(_, rest)| rest.trim_start_matches('/'))
        .filter(|id| !id.is_empty())
        .unwrap_or(backend_id)
        .to_owned()
}

pub(crate) fn encode_scratch_segment(id: &str) -> String {
    let mut out = String::new();
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[async_trait::async_trait]
impl Agent for CofoldAgent {
    fn descriptor(&self) -> AgentDescriptor {
        let mut d = AgentDescriptor::new(self.core.id.clone(), self.core.name.clone());
        d.description = self.description.clone();
        // A chat forks from any turn this process watched end.
        d.capabilities = Some(ahp_types::state::AgentCapabilities {
            multiple_chats: Some(ahp_types::state::MultipleChatsCapability {
                fork: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
        d.protected_resources = Some(vec![ProtectedResourceMetadata {
            resource: self.resource(),
            resource_name: Some(self.core.name.clone()),
            authorization_servers: None,
            jwks_uri: None,
            scopes_supported: None,
            bearer_methods_supported: None,
            resource_signing_alg_values_supported: None,
            resource_documentation: None,
            resource_policy_uri: None,
            resource_tos_uri: None,
            required: Some(false),
        }]);
        d
    }

    fn runs_nested(&self) -> bool {
        true
    }

    fn machine(&self) -> std::collections::BTreeMap<String, ahpd_sdk::machine::MachineNeed> {
        crate::machine::needs(
            self.core.options.computer_config_dir.as_deref(),
            &self.core.env,
        )
    }

    fn config_schema(&self, _working_directory: Option<&Path>) -> SessionConfigSchema {
        let mut properties = HashMap::new();
        properties.insert("model".to_owned(), property("string", "Model", true, None));
        properties.insert(
            "baseUrl".to_owned(),
            property("string", "Endpoint", false, None),
        );
        properties.insert(
            "instructions".to_owned(),
            property("string", "Instructions", false, None),
        );
        if self.core.embedder.policy.is_none() {
            let labels = [
                "Ask Before Edits",
                "Edit Automatically",
                "Plan Mode",
                "Auto Mode",
                "Bypass Permissions",
                "Don't Ask",
            ];
            let descriptions = MODES
                .iter()
                .filter_map(|m| serde_json::from_value::<PermissionMode>(json!(m)).ok())
                .map(|m| mode_description(m).to_owned())
                .collect();
            properties.insert(
                "permissionMode".to_owned(),
                property(
                    "string",
                    "Approvals",
                    true,
                    Some((
                        &MODES,
                        labels.map(str::to_owned).to_vec(),
                        descriptions,
                        "auto",
                    )),
                ),
            );
        }
        if self.core.embedder.adapter.is_none() {
            let labels = ["Off", "Low", "Medium", "High"].map(str::to_owned).to_vec();
            let descriptions = [
                "No extra thinking",
                "Thinks briefly",
                "Thinks before answering",
                "Thinks hard",
            ]
            .map(str::to_owned)
            .to_vec();
            properties.insert(
                "effortLevel".to_owned(),
                property(
                    "string",
                    "Effort",
                    true,
                    Some((&LEVELS, labels, descriptions, "off")),
                ),
            );
        }
        SessionConfigSchema {
            r#type: "object".to_owned(),
            properties,
            required: None,
        }
    }

    fn config_defaults(&self, working_directory: Option<&Path>) -> JsonObject {
        let mut out = JsonObject::new();
        let model = self
            .core
            .options
            .model
            .clone()
            .or_else(|| read_copapo(&self.core.env, working_directory).model);
        if let Some(model) = model {
            out.insert("model".to_owned(), json!(model));
        }
        if let Some(base) = &self.core.options.base_url {
            out.insert("baseUrl".to_owned(), json!(base));
        }
        out
    }

    fn validate_config(&self, values: &JsonObject) -> Result<(), Refusal> {
        check_config(&self.core.id, values)
    }

    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        let id = &self.core.id;
        let stored = self
            .core
            .store
            .get_session(&start.backend_id)
            .await
            .map_err(|e| AgentError::Failed(e.message))?;
        // A fork the store refuses still makes the chat (the host already shows its copied
        // turns); its first turn fails with the store's sentence instead.
        let mut refused_fork = None;
        let mut stored = stored;
        if let Some(source) = &start.fork {
            let Some(through) = source.point.data.as_str() else {
                return Err(AgentError::Refused(format!(
                    "{id}: turn {} has no cut point in this process",
                    source.point.turn_id
                )));
            };
            match self
                .core
                .store
                .fork(&source.backend_id, through, &start.backend_id)
                .await
            {
                Ok(record) => stored = Some(record),
                Err(e) => refused_fork = Some(format!("{id}: {}", e.message)),
            }
        }
        let had_record = stored.is_some();
        let stored_workspace = stored.and_then(|s| s.workspace).map(PathBuf::from);
        let workspace =
            match (&stored_workspace, &start.working_directory) {
                (Some(stored), Some(asked)) if stored != asked => {
                    return Err(AgentError::Refused(format!(
                        "{id}: this conversation works in {}",
                        stored.display()
                    )));
                }
                (Some(stored), _) => stored.clone(),
                (None, Some(asked)) => asked.clone(),
                (None, None) => {
                    // Keyed by the session, so every chat of it (forks too) works in one folder.
                    let scratch = self.core.env.home.join(".copilot").join("chats").join(
                        encode_scratch_segment(&session_id_of(
                            &start.session_uri,
                            &start.backend_id,
                        )),
                    );
                    std::fs::create_dir_all(&scratch)
                        .map_err(|e| AgentError::Failed(e.to_string()))?;
                    scratch
                }
            };
        // The conversation exists from the start, so a chat with nothing said yet is listed
        // and has an (empty) transcript. A refused fork is left to fail its first turn.
        if !had_record && refused_fork.is_none() {
            let new = NewSession {
                session_id: start.backend_id.clone(),
                // The id every turn's runtime is built under (see `build.rs`).
                agent_id: "cofold".to_owned(),
                workspace: Some(workspace.to_string_lossy().into_owned()),
            };
            match self.core.store.create_session(new).await {
                Err(e) if e.code != cofold_agents::error::ErrorCode::AlreadyExists => {
                    return Err(AgentError::Failed(format!("{id}: {}", e.message)));
                }
                _ => {}
            }
        }
        let copapo = read_copapo(&self.core.env, Some(&workspace));
        // A conversation read back may end in a run that waits on a person.
        let paused = match (&start.resume, &start.fork) {
            (Some(_), None) => {
                crate::session::read_paused(self.core.store.as_ref(), &start.backend_id).await
            }
            _ => None,
        };
        let session = CofoldSession::new(
            self.core.clone(),
            start.ctx.clone(),
            start.backend_id.clone(),
            session_id_of(&start.session_uri, &start.backend_id),
            workspace,
            copapo,
            start.settings.clone(),
            paused,
            refused_fork,
        );
        let servers = self.core.embedder.mcp_servers();
        if let Some(mcp) = self.core.mcp_sessions.attach(
            &session_id_of(&start.session_uri, &start.backend_id),
            self.core.embedder.mcp.as_ref(),
            &servers,
            &start.ctx,
        ) {
            session.attach_mcp(mcp);
        }
        if start.resume.is_some() {
            session.settle_dead().await;
        }
        Ok(Box::new(session))
    }

    async fn probe(&self) -> Probe {
        let core = &self.core;
        let reference = core
            .options
            .model
            .clone()
            .or_else(|| core.copapo.model.clone());
        let mut models: Vec<SessionModelInfo> = Vec::new();
        if core.embedder.adapter.is_none() {
            let timeout = Duration::from_millis(core.options.catalogue_timeout_ms);
            let mut endpoints: Vec<Listed> = Vec::new();
            if let Some(base) = &core.options.base_url {
                let key = core
                    .options
                    .api_key
                    .clone()
                    .map(KeySource::Fixed)
                    .or_else(|| core.embedder.api_key.clone().map(KeySource::Dynamic))
                    .unwrap_or(KeySource::None);
                endpoints.push((
                    core.id.clone(),
                    base.clone(),
                    key,
                    Vec::new(),
                    cofold_openai::ProviderSettings::default(),
                ));
            }
            for p in &core.copapo.providers {
                let key = p
                    .api_key
                    .clone()
                    .filter(|k| !k.is_empty())
                    .map(KeySource::Fixed)
                    .unwrap_or(KeySource::None);
                endpoints.push((
                    p.id.clone(),
                    p.base_url.clone(),
                    key,
                    p.headers.clone().unwrap_or_default(),
                    core.copapo.settings_of(Some(p)),
                ));
            }
            let lists = futures::future::join_all(endpoints.iter().map(
                |(_, base, key, headers, settings)| {
                    core.shared
                        .list(base, key, headers.clone(), settings, timeout)
                },
            ))
            .await;
            for ((prefix, _, _, _, _), list) in endpoints.iter().zip(lists) {
                for info in list.iter().filter(|m| !m.id.trim().is_empty()) {
                    let declared = (prefix == &core.id)
                        .then(|| core.options.models.get(&info.id))
                        .flatten();
                    let levels = thinking_levels(declared, Some(info));
                    models.push(SessionModelInfo {
                        id: format!("{prefix}/{}", info.id),
                        provider: core.id.clone(),
                        name: if info.name.trim().is_empty() {
                            info.id.clone()
                        } else {
                            info.name.clone()
                        },
                        max_context_window: info
                            .context_tokens
                            .filter(|c| *c > 0)
                            .map(|c| c as i64),
                        max_output_tokens: info
                            .max_output_tokens
                            .filter(|c| *c > 0)
                            .map(|c| c as i64),
                        max_prompt_tokens: None,
                        supports_vision: None,
                        policy_state: None,
                        config_schema: level_schema(&levels),
                        meta: None,
                    });
                }
            }
        }
        if let Some(reference) = reference
            && !models.iter().any(|m| m.id == reference)
        {
            // Unlisted, the model still takes the levels the record declares for it.
            let declared = core.options.base_url.as_deref().and_then(|base| {
                crate::models::resolve_connection(
                    &core.id,
                    Some(&reference),
                    Some(base),
                    &core.copapo,
                    &[],
                )
                .ok()
                .filter(|c| c.provider.is_none() && c.base_url == base)
                .and_then(|c| core.options.models.get(&c.model_id))
            });
            let levels = if core.embedder.adapter.is_none() {
                thinking_levels(declared, None)
            } else {
                Vec::new()
            };
            models.insert(
                0,
                SessionModelInfo {
                    id: reference.clone(),
                    provider: core.id.clone(),
                    name: reference,
                    max_context_window: None,
                    max_output_tokens: None,
                    max_prompt_tokens: None,
                    supports_vision: None,
                    policy_state: None,
                    config_schema: level_schema(&levels),
                    meta: None,
                },
            );
        }
        Probe {
            models,
            customizations: None,
        }
    }

    async fn list(&self) -> Vec<PastSession> {
        let sessions = self
            .core
            .store
            .list_sessions(SessionQuery::default())
            .await
            .unwrap_or_default();
        let mut rows = Vec::with_capacity(sessions.len());
        for record in sessions {
            rows.push(transcript::row(self.core.store.as_ref(), &record).await);
        }
        rows
    }

    async fn find(&self, id: &str) -> Option<PastSession> {
        let record = self.core.store.get_session(id).await.ok().flatten()?;
        Some(transcript::row(self.core.store.as_ref(), &record).await)
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        let host_tools = if self.core.options.host_tools {
            crate::host_tools::display_names(&self.core.embedder.host_tools)
        } else {
            HashMap::new()
        };
        let core = self.core.clone();
        let memory_dir = move |w: &std::path::Path| core.memory_dir(w);
        let at = transcript::ReadBack {
            host_tools: &host_tools,
            memory_dir: &memory_dir,
        };
        transcript::turns(self.core.store.as_ref(), id, &at).await
    }

    /// A run whose process is gone (settled when the backend opens) or a run waiting on a
    /// person (asked again once a client watches): either is worth opening the backend for as
    /// soon as a client subscribes. A store that cannot say is read as holding neither.
    async fn unfinished(&self, id: &str) -> bool {
        let store = self.core.store.as_ref();
        if matches!(store.dead_writer(id).await, Ok(Some(_))) {
            return true;
        }
        store
            .list_runs(id, Some(RunStatus::Awaiting))
            .await
            .is_ok_and(|runs| !runs.is_empty())
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        match self.core.store.delete_session(id).await {
            Ok(()) => {
                transcript::forget(self.core.store.as_ref(), id).await;
                crate::turn_facts::forget(self.core.store.as_ref(), id).await;
                Ok(())
            }
            Err(e) if e.code == cofold_agents::error::ErrorCode::NotFound => Ok(()),
            Err(e) => Err(AgentError::Failed(e.message)),
        }
    }
}

fn level_schema(levels: &[&str]) -> Option<ahp_types::state::ConfigSchema> {
    if levels.is_empty() {
        return None;
    }
    let labels: Vec<&str> = levels
        .iter()
        .map(|l| match *l {
            "off" => "Off",
            "low" => "Low",
            "medium" => "Medium",
            _ => "High",
        })
        .collect();
    let default = if levels.contains(&"off") {
        "off"
    } else {
        levels[0]
    };
    serde_json::from_value(json!({
        "type": "object",
        "properties": { "thinkingLevel": {
            "type": "string", "title": "Thinking", "enum": levels, "enumLabels": labels, "default": default
        } }
    }))
    .ok()
}
