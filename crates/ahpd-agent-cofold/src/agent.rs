//! `CofoldAgent`: the `Agent` of one record.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahp_types::state::{ProtectedResourceMetadata, SessionConfigSchema, Turn};
use ahpd_sdk::agent::{AgentDescriptor, AgentError, PastSession, Probe, Refusal, SessionStart};
use ahpd_sdk::{Agent, Session};
use cofold_agents::store::{MemoryStore, NewSession, RunStatus, SessionQuery, Store};
use cofold_store_file::{FileStore, FileStoreOptions};
use serde_json::{Value, json};

use crate::build::AgentCore;
use crate::models::{Shared, read_copapo, resource_of};
use crate::options::{CofoldOptions, Embedder, Environment};
use crate::session::CofoldSession;
use crate::transcript;
use crate::{catalogue, session_config};

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
        session_config::schema(
            self.core.embedder.policy.is_none(),
            self.core.embedder.adapter.is_none(),
        )
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
        session_config::check_config(&self.core.id, values)
    }

    // Long: opening a chat decides the fork, the workspace, the stored conversation, the paused
    // run and the MCP lease, each from the ones before it.
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
        let workspace = match (&stored_workspace, &start.working_directory) {
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
                    crate::scratch::encode_scratch_segment(&crate::scratch::session_id_of(
                        &start.session_uri,
                        &start.backend_id,
                    )),
                );
                // The person's alone, whatever the umask: the session's work and pastes land here.
                std::os::unix::fs::DirBuilderExt::mode(
                    std::fs::DirBuilder::new().recursive(true),
                    0o700,
                )
                .create(&scratch)
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
            crate::scratch::session_id_of(&start.session_uri, &start.backend_id),
            workspace,
            copapo,
            start.settings.clone(),
            paused,
            refused_fork,
        );
        let servers = self.core.embedder.mcp_servers();
        if let Some(mcp) = self.core.mcp_sessions.attach(
            &crate::scratch::session_id_of(&start.session_uri, &start.backend_id),
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
        catalogue::probe(&self.core).await
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
