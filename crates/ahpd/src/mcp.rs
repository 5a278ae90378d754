//! The daemon's MCP servers: the hub built from `mcpServers` (secrets read from the vault each
//! time a server starts), the status file a running daemon keeps for `ahpd mcp list`, and that
//! command.
//!
//! The status file (`mcp.json` in the configuration folder) holds each server's name, kind,
//! state, failure sentence and tool count: nothing secret. It is rewritten whenever a state
//! changes and read only while the daemon record names a live daemon.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::config::{self, ConfigError, Settings};
use crate::locations::Locations;
use crate::vault::Vault;

/// The status file's name in the configuration folder.
pub const STATUS_FILE: &str = "mcp.json";

/// The hub of the configured servers; nothing starts until a session or [`ahpd_mcp::McpHub::start_eager`].
pub fn hub(settings: &Settings, vault: &Vault) -> ahpd_mcp::McpHub {
    let vault = vault.clone();
    let secrets: ahpd_mcp::SecretResolver = Arc::new(move |name: &str| {
        vault
            .read(name)
            .map(|s| s.expose().to_owned())
            .map_err(|e| e.to_string())
    });
    ahpd_mcp::McpHub::new(settings.mcp_servers.value.clone(), secrets)
}

/// Keeps the status file current while the daemon runs.
pub fn report_status(hub: ahpd_mcp::McpHub, path: PathBuf) {
    tokio::spawn(async move {
        let mut changes = hub.changes();
        loop {
            let report = json!({ "pid": std::process::id(), "servers": hub.report() });
            if let Err(e) = crate::fsutil::write_json(&path, &report, 0o600) {
                tracing::warn!("cannot write {}: {e}", path.display());
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Each configured server's row: its entry and, while the daemon runs, its state; and whether
/// the daemon runs.
fn rows(loc: &Locations) -> Result<(bool, Vec<Value>), ConfigError> {
    let settings = config::load(loc)?;
    let live = crate::process::running(loc).and_then(|record| {
        let text = std::fs::read_to_string(loc.dir.join(STATUS_FILE)).ok()?;
        let value: Value = serde_json::from_str(&text).ok()?;
        (value.get("pid").and_then(Value::as_u64) == Some(u64::from(record.pid)))
            .then(|| value.get("servers").cloned())
            .flatten()
    });
    let state_of = |name: &str| -> Option<Value> {
        live.as_ref()?
            .as_array()?
            .iter()
            .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
    };
    let mut rows = Vec::new();
    for (name, spec) in &settings.mcp_servers.value {
        let mut row = json!({ "name": name, "type": spec.kind(), "target": spec.target(), "eager": spec.eager, "enabled": spec.enabled });
        if !spec.enabled {
            row["status"] = json!("disabled");
        } else if let Some(why) = spec.unusable() {
            // Known without the daemon: the entry itself says it cannot start.
            row["status"] = json!("failed");
            row["error"] = json!(why);
        } else if let Some(state) = state_of(name) {
            row["status"] = state.get("status").cloned().unwrap_or(Value::Null);
            row["tools"] = state.get("tools").cloned().unwrap_or(Value::Null);
            if let Some(error) = state.get("error") {
                row["error"] = error.clone();
            }
        } else if live.is_some() {
            row["status"] = json!("not started");
        }
        if let Some(extra) = detail(spec) {
            row["detail"] = extra;
        }
        rows.push(row);
    }
    Ok((live.is_some(), rows))
}

/// What else an entry says: the names (never the values) of its variables and headers, which
/// tools run without asking and which are offered.
fn detail(spec: &ahpd_mcp::ServerSpec) -> Option<Value> {
    let names = |m: &std::collections::BTreeMap<String, ahpd_mcp::SecretValue>| {
        m.keys().cloned().collect::<Vec<_>>()
    };
    let mut out = match &spec.transport {
        ahpd_mcp::Transport::Stdio { env, cwd, .. } => {
            json!({ "env": names(env), "cwd": cwd.as_ref().map(|c| c.display().to_string()) })
        }
        ahpd_mcp::Transport::Http { headers, .. } | ahpd_mcp::Transport::Sse { headers, .. } => {
            json!({ "headers": names(headers) })
        }
        ahpd_mcp::Transport::Invalid(_) => return None,
    };
    out["trust"] = match &spec.trust {
        ahpd_mcp::Trust::ReadOnly => json!("ask"),
        ahpd_mcp::Trust::All => json!("all"),
        ahpd_mcp::Trust::Tools(tools) => json!(tools),
    };
    if let Some(only) = &spec.tools.only {
        out["enabledTools"] = json!(only);
    }
    if !spec.tools.never.is_empty() {
        out["disabledTools"] = json!(spec.tools.never);
    }
    out["toolTimeoutSec"] = json!(spec.call_timeout.as_secs_f64());
    out["startupTimeoutSec"] = json!(spec.startup_timeout.as_secs_f64());
    Some(out)
}

/// `ahpd mcp get NAME`.
pub fn get(loc: &Locations, name: &str, as_json: bool) -> Result<i32, ConfigError> {
    let (_, rows) = rows(loc)?;
    let Some(row) = rows
        .into_iter()
        .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
    else {
        return Err(ConfigError::Usage(format!(
            "no MCP server {name} is configured (ahpd mcp list shows the configured ones)"
        )));
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&row).unwrap_or_default());
        return Ok(0);
    }
    println!("{}", line_of(&row));
    if let Some(Value::Object(detail)) = row.get("detail") {
        for (k, v) in detail {
            let shown = match v {
                Value::Null => continue,
                Value::Array(items) if items.is_empty() => "(none)".to_owned(),
                Value::Array(items) => items
                    .iter()
                    .map(|i| i.as_str().unwrap_or_default().to_owned())
                    .collect::<Vec<_>>()
                    .join(", "),
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            println!("  {k}: {}", printable(&shown).replace('\n', " "));
        }
    }
    Ok(0)
}

/// `ahpd mcp list`: the configured servers and, while the daemon runs, the state of each.
pub fn list(loc: &Locations, as_json: bool) -> Result<i32, ConfigError> {
    let (live, rows) = rows(loc)?;
    if as_json {
        let out = json!({ "daemon": live, "servers": rows });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no MCP servers are configured (mcpServers in the configuration file)");
        return Ok(0);
    }
    for row in &rows {
        println!("{}", line_of(row));
    }
    Ok(0)
}

/// A server's line: name, kind, command or URL, state (with tools and reason).
fn line_of(row: &Value) -> String {
    let text =
        |k: &str| printable(row.get(k).and_then(Value::as_str).unwrap_or("")).replace('\n', " ");
    // Names, commands and reasons come from a file and from servers: never raw to a terminal.
    let mut line = format!("{}\t{}\t{}", text("name"), text("type"), text("target"));
    match row.get("status").and_then(Value::as_str) {
        Some(status) => {
            line.push_str(&format!("\t{status}"));
            if let Some(n) = row.get("tools").and_then(Value::as_u64) {
                line.push_str(&format!(", {n} tools"));
            }
            if row.get("error").is_some() {
                line.push_str(&format!(": {}", text("error")));
            }
        }
        None => line.push_str("\t(the daemon is not running)"),
    }
    line
}

/// A line safe for a terminal: control characters (escape sequences among them, and line
/// breaks) shown as `\u{…}` rather than sent.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
