//! Reading one configuration file and checking its keys: every known key's value, and a
//! warning for each unknown one.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{ConfigError, PluginEntry, TokenSetting};
use crate::fsutil;
use crate::locations::{self, Locations};
use crate::vault;

/// One file's known keys, checked.
#[derive(Debug, Default)]
pub(super) struct Layer {
    pub(super) paths: Option<Vec<PathBuf>>,
    pub(super) host: Option<String>,
    pub(super) port: Option<u16>,
    pub(super) tokens: Vec<(&'static str, TokenSetting)>,
    pub(super) delta_window_ms: Option<u64>,
    /// `requestTimeoutSec`, `loadedSessionCap`, `idleUnloadSec`, `headerTimeoutSec`,
    /// `pendingConnectionCap`, `inFlightRequestCap`, by key.
    pub(super) limits: Vec<(&'static str, u64)>,
    pub(super) plugins: Option<Vec<PluginEntry>>,
    pub(super) allowed_origins: Option<Vec<String>>,
    pub(super) resource_deny: Option<Vec<PathBuf>>,
    pub(super) mcp_servers: Option<ahpd_mcp::Servers>,
}

const KNOWN_KEYS: &[&str] = &[
    "paths",
    "host",
    "port",
    "connectionToken",
    "connectionTokenFile",
    "withoutConnectionToken",
    "deltaWindowMs",
    "requestTimeoutSec",
    "loadedSessionCap",
    "idleUnloadSec",
    "headerTimeoutSec",
    "pendingConnectionCap",
    "inFlightRequestCap",
    "plugins",
    "allowedOrigins",
    "resourceDeny",
    "mcpServers",
];

/// The whole-number limits a file may set, with their ranges.
pub(super) const LIMITS: &[(&str, u64, u64)] = &[
    ("requestTimeoutSec", 1, 3_600),
    ("loadedSessionCap", 0, 100_000),
    ("idleUnloadSec", 10, 86_400),
    ("headerTimeoutSec", 1, 600),
    ("pendingConnectionCap", 1, 100_000),
    ("inFlightRequestCap", 1, 100_000),
];

/// Reads one file as a JSON object; `Ok(None)` when it is absent and `required` is false.
pub fn read_object(file: &Path, required: bool) -> Result<Option<Map<String, Value>>, ConfigError> {
    let read = crate::ownership::open_trusted(file, crate::ownership::Trusted::Config).and_then(
        |opened| match opened {
            Ok(mut f) => {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut f, &mut text)?;
                Ok(Ok(text))
            }
            Err(sentence) => Ok(Err(sentence)),
        },
    );
    let text = match read {
        Ok(Ok(t)) => t,
        Ok(Err(sentence)) => return Err(ConfigError::Usage(sentence)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        // A file where a folder of the path should be (a HOME that is not a folder, as in a
        // machine) means the optional file cannot exist either.
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory && !required => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ConfigError::File {
                file: file.to_path_buf(),
                problem: "no such file".into(),
            });
        }
        Err(e) => {
            return Err(ConfigError::File {
                file: file.to_path_buf(),
                problem: format!("cannot read it: {e}"),
            });
        }
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(_) => Err(ConfigError::File {
            file: file.to_path_buf(),
            problem: "must be a JSON object".into(),
        }),
        Err(e) => Err(ConfigError::File {
            file: file.to_path_buf(),
            problem: fsutil::json_problem(&e),
        }),
    }
}

/// The files to read, in order: the `--config-file`, or the base file then `$AHPD_CONFIG`.
/// Each is paired with whether it must exist.
pub fn file_list(loc: &Locations) -> Vec<(PathBuf, bool)> {
    if loc.explicit {
        return vec![(loc.base_file.clone(), true)];
    }
    let mut files = vec![(loc.base_file.clone(), false)];
    if let Some(extra) = std::env::var_os("AHPD_CONFIG").filter(|v| !v.is_empty()) {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        files.push((cwd.join(extra), true));
    }
    files
}

fn key_err(file: &Path, key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        file: file.to_path_buf(),
        key: key.into(),
        problem: problem.into(),
    }
}

fn dir_of(file: &Path) -> PathBuf {
    file.parent().map(Path::to_path_buf).unwrap_or_default()
}

