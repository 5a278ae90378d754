//! The standard set: a program's `tools` configuration section (`ToolsConfig`, whose JSON Schema
//! `tools_schema()` is derived from the same types) turned into capabilities, in the order
//! files, shell, web, memory.
//!
//! The types are read by hand rather than by serde's derive so that a wrong value gets the
//! documented sentence naming its key (`tools.files must be true, false or an object, not a
//! string`); the schema is derived from them, and a test holds the two to the same values.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use cofold_agents::capability::Capability;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::files::{FilesOptions, files};
use crate::memory::{MemoryOptions, memory};
use crate::private::PrivateSet;
use crate::shell::{ShellEnv, ShellOptions, shell};
use crate::web::search::{
    BraveOptions, DuckDuckGoOptions, TavilyOptions, brave, duckduckgo, tavily,
};
use crate::web::{ClientSource, Fetch, ReqwestFetch, WebOptions, web};

/// The `tools` section of a program's configuration. An absent key is on; `{}` (the default) is
/// files, shell and web.
#[derive(Debug, Clone, Default, PartialEq, Eq, JsonSchema)]
#[schemars(deny_unknown_fields)]
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
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged, deny_unknown_fields)]
pub enum FilesConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "requireRead": bool }`; an absent `requireRead` keeps the default (on).
    Options {
        /// Whether write_file and edit_file refuse a file the session has not read.
        #[schemars(rename = "requireRead")]
        require_read: Option<bool>,
    },
}

/// The `shell` key.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged, deny_unknown_fields)]
pub enum ShellConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "env": { … } }`: on, with the commands' environment configured.
    Options {
        /// Which of the daemon's variables commands see; absent keeps the default filter.
        #[schemars(default)]
        env: ShellEnv,
    },
}

/// The `web` key.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[schemars(untagged, deny_unknown_fields)]
pub enum WebConfig {
    /// `true` or `false`.
    Enabled(bool),
    /// `{ "search": { … } }`.
    Options {
        /// The search providers, in the order the section writes them.
        #[schemars(with = "Option<SearchShape>")]
        search: Option<SearchConfig>,
    },
}

/// The providers under `web.search`, in the order their keys were written.
pub type SearchConfig = Vec<ProviderConfig>;

/// How `web.search` is written: an object with a key per provider. Read into [`SearchConfig`],
/// which keeps the order; this type only gives the schema.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct SearchShape {
    brave: Option<KeyShape>,
    tavily: Option<KeyShape>,
    duckduckgo: Option<bool>,
}

/// A keyed provider's entry: `{ "apiKey": "<non-empty>" }`.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)]
struct KeyShape {
    #[schemars(rename = "apiKey", length(min = 1))]
    api_key: String,
}

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

/// How strictly a `tools` section is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Refuse unknown keys and keyless search providers: what [`tools_schema`] refuses.
    Strict,
    /// Skip unknown keys, search providers without a usable key and a non-boolean
    /// `duckduckgo`, for a section shared with programs that know other keys; values of known
    /// keys must still have their type.
    Loose,
}

impl ToolsConfig {
    /// Reads the section from a JSON value, keeping the written order of `web.search` (with
    /// serde_json's `preserve_order`). Refuses what [`tools_schema`] refuses.
    pub fn from_value(value: &Value) -> Result<Self, ToolsConfigError> {
        Self::read(value, Reading::Strict)
    }

    /// Reads the section the given way.
    pub fn read(value: &Value, reading: Reading) -> Result<Self, ToolsConfigError> {
        let loose = reading == Reading::Loose;
        let map = object(value, "the tools section")?;
        let mut config = ToolsConfig::default();
        for (key, value) in map {
            match key.as_str() {
                "files" => config.files = Some(files_config(value, loose)?),
                "shell" => config.shell = Some(shell_config(value, loose)?),
                "web" => config.web = Some(web_config(value, loose)?),
                "memory" => config.memory = Some(boolean(value, "tools.memory")?),
                _ if loose => {}
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

fn files_config(value: &Value, loose: bool) -> Result<FilesConfig, ToolsConfigError> {
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
            _ if loose => {}
            other => return Err(unknown(other, "tools.files", "requireRead")),
        }
    }
    Ok(FilesConfig::Options { require_read })
}

fn shell_config(value: &Value, loose: bool) -> Result<ShellConfig, ToolsConfigError> {
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
            _ if loose => {}
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

fn web_config(value: &Value, loose: bool) -> Result<WebConfig, ToolsConfigError> {
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
            "search" if loose => search = loose_search(value)?,
            "search" => search = Some(search_config(value)?),
            _ if loose => {}
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

/// `web.search` read loosely: the providers that can search, or none (the default search) when
/// no provider is usable.
fn loose_search(value: &Value) -> Result<Option<SearchConfig>, ToolsConfigError> {
    let map = object(value, "tools.web.search")?;
    let mut providers = Vec::new();
    for (key, value) in map {
        let usable_key = || match value.get("apiKey") {
            Some(Value::String(text)) => !text.trim().is_empty(),
            // A key of another type is kept so that reading it names the mistake.
            Some(Value::Object(_)) => true,
            _ => false,
        };
        let entry = |value: &Value| -> Value {
            let mut only_key = Map::new();
            if let Some(key) = value.get("apiKey") {
                only_key.insert("apiKey".to_owned(), key.clone());
            }
            Value::Object(only_key)
        };
        match key.as_str() {
            "brave" if usable_key() => providers.push(ProviderConfig::Brave {
                api_key: api_key(&entry(value), "brave")?,
            }),
            "tavily" if usable_key() => providers.push(ProviderConfig::Tavily {
                api_key: api_key(&entry(value), "tavily")?,
            }),
            "duckduckgo" => {
                if let Some(on) = value.as_bool() {
                    providers.push(ProviderConfig::DuckDuckGo(on));
                }
            }
            _ => {}
        }
    }
    let searches = providers
        .iter()
        .any(|p| !matches!(p, ProviderConfig::DuckDuckGo(false)));
    Ok(searches.then_some(providers))
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
    /// What the person keeps to themselves; list_files and search_files skip it.
    pub private: Option<Arc<PrivateSet>>,
}

/// The capabilities a `tools` section asks for, in the order files, shell, web, memory.
pub fn standard_capabilities(config: &ToolsConfig, args: StandardArgs) -> Vec<Arc<dyn Capability>> {
    let mut out: Vec<Arc<dyn Capability>> = Vec::new();
    match &config.files {
        Some(FilesConfig::Enabled(false)) => {}
        None | Some(FilesConfig::Enabled(true)) => out.push(Arc::new(files(FilesOptions {
            private: args.private.clone(),
            ..FilesOptions::default()
        }))),
        Some(FilesConfig::Options { require_read }) => out.push(Arc::new(files(FilesOptions {
            require_read: require_read.unwrap_or(true),
            private: args.private.clone(),
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

/// The JSON Schema of the `tools` section, derived from [`ToolsConfig`]. `files`, `shell` and
/// `web` are `anyOf` a boolean and an object, so a bad nested value is one issue at `$.files`,
/// `$.shell` or `$.web`.
pub fn tools_schema() -> Value {
    crate::config_schema::schema_for::<ToolsConfig>()
}

/// [`tools_schema`], built once.
pub static TOOLS_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(tools_schema);
