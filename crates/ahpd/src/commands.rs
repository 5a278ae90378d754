//! The one-shot commands: `config`, `token`, `plugin …`, `vault …`, `completion`.

use std::io::{IsTerminal, Read};

use serde_json::{Map, Value, json};

use crate::args::{PluginCommand, VaultCommand};
use crate::config::{self, ConfigError};
use crate::fsutil;
use crate::locations::Locations;
use crate::plugins::{self, options};
use crate::vault::{self, Secret, Vault, VaultError};

/// A command's failure with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// Configuration problem (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Usage problem (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Runtime failure (exit 1).
    #[error("{0}")]
    Failed(String),
}

impl CommandError {
    /// The exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandError::Config(_) | CommandError::Usage(_) => 2,
            CommandError::Failed(_) => 1,
        }
    }
}

impl From<VaultError> for CommandError {
    fn from(e: VaultError) -> Self {
        match e {
            VaultError::BadName(_) => CommandError::Usage(e.to_string()),
            _ => CommandError::Failed(e.to_string()),
        }
    }
}

const RESTART_HINT: &str = "a running daemon applies this at its next start (ahpd restart)";

/// `ahpd config`.
pub fn show_config(loc: &Locations, as_json: bool) -> Result<(), CommandError> {
    let settings = config::load(loc)?;
    let values = settings.describe(plugins::mask_secrets_of);
    let files: Vec<String> = settings
        .files
        .iter()
        .map(|f| f.display().to_string())
        .collect();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"files": files, "values": values}))
                .unwrap_or_default()
        );
        return Ok(());
    }
    println!("files read:");
    if files.is_empty() {
        println!(
            "  (none; defaults apply; the base file is {})",
            loc.base_file.display()
        );
    }
    for f in &files {
        println!("  {f}");
    }
    println!("values:");
    for (key, row) in &values {
        println!(
            "  {key} = {}  ({})",
            row["value"],
            row["source"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// `ahpd token`: the running daemon's address and token, or else those the configuration
/// gives (the token file is made when missing, as the daemon's first start would).
pub fn token(loc: &Locations, url_only: bool) -> Result<(), CommandError> {
    let (address, token) = match crate::process::running(loc) {
        Some(record) => {
            let token = crate::process::token_for(loc, &record);
            (record.address, token)
        }
        None => {
            let mut settings = config::load(loc)?;
            settings.apply_flags(&crate::args::RunArgs::default())?;
            let address = format!(
                "ws://{}:{}",
                crate::serve::url_host(&settings.host.value),
                settings.port.value
            );
            let token = match &settings.token.value {
                config::TokenSetting::Without => None,
                config::TokenSetting::Literal(s) => Some(s.expose().to_owned()),
                config::TokenSetting::SecretRef(name) => {
                    Some(Vault::new(loc.vault()).read(name)?.expose().to_owned())
                }
                config::TokenSetting::File(p) => Some(
                    crate::token::read_or_create(p)
                        .map_err(|e| CommandError::Failed(e.to_string()))?,
                ),
            };
            (address, token)
        }
    };
    if url_only {
        println!(
            "{}",
            crate::token::url_with_token(&address, token.as_deref())
        );
        return Ok(());
    }
    let entry = crate::token::vscode_entry(&address, token.as_deref());
    println!(
        "{}",
        serde_json::to_string_pretty(&entry).unwrap_or_default()
    );
    if std::io::stderr().is_terminal() {
        eprintln!("add this entry to the chat.remoteAgentHosts list in VS Code's settings.json");
    }
    Ok(())
}

/// Reads the base file as an object for editing (absent → empty).
fn read_base(loc: &Locations) -> Result<Map<String, Value>, CommandError> {
    Ok(config::read_object(&loc.base_file, false)?.unwrap_or_default())
}

fn write_base(loc: &Locations, map: Map<String, Value>) -> Result<(), CommandError> {
    fsutil::ensure_dir(&loc.dir)
        .map_err(|e| CommandError::Failed(format!("cannot create {}: {e}", loc.dir.display())))?;
    let mode = fsutil::mode_of(&loc.base_file).unwrap_or(fsutil::PRIVATE_FILE);
    fsutil::write_json(&loc.base_file, &Value::Object(map), mode)
        .map_err(|e| CommandError::Failed(format!("cannot write {}: {e}", loc.base_file.display())))
}

/// The `plugins` array of the base file and the index of `name`'s entry.
fn plugins_array(map: &mut Map<String, Value>) -> Result<&mut Vec<Value>, CommandError> {
    let slot = map
        .entry("plugins")
        .or_insert_with(|| Value::Array(Vec::new()));
    slot.as_array_mut()
        .ok_or_else(|| CommandError::Usage("the base file's plugins is not an array".into()))
}

fn entry_name(v: &Value) -> Option<&str> {
    v.as_str().or_else(|| v.get("name").and_then(Value::as_str))
}

fn require_builtin(name: &str) -> Result<(), CommandError> {
    if plugins::builtin().iter().any(|b| b.plugin.name() == name) {
        Ok(())
    } else {
        Err(CommandError::Usage(format!(
            "{name} is not a built-in plugin (built in: {})",
            plugins::builtin_names()
        )))
    }
}

fn enable(loc: &Locations, name: &str) -> Result<bool, CommandError> {
    let mut map = read_base(loc)?;
    let list = plugins_array(&mut map)?;
    let changed = match list.iter_mut().find(|v| entry_name(v) == Some(name)) {
        Some(Value::Object(obj)) => obj
            .remove("enabled")
            .is_some_and(|e| e != Value::Bool(true)),
        Some(_) => false,
        None => {
            list.push(Value::String(name.to_owned()));
            true
        }
    };
    if changed {
        write_base(loc, map)?;
    }
    Ok(changed)
}

fn disable(loc: &Locations, name: &str) -> Result<bool, CommandError> {
    let mut map = read_base(loc)?;
    let list = plugins_array(&mut map)?;
    let changed = match list.iter_mut().find(|v| entry_name(v) == Some(name)) {
        Some(Value::Object(obj)) => {
            obj.insert("enabled".into(), Value::Bool(false)) != Some(Value::Bool(false))
        }
        Some(slot) => {
            *slot = json!({"name": name, "enabled": false});
            true
        }
        None => {
            // A typo must not land in the configuration as a plugin nobody has.
            require_builtin(name)?;
            list.push(json!({"name": name, "enabled": false}));
            true
        }
    };
    if changed {
        write_base(loc, map)?;
    }
    Ok(changed)
}

/// `ahpd plugin …`.
pub fn plugin(loc: &Locations, cmd: &PluginCommand) -> Result<i32, CommandError> {
    match cmd {
        PluginCommand::List { json } => {
            let settings = config::load(loc)?;
            let cands = plugins::plan(&settings, None, &loc.dir)?;
            let rows = plugins::rows(&cands, &Vault::new(loc.vault()));
            if *json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).unwrap_or_default()
                );
            } else {
                print_table(&rows);
            }
            Ok(0)
        }
        PluginCommand::Enable { name } => {
            require_builtin(name)?;
            if enable(loc, name)? {
                println!(
                    "enabled {name} in {}; {RESTART_HINT}",
                    loc.base_file.display()
                );
            } else {
                println!("{name} is already enabled in {}", loc.base_file.display());
            }
            Ok(0)
        }
        PluginCommand::Disable { name } => {
            if disable(loc, name)? {
                println!(
                    "disabled {name} in {}; {RESTART_HINT}",
                    loc.base_file.display()
                );
            } else {
                println!("{name} is already disabled in {}", loc.base_file.display());
            }
            Ok(0)
        }
        PluginCommand::Config { args } => plugin_config(loc, args).map(|()| 0),
        PluginCommand::Install { name } => {
            if plugins::builtin().iter().any(|b| b.plugin.name() == name) {
                enable(loc, name)?;
                println!(
                    "{name} is built into ahpd: nothing to install. It is enabled in {}; {RESTART_HINT}",
                    loc.base_file.display()
                );
                Ok(0)
            } else {
                eprintln!(
                    "ahpd: {name} is not a built-in plugin, and ahpd loads no plugin at run time. Built in: {}",
                    plugins::builtin_names()
                );
                Ok(1)
            }
        }
        PluginCommand::Remove { name } => {
            eprintln!(
                "ahpd: plugins are built into ahpd and cannot be removed; to stop using {name}, run ahpd plugin disable {name}"
            );
            Ok(1)
        }
        PluginCommand::Update { .. } => {
            eprintln!(
                "ahpd: plugins are built into ahpd and update with it; to stop using one, run ahpd plugin disable <name>"
            );
            Ok(1)
        }
    }
}

