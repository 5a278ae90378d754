//! What the daemon keeps out of `resourceRead` and the other file-serving commands even inside a
//! served folder: its own files, the agents' stores, the usual credential stores and the
//! `resourceDeny` list. The host library only gets the resulting paths; the sessions' tools get
//! the same set ([`private_set`]), so what is never served is never read unasked either.

use std::ffi::OsStr;
use std::path::PathBuf;

use serde_json::Value;

// The credential stores under the home folder are the tools' list too (`HOME_CREDENTIALS`):
// one list, two users.
use ahpd_agent_cofold::guard::{CREDENTIAL_STORE, HOME_CREDENTIALS, HOST_FILES, PrivateSet};

use crate::config::{Settings, TokenSetting};
use crate::locations::{self, Locations};

/// The phrase for what `resourceDeny` names.
const CONFIGURED: &str = "a path the configuration keeps private (resourceDeny)";

/// With `--config-file`, the configuration folder and the rule picking the daemon's files in it
/// by name: their names are only known by pattern, so a list of paths cannot hold them all.
/// Without it the whole folder is private (see [`private_paths`]) and there is no rule.
pub fn daemon_files(loc: &Locations) -> Option<(PathBuf, impl Fn(&OsStr) -> bool + use<>)> {
    if !loc.explicit {
        return None;
    }
    let base = loc.base_file.file_name().map(OsStr::to_owned);
    Some((loc.dir.clone(), move |name: &OsStr| {
        locations::is_daemon_file(name, base.as_deref())
    }))
}

/// Every path never served. `engine_options` are the options each engine was started with: a
/// `store` option names where that engine keeps its conversations.
pub fn private_paths(
    loc: &Locations,
    settings: &Settings,
    engine_options: &[Value],
) -> Vec<PathBuf> {
    private_kinds(loc, settings, engine_options)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

/// The private paths with what each is, and the name rule of the configuration folder: what
/// the tools of every session keep to the person (asked about, skipped by walks).
pub fn private_set(loc: &Locations, settings: &Settings, engine_options: &[Value]) -> PrivateSet {
    let mut set = PrivateSet::new();
    for (path, kind) in private_kinds(loc, settings, engine_options) {
        set = set.with_paths([path], kind);
    }
    match daemon_files(loc) {
        Some((dir, rule)) => set.with_names(dir, rule, HOST_FILES),
        None => set,
    }
}

fn private_kinds(
    loc: &Locations,
    settings: &Settings,
    engine_options: &[Value],
) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if loc.explicit {
        // The name rule of `daemon_files` covers the folder's own files; the configuration
        // file is also listed by path in case its folder is not where its name is looked up.
        out.push((loc.base_file.clone(), HOST_FILES));
    } else {
        out.push((loc.dir.clone(), HOST_FILES));
    }
    if let TokenSetting::File(p) = &settings.token.value {
        out.push((p.clone(), HOST_FILES));
    }
    if let Ok(home) = locations::home() {
        out.extend(
            HOME_CREDENTIALS
                .iter()
                .map(|c| (home.join(c), CREDENTIAL_STORE)),
        );
        if let Some(xdg) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
            let xdg = PathBuf::from(xdg);
            if xdg.is_absolute() {
                out.push((xdg.join("copapo"), CREDENTIAL_STORE));
                out.push((xdg.join("gcloud"), CREDENTIAL_STORE));
            }
        }
        // The cofold engine's default store.
        match std::env::var_os("COFOLD_HOME").filter(|v| !v.is_empty()) {
            Some(v) => out.push((PathBuf::from(v), HOST_FILES)),
            None => out.push((home.join(".cofold"), HOST_FILES)),
        }
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    for options in engine_options {
        if let Some(store) = options.get("store").and_then(Value::as_str)
            && let Ok(path) = locations::resolve_path(store, &cwd)
        {
            out.push((path, HOST_FILES));
        }
    }
    out.extend(
        settings
            .resource_deny
            .value
            .iter()
            .map(|p| (p.clone(), CONFIGURED)),
    );
    out
}
