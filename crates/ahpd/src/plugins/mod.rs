//! Compiled-in plugins: the table, which of them run, and the state of each (`plugin list`).
//!
//! Resolving a plugin runs steps 1–4 of its start: merge the options, answer `$secret`
//! references, check the schema, ask `check`. `plugin list` stops there with the vault read for
//! names only; a start goes on to `apply` (see `crate::serve`).

pub mod builtin;
#[cfg(feature = "test-plugins")]
pub mod echo;
pub mod options;

use ahpd_sdk::plugin::{Plugin, Readiness};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::args::RunArgs;
use crate::config::{ConfigError, PluginEntry, Settings, Source};
use crate::vault::Vault;
pub use builtin::BuiltIn;
use builtin::Provides;
use options::SecretMode;

/// A plugin's state, as `plugin list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Enabled and ready to apply.
    Ready,
    /// Built in but not enabled.
    Disabled,
    /// Enabled but missing something (a secret, a setting).
    Unconfigured(String),
    /// Enabled but wrong (options, unknown name, a claim another plugin makes).
    Error(String),
}

impl State {
    /// The state's word.
    pub fn word(&self) -> &'static str {
        match self {
            State::Ready => "ready",
            State::Disabled => "disabled",
            State::Unconfigured(_) => "unconfigured",
            State::Error(_) => "error",
        }
    }

    /// The one-line reason, empty for `ready` and `disabled`.
    pub fn reason(&self) -> &str {
        match self {
            State::Unconfigured(r) | State::Error(r) => r,
            _ => "",
        }
    }
}

/// One plugin considered for this run.
pub struct Candidate {
    /// Its name as configured or built in.
    pub name: String,
    /// The built-in plugin of that name, if any.
    pub builtin: Option<BuiltIn>,
    /// Options from the configuration file's entry.
    pub file_options: Map<String, Value>,
    /// The folder of the file that set those options (for `"format": "path"` options).
    pub file_dir: Option<PathBuf>,
    /// Options from `--plugin-option`.
    pub flag_options: Map<String, Value>,
    /// Whether it runs this time.
    pub enabled: bool,
    /// The configuration folder, against which relative default paths resolve.
    pub config_dir: PathBuf,
}

/// Every compiled-in plugin, in the order `plugin list` shows them. Adding a plugin is one line.
pub fn builtin() -> Vec<BuiltIn> {
    #[allow(unused_mut)]
    let mut table: Vec<BuiltIn> = vec![
        BuiltIn::new(
            Arc::new(cofold_plugin()),
            &[Provides::Engine(ahpd_agent_cofold::ENGINE)],
        ),
        BuiltIn::new(
            Arc::new(ahpd_agent_acp::plugin()),
            &[Provides::Engine(ahpd_agent_acp::ENGINE)],
        ),
        BuiltIn::new(Arc::new(ahpd_computer::plugin()), &[]),
    ];
    #[cfg(feature = "test-plugins")]
    table.extend(echo::plugins());
    table
}

/// The cofold plugin, given the environment the process started with: the variables kept out
/// of its environment block (the model keys among them) reach the engine from memory, and
/// through it the commands that `tools.shell.env` lets have them.
fn cofold_plugin() -> ahpd_agent_cofold::CofoldPlugin {
    let vars = crate::environ::vars();
    let home = vars
        .get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    ahpd_agent_cofold::CofoldPlugin::with_embedder(ahpd_agent_cofold::Embedder {
        env: Some(ahpd_agent_cofold::Environment { vars, home }),
        ..ahpd_agent_cofold::Embedder::default()
    })
}