fn print_table(rows: &[plugins::Row]) {
    let provides: Vec<String> = rows.iter().map(|r| r.provides.join(", ")).collect();
    let w = |f: &dyn Fn(usize) -> usize, head: &str| {
        (0..rows.len()).map(f).max().unwrap_or(0).max(head.len())
    };
    let wn = w(&|i| rows[i].name.len(), "NAME");
    let wt = w(&|i| rows[i].title.len(), "TITLE");
    let wp = w(&|i| provides[i].len(), "PROVIDES");
    let ws = w(&|i| rows[i].state.len(), "STATE");
    println!(
        "{:wn$}  {:wt$}  {:wp$}  {:ws$}  REASON",
        "NAME", "TITLE", "PROVIDES", "STATE"
    );
    for (r, p) in rows.iter().zip(&provides) {
        println!(
            "{:wn$}  {:wt$}  {:wp$}  {:ws$}  {}",
            r.name, r.title, p, r.state, r.reason
        );
    }
}

/// `plugin config <name> [<key> [<value>]]` and `plugin config unset <name> <key>`.
fn plugin_config(loc: &Locations, args: &[String]) -> Result<(), CommandError> {
    if args.first().map(String::as_str) == Some("unset") {
        return plugin_config_unset(loc, args);
    }
    let name = &args[0];
    let builtin = plugins::builtin()
        .into_iter()
        .find(|b| b.plugin.name() == name.as_str())
        .ok_or_else(|| {
            CommandError::Usage(format!(
                "{name} is not a built-in plugin (built in: {})",
                plugins::builtin_names()
            ))
        })?;
    let settings = config::load(loc)?;
    let cands = plugins::plan(&settings, None, &loc.dir)?;
    let cand = cands
        .iter()
        .find(|c| &c.name == name)
        .ok_or_else(|| CommandError::Failed(format!("{name} is not configured")))?;
    let schema = builtin.plugin.options_schema();
    match args {
        [_] | [_, _] => {
            let mut shown = plugins::merged_options(builtin.plugin.as_ref(), cand);
            options::mask_write_only(&schema, &mut shown);
            let shown = match args.get(1) {
                Some(key) => options::get_dotted(&shown, key)
                    .cloned()
                    .ok_or_else(|| CommandError::Failed(format!("{name} has no option {key}")))?,
                None => shown,
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&shown).unwrap_or_default()
            );
            Ok(())
        }
        [_, key, raw] => plugin_config_set(loc, &builtin, cand, key, raw),
        _ => Err(CommandError::Usage(
            "usage: ahpd plugin config <name> [<key> [<value>]]".into(),
        )),
    }
}

