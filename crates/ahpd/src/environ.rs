//! The process's own environment, kept out of reach of the commands it runs.
//!
//! A process that hosts agents runs commands a model asked for, and those commands run as the
//! same user. Two things stop them from reading the host's secrets out of the host itself:
//!
//! - **Not dumpable.** `prctl(PR_SET_DUMPABLE, 0)` makes the kernel refuse other processes of
//!   the same user (without `CAP_SYS_PTRACE`) `/proc/<pid>/environ`, `mem`, `fd/`, `maps` and
//!   `ptrace`, and leaves no core dump. It does not stop root, nor the process's own reads of
//!   `/proc/self`; children become dumpable again when they `exec` a program.
//! - **Withheld variables.** `/proc/<pid>/environ` shows the block of `NAME=value` strings the
//!   kernel placed at the top of the stack when the program started, whatever the C library's
//!   table says later: `unsetenv` (and Rust's `remove_var`, which is `unsafe` in edition 2024
//!   besides) changes only the table. So at start, before any thread exists, the values of the
//!   variables that look like secrets (see [`withheld_name`]) are copied into the process's
//!   memory, and their strings in that block are overwritten with zero bytes through
//!   `/proc/self/mem`. The C library then sees an empty string where each was, which it skips,
//!   as does Rust's `std::env`; what a root process reads in `/proc/<pid>/environ` is the other
//!   variables and zero bytes. Code that needs a withheld value asks [`var`] or [`vars`].
//!
//! Overwriting the block was chosen over starting the program again with a cleaned
//! environment: a new program image could receive the values only on an inherited descriptor,
//! and a descriptor beyond the three standard ones cannot be taken over or closed without
//! `unsafe`, so it would stay open in every command; the standard ones carry the terminal,
//! the protocol (`--stdio`) or the prompt. Overwriting keeps the process id, its descriptors
//! and its name, and works the same in every mode.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::OnceLock;

/// The variables taken out of the environment block at start, with their values.
static WITHHELD: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Parts of a name (any case) that make a variable withheld: keys, secrets, tokens, passwords,
/// credentials, authentication sockets and cookies, session handles.
const NAME_PARTS: [&str; 9] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
];

/// Name prefixes of cloud credentials and settings (any case).
const NAME_PREFIXES: [&str; 2] = ["AWS_", "AZURE_"];

/// Whether a variable of this name is withheld from the environment block whatever its value.
pub fn withheld_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    NAME_PARTS.iter().any(|p| upper.contains(p))
        || NAME_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Whether a value is a URL carrying a password (`postgres://u:pw@host/db`).
pub fn url_with_password(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    if scheme.is_empty()
        || !scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .is_some_and(|(_, password)| !password.is_empty())
}

fn is_withheld(name: &[u8], value: &[u8]) -> bool {
    withheld_name(&String::from_utf8_lossy(name))
        || url_with_password(&String::from_utf8_lossy(value))
}

/// What [`seal`] did.
#[derive(Debug, Default)]
pub struct Sealed {
    /// The names withheld, for the log (never the values).
    pub names: Vec<String>,
    /// Why something could not be done, as sentences.
    pub problems: Vec<String>,
}

/// Makes this process not dumpable and takes the withheld variables out of its environment
/// block. Must run before any other thread starts: nothing else may read the environment
/// while its strings are overwritten.
pub fn seal() -> Sealed {
    let mut sealed = Sealed::default();
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        sealed.problems.push(format!(
            "could not make the process non-dumpable ({e}): other processes of this user can read its memory"
        ));
    }
    let taken = match blank_block() {
        Ok(taken) => taken,
        Err(e) => {
            sealed.problems.push(format!(
                "could not clear the secret-looking variables from the process's environment block ({e}): a command running as root can read them in /proc/{}/environ",
                std::process::id()
            ));
            // The values are still kept here, so a later reader gets the same answer.
            std::env::vars_os()
                .filter(|(n, v)| is_withheld(n.as_bytes(), v.as_bytes()))
                .collect()
        }
    };
    sealed.names = taken
        .iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect();
    let _ = WITHHELD.set(taken);
    sealed
}

