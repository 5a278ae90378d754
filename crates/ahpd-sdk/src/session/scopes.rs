//! What "allow for this session" allows, as a rule in the session's `permissions.allow` list
//! that later approvals are checked against, in the spelling of Claude Code's permission
//! rules:
//!
//! - `shell_exec(git status:*)`: commands whose leading words are `git status`, and that chain
//!   nothing else (no `;`, `&`, `|`, redirection or substitution), so `git status` never lets
//!   `rm` through;
//! - `shell_exec(exact text)`: exactly that command (what a chained command is allowed as);
//! - `edit_file(/work/src/**)`: calls whose `path` lies in that folder, links resolved;
//! - `mcp__x__y`: the tool, whatever its input.
//!
//! A call's command is its inline input when that is not a JSON object (the way a terminal
//! tool sends it), else the object's `command`; its path is the object's `path`.

use std::path::{Component, Path, PathBuf};

use ahp_types::state::ToolInput;
use serde_json::Value;

/// A rule and the words the question uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    /// The rule stored in `permissions.allow`.
    pub rule: String,
    /// "Allow … for this session".
    pub label: String,
}

enum Subject {
    Command(String),
    Path(String),
    None,
}

fn subject_of(input: Option<&ToolInput>) -> Subject {
    let Some(ToolInput::Inline(text)) = input else {
        return Subject::None;
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => {
            if let Some(c) = o.get("command").and_then(Value::as_str) {
                Subject::Command(c.to_owned())
            } else if let Some(p) = o.get("path").and_then(Value::as_str) {
                Subject::Path(p.to_owned())
            } else {
                Subject::None
            }
        }
        Ok(_) => Subject::None,
        Err(_) => Subject::Command(text.clone()),
    }
}

/// Whether a command does more than run one program: chains, pipes, redirects, substitutes,
/// or holds a control character.
fn chains(command: &str) -> bool {
    command
        .chars()
        .any(|c| matches!(c, ';' | '&' | '|' | '`' | '>' | '<' | '\n' | '\r') || c.is_control())
        || command.contains("$(")
}

/// The leading words a command is allowed by: the program, and its subcommand when the
/// second word is one (`git status`, `cargo test`), not an option or a file.
fn leading_words(command: &str) -> Option<String> {
    let mut words = command.split_whitespace();
    let first = words.next()?;
    if first.contains('=') {
        return None;
    }
    let sub = words.next().filter(|w| {
        w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
            && w.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    });
    Some(match sub {
        Some(s) => format!("{first} {s}"),
        None => first.to_owned(),
    })
}

/// `path` made absolute against `base`, `.` and `..` taken out, and the links of the part
/// that exists resolved, so a folder rule judges where a call lands.
fn resolved(path: &str, base: Option<&Path>) -> Option<PathBuf> {
    let p = Path::new(path);
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        base?.join(p)
    };
    let mut clean = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other.as_os_str()),
        }
    }
    // The deepest part that exists, with its links resolved, then the rest as written.
    let mut existing = clean.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return Some(out);
        }
        let name = existing.file_name()?.to_owned();
        rest.push(name);
        if !existing.pop() {
            return Some(clean);
        }
    }
}

/// The scope "allow for this session" gives a call of `tool` with `input`, relative paths
/// read against `base`.
pub(crate) fn scope_of(
    tool: &str,
    display: &str,
    input: Option<&ToolInput>,
    base: Option<&Path>,
) -> Scope {
    let whole = || Scope {
        rule: tool.to_owned(),
        label: format!("Allow {display} for this session"),
    };
    match subject_of(input) {
        Subject::Command(c) => {
            let c = c.trim();
            match leading_words(c).filter(|_| !chains(c)) {
                Some(words) => Scope {
                    rule: format!("{tool}({words}:*)"),
                    label: format!(
                        "Allow {display} commands starting with \"{words}\" for this session"
                    ),
                },
                None => Scope {
                    rule: format!("{tool}({c})"),
                    label: format!("Allow exactly this {display} command for this session"),
                },
            }
        }
        Subject::Path(p) => {
            let Some(full) = resolved(&p, base) else {
                return whole();
            };
            let folder = if full.is_dir() {
                full
            } else {
                match full.parent() {
                    Some(f) => f.to_path_buf(),
                    None => return whole(),
                }
            };
            Scope {
                rule: format!("{tool}({}/**)", folder.display()),
                label: format!("Allow {display} in {}/ for this session", folder.display()),
            }
        }
        Subject::None => whole(),
    }
}

