//! Where the daemon keeps its files: the configuration folder and the files beside the base file.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The home folder could not be found, so no default location exists.
#[derive(Debug, thiserror::Error)]
#[error("cannot find the home folder: HOME is not set")]
pub struct NoHome;

/// The home folder, from `$HOME`.
pub fn home() -> Result<PathBuf, NoHome> {
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() => Ok(PathBuf::from(h)),
        _ => Err(NoHome),
    }
}

/// Expands a leading `~/` and resolves a relative path against `base`.
pub fn resolve_path(raw: &str, base: &Path) -> Result<PathBuf, NoHome> {
    if raw == "~" {
        return home();
    }
    if let Some(rest) = raw.strip_prefix("~/") {
        return Ok(home()?.join(rest));
    }
    let p = Path::new(raw);
    Ok(if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    })
}

/// The base configuration file and the folder around it.
#[derive(Debug, Clone)]
pub struct Locations {
    /// The file configuration commands write: the `--config-file` path or the XDG default.
    pub base_file: PathBuf,
    /// The folder holding the base file, the vault, records and the daemon's own files.
    pub dir: PathBuf,
    /// Whether `--config-file` chose the base file (then `$AHPD_CONFIG` is not read).
    pub explicit: bool,
}

impl Locations {
    /// `--config-file` when given, else `$XDG_CONFIG_HOME/ahpd/config.json`, else
    /// `~/.config/ahpd/config.json`.
    pub fn resolve(config_file: Option<&Path>) -> Result<Self, NoHome> {
        if let Some(file) = config_file {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            let file = resolve_path(&file.to_string_lossy(), &cwd)?;
            let dir = file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| cwd.clone());
            return Ok(Locations {
                base_file: file,
                dir,
                explicit: true,
            });
        }
        let config_home = match std::env::var_os("XDG_CONFIG_HOME") {
            Some(x) if !x.is_empty() && Path::new(&x).is_absolute() => PathBuf::from(x),
            _ => home()?.join(".config"),
        };
        let dir = config_home.join("ahpd");
        Ok(Locations {
            base_file: dir.join("config.json"),
            dir,
            explicit: false,
        })
    }

    /// `vault.json`.
    pub fn vault(&self) -> PathBuf {
        self.dir.join("vault.json")
    }

    /// The `agents/` folder of records.
    pub fn agents(&self) -> PathBuf {
        self.dir.join("agents")
    }

    /// `sessions.json`, the host's session store.
    pub fn sessions(&self) -> PathBuf {
        self.dir.join("sessions.json")
    }

    /// `token`, the connection token used when no token option is given: one line of 64
    /// lower-case hex digits, mode `0600`. Terminal clients read it too, so its name and format
    /// stay as they are.
    pub fn token(&self) -> PathBuf {
        self.dir.join("token")
    }

    /// `daemon.json`, the detached daemon's record.
    pub fn daemon_record(&self) -> PathBuf {
        self.dir.join("daemon.json")
    }

    /// `daemon.log`, the detached daemon's log.
    pub fn daemon_log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }
}

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
