//! Reading entries: Claude Code's and Codex's field names, each value checked, the wrong key
//! named in the error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, SecretValue, ServerSpec, Servers, SpecError,
    ToolFilter, Transport, Trust, err,
};

/// Whether `name` may name a server: it becomes part of tool names (`mcp__<name>__<tool>`).
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Reads an `mcpServers` value; `key` is how errors name it (`mcpServers`,
/// `config.mcpServers`). Only a value that is not an object is refused whole: a wrong entry
/// becomes a server that fails with its reason ([`Transport::Invalid`]), so the others run.
pub fn parse_servers(key: &str, value: &Value) -> Result<Servers, SpecError> {
    let Value::Object(map) = value else {
        return Err(err(key, "must be an object of server name to server"));
    };
    let mut out = Servers::new();
    for (name, entry) in map {
        let here = format!("{key}.{name}");
        let spec = if valid_server_name(name) {
            parse_server(&here, entry).unwrap_or_else(ServerSpec::invalid)
        } else {
            ServerSpec::invalid(err(
                here,
                "a server name is 1 to 32 letters, digits, '-' or '_', without '__'",
            ))
        };
        out.insert(name.clone(), spec);
    }
    Ok(out)
}

/// The settings of a stdio server, of an HTTP (or SSE) one, and of both. Claude Code's names
/// and Codex's are both read.
const STDIO_KEYS: &[&str] = &["type", "command", "args", "cwd", "env", "env_vars"];
const HTTP_KEYS: &[&str] = &[
    "type",
    "url",
    "headers",
    "http_headers",
    "env_http_headers",
    "bearer_token_env_var",
];
const COMMON_KEYS: &[&str] = &[
    "enabled",
    "disabled",
    "eager",
    "trust",
    "allow",
    "enabled_tools",
    "disabled_tools",
    "timeoutSec",
    "tool_timeout_sec",
    "startupTimeoutSec",
    "startup_timeout_sec",
    "startup_timeout_ms",
];

/// Reads one entry, or says which of its keys is wrong.
pub fn parse_server(key: &str, entry: &Value) -> Result<ServerSpec, SpecError> {
    let Value::Object(obj) = entry else {
        return Err(err(key, "must be an object"));
    };
    let kind = match obj.get("type") {
        None if obj.contains_key("url") => "http",
        None => "stdio",
        Some(Value::String(t)) if t == "stdio" => "stdio",
        Some(Value::String(t)) if t == "http" || t == "streamable-http" => "http",
        Some(Value::String(t)) if t == "sse" => "sse",
        Some(_) => {
            return Err(err(
                format!("{key}.type"),
                "must be \"stdio\", \"http\" or \"sse\"",
            ));
        }
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
        let mut known: Vec<&str> = own.iter().chain(COMMON_KEYS).copied().collect();
        known.sort_unstable();
        return Err(err(
            format!("{key}.{other}"),
            format!(
                "is not a setting of a {kind} server (these are: {})",
                known.join(", ")
            ),
        ));
    }
    for (name, value) in obj {
        check_references(&format!("{key}.{name}"), value)?;
    }
    let transport = match kind {
        "stdio" => parse_stdio(key, obj)?,
        _ => {
            let (url, headers) = parse_http(key, obj)?;
            if kind == "sse" {
                Transport::Sse { url, headers }
            } else {
                Transport::Http { url, headers }
            }
        }
    };
    let flag = |name: &str| -> Result<Option<bool>, SpecError> {
        match obj.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(err(format!("{key}.{name}"), "must be true or false")),
        }
    };
    let enabled = match (flag("enabled")?, flag("disabled")?) {
        (Some(e), Some(d)) if e == d => {
            return Err(err(
                format!("{key}.disabled"),
                "contradicts enabled: set only one of them",
            ));
        }
        (Some(e), _) => e,
        (None, Some(d)) => !d,
        (None, None) => true,
    };
    Ok(ServerSpec {
        transport,
        enabled,
        eager: flag("eager")?.unwrap_or(false),
        trust: parse_trust(key, obj)?,
        tools: ToolFilter {
            only: names(key, obj, "enabled_tools")?,
            never: names(key, obj, "disabled_tools")?.unwrap_or_default(),
        },
        call_timeout: one_limit(key, obj, &[("timeoutSec", 1.0), ("tool_timeout_sec", 1.0)])?
            .unwrap_or(DEFAULT_CALL_TIMEOUT),
        startup_timeout: one_limit(
            key,
            obj,
            &[
                ("startupTimeoutSec", 1.0),
                ("startup_timeout_sec", 1.0),
                ("startup_timeout_ms", 0.001),
            ],
        )?
        .unwrap_or(DEFAULT_STARTUP_TIMEOUT),
        variables: true,
    })
}

