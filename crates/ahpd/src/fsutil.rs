//! Writing the daemon's files so that a crash leaves the old file or the new one, never a part.

use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every file that may hold a secret or a record.
pub const PRIVATE_FILE: u32 = 0o600;
/// Mode of every folder the daemon creates.
pub const PRIVATE_DIR: u32 = 0o700;

/// Creates `dir` and any missing parents with mode `0700`; an existing folder is left as it is.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same folder, flushed to disk,
/// then renamed over the old file. The new file gets `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    ensure_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed the mode; a file the user keeps wider stays wider.
        file.set_permissions(Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        // Make the rename itself durable where the filesystem allows it.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Writes a JSON value with two-space indentation and a final newline, atomically.
pub fn write_json(path: &Path, value: &serde_json::Value, mode: u32) -> io::Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    text.push('\n');
    write_atomic(path, text.as_bytes(), mode)
}

/// The permission bits of an existing file, or `None` when it does not exist.
pub fn mode_of(path: &Path) -> Option<u32> {
    fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// Narrows `path` to `0600` when it is readable or writable by anyone but its owner; returns
/// whether it changed anything.
pub fn tighten(path: &Path) -> io::Result<bool> {
    match mode_of(path) {
        Some(mode) if mode & 0o077 != 0 => {
            fs::set_permissions(path, Permissions::from_mode(PRIVATE_FILE))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Line and column of a JSON parse error, with serde's own position suffix removed from the
/// message so the caller can place them where the format wants them.
pub fn json_problem(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let problem = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => text.as_str(),
    };
    format!(
        "line {}, column {}: {}",
        err.line(),
        err.column(),
        problem.replace('`', "'")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_sets_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("a.json");
        write_atomic(&path, b"one", PRIVATE_FILE).expect("first write");
        write_atomic(&path, b"two", PRIVATE_FILE).expect("second write");
        assert_eq!(fs::read_to_string(&path).expect("read"), "two");
        assert_eq!(mode_of(&path), Some(0o600));
        assert_eq!(mode_of(&dir.path().join("sub")), Some(0o700));
        let leftovers = fs::read_dir(dir.path().join("sub")).expect("list").count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }

    #[test]
    fn json_problem_names_line_and_column() {
        let err = serde_json::from_str::<serde_json::Value>("{\"port\": 9187,")
            .expect_err("truncated JSON");
        let text = json_problem(&err);
        assert!(text.starts_with("line 1, column 14: "), "{text}");
    }
}
