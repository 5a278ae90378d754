//! An agent record's `config` for the `acp` engine: a preset, or a command of one's own, with
//! arguments and variables (values may be `$secret` references into the daemon's vault).

use std::path::{Path, PathBuf};

use ahp_types::common::JsonObject;
use ahpd_sdk::plugin::{RecordError, SecretReader};
use serde_json::{Value, json};

use crate::presets::{self, Preset};

/// One variable a record sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// A value written in the record.
    Literal(String),
    /// A vault entry, read when the agent starts.
    Secret(String),
}

/// What the engine runs for one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The preset it starts from, if any.
    pub preset: Option<&'static Preset>,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The record's variables, over the preset's.
    pub env: Vec<(String, EnvValue)>,
    /// The sign-in method to use when the agent offers it.
    pub auth_method: Option<String>,
}

/// JSON Schema of a record's `config`.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "preset": {
                "type": "string",
                "title": "Preset",
                "description": "A well-known agent: its command, arguments and the variables that keep its state in the session",
                "enum": presets::PRESETS.iter().map(|p| p.key).collect::<Vec<_>>()
            },
            "command": {"type": "string", "minLength": 1, "title": "Command", "description": "The program that speaks ACP on stdio (a name on PATH or an absolute path)"},
            "args": {"type": "array", "items": {"type": "string"}, "title": "Arguments"},
            "env": {
                "type": "object",
                "title": "Variables",
                "description": "Variables over the preset's; a key goes in as {\"$secret\": \"<vault name>\"}",
                "additionalProperties": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "object", "properties": {"$secret": {"type": "string", "minLength": 1}}, "required": ["$secret"], "additionalProperties": false}
                    ]
                }
            },
            "authMethod": {"type": "string", "minLength": 1, "title": "Sign-in method", "description": "An ACP authentication method id the agent offers"}
        },
        "additionalProperties": false
    })
}