/// Every string under `value` has well-formed `${VAR}` references.
fn check_references(key: &str, value: &Value) -> Result<(), SpecError> {
    match value {
        Value::String(s) => crate::expand::check(s).map_err(|problem| err(key, problem)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_references(&format!("{key}[{i}]"), v)),
        Value::Object(map) => map
            .iter()
            .try_for_each(|(k, v)| check_references(&format!("{key}.{k}"), v)),
        _ => Ok(()),
    }
}

fn strings(key: &str, value: Option<&Value>) -> Result<Vec<String>, SpecError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| err(format!("{key}[{i}]"), "must be a string"))
            })
            .collect(),
        Some(_) => Err(err(key, "must be an array of strings")),
    }
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
    let args = strings(&format!("{key}.args"), obj.get("args"))?;
    let cwd = match obj.get("cwd") {
        None => None,
        Some(Value::String(c)) if !c.is_empty() => Some(PathBuf::from(c)),
        Some(_) => return Err(err(format!("{key}.cwd"), "must be a non-empty path")),
    };
    let env_name = |name: &str| !name.is_empty() && !name.contains('=') && !name.contains('\0');
    let env = values(&format!("{key}.env"), obj.get("env"), env_name)?;
    let env_vars = strings(&format!("{key}.env_vars"), obj.get("env_vars"))?;
    if let Some(i) = env_vars.iter().position(|n| !env_name(n)) {
        return Err(err(
            format!("{key}.env_vars[{i}]"),
            "must be the name of a variable",
        ));
    }
    Ok(Transport::Stdio {
        command,
        args,
        cwd,
        env,
        env_vars,
    })
}

/// The URL and the headers of an HTTP or SSE entry: `headers` (Claude Code) or `http_headers`
/// (Codex), with Codex's `env_http_headers` and `bearer_token_env_var` read as the
/// `${VAR}` references they stand for.
fn parse_http(
    key: &str,
    obj: &Map<String, Value>,
) -> Result<(String, BTreeMap<String, SecretValue>), SpecError> {
    let url = match obj.get("url") {
        Some(Value::String(u))
            if u.starts_with("http://")
                || u.starts_with("https://")
                || (crate::expand::refers(u) && u.starts_with("${")) =>
        {
            u.clone()
        }
        _ => {
            return Err(err(
                format!("{key}.url"),
                "an http server needs an http:// or https:// URL",
            ));
        }
    };
    let header_ok = |name: &str| http::HeaderName::from_bytes(name.as_bytes()).is_ok();
    let mut headers = values(&format!("{key}.headers"), obj.get("headers"), header_ok)?;
    let codex = values(
        &format!("{key}.http_headers"),
        obj.get("http_headers"),
        header_ok,
    )?;
    headers.extend(codex);
    let from_env = values(
        &format!("{key}.env_http_headers"),
        obj.get("env_http_headers"),
        header_ok,
    )?;
    for (name, var) in from_env {
        let SecretValue::Literal(var) = var else {
            return Err(err(
                format!("{key}.env_http_headers.{name}"),
                "must name a variable of the daemon's environment",
            ));
        };
        headers.insert(name, SecretValue::Literal(format!("${{{var}}}")));
    }
    match obj.get("bearer_token_env_var") {
        None => {}
        Some(Value::String(var))
            if !var.is_empty() && crate::expand::check(&format!("${{{var}}}")).is_ok() =>
        {
            headers.insert(
                "Authorization".into(),
                SecretValue::Literal(format!("Bearer ${{{var}}}")),
            );
        }
        Some(_) => {
            return Err(err(
                format!("{key}.bearer_token_env_var"),
                "must name a variable of the daemon's environment",
            ));
        }
    }
    Ok((url, headers))
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

/// A list of tool names (`allow`, `enabled_tools`, `disabled_tools`).
fn names(
    key: &str,
    obj: &Map<String, Value>,
    name: &str,
) -> Result<Option<BTreeSet<String>>, SpecError> {
    match obj.get(name) {
        None => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| match a.as_str() {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(err(
                    format!("{key}.{name}[{i}]"),
                    "must be the name of one of the server's tools",
                )),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(err(
            format!("{key}.{name}"),
            "must be an array of tool names",
        )),
    }
}

fn parse_trust(key: &str, obj: &Map<String, Value>) -> Result<Trust, SpecError> {
    let all = match obj.get("trust") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err(format!("{key}.trust"), "must be true or false")),
    };
    let allow = names(key, obj, "allow")?.unwrap_or_default();
    Ok(if all {
        Trust::All
    } else if allow.is_empty() {
        Trust::ReadOnly
    } else {
        Trust::Tools(allow)
    })
}

