//! The standard set: a program's `tools` configuration section (`ToolsConfig`, checked by
//! `tools_schema()`) turned into capabilities, in the order files, shell, web, memory.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use cofold_agents::capability::Capability;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::files::{FilesOptions, files};
use crate::memory::{MemoryOptions, memory};
use crate::search::{BraveOptions, DuckDuckGoOptions, TavilyOptions, brave, duckduckgo, tavily};
use crate::shell::{ShellEnv, ShellOptions, shell};
use crate::web::{ClientSource, Fetch, ReqwestFetch, WebOptions, web};

/// The `tools` section of a program's configuration. An absent key is on; `{}` (the default) is
/// files, shell and web.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolsConfig {
    /// `files`: `true`/`false`, or `{ "requireRead": bool }`.
    pub files: Option<FilesConfig>,
    /// `shell`: `true`/`false`, or `{ "env": { "inherit", "exclude", "set" } }`.
    pub shell: Option<ShellConfig>,
    /// `web`: `true`/`false`, or `{ "search": { … } }`.
    pub web: Option<WebConfig>,
    /// `memory`: on or off; on only matters when the program gives a memory folder.
    pub memory: Option<bool>,
}

/// The `files` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "requireRead": bool }`; an absent `requireRead` keeps the default (on).
    Options {
        /// Whether write_file and edit_file refuse a file the session has not read.
        require_read: Option<bool>,
    },
}

/// The `shell` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "env": { … } }`: on, with the commands' environment configured.
    Options {
        /// Which of the daemon's variables commands see; absent keeps the default filter.
        env: ShellEnv,
    },
}

/// The `web` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "search": { … } }`.
    Options {
        /// The search providers, in the order the section writes them.
        search: Option<SearchConfig>,
    },
}

/// The providers under `web.search`, in the order their keys were written.
pub type SearchConfig = Vec<ProviderConfig>;

/// One key under `web.search`.
#[derive(Clone, PartialEq, Eq)]
pub enum ProviderConfig {
    /// `brave: { apiKey }`.
    Brave {
        /// The subscription token.
        api_key: String,
    },
    /// `tavily: { apiKey }`.
    Tavily {
        /// The API key.
        api_key: String,
    },
    /// `duckduckgo: bool`.
    DuckDuckGo(bool),
}

// Keys stay out of debug output (and so out of logs).
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Brave { .. } => f.write_str("Brave { api_key: <hidden> }"),
            Self::Tavily { .. } => f.write_str("Tavily { api_key: <hidden> }"),
            Self::DuckDuckGo(on) => write!(f, "DuckDuckGo({on})"),
        }
    }
}

/// A `tools` section that does not have the documented shape; the message is one sentence
/// naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolsConfigError(String);

impl ToolsConfig {
    /// Reads the section from a JSON value, keeping the written order of `web.search` (with
    /// serde_json's `preserve_order`). Refuses what [`tools_schema`] refuses.
    pub fn from_value(value: &Value) -> Result<Self, ToolsConfigError> {
        let map = object(value, "the tools section")?;
        let mut config = ToolsConfig::default();
        for (key, value) in map {
            match key.as_str() {
                "files" => config.files = Some(files_config(value)?),
                "shell" => config.shell = Some(shell_config(value)?),
                "web" => config.web = Some(web_config(value)?),
                "memory" => config.memory = Some(boolean(value, "tools.memory")?),
                other => {
                    return Err(unknown(
                        other,
                        "the tools section",
                        "files, shell, web, memory",
                    ));
                }
            }
        }
        Ok(config)
    }
}

impl<'de> Deserialize<'de> for ToolsConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        ToolsConfig::from_value(&value).map_err(serde::de::Error::custom)
    }
}

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, ToolsConfigError> {
    value
        .as_object()
        .ok_or_else(|| ToolsConfigError(format!("{what} must be an object, not {}", kind(value))))
}

fn boolean(value: &Value, key: &str) -> Result<bool, ToolsConfigError> {
    value.as_bool().ok_or_else(|| {
        ToolsConfigError(format!("{key} must be true or false, not {}", kind(value)))
    })
}

