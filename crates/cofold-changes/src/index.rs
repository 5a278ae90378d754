//! A folder's index: size, modification time and inode of every regular file, walked with the
//! folder's ignore files honoured (`.gitignore`, `.ignore`, the repository's excludes; `.git`
//! itself is skipped), so two indexes taken around a command say which files it touched
//! without reading any of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ignore::{ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};

/// Files an index holds at most; past it the walk stops and the index says so.
pub const MAX_INDEXED_FILES: usize = 200_000;

/// What the index knows of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Inode number (0 where the platform has none).
    pub inode: u64,
    /// The content's hash, when this session has read the content at this stat.
    pub hash: Option<String>,
}

impl Stat {
    fn same_file_state(&self, other: &Stat) -> bool {
        self.size == other.size && self.mtime_ns == other.mtime_ns && self.inode == other.inode
    }

    /// The stat of `path` now (links not followed), when it is a regular file.
    pub fn of(path: &Path) -> Option<Stat> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        meta.is_file().then(|| Stat::from_meta(&meta))
    }

    fn from_meta(meta: &std::fs::Metadata) -> Stat {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Stat {
            size: meta.len(),
            mtime_ns,
            inode,
            hash: None,
        }
    }
}

/// The regular files under a folder, as of one walk.
#[derive(Debug, Clone, Default)]
pub struct FolderIndex {
    /// The folder walked.
    pub root: PathBuf,
    /// Absolute path → stat.
    pub files: HashMap<PathBuf, Stat>,
    /// The walk stopped at [`MAX_INDEXED_FILES`] (or the bound given): the index is partial.
    pub over_bound: bool,
}

/// One file two indexes disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The file.
    pub path: PathBuf,
    /// Its stat before, `None` when it did not exist.
    pub before: Option<Stat>,
    /// Its stat after, `None` when it is gone.
    pub after: Option<Stat>,
}

struct Collect {
    shared: Arc<Mutex<Vec<(PathBuf, Stat)>>>,
    local: Vec<(PathBuf, Stat)>,
    count: Arc<std::sync::atomic::AtomicUsize>,
    bound: usize,
    over: Arc<std::sync::atomic::AtomicBool>,
}

impl ParallelVisitor for Collect {
    fn visit(&mut self, entry: Result<ignore::DirEntry, ignore::Error>) -> WalkState {
        use std::sync::atomic::Ordering;
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            return WalkState::Continue;
        }
        if self.count.fetch_add(1, Ordering::Relaxed) >= self.bound {
            self.over.store(true, Ordering::Relaxed);
            return WalkState::Quit;
        }
        if let Ok(meta) = entry.metadata() {
            self.local.push((entry.into_path(), Stat::from_meta(&meta)));
        }
        WalkState::Continue
    }
}

impl Drop for Collect {
    fn drop(&mut self) {
        let local = std::mem::take(&mut self.local);
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(local);
    }
}

struct Builder {
    shared: Arc<Mutex<Vec<(PathBuf, Stat)>>>,
    count: Arc<std::sync::atomic::AtomicUsize>,
    bound: usize,
    over: Arc<std::sync::atomic::AtomicBool>,
}

impl<'s> ParallelVisitorBuilder<'s> for Builder {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Collect {
            shared: self.shared.clone(),
            local: Vec::new(),
            count: self.count.clone(),
            bound: self.bound,
            over: self.over.clone(),
        })
    }
}

impl FolderIndex {
    /// Walks `root`, holding at most `bound` files, skipping the folders in `exclude`.
    pub fn scan(root: &Path, bound: usize) -> FolderIndex {
        FolderIndex::scan_excluding(root, bound, &[])
    }

