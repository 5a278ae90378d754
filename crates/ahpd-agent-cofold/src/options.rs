//! The plugin's options: parsing, defaults and the JSON Schema.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cofold_agents::model::ModelAdapter;
use cofold_agents::policy::Policy;
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    fn from_value(value: Option<&Value>) -> ModelTimeouts {
        let ms = |key: &str| value.and_then(|v| v.get(key)).and_then(Value::as_u64);
        ModelTimeouts {
            connect_ms: ms("connectMs"),
            first_byte_ms: ms("firstByteMs"),
            idle_ms: ms("idleMs"),
            whole_ms: ms("wholeMs"),
        }
    }

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

fn non_blank(value: Option<&Value>) -> Option<String> {
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl CofoldOptions {
    /// Reads options already checked against [`options_schema`]. A `$secret` object in `apiKey`
    /// counts as no key here; the caller resolves secrets before.
    pub fn from_value(value: &Value, env: &Environment) -> CofoldOptions {
        let empty = Map::new();
        let obj = value.as_object().unwrap_or(&empty);
        let store = non_blank(obj.get("store")).map(|s| match s.strip_prefix("~/") {
            Some(rest) => env.home.join(rest),
            None => PathBuf::from(s),
        });
        CofoldOptions {
            model: non_blank(obj.get("model")),
            base_url: non_blank(obj.get("baseUrl")),
            models: obj
                .get("models")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            instructions: non_blank(obj.get("instructions")),
            store,
            memory: obj.get("memory").and_then(Value::as_bool).unwrap_or(false),
            tools: obj.get("tools").cloned(),
            strict_tools: obj
                .get("strictTools")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            api_key: non_blank(obj.get("apiKey")),
            resource: non_blank(obj.get("resource")),
            auto_compact_tokens: obj.get("autoCompactTokens").and_then(Value::as_u64),
            auto_compact_at: obj
                .get("autoCompactAt")
                .and_then(Value::as_f64)
                .unwrap_or(DEFAULT_AUTO_COMPACT_AT),
            catalogue_timeout_ms: obj
                .get("catalogueTimeoutMs")
                .and_then(Value::as_u64)
                .unwrap_or(DEFAULT_CATALOGUE_TIMEOUT_MS),
            host_tools: obj
                .get("hostTools")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            model_timeouts: ModelTimeouts::from_value(obj.get("modelTimeouts")),
            computer_config_dir: match obj.get("computerConfigDir") {
                Some(Value::Bool(false)) => None,
                Some(Value::String(s)) if s.starts_with('/') => Some(s.clone()),
                _ => Some(DEFAULT_COMPUTER_CONFIG_DIR.to_owned()),
            },
        }
    }

    /// The `tools` section as the engine applies it: the loose reading drops unknown keys and
    /// providers without a key.
    pub fn tools_value(&self) -> Value {
        let tools = self.tools.clone().unwrap_or_else(|| json!({}));
        if self.strict_tools {
            return tools;
        }
        loosen_tools(&tools)
    }
}

fn loosen_tools(tools: &Value) -> Value {
    let mut out = Map::new();
    let Some(obj) = tools.as_object() else {
        return Value::Object(out);
    };
    for key in ["files", "shell", "memory"] {
        if let Some(v) = obj.get(key) {
            let kept = match v {
                Value::Object(o) => Value::Object(
                    o.iter()
                        .filter(|(k, _)| {
                            (key == "files" && k.as_str() == "requireRead")
                                || (key == "shell" && k.as_str() == "env")
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                other => other.clone(),
            };
            out.insert(key.to_owned(), kept);
        }
    }
    if let Some(web) = obj.get("web") {
        let kept = match web {
            Value::Object(o) => {
                let mut providers = Map::new();
                if let Some(search) = o.get("search").and_then(Value::as_object) {
                    for (name, entry) in search {
                        match name.as_str() {
                            "brave" | "tavily" => {
                                let key = entry.get("apiKey");
                                let usable = match key {
                                    Some(Value::String(s)) => !s.trim().is_empty(),
                                    Some(Value::Object(_)) => true,
                                    _ => false,
                                };
                                if usable {
                                    providers.insert(name.clone(), json!({ "apiKey": key }));
                                }
                            }
                            "duckduckgo" if entry.is_boolean() => {
                                providers.insert(name.clone(), entry.clone());
                            }
                            _ => {}
                        }
                    }
                }
                let usable = providers
                    .values()
                    .any(|v| v.is_object() || v.as_bool() == Some(true));
                if usable {
                    json!({ "search": providers })
                } else {
                    json!({})
                }
            }
            other => other.clone(),
        };
        out.insert("web".to_owned(), kept);
    }
    Value::Object(out)
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
}

impl Embedder {
    /// The MCP servers this agent's sessions use: the daemon's entries with the record's
    /// merged over them (none without a hub).
    pub fn mcp_servers(&self) -> ahpd_mcp::Servers {
        match &self.mcp {
            Some(hub) => ahpd_mcp::spec::merge(hub.configured(), &self.record_mcp_servers),
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

/// JSON Schema of the plugin's options.
pub fn options_schema() -> Value {
    let mut strict_tools = cofold_tools::standard::tools_schema();
    crate::schema_wording::boolean_or_object(&mut strict_tools);
    let mut loose_tools = loose_tools_schema();
    crate::schema_wording::boolean_or_object(&mut loose_tools);
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "model": { "type": "string", "description": "Model reference a turn runs on when nothing nearer names one." },
            "baseUrl": { "type": "string", "pattern": "^https?://[^\\s/]+", "description": "The agent's explicit OpenAI-compatible endpoint." },
            "models": {
                "type": "object",
                "description": "Thinking levels each model of baseUrl accepts.",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": { "supportsReasoningEffort": { "type": "array", "items": { "type": "string" } } }
                }
            },
            "instructions": { "type": "string", "default": DEFAULT_INSTRUCTIONS },
            "computerConfigDir": {
                "anyOf": [ { "type": "string", "pattern": "^/" }, { "const": false } ],
                "default": DEFAULT_COMPUTER_CONFIG_DIR
            },
            "store": { "type": "string", "description": "Root of the file store; default cofold's home." },
            "memory": { "type": "boolean", "default": false },
            "tools": { "type": "object" },
            "strictTools": { "type": "boolean", "default": true },
            "apiKey": {
                "writeOnly": true,
                "anyOf": [
                    { "type": "string" },
                    { "type": "object", "additionalProperties": false, "required": ["$secret"], "properties": { "$secret": { "type": "string" } } }
                ]
            },
            "resource": { "type": "string" },
            "autoCompactTokens": { "type": "integer", "minimum": 1 },
            "autoCompactAt": { "type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": DEFAULT_AUTO_COMPACT_AT },
            "catalogueTimeoutMs": { "type": "integer", "minimum": 1, "default": DEFAULT_CATALOGUE_TIMEOUT_MS },
            "hostTools": { "type": "boolean", "default": true },
            "modelTimeouts": {
                "type": "object",
                "additionalProperties": false,
                "description": "Time limits of this agent's model requests in milliseconds (0 for no limit), over the provider's own.",
                "properties": {
                    "connectMs": { "type": "integer", "minimum": 0 },
                    "firstByteMs": { "type": "integer", "minimum": 0 },
                    "idleMs": { "type": "integer", "minimum": 0 },
                    "wholeMs": { "type": "integer", "minimum": 0 }
                }
            }
        },
        "if": { "properties": { "strictTools": { "const": false } }, "required": ["strictTools"] },
        "then": { "properties": { "tools": loose_tools } },
        "else": { "properties": { "tools": strict_tools } }
    })
}

/// The loose reading checks only the types of the known keys.
fn loose_tools_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "files": { "anyOf": [ { "type": "boolean" }, { "type": "object", "properties": { "requireRead": { "type": "boolean" } } } ] },
            "shell": { "anyOf": [ { "type": "boolean" }, { "type": "object", "properties": { "env": { "type": "object" } } } ] },
            "memory": { "type": "boolean" },
            "web": { "anyOf": [ { "type": "boolean" }, { "type": "object", "properties": { "search": { "type": "object" } } } ] }
        }
    })
}

/// The record schema: the options without `model`, `strictTools` and the keyed search providers,
/// with `apiKey` its only secret field.
pub fn record_schema() -> Value {
    let mut schema = options_schema();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove("model");
        props.remove("strictTools");
        props.insert(
            "tools".to_owned(),
            json!({
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "files": { "anyOf": [ { "type": "boolean" }, { "type": "object", "additionalProperties": false, "properties": { "requireRead": { "type": "boolean" } } } ] },
                    "shell": cofold_tools::standard::tools_schema()["properties"]["shell"].clone(),
                    "memory": { "type": "boolean" },
                    "web": { "anyOf": [ { "type": "boolean" }, { "type": "object", "additionalProperties": false, "properties": {
                        "search": { "type": "object", "additionalProperties": false, "properties": { "duckduckgo": { "type": "boolean" } } }
                    } } ] }
                }
            }),
        );
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
