//! What the daemon keeps out of `resourceRead` and the other file-serving commands even inside a
//! served folder: its own files, the agents' stores, the usual credential stores and the
//! `resourceDeny` list. The host library only gets the resulting paths.

use std::path::PathBuf;

use serde_json::Value;

use crate::config::{Settings, TokenSetting};
use crate::locations::{self, Locations};

/// Credential stores under the home folder, never served.
const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".config/gcloud",
    ".git-credentials",
    ".pgpass",
    ".password-store",
    ".local/share/keyrings",
    ".config/gh",
    // The model providers' keys of the copapo configuration.
    ".config/copapo",
];

/// The files the daemon writes beside its configuration file, for when that file's folder is
/// one the user chose (`--config-file`) and may be shared with other things.
const DAEMON_FILES: &[&str] = &[
    "vault.json",
    "token",
    "sessions.json",
    ".sessions.json.lock",
    "agents",
    "daemon.json",
    "daemon.log",
];

/// Every path never served. `engine_options` are the options each engine was started with: a
/// `store` option names where that engine keeps its conversations.
pub fn private_paths(
    loc: &Locations,
    settings: &Settings,
    engine_options: &[Value],
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if loc.explicit {
        out.push(loc.base_file.clone());
        out.extend(DAEMON_FILES.iter().map(|f| loc.dir.join(f)));
    } else {
        out.push(loc.dir.clone());
    }
    if let TokenSetting::File(p) = &settings.token.value {
        out.push(p.clone());
    }
    if let Ok(home) = locations::home() {
        out.extend(HOME_CREDENTIALS.iter().map(|c| home.join(c)));
        if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
            let xdg = PathBuf::from(xdg);
            if xdg.is_absolute() {
                out.push(xdg.join("copapo"));
                out.push(xdg.join("gcloud"));
            }
        }
        // The cofold engine's default store.
        match std::env::var_os("COFOLD_HOME").filter(|v| !v.is_empty()) {
            Some(v) => out.push(PathBuf::from(v)),
            None => out.push(home.join(".cofold")),
        }
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    for options in engine_options {
        if let Some(store) = options.get("store").and_then(Value::as_str)
            && let Ok(path) = locations::resolve_path(store, &cwd)
        {
            out.push(path);
        }
    }
    out.extend(settings.resource_deny.value.iter().cloned());
    out
}
