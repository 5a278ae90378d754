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

/// The files the daemon writes beside its configuration file, for when that file's folder is
/// one the user chose (`--config-file`) and may be shared with other things. Each also stands
/// for the files named after it: see [`is_daemon_file`].
const DAEMON_FILES: &[&str] = &[
    "vault.json",
    "token",
    "sessions.json",
    "agents",
    "daemon.json",
    "daemon.log",
];

/// Whether `name`, an entry directly in the configuration folder, is one of the daemon's files
/// (or the configuration file `base_name` itself) or one named after it. `F.<anything>` covers
/// the rotated logs (`daemon.log.1` …) and a damaged store kept aside
/// (`sessions.json.corrupt-<millis>`); `.F.<anything>` covers the lock files and the temporary
/// files an atomic write renames into place (`.token.<id>.tmp`), which hold the same secrets.
pub fn is_daemon_file(name: &OsStr, base_name: Option<&OsStr>) -> bool {
    let Some(name) = name.to_str() else {
        // Every name the daemon writes is UTF-8.
        return false;
    };
    let base = base_name.and_then(OsStr::to_str);
    DAEMON_FILES.iter().copied().chain(base).any(|own| {
        let family = |n: &str| {
            n.strip_prefix(own)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        };
        family(name)
            || name
                .strip_prefix('.')
                .is_some_and(|n| family(n) && n != own)
    })
}

/// With `--config-file`, the configuration folder and the rule picking the daemon's files in it
/// by name: their names are only known by pattern, so a list of paths cannot hold them all.
/// Without it the whole folder is private (see [`private_paths`]) and there is no rule.
pub fn daemon_files(loc: &Locations) -> Option<(PathBuf, impl Fn(&OsStr) -> bool + use<>)> {
    if !loc.explicit {
        return None;
    }
    let base = loc.base_file.file_name().map(OsStr::to_owned);
    Some((loc.dir.clone(), move |name: &OsStr| {
        is_daemon_file(name, base.as_deref())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_files_and_those_named_after_them_are_recognised() {
        let base = Some(OsStr::new("ahpd.json"));
        for own in [
            "vault.json",
            "token",
            "sessions.json",
            ".sessions.json.lock",
            "sessions.json.corrupt-1767225600000",
            "agents",
            "daemon.json",
            "daemon.log",
            "daemon.log.1",
            "daemon.log.5",
            ".token.0123abcd.tmp",
            ".vault.json.0123abcd.tmp",
            ".sessions.json.tmp-42-0",
            "ahpd.json",
            ".ahpd.json.0123abcd.tmp",
        ] {
            assert!(is_daemon_file(OsStr::new(own), base), "{own}");
        }
        for other in [
            "notes.txt",
            "tokens",
            "daemon.logbook",
            ".token",
            "my-sessions.json",
            "ahpd.json5",
            "config.json",
        ] {
            assert!(!is_daemon_file(OsStr::new(other), base), "{other}");
        }
    }
}
