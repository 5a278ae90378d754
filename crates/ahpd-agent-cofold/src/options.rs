//! The plugin's options: parsing, defaults and the JSON Schema.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cofold_agents::model::ModelAdapter;
use cofold_agents::policy::Policy;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The instructions a session runs with when nothing names any.
pub const DEFAULT_INSTRUCTIONS: &str = "You are a helpful assistant.";
/// Milliseconds an endpoint's model list may take.
pub const DEFAULT_CATALOGUE_TIMEOUT_MS: u64 = 15_000;
/// Fraction of the window at which history is compacted.
pub const DEFAULT_AUTO_COMPACT_AT: f64 = 0.8;
/// The configuration folder inside a machine.
pub const DEFAULT_COMPUTER_CONFIG_DIR: &str = "/ahpd/cofold";

/// The options of one cofold agent, read from the plugin's options with a record's `config`
/// over them. Every field is optional; absent means the computed default.
#[derive(Clone, Default, PartialEq)]
pub struct CofoldOptions {
    /// Reference a turn runs on when nothing nearer names one.
    pub model: Option<String>,
    /// The agent's explicit OpenAI-compatible endpoint.
    pub base_url: Option<String>,
    /// Per model id on `base_url`: the thinking levels it accepts.
    pub models: Map<String, Value>,
    /// System prompt of a session that names none.
    pub instructions: Option<String>,
    /// Root of the file store (default cofold's home).
    pub store: Option<PathBuf>,
    /// Keep conversations in memory (tests).
    pub memory: bool,
    /// The `tools` section, as written.
    pub tools: Option<Value>,
    /// Whether `tools` is read strictly (default true).
    pub strict_tools: bool,
    /// The daemon's key for the agent's endpoint.
    pub api_key: Option<String>,
    /// The protected resource clients authenticate against.
    pub resource: Option<String>,
    /// History size that triggers compaction.
    pub auto_compact_tokens: Option<u64>,
    /// Fraction of the window at which history is compacted.
    pub auto_compact_at: f64,
    /// Milliseconds allowed for an endpoint's model list.
    pub catalogue_timeout_ms: u64,
    /// Whether the host's own tools reach this agent's sessions.
    pub host_tools: bool,
    /// Time limits of this agent's model requests, over the provider's own.
    pub model_timeouts: ModelTimeouts,
    /// Where cofold's configuration lives in a machine (`computerConfigDir`); `None` for
    /// `false`, which leaves the image's own configuration in force.
    pub computer_config_dir: Option<String>,
}

/// The `modelTimeouts` option: each limit set here replaces the provider's for this agent's
/// requests; an absent one keeps the provider's. A value of 0 means no limit, as in a copapo
/// provider entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(deny_unknown_fields)]
pub struct ModelTimeouts {
    /// `connectMs`.
    pub connect_ms: Option<u64>,
    /// `firstByteMs`.
    pub first_byte_ms: Option<u64>,
    /// `idleMs`.
    pub idle_ms: Option<u64>,
    /// `wholeMs`.
    pub whole_ms: Option<u64>,
}

impl ModelTimeouts {
    /// `limits` with the values set here put over them.
    pub fn over(&self, limits: cofold_openai::TimeLimits) -> cofold_openai::TimeLimits {
        let pick = |mine: Option<u64>, theirs: Option<std::time::Duration>| match mine {
            Some(0) => None,
            Some(ms) => Some(std::time::Duration::from_millis(ms)),
            None => theirs,
        };
        cofold_openai::TimeLimits {
            connect: pick(self.connect_ms, limits.connect),
            first_byte: pick(self.first_byte_ms, limits.first_byte),
            idle: pick(self.idle_ms, limits.idle),
            whole: pick(self.whole_ms, limits.whole),
        }
    }
}

impl std::fmt::Debug for CofoldOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed, only whether one is set.
        f.debug_struct("CofoldOptions")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("store", &self.store)
            .field("memory", &self.memory)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

