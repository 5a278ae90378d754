//! The copapo configuration: its files, its defaults, its typed form, and the `COPAPO_*` /
//! `COFOLD_*` environment overlay.

use std::collections::HashMap;
use std::path::PathBuf;

use cofold_agents::model::ModelParams;
use cofold_agents::policy::{PermissionMode, Rule};
use cofold_agents::provider::ProviderConfig;
use cofold_agents::thinking::EffortLevel;
use cofold_openai::settings::{ProviderSettings, SETTINGS_KEYS};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::check::{Mode, check};
use crate::error::ConfigError;
use crate::resolve::{EnvFile, ResolveOptions, Resolved, process_env, resolve_config, var};

/// The application name whose files are read.
pub const APP_NAME: &str = "copapo";
/// The project file looked for in the session's folder and above.
pub const PROJECT_FILE: &str = ".copapo.json";

/// What to load. Defaults: the process's environment and home, no explicit path, strict.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The session's folder: where the project file search starts and relative paths resolve.
    pub cwd: PathBuf,
    /// The environment; `None` reads the process's.
    pub env: Option<HashMap<String, String>>,
    /// The home folder; `None` asks the system.
    pub home: Option<PathBuf>,
    /// An explicit file over everything.
    pub path: Option<PathBuf>,
    /// Strict or lenient checking.
    pub mode: Mode,
}

impl LoadOptions {
    /// Strict options for `cwd` with the process's environment and home.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        LoadOptions {
            cwd: cwd.into(),
            ..LoadOptions::default()
        }
    }
}

/// The `rules` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RulesConfig {
    /// Refused calls.
    #[serde(default)]
    pub deny: Vec<Rule>,
    /// Calls that ask first.
    #[serde(default)]
    pub ask: Vec<Rule>,
    /// Calls that run.
    #[serde(default)]
    pub allow: Vec<Rule>,
}

/// Run limits; each absent means the runtime's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitsConfig {
    /// Model steps per run.
    pub max_steps: Option<u64>,
    /// Tool calls per run.
    pub max_tool_calls: Option<u64>,
    /// Characters of one tool result.
    pub max_tool_output_chars: Option<u64>,
    /// The run's time limit in milliseconds.
    pub timeout_ms: Option<u64>,
}

/// Context sizing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextConfig {
    /// The context budget in tokens (default 32000).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    /// Whether sessions compact on their own (default true).
    #[serde(default = "yes")]
    pub auto_compact: bool,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            max_tokens: default_max_tokens(),
            auto_compact: true,
        }
    }
}

fn default_max_tokens() -> u64 {
    32000
}

fn yes() -> bool {
    true
}

fn default_permissions() -> PermissionMode {
    PermissionMode::Default
}

fn default_reasoning() -> EffortLevel {
    EffortLevel::Off
}

fn default_tools() -> Value {
    json!({ "files": true, "shell": true, "web": true, "memory": true })
}

/// The typed copapo configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppConfig {
    /// Endpoints, in order (provider `default` first when the environment names one).
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    /// The model reference `<provider>/<model>`; none by default.
    #[serde(default)]
    pub model: Option<String>,
    /// The permission mode (default `default`).
    #[serde(default = "default_permissions")]
    pub permissions: PermissionMode,
    /// Rule lists, when given.
    #[serde(default)]
    pub rules: Option<RulesConfig>,
    /// The thinking level (default `off`).
    #[serde(default = "default_reasoning")]
    pub reasoning: EffortLevel,
    /// The system prompt; none by default.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Run limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Request params, when given.
    #[serde(default)]
    pub params: Option<ModelParams>,
    /// Context sizing.
    #[serde(default)]
    pub context: ContextConfig,
    /// The tools block as written; its consumer validates it.
    #[serde(default = "default_tools")]
    pub tools: Value,
    /// The copapo app's own key, unused here.
    #[serde(default)]
    pub backend: Option<String>,
    /// The copapo app's own key, unused here.
    #[serde(default)]
    pub theme: Option<String>,
    /// The copapo app's own key, unused here.
    #[serde(default)]
    pub shell: Option<String>,
    /// Where every value came from (the layers read), before the environment overlay.
    #[serde(skip, default = "empty_resolved")]
    pub resolved: Resolved,
    /// Each provider's transport settings by provider id (time limits, retries, proxy,
    /// certificates, dialect and quirks); a provider without any has none here.
    #[serde(skip)]
    pub provider_settings: HashMap<String, ProviderSettings>,
}

