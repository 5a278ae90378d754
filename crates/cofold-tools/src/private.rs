//! What a person keeps to themselves on their own machine: the usual credential stores under the
//! home folder, the host's own files (its configuration, vault, token, the agents' stores) and
//! whatever the host's configuration adds. One set serves every user of it: a host's
//! file-serving commands refuse these paths, and the tools' permission check asks before (or,
//! in the modes that never ask, refuses) a call that reaches them, while walks skip them.
//!
//! A path is judged by where it lands (links resolved) and, for a file with more than one name,
//! by its identity (device and inode), so neither a symbolic nor a hard link inside a workspace
//! makes a private file an ordinary one.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Credential stores under the home folder, relative to it.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".config/gcloud",
    ".git-credentials",
    ".pgpass",
    ".password-store",
    ".local/share/keyrings",
    ".config/gh",
    // The model providers' keys of the copapo configuration.
    ".config/copapo",
];

/// The phrase for a credential store.
pub const CREDENTIAL_STORE: &str = "a credential store";
/// The phrase for the host's own files.
pub const HOST_FILES: &str = "the host's own files";

/// Picks, by file name, entries of one folder that are private.
pub type NameRule = Arc<dyn Fn(&OsStr) -> bool + Send + Sync>;

/// Files looked at, at most, when the identities of the private files are gathered.
const IDENTITY_SCAN_LIMIT: usize = 20_000;
/// How long a gathering of identities is reused.
const IDENTITY_REUSE: Duration = Duration::from_secs(2);

/// The identities (device, inode) of the private files with more than one name, and when they
/// were gathered.
type Gathered = (Instant, HashSet<(u64, u64)>);

/// A set of private paths. Cheap to clone.
#[derive(Clone, Default)]
pub struct PrivateSet {
    /// Each path as given, with its links resolved when it was added, and its phrase.
    paths: Vec<(PathBuf, PathBuf, &'static str)>,
    names: Vec<(PathBuf, PathBuf, NameRule, &'static str)>,
    identities: Arc<Mutex<Option<Gathered>>>,
}

impl fmt::Debug for PrivateSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivateSet")
            .field(
                "paths",
                &self.paths.iter().map(|p| &p.0).collect::<Vec<_>>(),
            )
            .field(
                "names",
                &self.names.iter().map(|n| &n.0).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

// Rules cannot be compared: two sets are equal when they name the same paths and folders.
impl PartialEq for PrivateSet {
    fn eq(&self, other: &Self) -> bool {
        self.paths == other.paths
            && self.names.len() == other.names.len()
            && self
                .names
                .iter()
                .zip(&other.names)
                .all(|(a, b)| a.0 == b.0 && a.3 == b.3)
    }
}

impl Eq for PrivateSet {}

/// `path` tidied as written: `.` dropped and `..` applied.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The path with links resolved in the deepest part that exists, the rest tidied as written.
pub fn resolved(path: &Path) -> PathBuf {
    let path = normalise(path);
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path,
        }
    }
}

impl PrivateSet {
    /// An empty set.
    pub fn new() -> PrivateSet {
        PrivateSet::default()
    }

    /// The credential stores of [`HOME_CREDENTIALS`] under `home`.
    pub fn home_credentials(home: &Path) -> PrivateSet {
        PrivateSet::new().with_paths(
            HOME_CREDENTIALS.iter().map(|c| home.join(c)),
            CREDENTIAL_STORE,
        )
    }

    /// Also `paths` and everything under them, said as `kind` (for example
    /// [`CREDENTIAL_STORE`] or [`HOST_FILES`]).
    pub fn with_paths(
        mut self,
        paths: impl IntoIterator<Item = PathBuf>,
        kind: &'static str,
    ) -> PrivateSet {
        self.paths.extend(paths.into_iter().map(|p| {
            let real = resolved(&p);
            (normalise(&p), real, kind)
        }));
        self.identities = Arc::default();
        self
    }

    /// Also the entries directly inside `dir` whose names `rule` picks, and everything under
    /// them: for families of files known only by pattern (rotated logs, temporary files).
    pub fn with_names(
        mut self,
        dir: PathBuf,
        rule: impl Fn(&OsStr) -> bool + Send + Sync + 'static,
        kind: &'static str,
    ) -> PrivateSet {
        let real = resolved(&dir);
        let rule: NameRule = Arc::new(rule);
        self.names.push((normalise(&dir), real, rule, kind));
        self.identities = Arc::default();
        self
    }

    /// This set and everything `other` holds.
    pub fn with_set(mut self, other: &PrivateSet) -> PrivateSet {
        self.paths.extend(other.paths.iter().cloned());
        self.names.extend(other.names.iter().cloned());
        self.identities = Arc::default();
        self
    }

    /// The private paths, as given.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.paths.iter().map(|(p, _, _)| p.as_path())
    }

    /// The name rules, as given.
    pub fn name_rules(&self) -> impl Iterator<Item = (&Path, &NameRule)> {
        self.names
            .iter()
            .map(|(dir, _, rule, _)| (dir.as_path(), rule))
    }

