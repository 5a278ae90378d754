//! Where a path lands: lexical resolution against a workspace, the real path on disk with links
//! followed one name at a time, the inside/outside verdict hosts read, and the shown form.
//!
//! Everything here is total: a path that does not exist, a dangling link or a link loop still
//! gives an answer, because permission decisions are made before anything is created.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Links followed while resolving one path, all links together (the kernel's own figure).
const LINK_BUDGET: u32 = 40;

/// A path resolved against a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The path joined onto the workspace and normalised textually (no file-system access).
    pub absolute: PathBuf,
    /// Where `absolute` lands on disk now: links followed, a missing tail kept as written under
    /// its nearest existing ancestor.
    pub real: PathBuf,
    /// Whether `real` is the workspace's real path or lies under it.
    pub inside: bool,
}

/// Resolves `path` against `workspace`: the lexical `absolute`, the `real` path on disk, and
/// whether that real path is inside the workspace's real path.
///
/// An absolute `path` replaces the workspace; a relative workspace is first made absolute against
/// the process's current directory. Links are followed one name at a time with a budget of 40
/// shared by the whole path; once it is spent a link counts as a missing name, so a loop gives an
/// answer rather than an error.
pub fn resolve_within(workspace: &Path, path: &Path) -> ResolvedPath {
    let base = absolute_of(workspace);
    let absolute = normalize(&base.join(path));
    let real = real_path(&absolute);
    let real_workspace = real_path(&base);
    let inside = real.starts_with(&real_workspace);
    ResolvedPath {
        absolute,
        real,
        inside,
    }
}

/// The path a person reads for `absolute` seen from `from`: relative with `/` when `absolute` is
/// lexically `from` or under it (`.` for `from` itself), otherwise `absolute` in full.
///
/// Purely lexical, so a name reached through a link still shows as written. On Windows `\`
/// becomes `/`; names that are not UTF-8 are rendered lossily.
pub fn display_path(from: &Path, absolute: &Path) -> String {
    let from = normalize(&absolute_of(from));
    let absolute = normalize(&absolute_of(absolute));
    match absolute.strip_prefix(&from) {
        Ok(rest) if rest.as_os_str().is_empty() => ".".to_owned(),
        Ok(rest) => slashed(rest),
        Err(_) => slashed(&absolute),
    }
}

/// `path` made absolute against the current directory, without touching the file system beyond
/// asking for that directory.
pub(crate) fn absolute_of(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(path),
            // No current directory (it was deleted): the root is the only honest anchor left.
            Err(_) => Path::new("/").join(path),
        }
    }
}

/// Drops `.` and applies `..` textually, never climbing above the root.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(out.components().next_back(), Some(Component::Normal(_))) {
                    out.pop();
                } else if !out.has_root() {
                    // A relative path keeps leading `..`; an absolute one stays at its root.
                    out.push("..");
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// The real path of an absolute, normalised path (S2).
pub(crate) fn real_path(path: &Path) -> PathBuf {
    let mut budget = LINK_BUDGET;
    real(path, &mut budget)
}

fn real(path: &Path, budget: &mut u32) -> PathBuf {
    if let Ok(found) = std::fs::canonicalize(path) {
        return strip_verbatim(found);
    }
    if *budget > 0
        && let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_symlink()
        && let Ok(target) = std::fs::read_link(path)
    {
        *budget -= 1;
        let parent = match path.parent() {
            Some(parent) => real(parent, budget),
            None => path.to_path_buf(),
        };
        return follow(parent, &target, budget);
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => real(parent, budget).join(name),
        _ => path.to_path_buf(),
    }
}

/// Walks a link's target name by name from `dir`, the real folder holding the link.
fn follow(dir: PathBuf, target: &Path, budget: &mut u32) -> PathBuf {
    let mut position = dir;
    for component in target.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                position.push(component.as_os_str());
            }
            Component::CurDir => {}
            // The position is already real, so `..` leaves the folder the links led to.
            Component::ParentDir => {
                if let Some(parent) = position.parent() {
                    position = parent.to_path_buf();
                }
            }
            Component::Normal(name) => {
                position = real(&position.join(name), budget);
            }
        }
    }
    position
}

/// Windows' canonical form starts with `\\?\`; the rest of the program speaks plain paths.
#[cfg(windows)]
fn strip_verbatim(path: PathBuf) -> PathBuf {
    let plain = match path.to_str().and_then(|text| text.strip_prefix(r"\\?\")) {
        Some(rest) if !rest.starts_with("UNC\\") => Some(PathBuf::from(rest)),
        _ => None,
    };
    plain.unwrap_or(path)
}

#[cfg(not(windows))]
fn strip_verbatim(path: PathBuf) -> PathBuf {
    path
}

/// A path as text with `/` between names on every platform.
fn slashed(path: &Path) -> String {
    let text: OsString = path.as_os_str().to_owned();
    let text = text.to_string_lossy();
    if cfg!(windows) {
        text.replace('\\', "/")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_applies_dots_without_climbing_above_root() {
        assert_eq!(normalize(Path::new("/ws/./a/../b")), PathBuf::from("/ws/b"));
        assert_eq!(normalize(Path::new("/..")), PathBuf::from("/"));
        assert_eq!(normalize(Path::new("/a/../../x")), PathBuf::from("/x"));
        assert_eq!(normalize(Path::new("a/../../x")), PathBuf::from("../x"));
    }

    #[test]
    fn display_is_relative_inside_and_absolute_outside() {
        assert_eq!(display_path(Path::new("/ws"), Path::new("/ws")), ".");
        assert_eq!(display_path(Path::new("/ws"), Path::new("/ws/a/b")), "a/b");
        assert_eq!(
            display_path(Path::new("/ws"), Path::new("/ws2/x")),
            "/ws2/x"
        );
        assert_eq!(
            display_path(Path::new("/ws"), Path::new("/ws/..sibling")),
            "..sibling"
        );
    }
}