impl AppConfig {
    /// The settings of provider `id`: what its entry says, else every default.
    pub fn settings_of(&self, id: &str) -> ProviderSettings {
        self.provider_settings.get(id).cloned().unwrap_or_default()
    }
}

/// Moves the transport settings out of each provider entry (the shared provider schema does not
/// know them) and reads them. Entries were checked before, so a failure here only drops them.
fn take_settings(values: &mut Value) -> HashMap<String, ProviderSettings> {
    let mut out = HashMap::new();
    let Some(list) = values.get_mut("providers").and_then(Value::as_array_mut) else {
        return out;
    };
    for entry in list.iter_mut().filter_map(Value::as_object_mut) {
        let mut settings = serde_json::Map::new();
        for key in SETTINGS_KEYS {
            if let Some(v) = entry.shift_remove(key) {
                settings.insert(key.to_owned(), v);
            }
        }
        let id = entry.get("id").and_then(Value::as_str).map(str::to_owned);
        if let (Some(id), false) = (id, settings.is_empty()) {
            match ProviderSettings::from_entry(&settings) {
                Ok(s) => {
                    out.insert(id, s);
                }
                Err(e) => {
                    tracing::warn!(provider = %id, "{e}; the provider's settings are ignored")
                }
            }
        }
    }
    out
}

fn empty_resolved() -> Resolved {
    Resolved {
        values: Value::Null,
        layers: Vec::new(),
    }
}

/// copapo's defaults, the base layer.
pub fn copapo_defaults() -> Value {
    json!({
        "providers": [],
        "permissions": "default",
        "reasoning": "off",
        "tools": default_tools(),
        "context": { "maxTokens": 32000, "autoCompact": true }
    })
}

/// `COPAPO_<x>` when set and non-empty, else `COFOLD_<x>` when set and non-empty.
fn overlay_var<'a>(env: &'a HashMap<String, String>, x: &str) -> Option<&'a str> {
    var(env, &format!("COPAPO_{x}")).or_else(|| var(env, &format!("COFOLD_{x}")))
}

/// The environment overlay: a base URL adds (or replaces) provider `default`, first, with the
/// API key when one is set; a model without a slash becomes `default/<model>`.
pub fn apply_environment(config: &mut AppConfig, env: &HashMap<String, String>) {
    if let Some(base_url) = overlay_var(env, "BASE_URL") {
        config.providers.retain(|p| p.id != "default");
        config.provider_settings.remove("default");
        let mut p = ProviderConfig::new("default", base_url);
        p.api_key = overlay_var(env, "API_KEY").map(str::to_owned);
        config.providers.insert(0, p);
    }
    if let Some(model) = overlay_var(env, "MODEL") {
        config.model = Some(if model.contains('/') {
            model.to_owned()
        } else {
            format!("default/{model}")
        });
    }
}

/// Reads the copapo configuration: the user file, the nearest `.copapo.json`, the file
/// `$COPAPO_CONFIG` names and the explicit path, merged over the defaults in that order, checked,
/// then overlaid with the environment.
pub fn load_copapo(options: LoadOptions) -> Result<AppConfig, ConfigError> {
    let env = options.env.unwrap_or_else(process_env);
    let resolved = resolve_config(ResolveOptions {
        name: APP_NAME.to_owned(),
        user: true,
        project: Some(PROJECT_FILE.to_owned()),
        environment: EnvFile::Default,
        base: copapo_defaults(),
        path: options.path,
        cwd: options.cwd,
        env: Some(env.clone()),
        home: options.home,
    })?;
    let mut values = resolved.values.clone();
    let Some(map) = values.as_object_mut() else {
        return Err(ConfigError::Invalid {
            message: "the merged configuration is not an object".to_owned(),
            key: String::new(),
        });
    };
    if let Err(p) = check(map, options.mode) {
        let files = resolved.files();
        let suffix = if files.is_empty() {
            String::new()
        } else {
            format!(" (read: {})", files.join(", "))
        };
        return Err(ConfigError::Invalid {
            message: format!("{}{suffix}", p.sentence),
            key: p.key,
        });
    }
    let provider_settings = take_settings(&mut values);
    let mut config: AppConfig =
        serde_json::from_value(values).map_err(|e| ConfigError::Invalid {
            message: format!("the configuration does not fit its shape: {e}"),
            key: String::new(),
        })?;
    config.resolved = resolved;
    config.provider_settings = provider_settings;
    apply_environment(&mut config, &env);
    Ok(config)
}
