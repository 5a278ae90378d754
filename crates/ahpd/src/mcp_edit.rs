//! `ahpd mcp add|remove|enable|disable`: editing the `mcpServers` of the base configuration
//! file the way `claude mcp add` and `codex mcp add` edit theirs. Each change reads the file,
//! changes the one entry and writes the file back whole (atomically, mode 0600: an entry may
//! hold a token), keeping every other key as it was. An entry is checked before it is written,
//! so a wrong one is refused with the sentence the daemon would fail it with.

use serde_json::{Map, Value, json};

use crate::cli::McpAddArgs;
use crate::commands::CommandError;
use crate::config;
use crate::fsutil;
use crate::locations::Locations;

const RESTART_HINT: &str = "a running daemon applies this at its next start (ahpd restart)";

/// The base file as an object (absent: empty).
fn read_base(loc: &Locations) -> Result<Map<String, Value>, CommandError> {
    Ok(config::read_object(&loc.base_file, false)?.unwrap_or_default())
}

fn write_base(loc: &Locations, map: Map<String, Value>) -> Result<(), CommandError> {
    fsutil::ensure_dir(&loc.dir)
        .map_err(|e| CommandError::Failed(format!("cannot create {}: {e}", loc.dir.display())))?;
    fsutil::write_json(&loc.base_file, &Value::Object(map), fsutil::PRIVATE_FILE)
        .map_err(|e| CommandError::Failed(format!("cannot write {}: {e}", loc.base_file.display())))
}

/// The base file's `mcpServers` object, made when absent.
fn servers_of(
    loc: &Locations,
    map: &mut Map<String, Value>,
) -> Result<Map<String, Value>, CommandError> {
    match map.remove("mcpServers") {
        None => Ok(Map::new()),
        Some(Value::Object(servers)) => Ok(servers),
        Some(_) => Err(CommandError::Usage(format!(
            "{}: mcpServers: must be an object of server name to server",
            loc.base_file.display()
        ))),
    }
}

fn not_there(loc: &Locations, name: &str) -> CommandError {
    CommandError::Usage(format!(
        "{} has no MCP server {name} (ahpd mcp list shows the configured ones)",
        loc.base_file.display()
    ))
}

/// Changes the base file's `mcpServers` with `change`, writing the file when it says it
/// changed something.
fn edit(
    loc: &Locations,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<bool, CommandError>,
) -> Result<bool, CommandError> {
    let mut map = read_base(loc)?;
    let mut servers = servers_of(loc, &mut map)?;
    let changed = change(&mut servers)?;
    if changed {
        map.insert("mcpServers".into(), Value::Object(servers));
        write_base(loc, map)?;
    }
    Ok(changed)
}

/// Checks `entry` as the daemon will read it: the sentence of a wrong one, as a usage error.
fn check_entry(name: &str, entry: &Value) -> Result<&'static str, CommandError> {
    if !ahpd_mcp::spec::valid_server_name(name) {
        return Err(CommandError::Usage(format!(
            "{name:?} cannot name a server: a server name is 1 to 32 letters, digits, '-' or '_', without '__'"
        )));
    }
    let spec = ahpd_mcp::spec::parse_server(&format!("mcpServers.{name}"), entry)
        .map_err(|e| CommandError::Usage(e.to_string()))?;
    Ok(spec.kind())
}

/// `KEY=value` into its two parts.
fn pair<'a>(raw: &'a str, sep: &str, what: &str) -> Result<(&'a str, &'a str), CommandError> {
    match raw.split_once(sep) {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v.trim_start())),
        _ => Err(CommandError::Usage(format!(
            "{what} must be written {}",
            if sep == "=" {
                "KEY=VALUE"
            } else {
                "\"Name: value\""
            }
        ))),
    }
}

/// The entry `ahpd mcp add`'s flags describe.
fn entry_of(args: &McpAddArgs) -> Result<Value, CommandError> {
    if let Some(text) = &args.json {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| CommandError::Usage(format!("--json is not JSON: {e}")))?;
        let Value::Object(mut entry) = value else {
            return Err(CommandError::Usage("--json must be a JSON object".into()));
        };
        flags_into(args, &mut entry);
        return Ok(Value::Object(entry));
    }
    let Some(first) = args.command.first() else {
        return Err(CommandError::Usage(
            "name the server's command (ahpd mcp add NAME -- COMMAND ARGS...) or URL (ahpd mcp add --transport http NAME URL)".into(),
        ));
    };
    let looks_like_url = first.starts_with("http://") || first.starts_with("https://");
    let kind = match args.transport.as_deref() {
        Some(kind) => kind,
        // A lone URL is an HTTP server, as `codex mcp add --url` makes one.
        None if looks_like_url && args.command.len() == 1 => "http",
        None => "stdio",
    };
    let mut entry = Map::new();
    if kind == "stdio" {
        if !args.header.is_empty() {
            return Err(CommandError::Usage(
                "--header is for http and sse servers; a stdio server takes --env".into(),
            ));
        }
        entry.insert("command".into(), json!(first));
        if args.command.len() > 1 {
            entry.insert("args".into(), json!(args.command[1..]));
        }
        let mut env = Map::new();
        for raw in &args.env {
            let (k, v) = pair(raw, "=", "--env")?;
            env.insert(k.to_owned(), json!(v));
        }
        if !env.is_empty() {
            entry.insert("env".into(), Value::Object(env));
        }
    } else {
        if args.command.len() > 1 {
            return Err(CommandError::Usage(format!(
                "an {kind} server takes one URL, not a command line"
            )));
        }
        if !args.env.is_empty() {
            return Err(CommandError::Usage(
                "--env is for stdio servers; an http or sse server takes --header".into(),
            ));
        }
        entry.insert("type".into(), json!(kind));
        entry.insert("url".into(), json!(first));
        let mut headers = Map::new();
        for raw in &args.header {
            let (k, v) = pair(raw, ":", "--header")?;
            headers.insert(k.to_owned(), json!(v));
        }
        if !headers.is_empty() {
            entry.insert("headers".into(), Value::Object(headers));
        }
    }
    flags_into(args, &mut entry);
    Ok(Value::Object(entry))
}

