//! `@ahpd/agent-acp`: the plugin that registers the `acp` engine, which turns agent records
//! into ACP agents.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahpd_sdk::plugin::{
    AgentRecord, Engine, Plugin, PluginError, Readiness, RecordError, Registrar, SecretReader,
};
use ahpd_sdk::{Agent, AgentDescriptor};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::agent::AcpAgent;
use crate::launch::Launch;
use crate::store::Store;

/// The plugin's package name.
pub const PLUGIN: &str = "@ahpd/agent-acp";
/// The engine's name, as records name it.
pub const ENGINE: &str = "acp";

/// The plugin.
#[derive(Debug, Default)]
pub struct AcpPlugin;

#[async_trait]
impl Plugin for AcpPlugin {
    fn name(&self) -> &str {
        PLUGIN
    }

    fn title(&self) -> &str {
        "ACP agents"
    }

    fn defaults(&self) -> Value {
        json!({"store": "acp-sessions"})
    }

    fn options_schema(&self) -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "store": {
                    "type": "string",
                    "format": "path",
                    "title": "Conversation folder",
                    "description": "Where the host keeps each ACP session's turns and the agent's state folder"
                }
            },
            "additionalProperties": false
        })
    }

    fn check(&self, options: &Value) -> Readiness {
        match options.get("store").and_then(Value::as_str) {
            Some(s) if Path::new(s).is_absolute() => Readiness::Ready,
            _ => Readiness::Unconfigured("the option store must name a folder".into()),
        }
    }

    async fn apply(
        &self,
        options: Value,
        registrar: &mut dyn Registrar,
    ) -> Result<(), PluginError> {
        let store = options
            .get("store")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| PluginError("the option store must name a folder".into()))?;
        let mcp = registrar
            .service("mcp")
            .and_then(|s| s.downcast::<ahpd_mcp::McpHub>().ok())
            .map(|hub| (*hub).clone());
        registrar.engine(Arc::new(AcpEngine {
            store,
            served: registrar.served_paths(),
            mcp,
        }));
        Ok(())
    }
}

/// The `acp` engine: one agent per record.
pub struct AcpEngine {
    store: PathBuf,
    served: Vec<PathBuf>,
    mcp: Option<ahpd_mcp::McpHub>,
}

impl AcpEngine {
    /// An engine keeping its conversations under `store`, running agents only inside `served`.
    pub fn new(store: PathBuf, served: Vec<PathBuf>) -> Self {
        Self {
            store,
            served,
            mcp: None,
        }
    }
}

impl Engine for AcpEngine {
    fn name(&self) -> &str {
        ENGINE
    }

    fn record_schema(&self) -> Value {
        crate::record::schema()
    }

    fn host_only_fields(&self) -> Vec<String> {
        // Which program runs on the daemon's machine is the host's to say.
        vec!["command".into(), "args".into(), "env".into()]
    }

    fn template(&self) -> JsonObject {
        let mut t = JsonObject::new();
        t.insert("preset".into(), Value::from("gemini"));
        t
    }

    fn check_record(&self, owner: &str, config: &JsonObject) -> Result<(), RecordError> {
        if owner != "host" {
            for key in self.host_only_fields() {
                if config.contains_key(&key) {
                    return Err(RecordError::Config {
                        key,
                        reason: "only a host record may set it".into(),
                    });
                }
            }
        }
        crate::record::parse(config).map(|_| ())
    }

    fn agent(
        &self,
        record: &AgentRecord,
        _plugin_options: &Value,
        secrets: Arc<dyn SecretReader>,
    ) -> Result<Arc<dyn Agent>, RecordError> {
        let spec = crate::record::parse(&record.config)?;
        spec.locate(std::env::var_os("PATH").as_deref())
            .map_err(RecordError::Unavailable)?;
        if !crate::store::plain_id(&record.id) {
            return Err(RecordError::Build(format!(
                "the record id {:?} cannot name a folder",
                record.id
            )));
        }
        let store = Store::open(self.store.join(&record.id)).map_err(|e| {
            RecordError::Build(format!(
                "cannot open the conversation folder {}: {e}",
                self.store.display()
            ))
        })?;
        let mut descriptor = AgentDescriptor::new(record.id.clone(), record.name.clone());
        descriptor.description = record
            .description
            .clone()
            .unwrap_or_else(|| match spec.preset {
                Some(p) => format!("{} over the Agent Client Protocol", p.name),
                None => format!("{} over the Agent Client Protocol", spec.command),
            });
        let launch = Arc::new(Launch {
            offered: Default::default(),
            spec,
            store,
            secrets,
            served: self.served.clone(),
            mcp: self.mcp.clone(),
        });
        launch.load_offered();
        Ok(Arc::new(AcpAgent { descriptor, launch }))
    }
}
