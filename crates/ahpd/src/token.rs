//! The connection token: the default token file (made on first use), token files named by an
//! option, and `ahpd token`, which prints what a client needs to connect.

use std::io::Read;
use std::path::Path;

use crate::fsutil;

/// The name of the variable a token may be given in, so it appears neither in `ps` nor in
/// `daemon.json`.
pub const TOKEN_ENV: &str = "AHPD_CONNECTION_TOKEN";

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists but holds no usable token.
    #[error("{}: {problem}", path.display())]
    Bad {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong, never quoting the file's contents.
        problem: String,
    },
    /// The file is another user's, or others may change it: one sentence naming it and the fix.
    #[error("{0}")]
    Untrusted(String),
    /// Reading, creating or writing failed.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was tried.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// 64 hex digits from 32 random bytes of the kernel's generator.
pub fn fresh_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads the token in `path`, creating the file with a fresh token (mode `0600`) when it does
/// not exist. Two daemons starting at once end up with the same token: the file is put in
/// place only if no other appeared meanwhile, and then read back.
pub fn read_or_create(path: &Path) -> Result<String, TokenError> {
    match read(path) {
        Err(TokenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        other => return other,
    }
    let io = |what, source| TokenError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    let token = fresh_token().map_err(|e| io("make a token for", e))?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = dir.join(format!(".token.{}.tmp", uuid::Uuid::new_v4().simple()));
    fsutil::write_atomic(&tmp, format!("{token}\n").as_bytes(), fsutil::PRIVATE_FILE)
        .map_err(|e| io("write", e))?;
    // A hard link fails when the name exists, where a rename would replace it.
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(file = %path.display(), "created the connection token file");
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(path),
        Err(e) => Err(io("create", e)),
    }
}

/// Reads the token in an existing file: its first line, trimmed. A file others can read is
/// narrowed to `0600` first.
pub fn read(path: &Path) -> Result<String, TokenError> {
    let io = |source| TokenError::Io {
        what: "read",
        path: path.to_path_buf(),
        source,
    };
    let mut file =
        match crate::ownership::open_trusted(path, crate::ownership::Trusted::Token).map_err(io)? {
            Ok(file) => file,
            Err(sentence) => return Err(TokenError::Untrusted(sentence)),
        };
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(io)?;
    if let Ok(true) = fsutil::tighten(path) {
        tracing::warn!(file = %path.display(), "the token file could be read by other users; its mode is now 0600");
    }
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(TokenError::Bad {
            path: path.to_path_buf(),
            problem: "the token file is empty".into(),
        });
    }
    Ok(token.to_owned())
}

/// The URL a client opens: the address with the token as `?tkn=`.
pub fn url_with_token(address: &str, token: Option<&str>) -> String {
    match token {
        Some(t) => format!("{}/?tkn={}", address.trim_end_matches('/'), encode(t)),
        None => address.to_owned(),
    }
}

/// Percent-encodes everything but unreserved characters.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The name of this machine, for the name of a VS Code entry.
pub fn machine_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// A `chat.remoteAgentHosts` entry for VS Code's settings.
pub fn vscode_entry(address: &str, token: Option<&str>) -> serde_json::Value {
    let mut entry = serde_json::json!({
        "address": address,
        "name": format!("ahpd on {}", machine_name()),
    });
    if let Some(t) = token {
        entry["connectionToken"] = serde_json::Value::String(t.to_owned());
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format terminal clients expect of the default file: 64 lower-case hex digits.
    fn is_well_formed(token: &str) -> bool {
        token.len() == 64
            && token
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }

    #[test]
    fn a_made_token_is_kept_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cfg").join("token");
        let first = read_or_create(&path).expect("created");
        assert!(is_well_formed(&first), "{first}");
        let text = std::fs::read_to_string(&path).expect("written");
        assert_eq!(text, format!("{first}\n"));
        assert_eq!(fsutil::mode_of(&path), Some(0o600));
        assert_eq!(read_or_create(&path).expect("read"), first);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("token")]);
    }

    #[test]
    fn an_empty_file_is_refused_and_urls_carry_the_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "\n").expect("write");
        let e = read_or_create(&path).expect_err("empty");
        assert!(e.to_string().ends_with("the token file is empty"), "{e}");
        assert_eq!(
            url_with_token("ws://127.0.0.1:9187", Some("a b")),
            "ws://127.0.0.1:9187/?tkn=a%20b"
        );
        assert_eq!(url_with_token("ws://h:1", None), "ws://h:1");
    }
}
