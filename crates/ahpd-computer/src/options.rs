//! The plugin's options and profiles: their schema, defaults and the checks made at load.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

/// The image machines use when neither a profile nor the body names one.
pub const DEFAULT_IMAGE: &str = "debian:bookworm-slim";

/// Whether an absent image may be pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pull {
    /// Pull once when absent.
    #[default]
    Missing,
    /// Never pull; the image must be on the engine.
    Never,
}

/// What happens to a session whose vault value cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Unreadable {
    /// Refuse the session.
    #[default]
    Fail,
    /// Start it without that variable, with a `warn`.
    Drop,
}

/// How a machine keeps agent state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// Named volumes seeded from the host.
    #[default]
    Volume,
    /// The host's own files, bound.
    Host,
}

/// What a host's stop does with the disposable machines it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AtStop {
    /// Kept: the next start holds them for their kept sessions or removes them after their
    /// delay (a daemon's way).
    #[default]
    Keep,
    /// Removed at once (the way of `ahpd run` and `ahpd chat` with the host in their process).
    Remove,
}

/// Whose a profile's state volumes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StateScope {
    /// One per owner (`host` in this version).
    #[default]
    Owner,
    /// One for everyone.
    Shared,
}

/// Named machine settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Profile {
    pub title: Option<String>,
    pub description: Option<String>,
    pub image: Option<String>,
    pub cpus: Option<String>,
    pub memory: Option<String>,
    pub network: Option<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    #[serde(default)]
    pub mounts: Vec<String>,
    pub folder: Option<String>,
    pub agents: Option<Vec<String>>,
    #[serde(default)]
    pub needs: BTreeMap<String, Value>,
    pub secret_unreadable: Option<Unreadable>,
    #[serde(default)]
    pub state: StateMode,
    #[serde(default)]
    pub state_scope: StateScope,
    #[serde(default)]
    pub disposable: bool,
    pub disposable_delay: Option<u64>,
    #[serde(default)]
    pub disposable_alone: bool,
    #[serde(default)]
    pub session_folder: bool,
}

fn default_max() -> u32 {
    3
}
fn default_prefix() -> String {
    "ahpd-computer".into()
}
fn default_delay() -> u64 {
    300_000
}
fn default_start() -> u64 {
    30_000
}

/// The plugin's options.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Options {
    pub engine: Option<String>,
    pub runtime: Option<String>,
    pub image: Option<String>,
    #[serde(default)]
    pub pull: Pull,
    #[serde(default)]
    pub images: Vec<String>,
    pub cpus: Option<String>,
    pub memory: Option<String>,
    pub network: Option<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    #[serde(default)]
    pub mounts: Vec<String>,
    #[serde(default)]
    pub needs: BTreeMap<String, Value>,
    #[serde(default)]
    pub secret_unreadable: Unreadable,
    #[serde(default = "default_max")]
    pub max: u32,
    #[serde(default = "default_prefix")]
    pub prefix: String,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
    #[serde(default = "default_delay")]
    pub disposable_delay: u64,
    #[serde(default)]
    pub body_mounts: bool,
    #[serde(default)]
    pub session_default: String,
    pub ahpd_binary: Option<String>,
    #[serde(default = "default_start")]
    pub start_timeout_ms: u64,
    #[serde(default)]
    pub disposable_at_stop: AtStop,
}

/// Where the plugin's options sit in the daemon's configuration, as error sentences name them.
const AT: &str = "plugins.@ahpd/computer.options";

/// Why resolved options were refused; each sentence names the option's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// The options do not have the expected shape.
    #[error("{at}: {problem}")]
    Shape {
        /// The path of the offending key.
        at: String,
        /// What is wrong there.
        problem: String,
    },
    /// The engine address is not a unix socket.
    #[error("{AT}.engine: only a unix:// socket is served in this version, not {0}")]
    Engine(String),
    /// A runtime other than docker was named.
    #[error("{AT}.runtime: the only runtime is docker")]
    Runtime,
    /// A mount is malformed.
    #[error("{at}: {source}")]
    Mount {
        /// The path of the mount.
        at: String,
        /// What is wrong with it.
        source: MountError,
    },
    /// An image pattern is malformed.
    #[error("{AT}.images: {0}")]
    Pattern(#[from] PatternError),
    /// A variable in `needs` is neither a string nor a host vault reference.
    #[error("{at}.needs.{key}: {problem}")]
    Need {
        /// The path of the `needs` map.
        at: String,
        /// The variable.
        key: String,
        /// What is wrong with its value.
        problem: String,
    },
    /// `sessionDefault` names neither a machine nor a known profile.
    #[error("{AT}.sessionDefault: \"\", computer://<id> or disposable:<a profile>")]
    SessionDefault,
    /// A profile's folder is relative.
    #[error("{at}.folder: a host folder is an absolute path")]
    Folder {
        /// The path of the profile.
        at: String,
    },
}