/// `ahpd plugin config unset <name> <key>`.
fn plugin_config_unset(loc: &Locations, args: &[String]) -> Result<(), CommandError> {
    let [_, name, key] = args else {
        return Err(CommandError::Usage(
            "usage: ahpd plugin config unset <name> <key>".into(),
        ));
    };
    require_builtin(name)?;
    let mut map = read_base(loc)?;
    let list = plugins_array(&mut map)?;
    let removed = match list
        .iter_mut()
        .find(|v| entry_name(v) == Some(name.as_str()))
    {
        Some(Value::Object(obj)) => match obj.get_mut("options") {
            Some(Value::Object(opts)) => options::remove_dotted(opts, key),
            _ => false,
        },
        _ => false,
    };
    if removed {
        write_base(loc, map)?;
        println!("removed {name} option {key}; {RESTART_HINT}");
    } else {
        println!("{name} has no option {key} in {}", loc.base_file.display());
    }
    Ok(())
}

/// `ahpd plugin config <name> <key> <value>`: written only once the merged options pass the
/// plugin's schema.
fn plugin_config_set(
    loc: &Locations,
    builtin: &plugins::BuiltIn,
    cand: &plugins::Candidate,
    key: &str,
    raw: &str,
) -> Result<(), CommandError> {
    let name = &cand.name;
    let schema = builtin.plugin.options_schema();
    let value = options::parse_value(raw);
    let secret_keys = options::write_only_keys(&schema);
    if secret_keys.iter().any(|k| k == key) && config::secret_ref(&value).is_none() {
        return Err(CommandError::Usage(format!(
            "{key} is a secret option: store it with ahpd vault set host:<name> and set {key} to {{\"$secret\": \"host:<name>\"}}"
        )));
    }
    let mut map = read_base(loc)?;
    let list = plugins_array(&mut map)?;
    let idx = match list
        .iter()
        .position(|v| entry_name(v) == Some(name.as_str()))
    {
        Some(i) => i,
        None => {
            list.push(json!({"name": name}));
            list.len() - 1
        }
    };
    if list[idx].is_string() {
        list[idx] = json!({"name": name});
    }
    let Some(obj) = list[idx].as_object_mut() else {
        return Err(CommandError::Usage(format!(
            "the entry of {name} is not an object"
        )));
    };
    let opts = obj
        .entry("options")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(opts) = opts else {
        return Err(CommandError::Usage(format!(
            "the options of {name} are not an object"
        )));
    };
    options::set_dotted(opts, key, value).map_err(CommandError::Usage)?;
    // Check the merged result before anything is written; secrets stand as placeholders.
    let mut trial = cand_with(cand, opts.clone());
    trial.enabled = true;
    let mut merged = plugins::merged_options(builtin.plugin.as_ref(), &trial);
    blank_secrets(&mut merged);
    options::validate(&schema, &merged, &format!("plugins.{name}.options"))
        .map_err(CommandError::Usage)?;
    write_base(loc, map)?;
    println!("set {name} option {key}; {RESTART_HINT}");
    Ok(())
}

