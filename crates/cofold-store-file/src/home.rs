//! Where the store lives: the home folder of a program, the workspace slug and the memory folder.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use cofold_agents::error::AgentError;

/// Reads an environment variable; [`process_env`] reads the real environment, tests pass their own.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process environment, for [`resolve_home`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// The home folder of program `name`: the variable `<NAME>_HOME` (upper-cased, every
/// non-alphanumeric character as `_`) when set and not empty, else `~/.<name>`.
///
/// The user's home is `HOME` (on Windows `USERPROFILE` when `HOME` is unset); when neither is set
/// the error says so.
pub fn resolve_home(name: &str, env: EnvLookup<'_>) -> Result<PathBuf, AgentError> {
    let variable: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .chain("_HOME".chars())
        .collect();
    if let Some(value) = env(&variable).filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(value));
    }
    let user_home = env("HOME")
        .filter(|value| !value.is_empty())
        .or_else(|| env("USERPROFILE").filter(|value| !value.is_empty()))
        .ok_or_else(|| {
            AgentError::invalid_options(format!(
                "cannot place the {name} folder: neither {variable} nor HOME is set"
            ))
        })?;
    Ok(PathBuf::from(user_home).join(format!(".{name}")))
}

/// cofold's home, the default store root: `$COFOLD_HOME`, else `~/.cofold`.
pub fn cofold_home() -> Result<PathBuf, AgentError> {
    resolve_home("cofold", &process_env)
}

/// The memory capability's folder for a workspace: `<root>/memory/<workspace slug>`. The store
/// itself never writes there.
pub fn memory_dir(root: &Path, workspace: &str) -> PathBuf {
    root.join("memory").join(workspace_slug(workspace))
}

/// The folder name of a workspace: its absolute, lexically normalised path (links are not
/// followed) with every UTF-16 code unit outside `[A-Za-z0-9._-]` replaced by `-`, as the upstream
/// TypeScript store names its folders. `/home/u/proj` → `-home-u-proj`.
pub fn workspace_slug(workspace: &str) -> String {
    let text = normalise(workspace);
    let mut slug = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            slug.push(c);
        } else {
            // A character beyond the Basic Multilingual Plane is two UTF-16 units, so two dashes.
            for _ in 0..c.len_utf16() {
                slug.push('-');
            }
        }
    }
    slug
}

/// Makes the path absolute (against the current folder) and removes `.` and `..` without asking
/// the file system; on Windows the drive letter is lower-cased.
fn normalise(workspace: &str) -> String {
    let path = Path::new(workspace);
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut parts: Vec<Component<'_>> = Vec::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(parts.last(), Some(Component::Normal(_))) {
                    parts.pop();
                }
            }
            other => parts.push(other),
        }
    }
    let joined: PathBuf = parts.iter().collect();
    let text = joined.to_string_lossy().into_owned();
    lower_drive_letter(text)
}

#[cfg(windows)]
fn lower_drive_letter(text: String) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.len() >= 2 && chars[1] == ':' {
        chars[0] = chars[0].to_ascii_lowercase();
    }
    chars.into_iter().collect()
}

#[cfg(not(windows))]
fn lower_drive_letter(text: String) -> String {
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn home_variable_wins_when_set_and_not_empty() {
        let env = env_of(&[("COFOLD_HOME", "/data/cofold"), ("HOME", "/home/u")]);
        assert_eq!(
            resolve_home("cofold", &env).unwrap(),
            PathBuf::from("/data/cofold")
        );
        let env = env_of(&[("COFOLD_HOME", ""), ("HOME", "/home/u")]);
        assert_eq!(
            resolve_home("cofold", &env).unwrap(),
            PathBuf::from("/home/u/.cofold")
        );
        let env = env_of(&[("HOME", "/home/u")]);
        assert_eq!(
            resolve_home("cofold", &env).unwrap(),
            PathBuf::from("/home/u/.cofold")
        );
        let env = env_of(&[("MY_TOOL_HOME", "/t"), ("HOME", "/home/u")]);
        assert_eq!(resolve_home("my-tool", &env).unwrap(), PathBuf::from("/t"));
        let none = resolve_home("cofold", &env_of(&[])).unwrap_err();
        assert!(none.message.contains("COFOLD_HOME"), "{}", none.message);
    }

    #[test]
    fn slugs_follow_the_upstream_rule() {
        assert_eq!(workspace_slug("/home/u/proj"), "-home-u-proj");
        assert_eq!(workspace_slug("/home/u/proj/"), "-home-u-proj");
        assert_eq!(workspace_slug("/home/u/./x/../proj"), "-home-u-proj");
        assert_eq!(workspace_slug("/a/b"), workspace_slug("/a-b"));
        assert_eq!(workspace_slug("/p/é"), "-p--");
        assert_eq!(workspace_slug("/p/😀"), "-p---");
        assert_eq!(workspace_slug("/p/a b.c_d"), "-p-a-b.c_d");
    }

    #[test]
    fn memory_dir_uses_the_slug() {
        let root = Path::new("/store");
        assert_eq!(
            memory_dir(root, "/home/u/proj"),
            PathBuf::from("/store/memory/-home-u-proj")
        );
    }
}