    /// Whether there is nothing in the set.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.names.is_empty()
    }

    /// What `path` (absolute) is, when private: judged on the path as written and with its
    /// links resolved, then by identity when it is a file with more than one name.
    pub fn judge(&self, path: &Path) -> Option<&'static str> {
        if self.is_empty() {
            return None;
        }
        let written = normalise(path);
        let real = resolved(path);
        self.by_path(&written, true)
            .or_else(|| self.by_path(&real, true))
            .or_else(|| self.by_identity(&real))
    }

    /// The judgement of an entry a walk met at `real`, its links already resolved by the walk
    /// (which follows none below its start): by path, then by identity for a file with more
    /// than one name.
    pub fn judge_entry(&self, real: &Path) -> Option<&'static str> {
        if self.is_empty() {
            return None;
        }
        self.by_path(real, false).or_else(|| self.by_identity(real))
    }

    /// By path; `fresh` resolves the private paths again (one judged call), else the forms
    /// resolved when they were added serve (each entry of a walk).
    fn by_path(&self, path: &Path, fresh: bool) -> Option<&'static str> {
        for (private, real, kind) in &self.paths {
            if path.starts_with(private)
                || path.starts_with(real)
                || fresh && path.starts_with(resolved(private))
            {
                return Some(kind);
            }
        }
        for (dir, real, rule, kind) in &self.names {
            for dir in [dir, real] {
                if let Some(first) = path
                    .strip_prefix(dir)
                    .ok()
                    .and_then(|rest| rest.components().next())
                    && rule(first.as_os_str())
                {
                    return Some(kind);
                }
            }
        }
        None
    }

    #[cfg(unix)]
    fn by_identity(&self, path: &Path) -> Option<&'static str> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.is_file() || meta.nlink() < 2 {
            return None;
        }
        let identity = (meta.dev(), meta.ino());
        let mut cache = self.identities.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = cache
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < IDENTITY_REUSE);
        if !fresh {
            *cache = Some((Instant::now(), self.gather()));
        }
        let known = cache
            .as_ref()
            .is_some_and(|(_, ids)| ids.contains(&identity));
        // Every private file is reported with the one phrase its folder has; the identity
        // gathering does not keep which folder it came from, so say the broader one.
        known.then_some(CREDENTIAL_STORE_OR_HOST)
    }

    #[cfg(not(unix))]
    fn by_identity(&self, _path: &Path) -> Option<&'static str> {
        None
    }

    /// The identities of the private files with more than one name, at most
    /// [`IDENTITY_SCAN_LIMIT`] entries looked at, links never followed.
    #[cfg(unix)]
    fn gather(&self) -> HashSet<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut found = HashSet::new();
        let mut budget = IDENTITY_SCAN_LIMIT;
        let mut stack: Vec<PathBuf> = self.paths.iter().map(|(p, _, _)| resolved(p)).collect();
        for (_, dir, rule, _) in &self.names {
            if let Ok(entries) = std::fs::read_dir(dir) {
                stack.extend(
                    entries
                        .flatten()
                        .filter(|e| rule(&e.file_name()))
                        .map(|e| e.path()),
                );
            }
        }
        while let Some(path) = stack.pop() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                if let Ok(entries) = std::fs::read_dir(&path) {
                    stack.extend(entries.flatten().map(|e| e.path()));
                }
            } else if meta.is_file() && meta.nlink() > 1 {
                found.insert((meta.dev(), meta.ino()));
            }
        }
        found
    }
}

/// The phrase for a file known to be private by its identity alone.
const CREDENTIAL_STORE_OR_HOST: &str =
    "another name of a private file (a credential store or the host's own files)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_links_and_hard_links_are_judged_alike() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
        std::fs::write(home.join(".ssh/id_ed25519"), "key").expect("write");
        std::fs::create_dir_all(home.join("work")).expect("mkdir");
        std::fs::write(home.join("work/plain.txt"), "plain").expect("write");
        let set = PrivateSet::home_credentials(&home);
        assert_eq!(
            set.judge(&home.join(".ssh/id_ed25519")),
            Some(CREDENTIAL_STORE)
        );
        assert_eq!(
            set.judge(&home.join("work/../.ssh")),
            Some(CREDENTIAL_STORE)
        );
        assert_eq!(
            set.judge(&home.join(".ssh/not-yet")),
            Some(CREDENTIAL_STORE)
        );
        assert_eq!(set.judge(&home.join("work/plain.txt")), None);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(home.join(".ssh"), home.join("work/keys")).expect("link");
            assert_eq!(
                set.judge(&home.join("work/keys/id_ed25519")),
                Some(CREDENTIAL_STORE)
            );
            std::fs::hard_link(home.join(".ssh/id_ed25519"), home.join("work/copy")).expect("link");
            assert!(set.judge(&home.join("work/copy")).is_some());
            assert!(set.judge_entry(&home.join("work/copy")).is_some());
        }
    }

    #[test]
    fn name_rules_pick_entries_of_one_folder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let conf = dir.path().canonicalize().expect("canonical");
        let set = PrivateSet::new().with_names(
            conf.clone(),
            |name: &OsStr| name.to_str().is_some_and(|n| n.starts_with("vault")),
            HOST_FILES,
        );
        assert_eq!(set.judge(&conf.join("vault.json")), Some(HOST_FILES));
        assert_eq!(set.judge(&conf.join("vault.json/x")), Some(HOST_FILES));
        assert_eq!(set.judge(&conf.join("notes")), None);
    }
}