/// Why a `src:dst[:ro]` mount was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// Not two or three colon-separated parts.
    #[error("{0} is not src:dst or src:dst:ro")]
    Form(String),
    /// The source is relative, which the engine would take for a volume name.
    #[error("the mount source {0} is relative; the engine would read it as a volume name")]
    RelativeSource(String),
    /// The target is relative.
    #[error("the mount target {0} is relative")]
    RelativeTarget(String),
    /// The source is the container engine's socket.
    #[error("a machine never mounts the engine's socket")]
    EngineSocket,
}

/// An image pattern with a `*` inside a component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}: a * stands for a whole component, not part of one")]
pub struct PatternError(pub String);

/// A profile name the options do not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("there is no machine profile called {name}; the profiles are {known}")]
pub struct UnknownProfile {
    /// The name asked for.
    pub name: String,
    /// The defined profiles, comma-separated, or `none`.
    pub known: String,
}

impl Options {
    /// Reads and checks resolved options; the error is one line naming the option's path.
    pub fn parse(value: &Value) -> Result<Options, OptionsError> {
        // The path inside the options (`profiles.p.state`) makes the sentence name the key.
        let opts: Options = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
            let path = e.path().to_string();
            OptionsError::Shape {
                at: match path.as_str() {
                    "." => AT.to_owned(),
                    _ => format!("{AT}.{path}"),
                },
                problem: e.inner().to_string(),
            }
        })?;
        if let Some(e) = &opts.engine
            && !e.starts_with("unix://")
        {
            return Err(OptionsError::Engine(e.clone()));
        }
        if let Some(r) = &opts.runtime
            && r != "docker"
        {
            return Err(OptionsError::Runtime);
        }
        check_mounts(AT, &opts.mounts)?;
        for p in &opts.images {
            check_pattern(p)?;
        }
        check_needs(AT, &opts.needs)?;
        let s = &opts.session_default;
        if !(s.is_empty()
            || s.starts_with("computer://")
            || s.strip_prefix("disposable:")
                .is_some_and(|p| opts.profiles.contains_key(p)))
        {
            return Err(OptionsError::SessionDefault);
        }
        for (name, p) in &opts.profiles {
            let at = format!("{AT}.profiles.{name}");
            check_mounts(&at, &p.mounts)?;
            if let Some(f) = &p.folder
                && !f.starts_with('/')
            {
                return Err(OptionsError::Folder { at });
            }
            check_needs(&at, &p.needs)?;
        }
        Ok(opts)
    }

    /// A profile by name, or the sentence naming the profiles there are.
    pub fn profile(&self, name: &str) -> Result<&Profile, UnknownProfile> {
        self.profiles.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            UnknownProfile {
                name: name.to_owned(),
                known: if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                },
            }
        })
    }
}

fn check_mounts(at: &str, mounts: &[String]) -> Result<(), OptionsError> {
    for (i, m) in mounts.iter().enumerate() {
        check_mount(m).map_err(|source| OptionsError::Mount {
            at: format!("{at}.mounts.{i}"),
            source,
        })?;
    }
    Ok(())
}

/// `src:dst[:ro]` with absolute paths; never the engine's socket.
pub fn check_mount(m: &str) -> Result<(), MountError> {
    let parts: Vec<&str> = m.split(':').collect();
    let ok_form = matches!(parts.as_slice(), [_, _] | [_, _, "ro"] | [_, _, "rw"]);
    if !ok_form {
        return Err(MountError::Form(m.to_owned()));
    }
    if !parts[0].starts_with('/') {
        return Err(MountError::RelativeSource(parts[0].to_owned()));
    }
    if !parts[1].starts_with('/') {
        return Err(MountError::RelativeTarget(parts[1].to_owned()));
    }
    if parts[0].ends_with("docker.sock") || parts[0].ends_with("podman.sock") {
        return Err(MountError::EngineSocket);
    }
    Ok(())
}

/// An image pattern: whole components, `*` alone or `**` last.
pub fn check_pattern(p: &str) -> Result<(), PatternError> {
    for c in p.split(['/', ':']) {
        if c.contains('*') && c != "*" && c != "**" {
            return Err(PatternError(p.to_owned()));
        }
    }
    Ok(())
}

/// Whether an image matches an allow-list pattern, by whole components.
pub fn image_allowed(pattern: &str, image: &str) -> bool {
    let split = |s: &str| -> Vec<String> {
        let (name, tag) = match s.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n.to_owned(), Some(t.to_owned())),
            _ => (s.to_owned(), None),
        };
        let mut v: Vec<String> = name.split('/').map(str::to_owned).collect();
        v.push(tag.unwrap_or_else(|| "latest".into()));
        v
    };
    if let Some(prefix) = pattern.strip_suffix("/**") {
        let p: Vec<&str> = prefix.split('/').collect();
        let i: Vec<&str> = image.split('/').collect();
        return i.len() > p.len() && p.iter().zip(&i).all(|(a, b)| *a == "*" || a == b);
    }
    let p = split(pattern);
    let i = split(image);
    p.len() == i.len() && p.iter().zip(&i).all(|(a, b)| a == "*" || a == b)
}