fn unknown(key: &str, place: &str, known: &str) -> ToolsConfigError {
    ToolsConfigError(format!(
        "unknown key \"{key}\" in {place}; the keys are {known}"
    ))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn files_config(value: &Value) -> Result<FilesConfig, ToolsConfigError> {
    if let Some(on) = value.as_bool() {
        return Ok(FilesConfig::Enabled(on));
    }
    let Some(map) = value.as_object() else {
        return Err(ToolsConfigError(format!(
            "tools.files must be true, false or an object, not {}",
            kind(value)
        )));
    };
    let mut require_read = None;
    for (key, value) in map {
        match key.as_str() {
            "requireRead" => require_read = Some(boolean(value, "tools.files.requireRead")?),
            other => return Err(unknown(other, "tools.files", "requireRead")),
        }
    }
    Ok(FilesConfig::Options { require_read })
}

fn shell_config(value: &Value) -> Result<ShellConfig, ToolsConfigError> {
    if let Some(on) = value.as_bool() {
        return Ok(ShellConfig::Enabled(on));
    }
    let Some(map) = value.as_object() else {
        return Err(ToolsConfigError(format!(
            "tools.shell must be true, false or an object, not {}",
            kind(value)
        )));
    };
    let mut env = ShellEnv::default();
    for (key, value) in map {
        match key.as_str() {
            "env" => env = shell_env(value)?,
            other => return Err(unknown(other, "tools.shell", "env")),
        }
    }
    Ok(ShellConfig::Options { env })
}

fn shell_env(value: &Value) -> Result<ShellEnv, ToolsConfigError> {
    let map = object(value, "tools.shell.env")?;
    let mut env = ShellEnv::default();
    for (key, value) in map {
        match key.as_str() {
            "inherit" => env.inherit = names(value, "tools.shell.env.inherit")?,
            "exclude" => env.exclude = names(value, "tools.shell.env.exclude")?,
            "set" => {
                for (name, value) in object(value, "tools.shell.env.set")? {
                    let Some(text) = value.as_str() else {
                        // The value may be a secret: only its kind is named.
                        return Err(ToolsConfigError(format!(
                            "tools.shell.env.set.{name} must be a string, not {}",
                            kind(value)
                        )));
                    };
                    if !valid_name(name) {
                        return Err(ToolsConfigError(format!(
                            "tools.shell.env.set: \"{name}\" is not a variable name (it must be \
                             non-empty, without = or NUL)"
                        )));
                    }
                    env.set.insert(name.clone(), text.to_owned());
                }
            }
            other => return Err(unknown(other, "tools.shell.env", "inherit, exclude, set")),
        }
    }
    Ok(env)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

fn names(value: &Value, key: &str) -> Result<Vec<String>, ToolsConfigError> {
    let Some(items) = value.as_array() else {
        return Err(ToolsConfigError(format!(
            "{key} must be an array of name globs, not {}",
            kind(value)
        )));
    };
    items
        .iter()
        .map(|item| match item.as_str() {
            Some(text) if !text.is_empty() => Ok(text.to_owned()),
            _ => Err(ToolsConfigError(format!(
                "{key} must hold non-empty strings, not {}",
                kind(item)
            ))),
        })
        .collect()
}

fn web_config(value: &Value) -> Result<WebConfig, ToolsConfigError> {
    if let Some(on) = value.as_bool() {
        return Ok(WebConfig::Enabled(on));
    }
    let Some(map) = value.as_object() else {
        return Err(ToolsConfigError(format!(
            "tools.web must be true, false or an object, not {}",
            kind(value)
        )));
    };
    let mut search = None;
    for (key, value) in map {
        match key.as_str() {
            "search" => search = Some(search_config(value)?),
            other => return Err(unknown(other, "tools.web", "search")),
        }
    }
    Ok(WebConfig::Options { search })
}

fn search_config(value: &Value) -> Result<SearchConfig, ToolsConfigError> {
    let map = object(value, "tools.web.search")?;
    let mut providers = Vec::new();
    for (key, value) in map {
        providers.push(match key.as_str() {
            "brave" => ProviderConfig::Brave {
                api_key: api_key(value, "brave")?,
            },
            "tavily" => ProviderConfig::Tavily {
                api_key: api_key(value, "tavily")?,
            },
            "duckduckgo" => {
                ProviderConfig::DuckDuckGo(boolean(value, "tools.web.search.duckduckgo")?)
            }
            other => {
                return Err(unknown(
                    other,
                    "tools.web.search",
                    "brave, tavily, duckduckgo",
                ));
            }
        });
    }
    Ok(providers)
}

/// The provider's `apiKey`. The key's value never appears in a message.
fn api_key(value: &Value, provider: &str) -> Result<String, ToolsConfigError> {
    let place = format!("tools.web.search.{provider}");
    let map = object(value, &place)?;
    let mut key = None;
    for (name, value) in map {
        match name.as_str() {
            "apiKey" => match value.as_str() {
                Some(text) if !text.is_empty() => key = Some(text.to_owned()),
                Some(_) => {
                    return Err(ToolsConfigError(format!(
                        "{place}.apiKey must not be empty"
                    )));
                }
                None => {
                    return Err(ToolsConfigError(format!(
                        "{place}.apiKey must be a string, not {}",
                        kind(value)
                    )));
                }
            },
            other => return Err(unknown(other, &place, "apiKey")),
        }
    }
    key.ok_or_else(|| ToolsConfigError(format!("{place} needs an apiKey")))
}

/// What `standard_capabilities` is given besides the section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StandardArgs {
    /// The run's folder, for the record only: files and shell read the workspace from the run.
    pub workspace: PathBuf,
    /// The memory folder; without one there is no memory capability.
    pub memory_dir: Option<PathBuf>,
    /// The environment commands' variables are filtered from; `None` is the process's own.
    pub env: Option<Vec<(String, String)>>,
    /// Where web_fetch and the search providers get their HTTP clients (proxies, certificates);
    /// `None` uses no proxy.
    pub web_client: Option<ClientSource>,
}

/// The capabilities a `tools` section asks for, in the order files, shell, web, memory.
pub fn standard_capabilities(config: &ToolsConfig, args: StandardArgs) -> Vec<Arc<dyn Capability>> {
    let mut out: Vec<Arc<dyn Capability>> = Vec::new();
    match &config.files {
        Some(FilesConfig::Enabled(false)) => {}
        None | Some(FilesConfig::Enabled(true)) => {
            out.push(Arc::new(files(FilesOptions::default())))
        }
        Some(FilesConfig::Options { require_read }) => out.push(Arc::new(files(FilesOptions {
            require_read: require_read.unwrap_or(true),
            ..FilesOptions::default()
        }))),
    }
    let base_env = args.env.map(|vars| {
        Arc::new(
            vars.into_iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value)))
                .collect(),
        )
    });
    let env = match &config.shell {
        Some(ShellConfig::Enabled(false)) => None,
        None | Some(ShellConfig::Enabled(true)) => Some(ShellEnv::default()),
        Some(ShellConfig::Options { env }) => Some(env.clone()),
    };
    if let Some(env) = env {
        out.push(Arc::new(shell(ShellOptions {
            env,
            base_env,
            ..ShellOptions::default()
        })));
    }
    let transport = || -> Option<Arc<dyn Fetch>> {
        let source = args.web_client.clone()?;
        Some(Arc::new(ReqwestFetch::with_source(source)))
    };
    match &config.web {
        Some(WebConfig::Enabled(false)) => {}
        None | Some(WebConfig::Enabled(true)) | Some(WebConfig::Options { search: None }) => {
            out.push(Arc::new(web(WebOptions {
                client: args.web_client.clone(),
                ..WebOptions::default()
            })));
        }
        Some(WebConfig::Options {
            search: Some(providers),
        }) => {
            let search = providers
                .iter()
                .filter_map(|provider| match provider {
                    ProviderConfig::Brave { api_key } => Some(brave(BraveOptions {
                        api_key: api_key.clone(),
                        fetch: transport(),
                    })),
                    ProviderConfig::Tavily { api_key } => Some(tavily(TavilyOptions {
                        api_key: api_key.clone(),
                        fetch: transport(),
                    })),
                    ProviderConfig::DuckDuckGo(true) => {
                        Some(duckduckgo(DuckDuckGoOptions { fetch: transport() }))
                    }
                    ProviderConfig::DuckDuckGo(false) => None,
                })
                .collect();
            out.push(Arc::new(web(WebOptions {
                search,
                client: args.web_client.clone(),
                ..WebOptions::default()
            })));
        }
    }
    if config.memory != Some(false)
        && let Some(dir) = args.memory_dir
    {
        out.push(Arc::new(memory(MemoryOptions::new(dir))));
    }
    out
}

