//! Traits the daemon loads compiled-in plugins through. The loading itself (options, vault,
//! schema checks) belongs to the daemon; this module only fixes the shapes.

use std::sync::Arc;

use ahp_types::common::JsonObject;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::path::PathBuf;

use crate::agent::{Agent, Secret};
use crate::nested::machine::ComputerPort;
use crate::resources::port::ResourceProvider;

/// Whether a plugin's options are enough to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The plugin can run.
    Ready,
    /// Something is missing; the reason is one line for the person.
    Unconfigured(String),
}

/// Why a plugin's `apply` failed, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PluginError(pub String);

/// Why a secret could not be read. The message names the secret and never holds its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct SecretError {
    /// The secret asked for, e.g. `host:deepseek`.
    pub name: String,
    /// One sentence saying why, naming the secret.
    pub reason: String,
}

/// Why an engine refused an agent record or could not build its agent. Each message is one line
/// a client can show beside the record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// One `config` key does not fit the engine.
    #[error("config.{key}: {reason}")]
    Config {
        /// The key under `config`, dotted when nested.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The `config` does not fit the engine's record schema; the message names the key.
    #[error("{0}")]
    Schema(String),
    /// A secret the record refers to cannot be read.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The record was accepted but its agent could not be built (a store that does not open).
    #[error("{0}")]
    Build(String),
    /// The record is right but what it runs is not there (a program that is not installed);
    /// the message says how to get it. The record is listed as unavailable.
    #[error("{0}")]
    Unavailable(String),
}

/// A plugin compiled into the daemon.
#[async_trait]
pub trait Plugin: Send + Sync {
    /// The package name, e.g. `@ahpd/agent-cofold`.
    fn name(&self) -> &str;
    /// A short title, e.g. `Cofold`.
    fn title(&self) -> &str;
    /// The options every user starts from.
    fn defaults(&self) -> Value;
    /// JSON Schema (draft 2020-12) of the options.
    fn options_schema(&self) -> Value;
    /// A side-effect-free readiness check of resolved options.
    fn check(&self, options: &Value) -> Readiness;
    /// Register engines and agents; runs once before the host starts.
    async fn apply(&self, options: Value, registrar: &mut dyn Registrar)
    -> Result<(), PluginError>;
}

/// What a plugin registers into.
pub trait Registrar: Send {
    /// Register an engine that turns agent records into agents.
    fn engine(&mut self, engine: Arc<dyn Engine>);
    /// Register a fixed agent.
    fn agent(&mut self, agent: Arc<dyn Agent>);
    /// A value the daemon shares with its plugins, by name (the daemon's MCP servers are
    /// `mcp`); the plugin downcasts it to the type that name stands for. None by default.
    fn service(&self, _name: &str) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }
    /// Register the port through which sessions run in machines (one per daemon).
    fn computers(&mut self, _port: Arc<dyn ComputerPort>) {}
    /// Serve every resource request on `<scheme>:` URIs through this provider.
    fn resource_provider(&mut self, _scheme: &str, _provider: Arc<dyn ResourceProvider>) {}
    /// Add a key to the root state's and `initialize`'s `_meta`.
    fn meta(&mut self, _key: &str, _value: Value) {}
    /// The daemon's vault, read fresh on every call.
    fn secrets(&self) -> Option<Arc<dyn SecretReader>> {
        None
    }
    /// The daemon's configuration folder, when it has one it may write.
    fn config_dir(&self) -> Option<PathBuf> {
        None
    }
    /// The daemon's id (16 hex characters), kept beside its configuration.
    fn host_id(&self) -> Option<String> {
        None
    }
    /// The folders the daemon serves, for a plugin whose agents may run only inside them.
    /// None by default.
    fn served_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Reads secrets from the daemon's vault, fresh on every call.
pub trait SecretReader: Send + Sync {
    /// The value of a secret, or why it cannot be read.
    fn read(&self, name: &str) -> Result<Secret, SecretError>;
}

/// An agent record (`x-ahpd-agents`): which engine runs it and with what configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    /// Provider id and URI scheme of the agent's sessions.
    pub id: String,
    /// The engine that runs it.
    pub engine: String,
    /// `host`, `team:<team>` or `user:<id>`.
    pub owner: String,
    /// Display name.
    pub name: String,
    /// One line about the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An icon reference for clients that show one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// The model used when a turn names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The engine's own fields.
    #[serde(default)]
    pub config: JsonObject,
}

/// Turns agent records into agents.
pub trait Engine: Send + Sync {
    /// The engine name records refer to, e.g. `cofold`.
    fn name(&self) -> &str;
    /// JSON Schema of a record's `config`, shown to clients.
    fn record_schema(&self) -> Value;
    /// `config` keys only host-owned records may set.
    fn host_only_fields(&self) -> Vec<String>;
    /// The `config` a new record starts from.
    fn template(&self) -> JsonObject;
    /// The engine's full check of a record's `config`; the error names `config.<key>`.
    fn check_record(&self, owner: &str, config: &JsonObject) -> Result<(), RecordError>;
    /// Build the agent for a record.
    fn agent(
        &self,
        record: &AgentRecord,
        plugin_options: &Value,
        secrets: Arc<dyn SecretReader>,
    ) -> Result<Arc<dyn Agent>, RecordError>;
}
