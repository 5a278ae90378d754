//! The generic resolver: configuration layers read in a fixed order and merged key by key, with
//! provenance (which file set which key).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::ConfigError;

/// Where the environment file's variable comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EnvFile {
    /// The variable `<NAME>_CONFIG` ([`environment_name_of`]).
    #[default]
    Default,
    /// A variable of the caller's choosing.
    Named(String),
    /// No environment file.
    Off,
}

/// What to resolve. Build with [`ResolveOptions::new`]; defaults: the user layer on, no project
/// file name, the default environment variable, an empty base, no explicit path, and the
/// process's environment and home folder.
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// The application name: the user file is `<config home>/<name>/config.json`.
    pub name: String,
    /// Whether to read the user file.
    pub user: bool,
    /// The project file's name, looked for in `cwd` and every folder above it.
    pub project: Option<String>,
    /// Which variable names the environment file.
    pub environment: EnvFile,
    /// The program's defaults, under everything.
    pub base: Value,
    /// An explicit file, absolute or relative to `cwd`, over everything.
    pub path: Option<PathBuf>,
    /// The folder relative paths and the project search start from.
    pub cwd: PathBuf,
    /// The environment; `None` reads the process's.
    pub env: Option<HashMap<String, String>>,
    /// The home folder; `None` asks the system.
    pub home: Option<PathBuf>,
}

impl ResolveOptions {
    /// Options for `name` in `cwd` with every default.
    pub fn new(name: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        ResolveOptions {
            name: name.into(),
            user: true,
            project: None,
            environment: EnvFile::Default,
            base: Value::Object(Map::new()),
            path: None,
            cwd: cwd.into(),
            env: None,
            home: None,
        }
    }
}

/// Which layer a set of values came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// The program's defaults.
    Base,
    /// The user's own file.
    User,
    /// The nearest project file.
    Project,
    /// The file an environment variable names.
    Environment,
    /// The explicit path.
    Explicit,
}

impl LayerKind {
    /// The layer's name: `base`, `user`, `project`, `environment` or `explicit`.
    pub fn as_str(self) -> &'static str {
        match self {
            LayerKind::Base => "base",
            LayerKind::User => "user",
            LayerKind::Project => "project",
            LayerKind::Environment => "environment",
            LayerKind::Explicit => "explicit",
        }
    }
}

/// One layer that was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Where it came from.
    pub kind: LayerKind,
    /// The file's path, or `(defaults)` for the base layer.
    pub path: String,
    /// Its values as read.
    pub values: Value,
}

/// The merged values and the layers they came from, lowest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Every layer merged.
    pub values: Value,
    /// The layers read, lowest first (the base layer always first).
    pub layers: Vec<Layer>,
}

fn lookup<'a>(values: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .try_fold(values, |v, key| v.as_object().and_then(|o| o.get(key)))
}

impl Resolved {
    /// The merged value at a dotted path (`context.maxTokens`).
    pub fn get(&self, dotted: &str) -> Option<&Value> {
        lookup(&self.values, dotted)
    }

    /// The path of the last layer that set a dotted path; `(defaults)` for the base layer.
    pub fn source_of(&self, dotted: &str) -> Option<&str> {
        self.layers
            .iter()
            .rev()
            .find(|l| lookup(&l.values, dotted).is_some())
            .map(|l| l.path.as_str())
    }

    /// The paths of the file layers read, lowest first.
    pub fn files(&self) -> Vec<&str> {
        self.layers
            .iter()
            .filter(|l| l.kind != LayerKind::Base)
            .map(|l| l.path.as_str())
            .collect()
    }
}

/// The default variable naming an environment file: the name upper-cased, every other character
/// than a letter or digit as `_`, then `_CONFIG` (`my-tool` → `MY_TOOL_CONFIG`).
pub fn environment_name_of(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    out.push_str("_CONFIG");
    out
}

/// Merges `over` into `into`: objects key by key, recursively; anything else replaces.
pub fn merge(into: &mut Value, over: &Value) {
    match (into, over) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (into, over) => *into = over.clone(),
    }
}

