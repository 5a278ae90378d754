//! Where the daemon keeps its files: the configuration folder and the files beside the base file.

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
