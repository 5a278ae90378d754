//! The environment an agent child starts with: the daemon's own minus anything that looks like a
//! secret, then the preset's variables, then the record's `env` (where secrets may come in, by
//! `$secret` reference).
//!
//! The list is the shell tool's (`cofold-tools`, `shell/env.rs`, `DEFAULT_EXCLUDE`). It is
//! written again here rather than shared because this crate may not depend on cofold crates and
//! the SDK, which both could depend on, may not know about either tool.

use std::ffi::OsString;

/// Name patterns never passed on from the daemon: `*X*` for a name containing `X`, `X*` for a
/// name starting with it. Compared on the upper-cased name.
const EXCLUDED_PARTS: [&str; 5] = ["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL"];
const EXCLUDED_PREFIXES: [&str; 3] = ["COPAPO_", "COFOLD_", "AHPD_"];

/// Whether a variable of the daemon's may reach an agent.
pub fn passes(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !EXCLUDED_PARTS.iter().any(|p| upper.contains(p))
        && !EXCLUDED_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// The child's environment: the daemon's variables that pass, with `over` on top (later pairs
/// win over earlier ones and over the daemon's).
pub fn build(
    daemon: impl IntoIterator<Item = (OsString, OsString)>,
    over: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = daemon
        .into_iter()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            passes(&name) && !over.iter().any(|(n, _)| *n == name)
        })
        .collect();
    for (i, (name, value)) in over.iter().enumerate() {
        // A later entry of the same name replaces an earlier one.
        if over[i + 1..].iter().any(|(n, _)| n == name) {
            continue;
        }
        out.push((OsString::from(name), OsString::from(value)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_of_the_daemon_never_reach_the_agent() {
        let daemon = [
            ("PATH", "/bin"),
            ("OPENAI_API_KEY", "k"),
            ("github_token", "t"),
            ("DB_PASSWORD", "p"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "c"),
            ("AHPD_CONNECTION_TOKEN", "x"),
            ("COFOLD_HOME", "h"),
            ("HOME", "/home/u"),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let over = vec![
            ("MISTRAL_API_KEY".to_owned(), "from-record".to_owned()),
            ("HOME".to_owned(), "/state".to_owned()),
        ];
        let got: Vec<String> = build(daemon, &over)
            .into_iter()
            .map(|(n, v)| format!("{}={}", n.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(
            got,
            ["PATH=/bin", "MISTRAL_API_KEY=from-record", "HOME=/state"]
        );
    }
}