    /// [`FolderIndex::scan`], leaving out everything under the folders in `exclude` (a store
    /// that lives inside the folder, whose own writes are no one's change).
    pub fn scan_excluding(root: &Path, bound: usize, exclude: &[PathBuf]) -> FolderIndex {
        let exclude: Vec<PathBuf> = exclude.to_vec();
        let shared = Arc::new(Mutex::new(Vec::new()));
        let over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut builder = Builder {
            shared: shared.clone(),
            count: Arc::default(),
            bound,
            over: over.clone(),
        };
        WalkBuilder::new(root)
            .hidden(false)
            .require_git(false)
            .follow_links(false)
            .filter_entry(move |e| {
                e.file_name() != ".git" && !exclude.iter().any(|x| e.path() == x.as_path())
            })
            .threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(8)))
            .build_parallel()
            .visit(&mut builder);
        drop(builder);
        let files = std::mem::take(&mut *shared.lock().unwrap_or_else(|p| p.into_inner()));
        FolderIndex {
            root: root.to_path_buf(),
            files: files.into_iter().collect(),
            over_bound: over.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Carries hashes over from `earlier` for files whose stat has not changed since.
    pub fn inherit(&mut self, earlier: &FolderIndex) {
        for (path, stat) in &mut self.files {
            if let Some(old) = earlier.files.get(path)
                && old.same_file_state(stat)
            {
                stat.hash.clone_from(&old.hash);
            }
        }
    }

    /// The files whose presence, size, modification time or inode differ from `before`, in
    /// path order.
    pub fn moved_since(&self, before: &FolderIndex) -> Vec<Moved> {
        let mut out = Vec::new();
        for (path, stat) in &self.files {
            match before.files.get(path) {
                Some(old) if old.same_file_state(stat) => {}
                old => out.push(Moved {
                    path: path.clone(),
                    before: old.cloned(),
                    after: Some(stat.clone()),
                }),
            }
        }
        for (path, old) in &before.files {
            if !self.files.contains_key(path) {
                out.push(Moved {
                    path: path.clone(),
                    before: Some(old.clone()),
                    after: None,
                });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    /// Notes that the session knows `path`'s content at its current stat.
    pub fn note(&mut self, path: &Path, hash: Option<String>) {
        match Stat::of(path) {
            Some(mut stat) => {
                stat.hash = hash;
                self.files.insert(path.to_path_buf(), stat);
            }
            None => {
                self.files.remove(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_finds_what_moved_and_honours_ignore_files() {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path();
        std::fs::write(root.join("kept.txt"), "a").expect("w");
        std::fs::write(root.join("gone.txt"), "a").expect("w");
        std::fs::write(root.join(".gitignore"), "built/\n").expect("w");
        std::fs::create_dir_all(root.join("built")).expect("d");
        std::fs::create_dir_all(root.join(".git")).expect("d");
        let before = FolderIndex::scan(root, MAX_INDEXED_FILES);
        assert_eq!(before.files.len(), 3, "{:?}", before.files.keys());
        std::fs::write(root.join("new.txt"), "b").expect("w");
        std::fs::write(root.join("kept.txt"), "changed").expect("w");
        std::fs::remove_file(root.join("gone.txt")).expect("rm");
        std::fs::write(root.join("built/out.o"), "x").expect("w");
        std::fs::write(root.join(".git/index"), "x").expect("w");
        let after = FolderIndex::scan(root, MAX_INDEXED_FILES);
        let moved: Vec<_> = after
            .moved_since(&before)
            .into_iter()
            .map(|m| {
                (
                    m.path.file_name().map(|n| n.to_owned()),
                    m.before.is_some(),
                    m.after.is_some(),
                )
            })
            .collect();
        assert_eq!(
            moved,
            [
                (Some("gone.txt".into()), true, false),
                (Some("kept.txt".into()), true, true),
                (Some("new.txt".into()), false, true),
            ]
        );
    }

    #[test]
    fn the_bound_is_said() {
        let dir = tempfile::tempdir().expect("temp");
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("{i}")), "a").expect("w");
        }
        let index = FolderIndex::scan(dir.path(), 3);
        assert!(index.over_bound && index.files.len() <= 3);
    }
}