fn refuse(key: &str, reason: impl Into<String>) -> RecordError {
    RecordError::Config {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads and checks a record's `config`; every refusal names `config.<key>`.
pub fn parse(config: &JsonObject) -> Result<Spec, RecordError> {
    for key in config.keys() {
        if !["preset", "command", "args", "env", "authMethod"].contains(&key.as_str()) {
            return Err(refuse(
                key,
                "is not a setting of the acp engine (preset, command, args, env, authMethod)",
            ));
        }
    }
    let preset = match config.get("preset") {
        None => None,
        Some(Value::String(k)) => Some(presets::preset(k).ok_or_else(|| {
            refuse(
                "preset",
                format!("{k:?} is not a preset (presets: {})", presets::keys()),
            )
        })?),
        Some(_) => return Err(refuse("preset", "must be a string")),
    };
    let command = match config.get("command") {
        None => None,
        Some(Value::String(c)) if !c.trim().is_empty() => Some(c.clone()),
        Some(_) => return Err(refuse("command", "must be a program name or path")),
    };
    let command = match (command, preset) {
        (Some(c), _) => c,
        (None, Some(p)) => p.command.to_owned(),
        (None, None) => {
            return Err(refuse(
                "command",
                format!("a record names a preset ({}) or a command", presets::keys()),
            ));
        }
    };
    let args = match config.get("args") {
        None => preset
            .map(|p| p.args.iter().map(|a| (*a).to_owned()).collect())
            .unwrap_or_default(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| refuse(&format!("args.{i}"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(refuse("args", "must be an array of strings")),
    };
    let mut env = Vec::new();
    match config.get("env") {
        None => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let key = format!("env.{name}");
                if !valid_env_name(name) {
                    return Err(refuse(&key, "is not a variable name"));
                }
                let value = match value {
                    Value::String(s) => {
                        if !crate::env::passes(name) {
                            return Err(refuse(
                                &key,
                                "looks like a secret, and a record is shown to clients: store it with ahpd vault set host:<name> and write {\"$secret\": \"host:<name>\"}",
                            ));
                        }
                        EnvValue::Literal(s.clone())
                    }
                    Value::Object(o) if o.len() == 1 => match o.get("$secret") {
                        Some(Value::String(s)) if !s.is_empty() => EnvValue::Secret(s.clone()),
                        _ => {
                            return Err(refuse(
                                &key,
                                "must be a string or {\"$secret\": \"<vault name>\"}",
                            ));
                        }
                    },
                    _ => {
                        return Err(refuse(
                            &key,
                            "must be a string or {\"$secret\": \"<vault name>\"}",
                        ));
                    }
                };
                env.push((name.clone(), value));
            }
        }
        Some(_) => return Err(refuse("env", "must be an object of variables")),
    }
    let auth_method = match config.get("authMethod") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(refuse("authMethod", "must be a method id")),
    };
    Ok(Spec {
        preset,
        command,
        args,
        env,
        auth_method,
    })
}

impl Spec {
    /// Where the program is, or the sentence saying it is not installed and how to get it.
    pub fn locate(&self, path_var: Option<&std::ffi::OsStr>) -> Result<PathBuf, String> {
        let hint = |what: String| match self.preset {
            Some(p) => format!("{what}; install it with: {}", p.install),
            None => what,
        };
        let command = Path::new(&self.command);
        if command.components().count() > 1 {
            return if is_executable(command) {
                Ok(command.to_path_buf())
            } else {
                Err(hint(format!("{} is not an executable file", self.command)))
            };
        }
        if let Some(path) = path_var {
            for dir in std::env::split_paths(path) {
                let candidate = dir.join(command);
                if is_executable(&candidate) {
                    return Ok(candidate);
                }
            }
        }
        Err(hint(format!(
            "{} is not installed (not on PATH)",
            self.command
        )))
    }

    /// The variables the child gets over the filtered daemon environment: the preset's fixed
    /// ones, its state folders, then the record's (secrets read now).
    pub fn variables(
        &self,
        state: &Path,
        secrets: &dyn SecretReader,
    ) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        if let Some(p) = self.preset {
            for (name, value) in p.env {
                out.push(((*name).to_owned(), (*value).to_owned()));
            }
            for (name, sub) in p.state_env {
                let dir = if sub.is_empty() {
                    state.to_path_buf()
                } else {
                    state.join(sub)
                };
                out.push(((*name).to_owned(), dir.to_string_lossy().into_owned()));
            }
        }
        for (name, value) in &self.env {
            let value = match value {
                EnvValue::Literal(s) => s.clone(),
                EnvValue::Secret(n) => secrets
                    .read(n)
                    .map_err(|e| format!("config.env.{name}: {e}"))?
                    .expose()
                    .to_owned(),
            };
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    /// The sign-in method to ask for among those the agent offers: the record's, else the
    /// preset's when the record sets one of its key variables (a key in the daemon's own
    /// environment never reaches the agent, so it does not count).
    pub fn auth_method(&self) -> Option<String> {
        if let Some(m) = &self.auth_method {
            return Some(m.clone());
        }
        let (method, from) = self.preset?.authenticate?;
        let set = from.iter().any(|v| self.env.iter().any(|(n, _)| n == v));
        set.then(|| method.to_owned())
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn a_preset_gives_command_and_arguments() {
        let spec = parse(&obj(json!({"preset": "gemini"}))).expect("valid");
        assert_eq!(spec.command, "gemini");
        assert_eq!(spec.args, ["--acp"]);
    }

    #[test]
    fn bad_records_name_their_key() {
        let cases = [
            (json!({}), "config.command:"),
            (json!({"preset": "zed"}), "config.preset:"),
            (json!({"command": "x", "args": [1]}), "config.args.0:"),
            (
                json!({"command": "x", "env": {"OPENAI_API_KEY": "sk-1"}}),
                "config.env.OPENAI_API_KEY:",
            ),
            (
                json!({"command": "x", "env": {"1A": "v"}}),
                "config.env.1A:",
            ),
            (json!({"command": "x", "colour": 1}), "config.colour:"),
        ];
        for (config, start) in cases {
            let err = parse(&obj(config.clone()))
                .expect_err("refused")
                .to_string();
            assert!(err.starts_with(start), "{config}: {err}");
            assert!(!err.contains("sk-1"));
        }
    }

    #[test]
    fn an_absent_program_says_how_to_install_it() {
        let spec = parse(&obj(json!({"preset": "vibe"}))).expect("valid");
        let err = spec
            .locate(Some(std::ffi::OsStr::new("/nonexistent")))
            .expect_err("absent");
        assert!(err.contains("vibe-acp is not installed"), "{err}");
        assert!(err.contains("pip install mistral-vibe"), "{err}");
    }
}