/// The plugin's options as written. The JSON Schema clients and the daemon check options with
/// ([`options_schema`]) is derived from this struct; a field's doc comment is its description.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(deny_unknown_fields)]
pub struct WrittenOptions {
    /// Model reference a turn runs on when nothing nearer names one.
    pub model: Option<String>,
    /// The agent's explicit OpenAI-compatible endpoint.
    #[schemars(regex(pattern = r"^https?://[^\s/]+"))]
    pub base_url: Option<String>,
    /// Thinking levels each model of baseUrl accepts.
    #[schemars(with = "Option<std::collections::BTreeMap<String, ModelEntry>>")]
    pub models: Option<Map<String, Value>>,
    /// System prompt of a session that names none.
    #[schemars(extend("default" = DEFAULT_INSTRUCTIONS))]
    pub instructions: Option<String>,
    /// The configuration folder inside a machine, or false for none.
    #[schemars(extend("default" = DEFAULT_COMPUTER_CONFIG_DIR))]
    pub computer_config_dir: Option<ComputerConfigDir>,
    /// Root of the file store; default cofold's home.
    pub store: Option<String>,
    /// Keep conversations in memory only.
    #[schemars(extend("default" = false))]
    pub memory: Option<bool>,
    /// The tools section; its shape depends on strictTools.
    #[schemars(schema_with = "any_object")]
    pub tools: Option<Value>,
    /// Whether an unknown key in tools is refused (true) or skipped (false).
    #[schemars(extend("default" = true))]
    pub strict_tools: Option<bool>,
    /// The endpoint's key, or a reference to a vault secret.
    #[schemars(extend("writeOnly" = true))]
    pub api_key: Option<ApiKeyOption>,
    /// The protected resource clients authenticate against.
    pub resource: Option<String>,
    /// History size in tokens that triggers compaction.
    #[schemars(range(min = 1))]
    pub auto_compact_tokens: Option<u64>,
    /// Fraction of the context window at which history is compacted.
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 1, "default" = DEFAULT_AUTO_COMPACT_AT))]
    pub auto_compact_at: Option<f64>,
    /// Milliseconds an endpoint's model list may take.
    #[schemars(range(min = 1), extend("default" = DEFAULT_CATALOGUE_TIMEOUT_MS))]
    pub catalogue_timeout_ms: Option<u64>,
    /// Whether the host's own tools reach this agent's sessions.
    #[schemars(extend("default" = true))]
    pub host_tools: Option<bool>,
    /// Time limits of this agent's model requests in milliseconds (0 for no limit), over the
    /// provider's own.
    pub model_timeouts: Option<ModelTimeouts>,
}

/// One entry of `models`, for the schema: the entries are kept as written.
#[derive(Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub struct ModelEntry {
    /// The thinking levels the model accepts.
    // Only the derived schema reads it; the entries themselves are kept as written.
    #[allow(dead_code)]
    pub supports_reasoning_effort: Option<Vec<String>>,
}

/// `computerConfigDir`: an absolute path, or `false`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ComputerConfigDir {
    /// The folder.
    Path(#[schemars(regex(pattern = "^/"))] String),
    /// `false`: no configuration folder.
    Off(#[schemars(schema_with = "false_only")] bool),
}

fn false_only(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "const": false })
}

/// `apiKey`: the key itself, or `{ "$secret": "<vault name>" }`.
#[derive(Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ApiKeyOption {
    /// The key.
    Key(String),
    /// A vault reference, resolved by the daemon before the engine sees the options.
    Secret(SecretRef),
}

// The key is never printed.
impl std::fmt::Debug for ApiKeyOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiKeyOption::Key(_) => f.write_str("Key(<hidden>)"),
            ApiKeyOption::Secret(r) => write!(f, "Secret({})", r.secret),
        }
    }
}

/// `{ "$secret": "<vault name>" }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SecretRef {
    /// The vault entry's name.
    #[serde(rename = "$secret")]
    pub secret: String,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

/// Options that do not have the shape of `WrittenOptions`; the daemon checks options against
/// [`options_schema`] first, so only an embedder passing unchecked values meets this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the options do not fit the cofold engine: {0}")]
pub struct OptionsError(String);