/// The one of `names` the entry sets (each with the factor to seconds), as a duration.
fn one_limit(
    key: &str,
    obj: &Map<String, Value>,
    names: &[(&str, f64)],
) -> Result<Option<Duration>, SpecError> {
    let set: Vec<&(&str, f64)> = names.iter().filter(|(n, _)| obj.contains_key(*n)).collect();
    let Some(&&(name, factor)) = set.first() else {
        return Ok(None);
    };
    if let Some((other, _)) = set.get(1) {
        return Err(err(
            format!("{key}.{other}"),
            format!("sets the same limit as {name}: set only one of them"),
        ));
    }
    match obj.get(name).and_then(Value::as_f64).map(|v| v * factor) {
        Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Some(Duration::from_secs_f64(s))),
        _ => Err(err(
            format!("{key}.{name}"),
            if factor == 1.0 {
                "must be a number of seconds above 0 and at most 86400"
            } else {
                "must be a number of milliseconds above 0 and at most 86400000"
            },
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key_of(value: Value) -> String {
        match parse_servers("mcpServers", &value) {
            Err(e) => e.key,
            Ok(servers) => servers
                .values()
                .find_map(|s| match &s.transport {
                    Transport::Invalid(e) => Some(e.key.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| "accepted".into()),
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
        assert_eq!(
            key_of(json!({"t": {"command": "x", "args": ["${A"]}})),
            "mcpServers.t.args[0]"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "enabled": true, "disabled": true}})),
            "mcpServers.t.disabled"
        );
        assert_eq!(
            key_of(json!({"t": {"command": "x", "timeoutSec": 1, "tool_timeout_sec": 2}})),
            "mcpServers.t.tool_timeout_sec"
        );
        assert_eq!(
            key_of(json!({"t": {"type": "ws", "url": "ws://x"}})),
            "mcpServers.t.type"
        );
    }

    #[test]
    fn a_wrong_entry_fails_alone() {
        let servers = parse_servers(
            "mcpServers",
            &json!({
                "good": {"command": "x"},
                "typo": {"command": "x", "comand": "y"},
                "a b": {"command": "x"}
            }),
        )
        .unwrap();
        assert_eq!(servers["good"].kind(), "stdio");
        assert!(servers["good"].unusable().is_none());
        let typo = servers["typo"].unusable().unwrap();
        assert!(
            typo.starts_with("mcpServers.typo.comand: is not a setting of a stdio server"),
            "{typo}"
        );
        assert!(servers["a b"].unusable().is_some());
    }

    #[test]
    fn claude_code_and_codex_shapes_read_alike() {
        let servers = parse_servers(
            "mcpServers",
            &json!({
                "claude": {"type": "http", "url": "${API_BASE_URL:-https://api.example.com}/mcp",
                           "headers": {"Authorization": "Bearer ${API_KEY}"}},
                "codex": {"url": "https://api.example.com/mcp", "bearer_token_env_var": "API_KEY",
                          "enabled": false, "enabled_tools": ["a", "b"], "disabled_tools": ["b"],
                          "startup_timeout_ms": 2500, "tool_timeout_sec": 7},
                "old": {"type": "sse", "url": "https://api.example.com/sse"},
                "local": {"command": "npx", "args": ["-y", "pkg"], "env_vars": ["GITHUB_TOKEN"], "disabled": true}
            }),
        )
        .unwrap();
        let codex = &servers["codex"];
        assert!(!codex.enabled);
        assert!(codex.tools.offers("a") && !codex.tools.offers("b") && !codex.tools.offers("c"));
        assert_eq!(codex.startup_timeout, Duration::from_millis(2500));
        assert_eq!(codex.call_timeout, Duration::from_secs(7));
        let (Transport::Http { headers: a, .. }, Transport::Http { headers: b, .. }) =
            (&servers["claude"].transport, &codex.transport)
        else {
            panic!("both are http")
        };
        assert_eq!(a, b);
        assert_eq!(servers["old"].kind(), "sse");
        assert!(servers["old"].unusable().unwrap().contains("HTTP+SSE"));
        assert!(!servers["local"].enabled);
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
        assert!(!time.trust.believes_hints());
        assert!(servers["web"].trust.believes_hints());
        assert!(!time.trust.trusts("convert_time"));
        assert_eq!(time.call_timeout, Duration::from_secs(5));
        assert_eq!(time.secret_names(), vec!["host:k"]);
        assert!(time.has_literal_values());
        assert_eq!(servers["web"].kind(), "http");
        assert_eq!(servers["web"].trust, Trust::All);
        assert!(!format!("{:?}", servers).contains("UTC"));
    }
}