/// The start and end of the environment block in this process's memory: fields 50 and 51 of
/// `/proc/self/stat` (Linux 3.5 and later).
fn block_bounds() -> std::io::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The command name in parentheses may hold spaces; the fields after it start at field 3.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| std::io::Error::other("unexpected /proc/self/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> std::io::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| std::io::Error::other("no environment bounds in /proc/self/stat"))
    };
    let (start, end) = (field(50)?, field(51)?);
    if end < start || end - start > 64 * 1024 * 1024 {
        return Err(std::io::Error::other("implausible environment bounds"));
    }
    Ok((start, end))
}

/// Overwrites the withheld entries of the environment block with zero bytes; returns them.
fn blank_block() -> std::io::Result<Vec<(OsString, OsString)>> {
    use std::os::unix::fs::FileExt;
    let (start, end) = block_bounds()?;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let len = usize::try_from(end - start).map_err(std::io::Error::other)?;
    let mut block = vec![0u8; len];
    mem.read_exact_at(&mut block, start)?;
    let mut taken = Vec::new();
    let mut offset = 0usize;
    for entry in block.split(|b| *b == 0) {
        let here = offset;
        offset += entry.len() + 1;
        // A name is never empty; an entry without `=` is not a variable.
        let Some(eq) = entry.iter().skip(1).position(|b| *b == b'=').map(|p| p + 1) else {
            continue;
        };
        let (name, value) = (&entry[..eq], &entry[eq + 1..]);
        if !is_withheld(name, value) {
            continue;
        }
        mem.write_all_at(&vec![0u8; entry.len()], start + here as u64)?;
        taken.push((
            OsString::from_vec(name.to_vec()),
            OsString::from_vec(value.to_vec()),
        ));
    }
    // What the kernel shows now must hold none of them.
    let shown = std::fs::read("/proc/self/environ")?;
    let left = taken.iter().any(|(n, v)| {
        let mut line = n.as_bytes().to_vec();
        line.push(b'=');
        line.extend_from_slice(v.as_bytes());
        shown.split(|b| *b == 0).any(|e| e == line.as_slice())
    });
    if left {
        return Err(std::io::Error::other("the block still shows them"));
    }
    Ok(taken)
}

/// A variable of the environment the process started with, withheld or not.
pub fn var(name: &str) -> Option<String> {
    let withheld = WITHHELD.get().and_then(|w| {
        w.iter()
            .rev()
            .find(|(n, _)| n.as_os_str() == OsStr::new(name))
            .map(|(_, v)| v.to_string_lossy().into_owned())
    });
    withheld.or_else(|| std::env::var(name).ok())
}

/// The environment the process started with: what the C library still shows plus the
/// withheld variables. Variables whose name or value is not UTF-8 are left out.
pub fn vars() -> HashMap<String, String> {
    let mut out: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    for (k, v) in WITHHELD.get().into_iter().flatten() {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
            out.insert(k.to_owned(), v.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names_and_urls_with_passwords_are_withheld() {
        for name in [
            "COPAPO_API_KEY",
            "AHPD_CONNECTION_TOKEN",
            "github_token",
            "SSH_AUTH_SOCK",
            "AWS_PROFILE",
            "azure_client_id",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "DB_PASSWORD",
            "SESSION_COOKIE",
        ] {
            assert!(withheld_name(name), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "COFOLD_HOME",
            "COPAPO_CONFIG",
            "XDG_CONFIG_HOME",
        ] {
            assert!(!withheld_name(name), "{name}");
        }
        assert!(url_with_password("postgres://app:s3cret@db:5432/app"));
        assert!(url_with_password("https://u:p@proxy:3128"));
        assert!(!url_with_password("https://user@example.com/a:b@c"));
        assert!(!url_with_password("https://example.com/?a=b:c@d"));
        assert!(!url_with_password("not a url: x@y"));
        assert!(!url_with_password("https://u:@host"));
    }
}
