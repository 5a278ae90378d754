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

/// `ahpd mcp list`: the configured servers and, while the daemon runs, the state of each.
pub fn list(loc: &Locations, as_json: bool) -> Result<i32, ConfigError> {
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
        let target = match &spec.transport {
            ahpd_mcp::Transport::Stdio { command, args, .. } => std::iter::once(command.clone())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
            ahpd_mcp::Transport::Http { url, .. } => url.clone(),
        };
        let mut row =
            json!({ "name": name, "type": spec.kind(), "target": target, "eager": spec.eager });
        if let Some(state) = state_of(name) {
            row["status"] = state.get("status").cloned().unwrap_or(Value::Null);
            row["tools"] = state.get("tools").cloned().unwrap_or(Value::Null);
            if let Some(error) = state.get("error") {
                row["error"] = error.clone();
            }
        } else if live.is_some() {
            row["status"] = json!("not started");
        }
        rows.push(row);
    }
    if as_json {
        let out = json!({ "daemon": live.is_some(), "servers": rows });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no MCP servers are configured (mcpServers in the configuration file)");
        return Ok(0);
    }
    for row in &rows {
        let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let mut line = format!("{}\t{}\t{}", text("name"), text("type"), text("target"));
        match row.get("status").and_then(Value::as_str) {
            Some(status) => {
                line.push_str(&format!("\t{status}"));
                if let Some(n) = row.get("tools").and_then(Value::as_u64) {
                    line.push_str(&format!(", {n} tools"));
                }
                if let Some(e) = row.get("error").and_then(Value::as_str) {
                    line.push_str(&format!(": {e}"));
                }
            }
            None => line.push_str("\t(the daemon is not running)"),
        }
        println!("{line}");
    }
    Ok(0)
}
