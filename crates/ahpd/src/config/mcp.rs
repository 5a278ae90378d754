//! The `mcpServers` key: checked with the MCP crate's own reading, so a wrong entry stops the
//! start naming the file and the key; a relative or `~` working folder is resolved against the
//! file's folder, as `paths` are.

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
    for spec in servers.values_mut() {
        if let ahpd_mcp::Transport::Stdio { cwd: Some(cwd), .. } = &mut spec.transport {
            *cwd = locations::resolve_path(&cwd.to_string_lossy(), base)?;
        }
    }
    Ok(servers)
}

/// What `ahpd config` shows of the servers: names, kinds, commands and URLs, and the names (never
/// the values) of their variables and headers.
pub(super) fn shown(servers: &ahpd_mcp::Servers) -> Value {
    let mut out = serde_json::Map::new();
    for (name, spec) in servers {
        let entry = match &spec.transport {
            ahpd_mcp::Transport::Stdio {
                command, args, env, ..
            } => json!({
                "type": "stdio", "command": command, "args": args,
                "env": env.keys().collect::<Vec<_>>(), "eager": spec.eager,
            }),
            ahpd_mcp::Transport::Http { url, headers } => json!({
                "type": "http", "url": url,
                "headers": headers.keys().collect::<Vec<_>>(), "eager": spec.eager,
            }),
        };
        out.insert(name.clone(), entry);
    }
    Value::Object(out)
}
