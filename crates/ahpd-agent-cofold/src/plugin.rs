//! Registration as the compiled-in plugin `@ahpd/agent-cofold` with the engine `cofold`.

use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahpd_sdk::Agent;
use ahpd_sdk::plugin::{
    AgentRecord, Engine, Plugin, PluginError, Readiness, RecordError, Registrar, SecretReader,
};
use serde_json::{Value, json};

use crate::agent::CofoldAgent;
use crate::models::Shared;
use crate::options::{Embedder, options_schema, record_schema};
use crate::{ENGINE, PLUGIN_NAME, TITLE};

/// The plugin the daemon compiles in.
pub fn plugin() -> CofoldPlugin {
    CofoldPlugin::default()
}

/// `@ahpd/agent-cofold`.
#[derive(Default)]
pub struct CofoldPlugin {
    embedder: Embedder,
}

impl CofoldPlugin {
    /// The plugin with values only an embedder passes (tests, embedding hosts).
    pub fn with_embedder(embedder: Embedder) -> CofoldPlugin {
        CofoldPlugin { embedder }
    }
}

#[async_trait::async_trait]
impl Plugin for CofoldPlugin {
    fn name(&self) -> &str {
        PLUGIN_NAME
    }

    fn title(&self) -> &str {
        TITLE
    }

    fn defaults(&self) -> Value {
        json!({})
    }

    fn options_schema(&self) -> Value {
        options_schema()
    }

    fn check(&self, _options: &Value) -> Readiness {
        // A missing model is a turn's failure, never the plugin's.
        Readiness::Ready
    }

    async fn apply(
        &self,
        options: Value,
        registrar: &mut dyn Registrar,
    ) -> Result<(), PluginError> {
        let mut embedder = self.embedder.clone();
        if embedder.mcp.is_none()
            && let Some(hub) = registrar
                .service(crate::MCP_SERVICE)
                .and_then(|s| s.downcast::<ahpd_mcp::McpHub>().ok())
        {
            embedder.mcp = Some((*hub).clone());
        }
        if embedder.guard.is_none()
            && let Some(guard) = registrar
                .service(crate::guard::GUARD_SERVICE)
                .and_then(|s| s.downcast::<crate::guard::HostGuard>().ok())
        {
            embedder.guard = Some(guard);
        }
        if embedder.project == crate::project::ProjectSetup::default() {
            let served = registrar
                .service(crate::SERVED_SERVICE)
                .and_then(|s| s.downcast::<Vec<std::path::PathBuf>>().ok())
                .map(|s| (*s).clone());
            let config_dir = registrar.config_dir();
            embedder.project = crate::project::ProjectSetup {
                served,
                global: config_dir
                    .as_ref()
                    .map(|d| d.join(cofold_tools::project::AGENTS_FILE)),
                config_dir,
            };
        }
        registrar.resource_provider(
            crate::changes::CONTENT_SCHEME,
            Arc::new(crate::changes::ContentProvider),
        );
        registrar.engine(Arc::new(CofoldEngine {
            plugin_options: options,
            embedder,
            shared: Arc::new(Shared::default()),
        }));
        Ok(())
    }
}

/// The `cofold` engine: one agent per record.
pub struct CofoldEngine {
    plugin_options: Value,
    embedder: Embedder,
    shared: Arc<Shared>,
}

impl Engine for CofoldEngine {
    fn name(&self) -> &str {
        ENGINE
    }

    fn record_schema(&self) -> Value {
        record_schema()
    }

    fn host_only_fields(&self) -> Vec<String> {
        ["computerConfigDir", "store", "memory", "mcpServers"]
            .map(str::to_owned)
            .to_vec()
    }

    fn template(&self) -> JsonObject {
        JsonObject::new()
    }

    fn check_record(&self, owner: &str, config: &JsonObject) -> Result<(), RecordError> {
        let refuse = |key: &str, reason: &str| RecordError::Config {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if config.contains_key("model") {
            return Err(refuse(
                "model",
                "a record names its model in its own model field",
            ));
        }
        if owner != "host" {
            for key in self.host_only_fields() {
                if config.contains_key(&key) {
                    return Err(refuse(&key, "only the host's own records may set it"));
                }
            }
        }
        if let Some(servers) = config.get("mcpServers") {
            crate::mcp::check_record_servers(servers)
                .map_err(|e| RecordError::Schema(e.to_string()))?;
        }
        let schema = record_schema();
        let props = schema.get("properties").and_then(Value::as_object);
        for key in config.keys() {
            if !props.is_some_and(|p| p.contains_key(key)) {
                return Err(refuse(key, "is not an option of the cofold engine"));
            }
        }
        Ok(())
    }

    fn agent(
        &self,
        record: &AgentRecord,
        plugin_options: &Value,
        secrets: Arc<dyn SecretReader>,
    ) -> Result<Arc<dyn Agent>, RecordError> {
        // The record's keys each replace the plugin's whole.
        let base = if plugin_options.is_object() {
            plugin_options
        } else {
            &self.plugin_options
        };
        let mut merged = base.as_object().cloned().unwrap_or_default();
        for (k, v) in &record.config {
            merged.insert(k.clone(), v.clone());
        }
        if let Some(model) = &record.model {
            merged.insert("model".to_owned(), json!(model));
        }
        let mut embedder = self.embedder.clone();
        if let Some(servers) = merged.remove("mcpServers") {
            let mut parsed = ahpd_mcp::spec::parse_servers("config.mcpServers", &servers)
                .map_err(|e| RecordError::Schema(e.to_string()))?;
            // A record comes from a client: its entries never read the daemon's environment.
            for spec in parsed.values_mut() {
                spec.variables = false;
            }
            embedder.record_mcp_servers = parsed;
        }
        if let Some(secret) = merged
            .get("apiKey")
            .and_then(|k| k.get("$secret"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        {
            // Read now only to refuse a record whose secret is missing; the key itself is read
            // again for every request, so a changed secret takes effect without a restart and
            // no copy of it is kept in the agent's options.
            secrets.read(&secret)?;
            merged.remove("apiKey");
            embedder.api_key = Some(Arc::new(move || {
                secrets.read(&secret).ok().map(|s| s.expose().to_owned())
            }));
        }
        let agent = CofoldAgent::new(
            &record.id,
            &record.name,
            record.description.as_deref().unwrap_or(""),
            &Value::Object(merged),
            embedder,
            self.shared.clone(),
        )
        .map_err(|e| RecordError::Build(e.to_string()))?;
        Ok(Arc::new(agent))
    }
}