/// The JSON Schema of the `tools` section. `files` and `web` are `anyOf`, so a bad nested value
/// is one issue at `$.files` or `$.web`.
pub fn tools_schema() -> Value {
    let key = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["apiKey"],
        "properties": {"apiKey": {"type": "string", "minLength": 1}},
    });
    let names = json!({"type": "array", "items": {"type": "string", "minLength": 1}});
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "files": {"anyOf": [
                {"type": "boolean"},
                {"type": "object", "additionalProperties": false,
                 "properties": {"requireRead": {"type": "boolean"}}},
            ]},
            "shell": {"anyOf": [
                {"type": "boolean"},
                {"type": "object", "additionalProperties": false, "properties": {"env": {
                    "type": "object", "additionalProperties": false, "properties": {
                        "inherit": names.clone(),
                        "exclude": names,
                        // String values and sane names are checked by `ToolsConfig`: the schema
                        // dialect has no schema-valued additionalProperties.
                        "set": {"type": "object"},
                    },
                }}},
            ]},
            "web": {"anyOf": [
                {"type": "boolean"},
                {"type": "object", "additionalProperties": false, "properties": {"search": {
                    "type": "object", "additionalProperties": false, "properties": {
                        "brave": key.clone(),
                        "tavily": key,
                        "duckduckgo": {"type": "boolean"},
                    },
                }}},
            ]},
            "memory": {"type": "boolean"},
        },
    })
}

/// [`tools_schema`], built once.
pub static TOOLS_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(tools_schema);
