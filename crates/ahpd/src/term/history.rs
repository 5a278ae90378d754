//! `ahpd chat`'s line history, kept across runs in `chat_history` beside the configuration:
//! one JSON string a line (so a pasted block stays one entry), the last [`KEEP`] entries, the
//! file readable by its owner alone. A line that looks like it holds a secret (a key, a
//! token), or that starts with a space, is never written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Entries kept.
pub const KEEP: usize = 1000;

/// The history file of a configuration folder.
pub fn file_in(dir: &Path) -> PathBuf {
    dir.join("chat_history")
}

/// The kept entries, oldest first; none when the file is absent or unreadable.
pub fn load(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<String>(l).ok())
        .collect();
    let extra = lines.len().saturating_sub(KEEP);
    lines.drain(..extra);
    lines
}

/// Whether a word looks like a credential: a known key prefix, or a long run of key
/// characters mixing letters and digits.
fn secret_word(w: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "sk-",
        "sk_",
        "ghp_",
        "gho_",
        "github_pat_",
        "glpat-",
        "xox",
        "AKIA",
        "AIza",
    ];
    let w = w.trim_matches(|c: char| "\"'`,;()[]{}<>".contains(c));
    let w = w.rsplit_once('=').map_or(w, |(_, v)| v);
    if PREFIXES.iter().any(|p| w.starts_with(p)) && w.len() >= 12 {
        return true;
    }
    w.len() >= 24
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_+/=.".contains(c))
        && w.chars().any(|c| c.is_ascii_digit())
        && w.chars().any(|c| c.is_ascii_alphabetic())
        && !w.contains('/')
}

/// Whether a line may be written to the history.
pub fn keepable(line: &str) -> bool {
    !line.trim().is_empty() && !line.starts_with(' ') && !line.split_whitespace().any(secret_word)
}

/// Appends `line` (when it may be kept), trimming the file to [`KEEP`] entries now and then.
pub fn append(path: &Path, line: &str) {
    if !keepable(line) {
        return;
    }
    let Ok(entry) = serde_json::to_string(line) else {
        return;
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).append(true);
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let Ok(mut f) = opts.open(path) else {
        return;
    };
    let _ = writeln!(f, "{entry}");
    drop(f);
    // Rewritten only once it holds twice what is kept, so a line costs an append.
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    if meta.len() > 200 * KEEP as u64 {
        let kept = load(path);
        if kept.len() * 2 > KEEP {
            let body: String = kept
                .iter()
                .filter_map(|l| serde_json::to_string(l).ok())
                .map(|l| l + "\n")
                .collect();
            let _ = crate::fsutil::write_atomic(path, body.as_bytes(), 0o600);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_not_kept() {
        assert!(keepable("fix the failing test in src/lib.rs"));
        assert!(!keepable("use the key sk-proj-abcdefghijklmnop1234"));
        assert!(!keepable("TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345"));
        assert!(!keepable("here: 8f3a9c2b7d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a"));
        assert!(!keepable(" a private line"));
    }

    #[test]
    fn entries_survive_and_stay_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = file_in(dir.path());
        append(&path, "first");
        append(&path, "two\nlines");
        assert_eq!(
            load(&path),
            vec!["first".to_owned(), "two\nlines".to_owned()]
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