fn non_blank(value: Option<String>) -> Option<String> {
    value.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

impl CofoldOptions {
    /// Reads options, already checked against [`options_schema`] when they come from the
    /// daemon. A `$secret` object in `apiKey` counts as no key here; the caller resolves
    /// secrets before.
    pub fn from_value(value: &Value, env: &Environment) -> Result<CofoldOptions, OptionsError> {
        let written = match value {
            Value::Null => WrittenOptions::default(),
            other => WrittenOptions::deserialize(other)
                .map_err(|e| OptionsError(e.to_string().replace('`', "'")))?,
        };
        let store = non_blank(written.store).map(|s| match s.strip_prefix("~/") {
            Some(rest) => env.home.join(rest),
            None => PathBuf::from(s),
        });
        let api_key = match written.api_key {
            Some(ApiKeyOption::Key(key)) => non_blank(Some(key)),
            Some(ApiKeyOption::Secret(_)) | None => None,
        };
        Ok(CofoldOptions {
            model: non_blank(written.model),
            base_url: non_blank(written.base_url),
            models: written.models.unwrap_or_default(),
            instructions: non_blank(written.instructions),
            store,
            memory: written.memory.unwrap_or(false),
            tools: written.tools,
            strict_tools: written.strict_tools.unwrap_or(true),
            api_key,
            resource: non_blank(written.resource),
            auto_compact_tokens: written.auto_compact_tokens,
            auto_compact_at: written.auto_compact_at.unwrap_or(DEFAULT_AUTO_COMPACT_AT),
            catalogue_timeout_ms: written
                .catalogue_timeout_ms
                .unwrap_or(DEFAULT_CATALOGUE_TIMEOUT_MS),
            host_tools: written.host_tools.unwrap_or(true),
            model_timeouts: written.model_timeouts.unwrap_or_default(),
            computer_config_dir: match written.computer_config_dir {
                Some(ComputerConfigDir::Off(false)) => None,
                Some(ComputerConfigDir::Path(path)) if path.starts_with('/') => Some(path),
                _ => Some(DEFAULT_COMPUTER_CONFIG_DIR.to_owned()),
            },
        })
    }

    /// The `tools` section as the engine applies it: read loosely when `strictTools` is
    /// false (unknown keys and keyless search providers skipped).
    pub fn tools_config(
        &self,
    ) -> Result<cofold_tools::standard::ToolsConfig, cofold_tools::standard::ToolsConfigError> {
        use cofold_tools::standard::{Reading, ToolsConfig};
        let reading = if self.strict_tools {
            Reading::Strict
        } else {
            Reading::Loose
        };
        match &self.tools {
            Some(tools) => ToolsConfig::read(tools, reading),
            None => Ok(ToolsConfig::default()),
        }
    }
}

/// Where the engine reads environment variables and the home folder from; injectable so tests
/// run in parallel and never read the developer's own files.
#[derive(Clone, Default, PartialEq)]
pub struct Environment {
    /// The variables.
    pub vars: HashMap<String, String>,
    /// The home folder.
    pub home: PathBuf,
}

// Names only: the variables hold keys.
impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        names.sort_unstable();
        f.debug_struct("Environment")
            .field("vars", &names)
            .field("home", &self.home)
            .finish()
    }
}

impl Environment {
    /// The process's own environment and home folder.
    pub fn process() -> Environment {
        let vars: HashMap<String, String> = std::env::vars().collect();
        let home = vars
            .get("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        Environment { vars, home }
    }

    /// A variable's value when set and non-empty.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// cofold's home: `$COFOLD_HOME`, else `~/.cofold`.
    pub fn cofold_home(&self) -> PathBuf {
        match self.var("COFOLD_HOME") {
            Some(home) => PathBuf::from(home),
            None => self.home.join(".cofold"),
        }
    }
}

/// A function asked once per HTTP request for the endpoint's key.
pub type KeyFunction = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Receives edit notices: `(turn id, absolute path, before | after)`.
pub type EditObserver = Arc<dyn Fn(&str, &std::path::Path, EditPhase) + Send + Sync>;

/// Values only an embedder can pass.
#[derive(Clone, Default)]
pub struct Embedder {
    /// A model adapter every turn uses; no catalogue request is made.
    pub adapter: Option<Arc<dyn ModelAdapter>>,
    /// A policy that replaces the permission mode.
    pub policy: Option<Arc<dyn Policy>>,
    /// Asked once per HTTP request for the endpoint's key.
    pub api_key: Option<KeyFunction>,
    /// Receives edit notices: `(turn id, path, "before" | "after")`.
    pub on_file_edit: Option<EditObserver>,
    /// The environment (default: the process's).
    pub env: Option<Environment>,
    /// The host's own tools, offered to every session of an agent whose `hostTools` is not
    /// `false`.
    pub host_tools: Vec<crate::host_tools::HostTool>,
    /// The daemon's MCP servers; sessions lease from it.
    pub mcp: Option<ahpd_mcp::McpHub>,
    /// The agent record's own `mcpServers`, merged over the hub's entries by name.
    pub record_mcp_servers: ahpd_mcp::Servers,
    /// The daemon's secrets and private paths (without one: none, and the credential stores
    /// under the home folder with the engine's store).
    pub guard: Option<Arc<crate::guard::HostGuard>>,
    /// Where project instructions (`AGENTS.md`) may be read from.
    pub project: crate::project::ProjectSetup,
}

impl Embedder {
    /// The MCP servers this agent's sessions use: the daemon's entries with the record's
    /// merged over them, less the disabled ones (none without a hub).
    pub fn mcp_servers(&self) -> ahpd_mcp::Servers {
        match &self.mcp {
            Some(hub) => {
                let mut servers = ahpd_mcp::spec::merge(hub.configured(), &self.record_mcp_servers);
                servers.retain(|_, spec| spec.enabled);
                servers
            }
            None => ahpd_mcp::Servers::new(),
        }
    }