/// The built-in names, for messages.
pub fn builtin_names() -> String {
    let names: Vec<String> = builtin()
        .iter()
        .map(|b| b.plugin.name().to_owned())
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn find_builtin(name: &str) -> Option<BuiltIn> {
    builtin().into_iter().find(|b| b.plugin.name() == name)
}

/// Splits `<plugin>.<key>=<value>` at the longest built-in plugin name.
fn split_plugin_option(raw: &str) -> Result<(String, String, Value), ConfigError> {
    let (lhs, value) = raw.split_once('=').ok_or_else(|| {
        ConfigError::Usage(format!(
            "--plugin-option {raw}: expected <plugin>.<key>[.<key>...]=<value>"
        ))
    })?;
    let mut best: Option<String> = None;
    for b in builtin() {
        let name = b.plugin.name();
        if lhs.len() > name.len() + 1
            && lhs.starts_with(name)
            && lhs.as_bytes()[name.len()] == b'.'
            && best.as_ref().is_none_or(|n| n.len() < name.len())
        {
            best = Some(name.to_owned());
        }
    }
    let Some(plugin) = best else {
        return Err(ConfigError::Usage(format!(
            "--plugin-option {lhs}: names no built-in plugin (built in: {})",
            builtin_names()
        )));
    };
    let key = lhs[plugin.len() + 1..].to_owned();
    Ok((plugin, key, options::parse_value(value)))
}

fn entry_dir(source: &Source) -> Option<PathBuf> {
    match source {
        Source::File(f) => f.parent().map(Path::to_path_buf),
        _ => None,
    }
}

/// Every plugin this run considers, in order: the configured entries (or `--plugin` names),
/// then built-in plugins no entry names (disabled). `run` is `None` for commands that take no
/// run flags.
pub fn plan(
    settings: &Settings,
    run: Option<&RunArgs>,
    config_dir: &Path,
) -> Result<Vec<Candidate>, ConfigError> {
    let entries: &[PluginEntry] = &settings.plugins.value;
    let dir = entry_dir(&settings.plugins.source);
    let mut out: Vec<Candidate> = Vec::new();
    let from_entry = |e: &PluginEntry, enabled: bool| Candidate {
        name: e.name.clone(),
        builtin: find_builtin(&e.name),
        file_options: e.options.clone(),
        file_dir: dir.clone(),
        flag_options: Map::new(),
        enabled,
        config_dir: config_dir.to_path_buf(),
    };
    match run {
        Some(r) if r.no_plugins => {
            out.extend(entries.iter().map(|e| from_entry(e, false)));
        }
        Some(r) if !r.plugins.is_empty() => {
            for name in &r.plugins {
                let Some(b) = find_builtin(name) else {
                    return Err(ConfigError::Usage(format!(
                        "--plugin {name}: not a built-in plugin (built in: {})",
                        builtin_names()
                    )));
                };
                if out.iter().any(|c| &c.name == name) {
                    continue;
                }
                let file_options = entries
                    .iter()
                    .find(|e| &e.name == name)
                    .map(|e| e.options.clone())
                    .unwrap_or_default();
                out.push(Candidate {
                    name: name.clone(),
                    builtin: Some(b),
                    file_options,
                    file_dir: dir.clone(),
                    flag_options: Map::new(),
                    enabled: true,
                    config_dir: config_dir.to_path_buf(),
                });
            }
            for e in entries {
                if !out.iter().any(|c| c.name == e.name) {
                    out.push(from_entry(e, false));
                }
            }
        }
        _ => out.extend(entries.iter().map(|e| from_entry(e, e.enabled))),
    }
    for b in builtin() {
        if !out.iter().any(|c| c.name == b.plugin.name()) {
            out.push(Candidate {
                name: b.plugin.name().to_owned(),
                builtin: Some(b),
                file_options: Map::new(),
                file_dir: None,
                flag_options: Map::new(),
                enabled: false,
                config_dir: config_dir.to_path_buf(),
            });
        }
    }
    if let Some(r) = run {
        for raw in &r.plugin_options {
            let (plugin, key, value) = split_plugin_option(raw)?;
            let Some(c) = out.iter_mut().find(|c| c.name == plugin) else {
                continue;
            };
            if !c.enabled {
                tracing::warn!("--plugin-option {plugin}.{key}: {plugin} does not run this time");
            }
            options::set_dotted(&mut c.flag_options, &key, value)
                .map_err(|e| ConfigError::Usage(format!("--plugin-option {raw}: {e}")))?;
        }
    }
    Ok(out)
}

/// Options merged from defaults, file and flags, before secrets are answered.
pub fn merged_options(plugin: &dyn Plugin, c: &Candidate) -> Value {
    let schema = plugin.options_schema();
    let mut opts = plugin.defaults();
    if !opts.is_object() {
        opts = Value::Object(Map::new());
    }
    options::resolve_path_options(&schema, &mut opts, &c.config_dir);
    let mut file = Value::Object(c.file_options.clone());
    if let Some(dir) = &c.file_dir {
        options::resolve_path_options(&schema, &mut file, dir);
    }
    options::deep_merge(&mut opts, &file);
    let mut flags = Value::Object(c.flag_options.clone());
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    options::resolve_path_options(&schema, &mut flags, &cwd);
    options::deep_merge(&mut opts, &flags);
    opts
}

/// Steps 1–4 of a plugin's start. `Ok` holds the options `apply` gets (with placeholders in
/// place of secrets when `mode` is [`SecretMode::NamesOnly`]).
pub fn resolve(c: &Candidate, vault: &Vault, mode: SecretMode) -> Result<Value, State> {
    if !c.enabled {
        return Err(State::Disabled);
    }
    let Some(b) = &c.builtin else {
        return Err(State::Error(format!(
            "{} is not a built-in plugin (built in: {})",
            c.name,
            builtin_names()
        )));
    };
    let plugin = b.plugin.as_ref();
    let mut opts = merged_options(plugin, c);
    // Values a plugin reads from the vault when it uses them keep their references, so a
    // rotated secret reaches the next use and a missing one fails that use, not the load.
    let kept = options::take_secret_at_use(&mut opts, &plugin.options_schema());
    options::resolve_secrets(&mut opts, vault, mode).map_err(State::Unconfigured)?;
    options::put_back(&mut opts, kept);
    options::validate(
        &plugin.options_schema(),
        &opts,
        &format!("plugins.{}.options", c.name),
    )
    .map_err(State::Error)?;
    match plugin.check(&opts) {
        Readiness::Ready => Ok(opts),
        Readiness::Unconfigured(reason) => Err(State::Unconfigured(reason)),
    }
}

/// One row of `plugin list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Plugin name.
    pub name: String,
    /// Title (empty for a name that is not built in).
    pub title: String,
    /// What it registers, e.g. `engine echo`.
    pub provides: Vec<String>,
    /// `ready`, `disabled`, `unconfigured` or `error`.
    pub state: String,
    /// One line for the last two.
    pub reason: String,
}

