//! The `mcpServers` key, read with the MCP crate's own reading: a value that is not an object
//! stops the start naming the file and the key; a wrong entry fails only its own server, with
//! the file and the key in its reason. A relative or `~` working folder is resolved against
//! the file's folder, as `paths` are.

use std::path::Path;

use serde_json::{Value, json};

use super::ConfigError;
use crate::locations;

pub(super) fn check(
    file: &Path,
    value: &Value,
    base: &Path,
) -> Result<ahpd_mcp::Servers, ConfigError> {
    let mut servers =
        ahpd_mcp::spec::parse_servers("mcpServers", value).map_err(|e| ConfigError::Key {
            file: file.to_path_buf(),
            key: e.key,
            problem: e.problem,
        })?;
    for (name, spec) in servers.iter_mut() {
        match &mut spec.transport {
            ahpd_mcp::Transport::Stdio { cwd: Some(cwd), .. } => {
                let raw = cwd.to_string_lossy().into_owned();
                // A folder written with a `${VAR}` is known only at the start.
                if raw.contains("${") {
                    continue;
                }
                match locations::resolve_path(&raw, base) {
                    Ok(resolved) => *cwd = resolved,
                    Err(e) => {
                        *spec = ahpd_mcp::ServerSpec::invalid(ahpd_mcp::SpecError {
                            key: format!("{}: mcpServers.{name}.cwd", file.display()),
                            problem: e.to_string(),
                        });
                    }
                }
            }
            ahpd_mcp::Transport::Invalid(e) => {
                // The reason names the file, as a refused start would.
                e.key = format!("{}: {}", file.display(), e.key);
            }
            _ => {}
        }
    }
    Ok(servers)
}

/// What `ahpd config` shows of the servers: names, kinds, commands and URLs as written (a
/// `${VAR}` stays a reference), the names (never the values) of their variables and headers,
/// and why an entry cannot be used.
pub(super) fn shown(servers: &ahpd_mcp::Servers) -> Value {
    let mut out = serde_json::Map::new();
    for (name, spec) in servers {
        let mut entry = match &spec.transport {
            ahpd_mcp::Transport::Stdio {
                command, args, env, ..
            } => json!({
                "type": "stdio", "command": command, "args": args,
                "env": env.keys().collect::<Vec<_>>(),
            }),
            ahpd_mcp::Transport::Http { url, headers }
            | ahpd_mcp::Transport::Sse { url, headers } => json!({
                "type": spec.kind(), "url": url,
                "headers": headers.keys().collect::<Vec<_>>(),
            }),
            ahpd_mcp::Transport::Invalid(_) => json!({ "type": "invalid" }),
        };
        entry["eager"] = json!(spec.eager);
        entry["enabled"] = json!(spec.enabled);
        if let Some(why) = spec.unusable() {
            entry["error"] = json!(why);
        }
        out.insert(name.clone(), entry);
    }
    Value::Object(out)
}