    /// The same values with one more host tool. A host tool named like one of cofold's tools
    /// (`ask_user` included) takes that name, and cofold's own is left out.
    pub fn host_tool(mut self, tool: crate::host_tools::HostTool) -> Embedder {
        // A later registration under the same name replaces the earlier one.
        self.host_tools.retain(|t| t.name() != tool.name());
        self.host_tools.push(tool);
        self
    }
}

/// Which side of a file edit a notice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditPhase {
    /// Before the tool runs.
    Before,
    /// After it finished, was refused or declined.
    After,
}

/// JSON Schema of the plugin's options: derived from `WrittenOptions`, with `tools` checked
/// strictly or loosely as `strictTools` says.
pub fn options_schema() -> Value {
    let mut strict_tools = cofold_tools::standard::tools_schema();
    crate::schema_wording::boolean_or_object(&mut strict_tools);
    let mut loose_tools = loose_tools_schema();
    crate::schema_wording::boolean_or_object(&mut loose_tools);
    let mut schema = cofold_tools::config_schema::schema_for::<WrittenOptions>();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "if".to_owned(),
            json!({ "properties": { "strictTools": { "const": false } }, "required": ["strictTools"] }),
        );
        obj.insert(
            "then".to_owned(),
            json!({ "properties": { "tools": loose_tools } }),
        );
        obj.insert(
            "else".to_owned(),
            json!({ "properties": { "tools": strict_tools } }),
        );
    }
    schema
}

/// The loose reading checks only the types of the known keys: the derived schema without its
/// refusals of unknown keys, and with the contents of `shell.env` and `web.search` left to the
/// reading.
fn loose_tools_schema() -> Value {
    let mut schema = cofold_tools::standard::tools_schema();
    allow_unknown_keys(&mut schema);
    for (key, inner) in [("shell", "env"), ("web", "search")] {
        if let Some(branches) = schema["properties"][key]["anyOf"].as_array_mut() {
            for branch in branches {
                if let Some(props) = branch.get_mut("properties").and_then(Value::as_object_mut)
                    && props.contains_key(inner)
                {
                    props.insert(inner.to_owned(), json!({ "type": "object" }));
                }
            }
        }
    }
    schema
}

/// A record's `tools`: the strict schema without the keyed search providers, whose keys a record
/// cannot hold.
fn record_tools_schema() -> Value {
    let mut schema = cofold_tools::standard::tools_schema();
    if let Some(branches) = schema["properties"]["web"]["anyOf"].as_array_mut() {
        for branch in branches {
            if let Some(providers) = branch
                .pointer_mut("/properties/search/properties")
                .and_then(Value::as_object_mut)
            {
                providers.remove("brave");
                providers.remove("tavily");
            }
        }
    }
    schema
}

/// Removes every `additionalProperties: false` and `required`.
fn allow_unknown_keys(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map.get("additionalProperties") == Some(&Value::Bool(false)) {
                map.remove("additionalProperties");
            }
            map.remove("required");
            map.values_mut().for_each(allow_unknown_keys);
        }
        Value::Array(items) => items.iter_mut().for_each(allow_unknown_keys),
        _ => {}
    }
}

/// The record schema: the options without `model`, `strictTools` and the keyed search providers,
/// with `apiKey` its only secret field.
pub fn record_schema() -> Value {
    let mut schema = options_schema();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove("model");
        props.remove("strictTools");
        props.insert("tools".to_owned(), record_tools_schema());
    }
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        // Checked whole by the engine (`check_record`), which names the wrong key.
        props.insert(
            "mcpServers".to_owned(),
            json!({ "type": "object", "description": "MCP servers of this agent's sessions, merged by name over the daemon's mcpServers" }),
        );
    }
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("if");
        obj.remove("then");
        obj.remove("else");
    }
    crate::schema_wording::boolean_or_object(&mut schema);
    schema
}