/// Need values: strings or `{ "$secret": "host:<name>" }`.
fn check_needs(at: &str, needs: &BTreeMap<String, Value>) -> Result<(), OptionsError> {
    let refuse = |key: &str, problem: String| OptionsError::Need {
        at: at.to_owned(),
        key: key.to_owned(),
        problem,
    };
    for (k, v) in needs {
        match v {
            Value::String(_) => {}
            Value::Object(o) => match o.get("$secret").and_then(Value::as_str) {
                Some(name) if name.starts_with("host:") && o.len() == 1 => {}
                Some(name) => {
                    return Err(refuse(
                        k,
                        format!(
                            "the vault name {name} is not host:<name>; other scopes wait for accounts"
                        ),
                    ));
                }
                None => {
                    return Err(refuse(
                        k,
                        "a string or { \"$secret\": \"host:<name>\" }".into(),
                    ));
                }
            },
            _ => {
                return Err(refuse(
                    k,
                    "a string or { \"$secret\": \"host:<name>\" }".into(),
                ));
            }
        }
    }
    Ok(())
}

/// The JSON Schema of the options.
pub fn schema() -> Value {
    let need_values = json!({
        "type": "object",
        "x-ahpd-secret-at-use": true,
        "additionalProperties": {
            "anyOf": [
                { "type": "string" },
                // Only the host's vault exists in this version, so another scope is an error
                // at load rather than a plugin waiting for configuration.
                { "type": "object", "properties": { "$secret": { "type": "string", "pattern": "^host:" } },
                  "required": ["$secret"], "additionalProperties": false }
            ]
        }
    });
    let strings = json!({ "type": "array", "items": { "type": "string" } });
    let profile = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "title": { "type": "string" }, "description": { "type": "string" },
            "image": { "type": "string" }, "cpus": { "type": "string" },
            "memory": { "type": "string" }, "network": { "type": "string" },
            "user": { "type": "string" }, "workdir": { "type": "string" },
            "mounts": strings, "folder": { "type": "string" }, "agents": strings,
            "needs": need_values,
            "secretUnreadable": { "enum": ["fail", "drop"] },
            "state": { "enum": ["volume", "host"] },
            "stateScope": { "enum": ["owner", "shared"] },
            "disposable": { "type": "boolean" },
            "disposableDelay": { "type": "integer", "minimum": 0 },
            "disposableAlone": { "type": "boolean" },
            "sessionFolder": { "type": "boolean" }
        }
    });
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "engine": { "type": "string", "pattern": "^unix://" },
            "runtime": { "enum": ["docker"], "default": "docker" },
            "image": { "type": "string", "default": DEFAULT_IMAGE },
            "pull": { "enum": ["missing", "never"], "default": "missing" },
            "images": strings,
            "cpus": { "type": "string" }, "memory": { "type": "string" },
            "network": { "type": "string" }, "user": { "type": "string" },
            "workdir": { "type": "string" }, "mounts": strings,
            "needs": need_values,
            "secretUnreadable": { "enum": ["fail", "drop"], "default": "fail" },
            "max": { "type": "integer", "minimum": 1, "default": 3 },
            "prefix": { "type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,40}$", "default": "ahpd-computer" },
            "profiles": { "type": "object", "additionalProperties": profile },
            "disposableDelay": { "type": "integer", "minimum": 0, "default": 300000 },
            "bodyMounts": { "type": "boolean", "default": false },
            "sessionDefault": { "type": "string", "default": "" },
            "ahpdBinary": { "type": "string", "pattern": "^/" },
            "startTimeoutMs": { "type": "integer", "minimum": 1, "default": 30000 },
            "disposableAtStop": { "enum": ["keep", "remove"], "default": "keep" }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_components() {
        assert!(image_allowed("node:*", "node:22"));
        assert!(!image_allowed("node:*", "nodejs/node:22"));
        assert!(image_allowed("ghcr.io/acme/**", "ghcr.io/acme/x/y:1"));
        assert!(check_pattern("no*de:1").is_err());
    }

    #[test]
    fn bad_options_name_their_path() {
        let e = Options::parse(&json!({"engine": "tcp://h:2375"}))
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("plugins.@ahpd/computer.options.engine:"),
            "{e}"
        );
        let e = Options::parse(&json!({"command": "docker"}))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("command"), "{e}");
        let e = Options::parse(&json!({"profiles": {"p": {"state": "disk"}}}))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("state"), "{e}");
        let e = Options::parse(&json!({"needs": {"k": {"$secret": "team:core/k"}}}))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("needs.k"), "{e}");
        let ok = Options::parse(&json!({"needs": {"cofoldApiKey": {"$secret": "host:deepseek"}}}))
            .expect("accepted");
        assert_eq!(ok.max, 3);
    }
}