pub(super) fn check_layer(file: &Path, map: &Map<String, Value>) -> Result<Layer, ConfigError> {
    let mut layer = Layer::default();
    let base = dir_of(file);
    for (key, value) in map {
        match key.as_str() {
            "paths" => layer.paths = Some(check_paths(file, value, &base)?),
            "host" => match value.as_str() {
                Some(h) if !h.trim().is_empty() => layer.host = Some(h.to_owned()),
                _ => return Err(key_err(file, "host", "must be a non-empty string")),
            },
            "port" => {
                let port = value
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| key_err(file, "port", "must be an integer from 0 to 65535"))?;
                layer.port = Some(port);
            }
            "requestTimeoutSec"
            | "loadedSessionCap"
            | "idleUnloadSec"
            | "headerTimeoutSec"
            | "pendingConnectionCap"
            | "inFlightRequestCap" => {
                if let Some(&(name, lo, hi)) = LIMITS.iter().find(|(k, _, _)| *k == key.as_str()) {
                    let v = value
                        .as_u64()
                        .filter(|v| (lo..=hi).contains(v))
                        .ok_or_else(|| {
                            key_err(file, name, format!("must be an integer from {lo} to {hi}"))
                        })?;
                    layer.limits.push((name, v));
                }
            }
            "deltaWindowMs" => {
                let ms = value.as_u64().filter(|ms| *ms <= 10_000).ok_or_else(|| {
                    key_err(file, "deltaWindowMs", "must be an integer from 0 to 10000")
                })?;
                layer.delta_window_ms = Some(ms);
            }
            "connectionToken" => layer
                .tokens
                .push(("connectionToken", check_token(file, value)?)),
            "connectionTokenFile" => {
                let raw = value
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| key_err(file, "connectionTokenFile", "must be a file path"))?;
                let path = locations::resolve_path(raw, &base)?;
                layer
                    .tokens
                    .push(("connectionTokenFile", TokenSetting::File(path)));
            }
            "withoutConnectionToken" => {
                let on = value.as_bool().ok_or_else(|| {
                    key_err(file, "withoutConnectionToken", "must be true or false")
                })?;
                if on {
                    layer
                        .tokens
                        .push(("withoutConnectionToken", TokenSetting::Without));
                }
            }
            "plugins" => layer.plugins = Some(check_plugins(file, value)?),
            "allowedOrigins" => layer.allowed_origins = Some(check_origins(file, value)?),
            "resourceDeny" => layer.resource_deny = Some(check_deny(file, value, &base)?),
            "mcpServers" => layer.mcp_servers = Some(super::mcp::check(file, value, &base)?),
            other => {
                debug_assert!(!KNOWN_KEYS.contains(&other));
                tracing::warn!("ahpd: {}: unknown key {other} (ignored)", file.display());
            }
        }
    }
    Ok(layer)
}

/// `paths`: existing folders, relative ones read from the file's folder.
fn check_paths(file: &Path, value: &Value, base: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(key_err(file, "paths", "must be an array of folder paths"));
    };
    let mut paths = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let key = format!("paths[{i}]");
        let raw = item
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| key_err(file, &key, "must be a folder path"))?;
        let path = locations::resolve_path(raw, base)?;
        if !path.is_dir() {
            return Err(key_err(
                file,
                &key,
                format!("{} is not an existing directory", path.display()),
            ));
        }
        paths.push(path);
    }
    Ok(paths)
}

/// `connectionToken`: the token itself, or a reference to it in the vault.
fn check_token(file: &Path, value: &Value) -> Result<TokenSetting, ConfigError> {
    let refused = || {
        key_err(
            file,
            "connectionToken",
            "must be a non-empty string or {\"$secret\": \"<name>\"}",
        )
    };
    match value {
        Value::String(s) if !s.is_empty() => {
            Ok(TokenSetting::Literal(vault::Secret::new(s.clone())))
        }
        Value::Object(_) => {
            let name = secret_ref(value).ok_or_else(refused)?;
            vault::check_name(name).map_err(|e| key_err(file, "connectionToken", e.to_string()))?;
            Ok(TokenSetting::SecretRef(name.to_owned()))
        }
        _ => Err(refused()),
    }
}

/// `resourceDeny`: paths, relative ones read from the file's folder.
fn check_deny(file: &Path, value: &Value, base: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(key_err(file, "resourceDeny", "must be an array of paths"));
    };
    let mut paths = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let raw = item
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| key_err(file, format!("resourceDeny[{i}]"), "must be a path"))?;
        paths.push(locations::resolve_path(raw, base)?);
    }
    Ok(paths)
}

/// `allowedOrigins`: web origins as browsers send them, `<scheme>://<host>[:<port>]`.
fn check_origins(file: &Path, value: &Value) -> Result<Vec<String>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(key_err(
            file,
            "allowedOrigins",
            "must be an array of origins such as \"https://vscode.dev\"",
        ));
    };
    let mut origins = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("allowedOrigins[{i}]");
        let origin = item.as_str().unwrap_or("");
        let well_formed = origin.split_once("://").is_some_and(|(scheme, rest)| {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
                && !rest.trim_end_matches('/').is_empty()
                && !rest.trim_end_matches('/').contains(['/', '?', '#'])
        });
        if !well_formed {
            return Err(key_err(
                file,
                at,
                "must be an origin <scheme>://<host>[:<port>], with no path",
            ));
        }
        if origin.contains('*') {
            return Err(key_err(
                file,
                at,
                "wildcards are not accepted: name each origin",
            ));
        }
        origins.push(origin.to_owned());
    }
    Ok(origins)
}

