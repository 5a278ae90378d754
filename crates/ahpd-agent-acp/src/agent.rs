//! One agent record as an AHP agent: its sessions, listed and read back from the host's own
//! store, each run by a child of the record's command in a folder the host serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use ahp_types::state::{SessionConfigSchema, Turn};
use ahpd_sdk::{
    Agent, AgentDescriptor, AgentError, PastSession, Session, SessionStart, util as sdk_util,
};
use async_trait::async_trait;

use crate::launch::{Launch, Offered};
use crate::session::AcpSession;
use crate::store::Conversation;

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
