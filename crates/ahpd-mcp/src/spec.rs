//! The `mcpServers` setting: one entry per server, checked whole before anything starts, so a
//! wrong entry is refused with the key that is wrong and no server of the list runs half
//! configured.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

/// The per-call time limit when an entry sets none.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting and the `initialize` handshake may take when an entry sets no limit.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A wrong entry: the key (`mcpServers.time.args[1]`) and what is wrong with it, never quoting a
/// value (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct SpecError {
    /// The dotted key, starting at the name the caller gave the whole setting.
    pub key: String,
    /// What is wrong, as one sentence.
    pub problem: String,
}

fn err(key: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        key: key.into(),
        problem: problem.into(),
    }
}

/// An environment or header value: written out, or a reference to a secret the daemon keeps.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum SecretValue {
    /// The value itself.
    Literal(String),
    /// `{"$secret": "<name>"}`: read from the vault each time the server starts.
    Secret(String),
}

// Either kind may be a secret: the value never reaches a log through Debug.
impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretValue::Literal(_) => f.write_str("Literal(..)"),
            SecretValue::Secret(name) => write!(f, "Secret({name})"),
        }
    }
}

/// How the daemon reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its working folder (else the daemon's).
        cwd: Option<PathBuf>,
        /// Variables set over the daemon's environment (less the secret-looking ones).
        env: BTreeMap<String, SecretValue>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, SecretValue>,
    },
}

/// Which of a server's tools run without asking a person.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Trust {
    /// Only the tools the server marks read-only; the rest ask like a command does.
    #[default]
    ReadOnly,
    /// Every tool of the server (`"trust": true`).
    All,
    /// These tools besides the read-only ones (`"allow": [...]`).
    Tools(BTreeSet<String>),
}

impl Trust {
    /// Whether calls of `tool` need no asking beyond what its annotations say.
    pub fn trusts(&self, tool: &str) -> bool {
        match self {
            Trust::ReadOnly => false,
            Trust::All => true,
            Trust::Tools(names) => names.contains(tool),
        }
    }
}

/// One checked entry of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    /// How to reach it.
    pub transport: Transport,
    /// Started with the daemon rather than with the first session that may use it.
    pub eager: bool,
    /// Which tools need no asking.
    pub trust: Trust,
    /// The time limit of one tool call.
    pub call_timeout: Duration,
    /// The time limit of connecting and the handshake.
    pub startup_timeout: Duration,
}

impl ServerSpec {
    /// `stdio` or `http`.
    pub fn kind(&self) -> &'static str {
        match self.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }

    /// Every secret name the entry refers to.
    pub fn secret_names(&self) -> Vec<&str> {
        let values = match &self.transport {
            Transport::Stdio { env, .. } => env.values(),
            Transport::Http { headers, .. } => headers.values(),
        };
        values
            .filter_map(|v| match v {
                SecretValue::Secret(name) => Some(name.as_str()),
                SecretValue::Literal(_) => None,
            })
            .collect()
    }

    /// Whether any environment or header value is written out rather than referenced.
    pub fn has_literal_values(&self) -> bool {
        let mut values = match &self.transport {
            Transport::Stdio { env, .. } => env.values(),
            Transport::Http { headers, .. } => headers.values(),
        };
        values.any(|v| matches!(v, SecretValue::Literal(_)))
    }
}

/// The checked servers, by name.
pub type Servers = BTreeMap<String, ServerSpec>;

/// Whether `name` may name a server: it becomes part of tool names (`mcp__<name>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks an `mcpServers` value; `key` is how errors name it (`mcpServers`,
/// `config.mcpServers`).
pub fn parse_servers(key: &str, value: &Value) -> Result<Servers, SpecError> {
    let Value::Object(map) = value else {
        return Err(err(key, "must be an object of server name to server"));
    };
    let mut out = Servers::new();
    for (name, entry) in map {
        let here = format!("{key}.{name}");
        if !valid_server_name(name) {
            return Err(err(
                here,
                "a server name is 1 to 32 letters, digits, '-' or '_', without '__'",
            ));
        }
        out.insert(name.clone(), parse_server(&here, entry)?);
    }
    Ok(out)
}