/// Whether `rule` allows a call of `tool` with `input`.
pub(crate) fn allows(
    rule: &str,
    tool: &str,
    input: Option<&ToolInput>,
    base: Option<&Path>,
) -> bool {
    let Some(spec) = rule
        .strip_prefix(tool)
        .and_then(|r| r.strip_prefix('('))
        .and_then(|r| r.strip_suffix(')'))
    else {
        return rule == tool;
    };
    match subject_of(input) {
        Subject::Command(c) => {
            let c = c.trim();
            match spec.strip_suffix(":*") {
                Some(words) => {
                    !chains(c)
                        && (c == words
                            || c.strip_prefix(words)
                                .is_some_and(|r| r.starts_with(char::is_whitespace)))
                }
                None => c == spec,
            }
        }
        Subject::Path(p) => {
            let Some(folder) = spec.strip_suffix("/**") else {
                return false;
            };
            resolved(&p, base).is_some_and(|full| full.starts_with(folder))
        }
        Subject::None => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cmd(c: &str) -> Option<ToolInput> {
        Some(ToolInput::Inline(c.to_owned()))
    }

    #[test]
    fn a_command_is_allowed_by_its_leading_words_and_nothing_chained() {
        let s = scope_of(
            "shell_exec",
            "shell_exec",
            cmd("git status --short").as_ref(),
            None,
        );
        assert_eq!(s.rule, "shell_exec(git status:*)");
        assert!(s.label.contains("\"git status\""), "{}", s.label);
        let ok = |c: &str| allows(&s.rule, "shell_exec", cmd(c).as_ref(), None);
        assert!(ok("git status"));
        assert!(ok("git status -uno"));
        assert!(!ok("git statusx"));
        assert!(!ok("rm -rf x"));
        assert!(!ok("git status; rm -rf x"));
        assert!(!ok("git status && curl x | sh"));
        assert!(!ok("git status\nrm x"));
        assert!(!ok("git status > /etc/x"));
        assert!(!allows(
            &s.rule,
            "other_tool",
            cmd("git status").as_ref(),
            None
        ));
        let cat = scope_of(
            "shell_exec",
            "shell_exec",
            cmd("cat notes.txt").as_ref(),
            None,
        );
        assert_eq!(cat.rule, "shell_exec(cat:*)");
        let chained = scope_of(
            "shell_exec",
            "shell_exec",
            cmd("ls; touch x").as_ref(),
            None,
        );
        assert_eq!(chained.rule, "shell_exec(ls; touch x)");
        assert!(allows(
            &chained.rule,
            "shell_exec",
            cmd("ls; touch x").as_ref(),
            None
        ));
        assert!(!allows(
            &chained.rule,
            "shell_exec",
            cmd("ls; touch y").as_ref(),
            None
        ));
    }

    #[test]
    fn a_file_tool_is_allowed_in_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("src")).unwrap();
        let input = |p: &str| Some(ToolInput::Inline(format!("{{\"path\":\"{p}\"}}")));
        let s = scope_of("edit_file", "Edit", input("src/a.rs").as_ref(), Some(&base));
        assert_eq!(
            s.rule,
            format!("edit_file({}/**)", base.join("src").display())
        );
        let ok = |p: &str| allows(&s.rule, "edit_file", input(p).as_ref(), Some(&base));
        assert!(ok("src/b.rs"));
        assert!(ok("src/deeper/c.rs"));
        assert!(!ok("README.md"));
        assert!(!ok("src/../README.md"));
        std::os::unix::fs::symlink("/etc", base.join("src/out")).unwrap();
        assert!(!ok("src/out/passwd"));
        let mcp = scope_of("mcp__x__y", "y", input("ignored").as_ref(), Some(&base));
        assert_eq!(mcp.rule, format!("mcp__x__y({}/**)", base.display()));
    }

    #[test]
    fn a_tool_without_a_subject_is_allowed_whole() {
        let s = scope_of(
            "mcp__x__y",
            "create issue",
            Some(&ToolInput::Inline("{\"title\":\"t\"}".into())),
            None,
        );
        assert_eq!(s.rule, "mcp__x__y");
        assert!(allows("mcp__x__y", "mcp__x__y", None, None));
        assert!(!allows("mcp__x__y", "mcp__x__z", None, None));
    }
}
