//! The configuration files: finding, parsing, checking and merging them, then the flags on top.
//!
//! Every known key is checked when its file is read, so a wrong value stops the start before
//! anything listens, with one line naming the file and the key. Unknown keys only warn, which
//! keeps the upstream daemon's files usable.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::args::RunArgs;
use crate::locations::{self, Locations, NoHome};
use crate::token::TOKEN_ENV;

mod keys;
mod mcp;

use crate::vault;
use keys::check_layer;
pub use keys::{file_list, read_object, secret_ref};

/// Default bind address.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// Default port.
pub const DEFAULT_PORT: u16 = 9187;
/// Default delta coalescing window.
pub const DEFAULT_DELTA_WINDOW_MS: u64 = 75;
/// Default `requestTimeoutSec`.
pub const DEFAULT_REQUEST_TIMEOUT_SEC: u64 = 60;
/// Default `loadedSessionCap`.
pub const DEFAULT_LOADED_SESSION_CAP: u64 = 64;
/// Default `idleUnloadSec`.
pub const DEFAULT_IDLE_UNLOAD_SEC: u64 = 600;
/// Default `headerTimeoutSec`.
pub const DEFAULT_HEADER_TIMEOUT_SEC: u64 = 10;
/// Default `pendingConnectionCap`.
pub const DEFAULT_PENDING_CONNECTION_CAP: u64 = 64;
/// Default `inFlightRequestCap`.
pub const DEFAULT_IN_FLIGHT_REQUEST_CAP: u64 = 256;

/// A configuration problem; every one exits with code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key of a file has a wrong value.
    #[error("{}: {key}: {problem}", file.display())]
    Key {
        /// The file that set it.
        file: PathBuf,
        /// The key, with indexes for array members (`paths[1]`).
        key: String,
        /// What is wrong, never quoting a secret.
        problem: String,
    },
    /// A file is missing, unreadable or not JSON.
    #[error("{}: {problem}", file.display())]
    File {
        /// The file.
        file: PathBuf,
        /// What is wrong (`line 7, column 3: expected ','`).
        problem: String,
    },
    /// A command-line problem the parser could not see.
    #[error("{0}")]
    Usage(String),
    /// No home folder.
    #[error(transparent)]
    NoHome(#[from] NoHome),
}

/// Where an effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// A configuration file.
    File(PathBuf),
    /// The command line.
    Flag,
    /// An environment variable.
    Env(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Flag => f.write_str("flag"),
            Source::Env(name) => write!(f, "environment ({name})"),
        }
    }
}

/// A value with its source.
#[derive(Debug, Clone)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Sourced<T> {
    fn default(value: T) -> Self {
        Sourced {
            value,
            source: Source::Default,
        }
    }
}

/// How connections are authenticated. With no token option, the default is the token file in
/// the configuration folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSetting {
    /// A literal token.
    Literal(vault::Secret),
    /// A token kept in the vault under this name.
    SecretRef(String),
    /// A token read from (or created in) this file.
    File(PathBuf),
    /// Explicitly no token.
    Without,
}

/// One entry of the `plugins` array.
#[derive(Debug, Clone)]
pub struct PluginEntry {
    /// The plugin's package name.
    pub name: String,
    /// The options the entry sets (merged over the plugin's defaults later).
    pub options: Map<String, Value>,
    /// `false` when the entry says `"enabled": false`.
    pub enabled: bool,
}

/// The effective configuration: files merged, then flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// Folders served.
    pub paths: Sourced<Vec<PathBuf>>,
    /// Bind address.
    pub host: Sourced<String>,
    /// Port.
    pub port: Sourced<u16>,
    /// Token choice.
    pub token: Sourced<TokenSetting>,
    /// Delta coalescing window.
    pub delta_window_ms: Sourced<u64>,
    /// How long a request may wait on an agent, in seconds.
    pub request_timeout_sec: Sourced<u64>,
    /// Unused sessions opened from the store kept open.
    pub loaded_session_cap: Sourced<u64>,
    /// Seconds an unused session opened from the store stays open.
    pub idle_unload_sec: Sourced<u64>,
    /// Seconds a connection has to send its request head.
    pub header_timeout_sec: Sourced<u64>,
    /// Connections that may wait at once without having shown the token.
    pub pending_connection_cap: Sourced<u64>,
    /// Requests one connection may have in flight at once.
    pub in_flight_request_cap: Sourced<u64>,
    /// The `plugins` array of the files.
    pub plugins: Sourced<Vec<PluginEntry>>,
    /// Web origins whose pages may connect (`allowedOrigins`).
    pub allowed_origins: Sourced<Vec<String>>,
    /// Files and folders never served as resources, besides the built-in ones (`resourceDeny`).
    pub resource_deny: Sourced<Vec<PathBuf>>,
    /// MCP servers (`mcpServers`), each file's entries merged by name over the earlier ones'.
    pub mcp_servers: Sourced<ahpd_mcp::Servers>,
}

