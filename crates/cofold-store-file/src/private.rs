//! The store is its user's alone: folders are made `0700` and files `0600`, whatever the umask
//! (which can only take bits away from these), and a store that others could enter, as one
//! made by an older version under the usual umask `022` is, is narrowed with everything in it
//! when it is opened.
//!
//! Transcripts hold what the agent read, which may be a secret file's content, so a store
//! readable by other users of the machine would hand them what the person's own file modes
//! kept from them.

use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every folder the store makes.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Mode of every file the store makes.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Makes a folder and its missing parents, each `0700`.
pub(crate) fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Makes one folder, `0700`; fails when it exists.
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(path)
}

/// Options that create a file `0600`.
pub(crate) fn file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Narrows the store at `root` when others may enter it: every folder under it to `0700` and
/// every file to `0600`. A store already private is left alone without a walk. Entries that
/// belong to someone else (and so cannot be changed) are left as they are.
pub(crate) fn tighten(root: &Path) -> io::Result<bool> {
    let meta = fs::metadata(root)?;
    if meta.permissions().mode() & 0o077 == 0 {
        return Ok(false);
    }
    narrow(root);
    Ok(true)
}

fn narrow(path: &Path) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode();
    if meta.is_dir() {
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                narrow(&entry.path());
            }
        }
        if mode & 0o077 != 0 {
            let _ = fs::set_permissions(path, Permissions::from_mode(DIR_MODE));
        }
    } else if meta.is_file() && mode & 0o077 != 0 {
        let _ = fs::set_permissions(path, Permissions::from_mode(mode & 0o700));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_store_others_could_enter_is_narrowed_with_everything_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/messages.jsonl"), "x").unwrap();
        for p in [&root, &root.join("a"), &root.join("a/b")] {
            fs::set_permissions(p, Permissions::from_mode(0o755)).unwrap();
        }
        fs::set_permissions(
            root.join("a/b/messages.jsonl"),
            Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(tighten(&root).unwrap());
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("a/b")), 0o700);
        assert_eq!(mode(&root.join("a/b/messages.jsonl")), 0o600);
        assert!(!tighten(&root).unwrap());
        create_dir_all(&root.join("c/d")).unwrap();
        assert_eq!(mode(&root.join("c/d")), 0o700);
    }
}