fn cand_with(c: &plugins::Candidate, file_options: Map<String, Value>) -> plugins::Candidate {
    plugins::Candidate {
        name: c.name.clone(),
        builtin: c.builtin.clone(),
        file_options,
        file_dir: Some(c.config_dir.clone()),
        flag_options: Map::new(),
        enabled: c.enabled,
        config_dir: c.config_dir.clone(),
    }
}

/// Replaces `$secret` references with an empty string so the schema sees a string there.
fn blank_secrets(v: &mut Value) {
    if config::secret_ref(v).is_some() {
        *v = Value::String(String::new());
        return;
    }
    match v {
        Value::Object(m) => m.values_mut().for_each(blank_secrets),
        Value::Array(a) => a.iter_mut().for_each(blank_secrets),
        _ => {}
    }
}

/// Reads a secret from standard input: to its end (one trailing newline dropped), or one line
/// with echo off when it is a terminal.
fn read_secret_input() -> Result<String, CommandError> {
    let stdin = std::io::stdin();
    let mut text = String::new();
    if stdin.is_terminal() {
        eprint!("value (not echoed): ");
        let fd = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&fd).ok();
        if let Some(mut t) = saved.clone() {
            t.local_modes.remove(rustix::termios::LocalModes::ECHO);
            let _ = rustix::termios::tcsetattr(&fd, rustix::termios::OptionalActions::Now, &t);
        }
        let read = stdin.read_line(&mut text);
        if let Some(t) = saved {
            let _ = rustix::termios::tcsetattr(&fd, rustix::termios::OptionalActions::Now, &t);
        }
        eprintln!();
        read.map_err(|e| CommandError::Failed(format!("cannot read standard input: {e}")))?;
    } else {
        stdin
            .lock()
            .read_to_string(&mut text)
            .map_err(|e| CommandError::Failed(format!("cannot read standard input: {e}")))?;
    }
    if let Some(t) = text.strip_suffix('\n') {
        text = t.strip_suffix('\r').unwrap_or(t).to_owned();
    }
    if text.is_empty() {
        return Err(CommandError::Usage(
            "the value is empty: give it on standard input".into(),
        ));
    }
    Ok(text)
}

/// `ahpd vault …`.
pub fn vault_cmd(loc: &Locations, cmd: &VaultCommand) -> Result<(), CommandError> {
    let vault = Vault::new(loc.vault());
    match cmd {
        VaultCommand::Set { name, value } => {
            if value.is_some() {
                return Err(CommandError::Usage(
                    "the value is read from standard input only (e.g. printf '%s' \"$KEY\" | ahpd vault set <name>)".into(),
                ));
            }
            vault::check_name(name)?;
            let secret = Secret::new(read_secret_input()?);
            vault.set(name, &secret)?;
            println!(
                "stored {name} in {}; {RESTART_HINT}",
                vault.path().display()
            );
            Ok(())
        }
        VaultCommand::Delete { name } => {
            vault.delete(name)?;
            println!("removed {name} from {}", vault.path().display());
            Ok(())
        }
        VaultCommand::List { json } => {
            let names = vault.names()?;
            if *json {
                let rows: Vec<Value> = names
                    .iter()
                    .map(|n| json!({"name": n, "set": true}))
                    .collect();
                println!("{}", Value::Array(rows));
            } else {
                for n in names {
                    println!("{n}  set");
                }
            }
            Ok(())
        }
    }
}