pub(crate) fn process_env() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

pub(crate) fn process_home() -> Option<PathBuf> {
    std::env::home_dir()
}

/// A set, non-empty variable.
pub(crate) fn var<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(String::as_str).filter(|v| !v.is_empty())
}

/// Reads one layer file. `Ok(None)` when it is absent (or a folder) and optional.
fn read_file(path: &Path, required: bool) -> Result<Option<Value>, ConfigError> {
    let shown = path.display().to_string();
    if path.is_dir() {
        return if required {
            Err(ConfigError::Missing { path: shown })
        } else {
            Ok(None)
        };
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return if required {
                Err(ConfigError::Missing { path: shown })
            } else {
                Ok(None)
            };
        }
        Err(e) => {
            return Err(ConfigError::Unreadable {
                path: shown,
                reason: e.to_string(),
            });
        }
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| ConfigError::NotJson {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(ConfigError::NotObject { path: shown });
    }
    Ok(Some(value))
}

/// The nearest `file_name` in `start` or a folder above it.
fn find_up(start: &Path, file_name: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(file_name))
        .find(|p| p.is_file())
}

/// Reads and merges the layers (base, user, project, environment, explicit), later over earlier.
pub fn resolve_config(options: ResolveOptions) -> Result<Resolved, ConfigError> {
    let env = options.env.unwrap_or_else(process_env);
    let home = options.home.or_else(process_home);
    let cwd = options.cwd;
    let mut layers = vec![Layer {
        kind: LayerKind::Base,
        path: "(defaults)".to_owned(),
        values: options.base,
    }];
    let mut push = |kind: LayerKind, path: PathBuf, required: bool| -> Result<(), ConfigError> {
        if let Some(values) = read_file(&path, required)? {
            layers.push(Layer {
                kind,
                path: path.display().to_string(),
                values,
            });
        }
        Ok(())
    };
    if options.user {
        let config_home = match var(&env, "XDG_CONFIG_HOME") {
            Some(x) => Some(PathBuf::from(x)),
            None => home.as_ref().map(|h| h.join(".config")),
        };
        if let Some(dir) = config_home {
            push(
                LayerKind::User,
                dir.join(&options.name).join("config.json"),
                false,
            )?;
        }
    }
    if let Some(project) = options.project.as_deref().filter(|p| !p.is_empty())
        && let Some(found) = find_up(&cwd, project)
    {
        push(LayerKind::Project, found, false)?;
    }
    let variable = match &options.environment {
        EnvFile::Default => Some(environment_name_of(&options.name)),
        EnvFile::Named(v) => Some(v.clone()),
        EnvFile::Off => None,
    };
    if let Some(file) = variable.as_deref().and_then(|v| var(&env, v)) {
        push(LayerKind::Environment, cwd.join(file), true)?;
    }
    if let Some(path) = options.path.filter(|p| !p.as_os_str().is_empty()) {
        push(LayerKind::Explicit, cwd.join(path), true)?;
    }
    let mut values = Value::Object(Map::new());
    for l in &layers {
        merge(&mut values, &l.values);
    }
    Ok(Resolved { values, layers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn environment_names() {
        assert_eq!(environment_name_of("depot"), "DEPOT_CONFIG");
        assert_eq!(environment_name_of("my-tool"), "MY_TOOL_CONFIG");
        assert_eq!(environment_name_of("copapo"), "COPAPO_CONFIG");
    }

    #[test]
    fn merge_objects_deeply_and_replace_the_rest() {
        let mut a = json!({ "t": { "a": 1, "b": [1, 2] }, "x": 1 });
        merge(
            &mut a,
            &json!({ "t": { "b": [3], "c": 2 }, "x": { "y": 1 } }),
        );
        assert_eq!(
            a,
            json!({ "t": { "a": 1, "b": [3], "c": 2 }, "x": { "y": 1 } })
        );
    }
}