/// The name inside `{"$secret": "<name>"}`, when `value` is exactly that.
pub fn secret_ref(value: &Value) -> Option<&str> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.get("$secret")?.as_str()
}

fn check_plugins(file: &Path, value: &Value) -> Result<Vec<PluginEntry>, ConfigError> {
    let Value::Array(items) = value else {
        return Err(key_err(
            file,
            "plugins",
            "must be an array of plugin names or {\"name\", \"options\", \"enabled\"} objects",
        ));
    };
    let mut entries: Vec<PluginEntry> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("plugins[{i}]");
        let entry = match item {
            Value::String(name) if !name.is_empty() => PluginEntry {
                name: name.clone(),
                options: Map::new(),
                enabled: true,
            },
            Value::Object(obj) => {
                let name = obj
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| key_err(file, format!("{at}.name"), "must be a plugin name"))?;
                let options = match obj.get("options") {
                    None => Map::new(),
                    Some(Value::Object(o)) => o.clone(),
                    Some(_) => {
                        return Err(key_err(file, format!("{at}.options"), "must be an object"));
                    }
                };
                let enabled = match obj.get("enabled") {
                    None => true,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => {
                        return Err(key_err(
                            file,
                            format!("{at}.enabled"),
                            "must be true or false",
                        ));
                    }
                };
                for k in obj.keys() {
                    if !matches!(k.as_str(), "name" | "options" | "enabled") {
                        tracing::warn!("ahpd: {}: unknown key {at}.{k} (ignored)", file.display());
                    }
                }
                PluginEntry {
                    name: name.to_owned(),
                    options,
                    enabled,
                }
            }
            _ => {
                return Err(key_err(
                    file,
                    at,
                    "must be a plugin name or {\"name\", \"options\", \"enabled\"}",
                ));
            }
        };
        if entries.iter().any(|e| e.name == entry.name) {
            return Err(key_err(
                file,
                at,
                format!("{} appears twice; give each plugin one entry", entry.name),
            ));
        }
        entries.push(entry);
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer_of(text: &str) -> Result<Layer, ConfigError> {
        let map: Map<String, Value> = serde_json::from_str(text).expect("object");
        check_layer(Path::new("/cfg/config.json"), &map)
    }

    #[test]
    fn wrong_values_name_the_key() {
        let err = layer_of(r#"{"port": "x"}"#).expect_err("bad port");
        assert_eq!(
            err.to_string(),
            "/cfg/config.json: port: must be an integer from 0 to 65535"
        );
        let err = layer_of(r#"{"plugins": [{"name": "a", "enabled": 1}]}"#).expect_err("bad");
        assert_eq!(
            err.to_string(),
            "/cfg/config.json: plugins[0].enabled: must be true or false"
        );
        let err = layer_of(r#"{"plugins": ["a", "a"]}"#).expect_err("twice");
        assert!(err.to_string().contains("plugins[1]: a appears twice"));
        let err = layer_of(r#"{"connectionToken": 5}"#).expect_err("token");
        assert!(err.to_string().contains("connectionToken: must be"));
        let err = layer_of(r#"{"allowedOrigins": ["https://a.dev", "https://b.dev/x"]}"#)
            .expect_err("path in an origin");
        assert!(
            err.to_string()
                .starts_with("/cfg/config.json: allowedOrigins[1]: must be an origin"),
            "{err}"
        );
        let err = layer_of(r#"{"allowedOrigins": ["https://*.dev"]}"#).expect_err("wildcard");
        assert!(err.to_string().contains("wildcards"), "{err}");
        let err = layer_of(r#"{"resourceDeny": ["~/x", 3]}"#).expect_err("not a path");
        assert!(
            err.to_string().contains("resourceDeny[1]: must be a path"),
            "{err}"
        );
        let ok = layer_of(r#"{"allowedOrigins": ["https://vscode.dev"]}"#).expect("valid");
        assert_eq!(
            ok.allowed_origins,
            Some(vec!["https://vscode.dev".to_owned()])
        );
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("work")).expect("mkdir");
        let file = dir.path().join("config.json");
        let map: Map<String, Value> =
            serde_json::from_str(r#"{"paths": ["work"], "connectionTokenFile": "t"}"#)
                .expect("object");
        let layer = check_layer(&file, &map).expect("valid");
        assert_eq!(layer.paths, Some(vec![dir.path().join("work")]));
        assert_eq!(
            layer.tokens,
            vec![(
                "connectionTokenFile",
                TokenSetting::File(dir.path().join("t"))
            )]
        );
        let map: Map<String, Value> =
            serde_json::from_str(r#"{"paths": ["work", "gone"]}"#).expect("object");
        let err = check_layer(&file, &map).expect_err("missing folder");
        assert!(err.to_string().contains(": paths[1]: "));
    }
}