const STDIO_KEYS: &[&str] = &["type", "command", "args", "cwd", "env"];
const HTTP_KEYS: &[&str] = &["type", "url", "headers"];
const COMMON_KEYS: &[&str] = &["eager", "trust", "allow", "timeoutSec", "startupTimeoutSec"];

fn parse_server(key: &str, entry: &Value) -> Result<ServerSpec, SpecError> {
    let Value::Object(obj) = entry else {
        return Err(err(key, "must be an object"));
    };
    let kind = match obj.get("type") {
        None if obj.contains_key("url") => "http",
        None => "stdio",
        Some(Value::String(t)) if t == "stdio" => "stdio",
        Some(Value::String(t)) if t == "http" || t == "streamable-http" => "http",
        Some(_) => return Err(err(format!("{key}.type"), "must be \"stdio\" or \"http\"")),
    };
    let own = if kind == "stdio" {
        STDIO_KEYS
    } else {
        HTTP_KEYS
    };
    if let Some(other) = obj
        .keys()
        .find(|k| !own.contains(&k.as_str()) && !COMMON_KEYS.contains(&k.as_str()))
    {
        return Err(err(
            format!("{key}.{other}"),
            format!("is not a setting of a {kind} server"),
        ));
    }
    let transport = if kind == "stdio" {
        parse_stdio(key, obj)?
    } else {
        parse_http(key, obj)?
    };
    let eager = match obj.get("eager") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err(format!("{key}.eager"), "must be true or false")),
    };
    Ok(ServerSpec {
        transport,
        eager,
        trust: parse_trust(key, obj)?,
        call_timeout: seconds(key, obj, "timeoutSec")?.unwrap_or(DEFAULT_CALL_TIMEOUT),
        startup_timeout: seconds(key, obj, "startupTimeoutSec")?.unwrap_or(DEFAULT_STARTUP_TIMEOUT),
    })
}

fn parse_stdio(key: &str, obj: &Map<String, Value>) -> Result<Transport, SpecError> {
    let command = match obj.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        _ => {
            return Err(err(
                format!("{key}.command"),
                "a stdio server needs a non-empty command",
            ));
        }
    };
    let args = match obj.get("args") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| err(format!("{key}.args[{i}]"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(err(format!("{key}.args"), "must be an array of strings")),
    };
    let cwd = match obj.get("cwd") {
        None => None,
        Some(Value::String(c)) if !c.is_empty() => Some(PathBuf::from(c)),
        Some(_) => return Err(err(format!("{key}.cwd"), "must be a non-empty path")),
    };
    let env = values(&format!("{key}.env"), obj.get("env"), |name| {
        !name.is_empty() && !name.contains('=') && !name.contains('\0')
    })?;
    Ok(Transport::Stdio {
        command,
        args,
        cwd,
        env,
    })
}

fn parse_http(key: &str, obj: &Map<String, Value>) -> Result<Transport, SpecError> {
    let url = match obj.get("url") {
        Some(Value::String(u)) if u.starts_with("http://") || u.starts_with("https://") => {
            u.clone()
        }
        _ => {
            return Err(err(
                format!("{key}.url"),
                "an http server needs an http:// or https:// URL",
            ));
        }
    };
    let headers = values(&format!("{key}.headers"), obj.get("headers"), |name| {
        http::HeaderName::from_bytes(name.as_bytes()).is_ok()
    })?;
    Ok(Transport::Http { url, headers })
}