/// Reads and merges the configuration files (no flags).
pub fn load(loc: &Locations) -> Result<Settings, ConfigError> {
    let mut settings = Settings {
        files: Vec::new(),
        paths: Sourced::default(vec![locations::home()?]),
        host: Sourced::default(DEFAULT_HOST.to_owned()),
        port: Sourced::default(DEFAULT_PORT),
        token: Sourced::default(TokenSetting::File(loc.token())),
        delta_window_ms: Sourced::default(DEFAULT_DELTA_WINDOW_MS),
        request_timeout_sec: Sourced::default(DEFAULT_REQUEST_TIMEOUT_SEC),
        loaded_session_cap: Sourced::default(DEFAULT_LOADED_SESSION_CAP),
        idle_unload_sec: Sourced::default(DEFAULT_IDLE_UNLOAD_SEC),
        header_timeout_sec: Sourced::default(DEFAULT_HEADER_TIMEOUT_SEC),
        pending_connection_cap: Sourced::default(DEFAULT_PENDING_CONNECTION_CAP),
        in_flight_request_cap: Sourced::default(DEFAULT_IN_FLIGHT_REQUEST_CAP),
        plugins: Sourced::default(Vec::new()),
        allowed_origins: Sourced::default(Vec::new()),
        resource_deny: Sourced::default(Vec::new()),
        mcp_servers: Sourced::default(ahpd_mcp::Servers::new()),
    };
    // Token keys across every file, so two of them in the merged result can be named together.
    let mut token_keys: Vec<(&'static str, PathBuf, TokenSetting)> = Vec::new();
    for (file, required) in file_list(loc) {
        let Some(map) = read_object(&file, required)? else {
            continue;
        };
        let mut layer = check_layer(&file, &map)?;
        for (key, setting) in std::mem::take(&mut layer.tokens) {
            // A later file's value for the same key replaces the earlier one.
            token_keys.retain(|(k, _, _)| *k != key);
            token_keys.push((key, file.clone(), setting));
        }
        settings.merge_layer(layer, &file);
        settings.files.push(file);
    }
    match token_keys.len() {
        0 => {}
        1 => {
            if let Some((_, file, setting)) = token_keys.pop() {
                settings.token = Sourced {
                    value: setting,
                    source: Source::File(file),
                };
            }
        }
        _ => {
            let named: Vec<String> = token_keys
                .iter()
                .map(|(k, f, _)| format!("{k} ({})", f.display()))
                .collect();
            return Err(ConfigError::Usage(format!(
                "{} are all set: keep one token option",
                named.join(", ")
            )));
        }
    }
    Ok(settings)
}

/// Puts `value`, read from `file`, in `slot` when the file sets it.
fn set_from<T>(slot: &mut Sourced<T>, value: Option<T>, file: &Path) {
    if let Some(value) = value {
        *slot = Sourced {
            value,
            source: Source::File(file.to_owned()),
        };
    }
}

impl Settings {
    /// Takes what one file sets (its token keys apart) over the earlier files' values.
    fn merge_layer(&mut self, layer: keys::Layer, file: &Path) {
        set_from(&mut self.paths, layer.paths, file);
        set_from(&mut self.host, layer.host, file);
        set_from(&mut self.port, layer.port, file);
        set_from(&mut self.delta_window_ms, layer.delta_window_ms, file);
        for (key, v) in layer.limits {
            let slot = match key {
                "requestTimeoutSec" => &mut self.request_timeout_sec,
                "loadedSessionCap" => &mut self.loaded_session_cap,
                "headerTimeoutSec" => &mut self.header_timeout_sec,
                "pendingConnectionCap" => &mut self.pending_connection_cap,
                "inFlightRequestCap" => &mut self.in_flight_request_cap,
                _ => &mut self.idle_unload_sec,
            };
            set_from(slot, Some(v), file);
        }
        set_from(&mut self.plugins, layer.plugins, file);
        set_from(&mut self.allowed_origins, layer.allowed_origins, file);
        set_from(&mut self.resource_deny, layer.resource_deny, file);
        let merged = layer
            .mcp_servers
            .map(|v| ahpd_mcp::spec::merge(&self.mcp_servers.value, &v));
        set_from(&mut self.mcp_servers, merged, file);
    }
}

impl Settings {
    /// Applies the command-line options over the files, key by key.
    pub fn apply_flags(&mut self, run: &RunArgs) -> Result<(), ConfigError> {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        self.apply_flags_in(run, &cwd)
    }

    /// [`apply_flags`](Self::apply_flags) for a command line given in the folder `cwd`, which
    /// its relative paths are resolved against: another process's recorded command line is
    /// read without touching this process's current folder, which every thread shares.
    pub fn apply_flags_in(&mut self, run: &RunArgs, cwd: &Path) -> Result<(), ConfigError> {
        if !run.paths.is_empty() {
            let mut paths = Vec::new();
            for p in &run.paths {
                let path = locations::resolve_path(&p.to_string_lossy(), cwd)?;
                if !path.is_dir() {
                    return Err(ConfigError::Usage(format!(
                        "--path {}: not an existing directory",
                        p.display()
                    )));
                }
                paths.push(path);
            }
            self.paths = Sourced {
                value: paths,
                source: Source::Flag,
            };
        }
        if let Some(host) = &run.host {
            if host.trim().is_empty() {
                return Err(ConfigError::Usage("--host: must not be empty".into()));
            }
            self.host = Sourced {
                value: host.clone(),
                source: Source::Flag,
            };
        }
        if let Some(port) = run.port {
            self.port = Sourced {
                value: port,
                source: Source::Flag,
            };
        }
        if let Some(ms) = run.delta_window_ms {
            self.delta_window_ms = Sourced {
                value: ms,
                source: Source::Flag,
            };
        }
        let token = if let Some(t) = &run.connection_token {
            if t.is_empty() {
                return Err(ConfigError::Usage(
                    "--connection-token: must not be empty".into(),
                ));
            }
            Some(TokenSetting::Literal(vault::Secret::new(t.clone())))
        } else if let Some(f) = &run.connection_token_file {
            Some(TokenSetting::File(locations::resolve_path(
                &f.to_string_lossy(),
                cwd,
            )?))
        } else if run.without_connection_token {
            Some(TokenSetting::Without)
        } else {
            None
        };
        if let Some(value) = token {
            self.token = Sourced {
                value,
                source: Source::Flag,
            };
        } else if let Some(t) = crate::environ::var(TOKEN_ENV).filter(|t| !t.is_empty()) {
            // Over the files, under the flags: a variable set for one run outranks what the
            // files say, as a flag would.
            self.token = Sourced {
                value: TokenSetting::Literal(vault::Secret::new(t)),
                source: Source::Env(TOKEN_ENV),
            };
        }
        Ok(())
    }

    /// The effective values as JSON rows `{key: {value, source}}`; secrets show as `<set>`.
    /// `mask` hides a plugin's write-only options (the plugins know which they are).
    pub fn describe(&self, mask: impl Fn(&str, &Value) -> Value) -> Map<String, Value> {
        let mut out = Map::new();
        let mut row = |key: &str, value: Value, source: &Source| {
            out.insert(
                key.to_owned(),
                serde_json::json!({"value": value, "source": source.to_string()}),
            );
        };
        row("paths", shown_paths(&self.paths.value), &self.paths.source);
        row(
            "host",
            Value::String(self.host.value.clone()),
            &self.host.source,
        );
        row("port", Value::from(self.port.value), &self.port.source);
        let (key, value) = self.token.value.shown();
        row(key, value, &self.token.source);
        row(
            "deltaWindowMs",
            Value::from(self.delta_window_ms.value),
            &self.delta_window_ms.source,
        );
        for (key, slot) in [
            ("requestTimeoutSec", &self.request_timeout_sec),
            ("loadedSessionCap", &self.loaded_session_cap),
            ("idleUnloadSec", &self.idle_unload_sec),
            ("headerTimeoutSec", &self.header_timeout_sec),
            ("pendingConnectionCap", &self.pending_connection_cap),
            ("inFlightRequestCap", &self.in_flight_request_cap),
        ] {
            row(key, Value::from(slot.value), &slot.source);
        }
        let plugins: Vec<Value> = self
            .plugins
            .value
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name,
                    "enabled": e.enabled,
                    "options": mask(&e.name, &Value::Object(e.options.clone())),
                })
            })
            .collect();
        row("plugins", Value::Array(plugins), &self.plugins.source);
        row(
            "allowedOrigins",
            Value::from(self.allowed_origins.value.clone()),
            &self.allowed_origins.source,
        );
        row(
            "resourceDeny",
            shown_paths(&self.resource_deny.value),
            &self.resource_deny.source,
        );
        row(
            "mcpServers",
            mcp::shown(&self.mcp_servers.value),
            &self.mcp_servers.source,
        );
        out
    }
}

/// Paths as `config` shows them.
fn shown_paths(paths: &[PathBuf]) -> Value {
    paths
        .iter()
        .map(|p| Value::String(p.display().to_string()))
        .collect()
}

impl TokenSetting {
    /// The key and value `config` shows for the token; a literal token shows as `<set>`.
    fn shown(&self) -> (&'static str, Value) {
        match self {
            TokenSetting::Literal(_) => ("connectionToken", Value::String("<set>".into())),
            TokenSetting::SecretRef(name) => {
                ("connectionToken", serde_json::json!({"$secret": name}))
            }
            TokenSetting::File(p) => (
                "connectionTokenFile",
                Value::String(p.display().to_string()),
            ),
            TokenSetting::Without => ("withoutConnectionToken", Value::Bool(true)),
        }
    }
}

/// Whether `host` names a loopback address: `127.0.0.0/8`, `::1` or `localhost`.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.eq_ignore_ascii_case("localhost") {
        return true;
    }
    bare.parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["0.0.0.0", "192.168.1.2", "example.com", "::"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