fn flags_into(args: &McpAddArgs, entry: &mut Map<String, Value>) {
    if args.trust {
        entry.insert("trust".into(), json!(true));
    }
    if !args.allow.is_empty() {
        entry.insert("allow".into(), json!(args.allow));
    }
    if args.eager {
        entry.insert("eager".into(), json!(true));
    }
}

/// `ahpd mcp add`.
pub fn add(loc: &Locations, args: &McpAddArgs) -> Result<i32, CommandError> {
    let entry = entry_of(args)?;
    let kind = check_entry(&args.name, &entry)?;
    let name = args.name.clone();
    edit(loc, |servers| {
        if servers.contains_key(&name) {
            return Err(CommandError::Usage(format!(
                "{} already has an MCP server {name}: remove it first (ahpd mcp remove {name})",
                loc.base_file.display()
            )));
        }
        servers.insert(name.clone(), entry);
        Ok(true)
    })?;
    println!(
        "added the {kind} MCP server {name} to {}; {RESTART_HINT}",
        loc.base_file.display()
    );
    Ok(0)
}

/// `ahpd mcp remove`.
pub fn remove(loc: &Locations, name: &str) -> Result<i32, CommandError> {
    edit(loc, |servers| {
        servers
            .remove(name)
            .map(|_| true)
            .ok_or_else(|| not_there(loc, name))
    })?;
    println!(
        "removed the MCP server {name} from {}; {RESTART_HINT}",
        loc.base_file.display()
    );
    Ok(0)
}

/// `ahpd mcp enable` (`on`) and `ahpd mcp disable`.
pub fn set_enabled(loc: &Locations, name: &str, on: bool) -> Result<i32, CommandError> {
    let changed = edit(loc, |servers| {
        let Some(entry) = servers.get_mut(name) else {
            return Err(not_there(loc, name));
        };
        let Value::Object(entry) = entry else {
            return Err(CommandError::Usage(format!(
                "{}: mcpServers.{name}: must be an object",
                loc.base_file.display()
            )));
        };
        let was = entry
            .get("enabled")
            .and_then(Value::as_bool)
            .unwrap_or(true)
            && !entry
                .get("disabled")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        // Codex's key; Cline's `disabled` gives way to it.
        entry.remove("disabled");
        if on {
            entry.remove("enabled");
        } else {
            entry.insert("enabled".into(), json!(false));
        }
        Ok(was != on)
    })?;
    let word = if on { "enabled" } else { "disabled" };
    if changed {
        println!(
            "{word} the MCP server {name} in {}; {RESTART_HINT}",
            loc.base_file.display()
        );
    } else {
        println!(
            "the MCP server {name} is already {word} in {}",
            loc.base_file.display()
        );
    }
    Ok(0)
}

/// VS Code writes a variable as `${env:NAME}`; the daemon reads `${NAME}`.
fn from_vscode(value: &mut Value) {
    match value {
        Value::String(s) => *s = s.replace("${env:", "${"),
        Value::Array(items) => items.iter_mut().for_each(from_vscode),
        Value::Object(map) => map.values_mut().for_each(from_vscode),
        _ => {}
    }
}

/// `ahpd mcp import FILE`: the servers of a Claude Code `.mcp.json` or settings file
/// (`mcpServers`) or of VS Code's `mcp.json` (`servers`) added to the base file. A name already
/// configured is left as it is; an entry the daemon would fail is left out, said with its
/// reason (exit code 2 when any was).
pub fn import(loc: &Locations, file: &std::path::Path) -> Result<i32, CommandError> {
    let shown = file.display().to_string();
    if file.extension().is_some_and(|e| e == "toml") {
        return Err(CommandError::Usage(format!(
            "{shown}: reading a Codex config.toml is not built yet; write its [mcp_servers.*] entries as JSON in mcpServers (the daemon reads Codex's keys)"
        )));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| CommandError::Usage(format!("{shown}: cannot read it: {e}")))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| CommandError::Usage(format!("{shown}: is not JSON: {e}")))?;
    let (found, vscode) = match (value.get("mcpServers"), value.get("servers")) {
        (Some(Value::Object(s)), _) => (s.clone(), false),
        (None, Some(Value::Object(s))) => (s.clone(), true),
        _ => {
            return Err(CommandError::Usage(format!(
                "{shown}: holds neither mcpServers (Claude Code) nor servers (VS Code)"
            )));
        }
    };
    let mut left_out = 0;
    let mut added = Vec::new();
    edit(loc, |servers| {
        for (name, mut entry) in found {
            if vscode {
                from_vscode(&mut entry);
            }
            if servers.contains_key(&name) {
                eprintln!("ahpd: {shown}: {name} is already configured; left as it is");
                continue;
            }
            match check_entry(&name, &entry) {
                Ok(_) => {
                    servers.insert(name.clone(), entry);
                    added.push(name);
                }
                Err(e) => {
                    left_out += 1;
                    eprintln!("ahpd: {shown}: {e} (left out)");
                }
            }
        }
        Ok(!added.is_empty())
    })?;
    if added.is_empty() {
        println!("no server was added from {shown}");
    } else {
        println!(
            "added {} from {shown} to {}; {RESTART_HINT}",
            added.join(", "),
            loc.base_file.display()
        );
    }
    Ok(if left_out > 0 { 2 } else { 0 })
}