/// The state of every candidate, without applying anything. Two ready plugins claiming the same
/// engine or agent are both `error`.
pub fn states(cands: &[Candidate], vault: &Vault) -> Vec<(State, Vec<String>)> {
    let mut out: Vec<(State, Vec<String>)> = cands
        .iter()
        .map(|c| {
            let provides = c
                .builtin
                .as_ref()
                .map(|b| b.provides.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            let state = match resolve(c, vault, SecretMode::NamesOnly) {
                Ok(_) => State::Ready,
                Err(s) => s,
            };
            (state, provides)
        })
        .collect();
    let ready: Vec<bool> = out.iter().map(|(s, _)| *s == State::Ready).collect();
    for i in 0..out.len() {
        if !ready[i] {
            continue;
        }
        for j in 0..out.len() {
            if i == j || !ready[j] {
                continue;
            }
            if let Some(claim) = out[i].1.iter().find(|p| out[j].1.contains(p)) {
                let reason = format!("{} also registers the {claim}", cands[j].name);
                out[i].0 = State::Error(reason);
                break;
            }
        }
    }
    out
}

/// The rows `plugin list` prints.
pub fn rows(cands: &[Candidate], vault: &Vault) -> Vec<Row> {
    cands
        .iter()
        .zip(states(cands, vault))
        .map(|(c, (state, provides))| Row {
            name: c.name.clone(),
            title: c
                .builtin
                .as_ref()
                .map(|b| b.plugin.title().to_owned())
                .unwrap_or_default(),
            provides,
            state: state.word().to_owned(),
            reason: state.reason().to_owned(),
        })
        .collect()
}

/// Plain values of a plugin's `writeOnly` options shown as `<set>`; other values as written.
pub fn mask_secrets_of(name: &str, options: &Value) -> Value {
    let mut out = options.clone();
    if let Some(b) = find_builtin(name) {
        options::mask_write_only(&b.plugin.options_schema(), &mut out);
    }
    out
}

#[cfg(all(test, feature = "test-plugins"))]
mod tests {
    use super::*;

    #[test]
    fn plugin_options_split_at_the_longest_built_in_name() {
        let (plugin, key, value) =
            split_plugin_option("@ahpd/agent-echo-twin.delayMs=5").expect("valid");
        assert_eq!(plugin, "@ahpd/agent-echo-twin");
        assert_eq!(key, "delayMs");
        assert_eq!(value, serde_json::json!(5));
        let (plugin, key, value) =
            split_plugin_option("@ahpd/agent-echo.store=a b").expect("valid");
        assert_eq!(
            (plugin.as_str(), key.as_str()),
            ("@ahpd/agent-echo", "store")
        );
        assert_eq!(value, serde_json::json!("a b"));
        assert!(split_plugin_option("@ahpd/agent-echo=1").is_err());
        assert!(split_plugin_option("nope.x=1").is_err());
    }
}