/// An object of name to a string or `{"$secret": "<name>"}`.
fn values(
    key: &str,
    value: Option<&Value>,
    name_ok: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, SecretValue>, SpecError> {
    let Some(value) = value else {
        return Ok(BTreeMap::new());
    };
    let Value::Object(map) = value else {
        return Err(err(key, "must be an object of name to value"));
    };
    let mut out = BTreeMap::new();
    for (name, v) in map {
        let here = format!("{key}.{name}");
        if !name_ok(name) {
            return Err(err(here, "is not a valid name"));
        }
        let parsed = match v {
            Value::String(s) => SecretValue::Literal(s.clone()),
            Value::Object(o) => match (o.len(), o.get("$secret")) {
                (1, Some(Value::String(n))) if !n.is_empty() => SecretValue::Secret(n.clone()),
                _ => return Err(err(here, "must be a string or {\"$secret\": \"<name>\"}")),
            },
            _ => return Err(err(here, "must be a string or {\"$secret\": \"<name>\"}")),
        };
        out.insert(name.clone(), parsed);
    }
    Ok(out)
}

fn parse_trust(key: &str, obj: &Map<String, Value>) -> Result<Trust, SpecError> {
    let all = match obj.get("trust") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err(format!("{key}.trust"), "must be true or false")),
    };
    let allow = match obj.get("allow") {
        None => BTreeSet::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| match a.as_str() {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(err(
                    format!("{key}.allow[{i}]"),
                    "must be the name of one of the server's tools",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(err(
                format!("{key}.allow"),
                "must be an array of tool names",
            ));
        }
    };
    Ok(if all {
        Trust::All
    } else if allow.is_empty() {
        Trust::ReadOnly
    } else {
        Trust::Tools(allow)
    })
}

fn seconds(key: &str, obj: &Map<String, Value>, name: &str) -> Result<Option<Duration>, SpecError> {
    match obj.get(name) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(err(
                format!("{key}.{name}"),
                "must be a number of seconds above 0 and at most 86400",
            )),
        },
    }
}

/// `over` merged over `base`: an entry of `over` replaces the whole entry of that name.
pub fn merge(base: &Servers, over: &Servers) -> Servers {
    let mut out = base.clone();
    for (name, spec) in over {
        out.insert(name.clone(), spec.clone());
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key_of(value: Value) -> String {
        match parse_servers("mcpServers", &value) {
            Err(e) => e.key,
            Ok(_) => "accepted".into(),
        }
    }

    #[test]
    fn wrong_entries_name_their_key() {
        assert_eq!(key_of(json!([])), "mcpServers");
        assert_eq!(key_of(json!({"a b": {"command": "x"}})), "mcpServers.a b");
        assert_eq!(
            key_of(json!({"t": {"type": "stdio"}})),
            "mcpServers.t.command"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "args": ["a", 3]}})),
            "mcpServers.t.args[1]"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "env": {"K": {"$secret": 1}}}})),
            "mcpServers.t.env.K"
        );
        assert_eq!(
            key_of(json!({"t": {"type": "http", "url": "ftp://x"}})),
            "mcpServers.t.url"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "comand": "y"}})),
            "mcpServers.t.comand"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "timeoutSec": 0}})),
            "mcpServers.t.timeoutSec"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "allow": [""]}})),
            "mcpServers.t.allow[0]"
        );
    }

    #[test]
    fn a_full_entry_reads_back() {
        let servers = parse_servers(
            "mcpServers",
            &json!({
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC", "K": {"$secret": "host:k"}}, "eager": true, "allow": ["get_current_time"], "timeoutSec": 5},
                "web": {"url": "https://example.test/mcp", "headers": {"Authorization": {"$secret": "host:tok"}}, "trust": true}
            }),
        )
        .unwrap();
        let time = &servers["time"];
        assert!(time.eager);
        assert!(time.trust.trusts("get_current_time"));
        assert!(!time.trust.trusts("convert_time"));
        assert_eq!(time.call_timeout, Duration::from_secs(5));
        assert_eq!(time.secret_names(), vec!["host:k"]);
        assert!(time.has_literal_values());
        assert_eq!(servers["web"].kind(), "http");
        assert_eq!(servers["web"].trust, Trust::All);
        assert!(!format!("{:?}", servers).contains("UTC"));
    }
}
