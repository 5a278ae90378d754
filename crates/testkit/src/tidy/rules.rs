//! The rules checked over every tracked text file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{FILE_LINES_WARN, TidyError};

/// One place a rule was broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file, relative to the workspace root.
    pub file: PathBuf,
    /// The line, counted from 1 (0 for the whole file).
    pub line: usize,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
        }
    }
}

/// What the rules found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Broken rules: the check fails on any.
    pub errors: Vec<Finding>,
    /// Worth a look, not a failure (files over [`FILE_LINES_WARN`] lines).
    pub warnings: Vec<Finding>,
}

/// Parts of a path that only a particular machine has: a tool's own cache or install folder
/// (spelled in pieces so this file does not name them itself).
const MACHINE_MARKERS: &[&str] = &[
    concat!("/.cargo", "/registry/"),
    concat!("/.cargo", "/git/checkouts/"),
    concat!("/.rustup", "/toolchains/"),
];

/// The section sign, which the house writes out in words.
const SECTION: char = '\u{a7}';

/// The absolute folders a tracked file must never name: the checkout itself and, for a git
/// worktree, the main checkout it belongs to. A folder of fewer than two components (`/`,
/// `/src`) is left out, since test data names such paths on purpose.
pub fn forbidden_prefixes(workspace: &Path) -> Vec<String> {
    let mut dirs = vec![workspace.to_path_buf()];
    if let Ok(real) = workspace.canonicalize() {
        dirs.push(real);
    }
    let common = Command::new("git")
        .args(["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .current_dir(workspace)
        .output();
    if let Ok(out) = common
        && out.status.success()
    {
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if let Some(main) = Path::new(&text).parent() {
            dirs.push(main.to_path_buf());
        }
    }
    let mut out: Vec<String> = dirs
        .into_iter()
        .filter(|d| d.components().count() > 2)
        .map(|d| d.to_string_lossy().trim_end_matches('/').to_owned())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Checks one file's text, adding what it finds to `report`.
pub fn check_text(file: &Path, text: &str, forbidden: &[String], report: &mut Report) {
    for (n, line) in text.lines().enumerate() {
        let at = |message: String| Finding {
            file: file.to_path_buf(),
            line: n + 1,
            message,
        };
        if line.contains(SECTION) {
            report.errors.push(at(format!(
                "uses `{SECTION}`; name the section in words or link the heading instead"
            )));
        }
        if let Some(marker) = MACHINE_MARKERS.iter().find(|m| line.contains(*m)) {
            report.errors.push(at(format!(
                "names a path on one machine (`…{marker}…`); say which crate and file in words"
            )));
        }
        for prefix in forbidden {
            if names_absolute(line, prefix) {
                report.errors.push(at(format!(
                    "names the absolute path {prefix}; use a path relative to the repository"
                )));
            }
        }
    }
    let lines = text.lines().count();
    if file.extension().is_some_and(|e| e == "rs") && lines > FILE_LINES_WARN {
        report.warnings.push(Finding {
            file: file.to_path_buf(),
            line: 0,
            message: format!("{lines} lines (more than {FILE_LINES_WARN}): is it one concept?"),
        });
    }
}

/// Whether `line` holds `prefix` as the start of an absolute path (not as the tail of a
/// longer, relative one), followed by the end of the path or a further component.
fn names_absolute(line: &str, prefix: &str) -> bool {
    line.match_indices(prefix).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + prefix.len()..].chars().next();
        let starts = before.is_none_or(|c| !(c.is_alphanumeric() || "._-/~".contains(c)));
        let ends = after.is_none_or(|c| !(c.is_alphanumeric() || "._-".contains(c)));
        starts && ends
    })
}

/// The tracked files: `git ls-files`, or every file outside `target/` and `.git/` where the tree
/// is not a git checkout.
fn tracked(workspace: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .arg("ls-files")
        .arg("-z")
        .current_dir(workspace)
        .output();
    if let Ok(out) = listed
        && out.status.success()
    {
        return out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect();
    }
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(workspace.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let rel = dir.join(entry.file_name());
            let name = entry.file_name();
            if name == "target" || name == ".git" {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(rel),
                Ok(t) if t.is_file() => out.push(rel),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Checks every tracked text file of the workspace (files that are not UTF-8 are skipped).
pub fn check_tree(workspace: &Path) -> Result<Report, TidyError> {
    let forbidden = forbidden_prefixes(workspace);
    let mut report = Report::default();
    for file in tracked(workspace) {
        let bytes = match std::fs::read(workspace.join(&file)) {
            Ok(b) => b,
            // Listed but deleted in the working tree: nothing to check.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(TidyError::Read { path: file, source }),
        };
        if let Ok(text) = String::from_utf8(bytes) {
            check_text(&file, &text, &forbidden, &mut report);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str, forbidden: &[&str]) -> Vec<String> {
        let forbidden: Vec<String> = forbidden.iter().map(|s| (*s).to_owned()).collect();
        let mut report = Report::default();
        check_text(Path::new("docs/x.md"), text, &forbidden, &mut report);
        report.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_section_sign_and_a_machine_path_are_refused() {
        let found = errors(
            &format!(
                "fine\nsee host.md {SECTION}7\nin ~{}src/index/x-1.0/src/lib.rs\n",
                MACHINE_MARKERS[0]
            ),
            &[],
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("docs/x.md:2: uses `"), "{found:?}");
        assert!(
            found[1].starts_with("docs/x.md:3: names a path on one machine"),
            "{found:?}"
        );
    }

    #[test]
    fn the_checkout_path_is_refused_only_as_an_absolute_path() {
        let prefix = ["/srv/ci/cofold-rs"];
        assert_eq!(
            errors("open /srv/ci/cofold-rs/crates/a.rs", &prefix).len(),
            1
        );
        assert_eq!(errors("`/srv/ci/cofold-rs`", &prefix).len(), 1);
        assert!(errors("mirror/srv/ci/cofold-rs/x", &prefix).is_empty());
        assert!(errors("/srv/ci/cofold-rs-old/x", &prefix).is_empty());
        assert!(errors("/home/u/proj is test data", &prefix).is_empty());
    }

    #[test]
    fn a_long_source_file_is_a_warning_not_an_error() {
        let text = "x\n".repeat(FILE_LINES_WARN + 1);
        let mut report = Report::default();
        check_text(Path::new("src/big.rs"), &text, &[], &mut report);
        check_text(Path::new("docs/big.md"), &text, &[], &mut report);
        assert!(report.errors.is_empty());
        assert_eq!(report.warnings.len(), 1);
        assert_eq!(report.warnings[0].file, Path::new("src/big.rs"));
    }
}
