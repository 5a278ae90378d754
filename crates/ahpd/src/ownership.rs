//! Files the daemon trusts and files it keeps: a token file or a configuration file that
//! another user owns, or that others may write, is refused (whoever controls a configuration
//! file can make the daemon start programs, and whoever planted a token file can connect); and
//! the daemon's own folder and files are narrowed to the person alone at start.

use std::fs::{File, Metadata, Permissions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::fsutil::{PRIVATE_DIR, PRIVATE_FILE};
use crate::locations::Locations;

/// What a file the daemon is about to trust is called in a refusal.
#[derive(Debug, Clone, Copy)]
pub enum Trusted {
    /// A connection token file.
    Token,
    /// A configuration file.
    Config,
}

impl Trusted {
    fn what(self) -> &'static str {
        match self {
            Trusted::Token => "the connection token file",
            Trusted::Config => "the configuration file",
        }
    }
}

/// The one-sentence refusal of an opened file that is not the person's own to trust: owned by
/// someone other than this user (root excepted), or writable by its group or by others.
pub fn refusal(path: &Path, meta: &Metadata, kind: Trusted) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    let owner = meta.uid();
    let what = kind.what();
    let shown = path.display();
    if owner != me && owner != 0 {
        return Some(format!(
            "{shown}: {what} belongs to another user (uid {owner}), who could have planted it: remove it and let the daemon create its own, or name a file of yours"
        ));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "{shown}: {what} can be changed by other users (mode {mode:04o}): run chmod go-w {shown}, then check what it holds"
        ));
    }
    None
}

/// Opens a file to trust, refusing it as [`refusal`] says.
pub fn open_trusted(path: &Path, kind: Trusted) -> std::io::Result<Result<File, String>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    Ok(match refusal(path, &meta, kind) {
        Some(sentence) => Err(sentence),
        None => Ok(file),
    })
}

/// Narrows the configuration folder and the daemon's files in it when others may read them
/// (a folder made before the daemon set modes itself, or under an unusual umask). With
/// `--config-file` the folder is the person's choice and may hold other things, so only the
/// daemon's own files in it are narrowed.
pub fn tighten_own_files(loc: &Locations) {
    let dir = &loc.dir;
    if !dir.is_dir() {
        return;
    }
    let mut changed = Vec::new();
    if !loc.explicit && narrow(dir, PRIVATE_DIR) {
        changed.push(dir.clone());
    }
    let base_name = loc.base_file.file_name();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !crate::locations::is_daemon_file(&name, None) && name != "mcp.json" {
            continue;
        }
        if Some(name.as_os_str()) == base_name {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if narrow(&path, PRIVATE_DIR) {
                changed.push(path.clone());
            }
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                let p = inner.path();
                if p.is_file() && narrow(&p, PRIVATE_FILE) {
                    changed.push(p);
                }
            }
        } else if meta.is_file() && narrow(&path, PRIVATE_FILE) {
            changed.push(path);
        }
    }
    for path in changed {
        tracing::debug!(file = %path.display(), "other users could read this; it is now readable by its owner alone");
    }
}

/// Sets `mode` on a file or folder of this user that others may read or write.
fn narrow(path: &Path, mode: u32) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.file_type().is_symlink()
        || meta.uid() != rustix::process::geteuid().as_raw()
        || meta.permissions().mode() & 0o077 == 0
    {
        return false;
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_others_can_change_are_refused_with_the_fix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").expect("write");
        std::fs::set_permissions(&path, Permissions::from_mode(0o664)).expect("chmod");
        let meta = std::fs::metadata(&path).expect("stat");
        let sentence = refusal(&path, &meta, Trusted::Config).expect("refused");
        assert!(sentence.contains("chmod go-w"), "{sentence}");
        assert!(sentence.contains(&path.display().to_string()), "{sentence}");
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).expect("chmod");
        let meta = std::fs::metadata(&path).expect("stat");
        assert_eq!(refusal(&path, &meta, Trusted::Config), None);
    }
}
