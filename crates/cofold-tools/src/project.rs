//! Project instructions: the `AGENTS.md` files (a folder without one gives its `CLAUDE.md`)
//! from the project's top folder down to a session's folder, then one global file, within a
//! total budget, read again for every run so an edit between turns is seen by the next one.
//!
//! Which folders may be read is not this module's choice alone: a folder inside one of the
//! `served` roots is read, any other only when the [`FolderTrust`] given says so (a host asks
//! its person there). The top folder is the nearest one holding `.git` (the repository root),
//! but never above the served root the folder lies in.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};

/// The file read in each folder.
pub const AGENTS_FILE: &str = "AGENTS.md";
/// The file read in a folder that has no [`AGENTS_FILE`].
pub const CLAUDE_FILE: &str = "CLAUDE.md";
/// Bytes of instruction text a run is given at most, all files together.
pub const INSTRUCTIONS_CAP: usize = 32 * 1024;

/// Whether instruction files in a folder outside the served roots may be read.
#[async_trait]
pub trait FolderTrust: Send + Sync {
    /// Asked once per run for `top`, the folder whose files (`files`, in reading order) would be
    /// read; `true` lets them in. An implementation may ask a person and remember the answer.
    async fn allow(&self, top: &Path, files: &[PathBuf]) -> bool;
}

/// Where a run's project instructions come from.
#[derive(Clone, Default)]
pub struct ProjectSources {
    /// The session's folder.
    pub folder: PathBuf,
    /// The folders the host serves; files inside them are read without asking.
    pub served: Vec<PathBuf>,
    /// The person's own file, read after the project's (e.g. `<config>/AGENTS.md`).
    pub global: Option<PathBuf>,
    /// Asked about a folder outside `served`; without one such folders are never read.
    pub trust: Option<Arc<dyn FolderTrust>>,
    /// Bytes allowed in all; [`INSTRUCTIONS_CAP`] when zero.
    pub cap: usize,
}

/// How much of one file reached the instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inclusion {
    /// The whole file.
    Whole,
    /// Its beginning only: the budget ran out inside it.
    Cut,
    /// Nothing: the budget was spent before it.
    Left,
}

/// One instruction file found for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedFile {
    /// The file, as found (the folder's path joined with the file name).
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: usize,
    /// How much of it the model was given.
    pub inclusion: Inclusion,
    /// Whether it is the global file rather than one of the project's.
    pub global: bool,
}

/// What one run's reading found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loaded {
    /// The files in reading order.
    pub files: Vec<LoadedFile>,
    /// The instructions section; empty when no file was read.
    pub text: String,
    /// Files that exist but were not read because their folder is neither served nor allowed.
    pub withheld: Vec<PathBuf>,
}

impl Loaded {
    /// Whether the budget cut anything.
    pub fn cut(&self) -> bool {
        self.files.iter().any(|f| f.inclusion != Inclusion::Whole)
    }
}

fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| crate::paths::resolve_within(path, path).real)
}

/// The outermost served root that holds `folder` (both compared as real paths).
pub fn served_root(folder: &Path, served: &[PathBuf]) -> Option<PathBuf> {
    let folder = real(folder);
    served
        .iter()
        .map(|r| real(r))
        .filter(|r| folder.starts_with(r))
        .min_by_key(|r| r.components().count())
}

/// The project's top folder for `folder`: the nearest folder at or above it holding `.git`,
/// as long as that is not above `boundary`; else `boundary` (or `folder` without one).
pub fn project_top(folder: &Path, boundary: Option<&Path>) -> PathBuf {
    let folder = real(folder);
    for dir in folder.ancestors() {
        if let Some(b) = boundary
            && !dir.starts_with(b)
        {
            break;
        }
        if dir.join(".git").exists() {
            return dir.to_path_buf();
        }
    }
    boundary.map_or(folder, Path::to_path_buf)
}

/// The instruction files from `top` down to `folder`: per folder its `AGENTS.md`, else its
/// `CLAUDE.md`, when that is a regular file (links followed).
pub fn instruction_files(folder: &Path, top: &Path) -> Vec<PathBuf> {
    let folder = real(folder);
    let Ok(rest) = folder.strip_prefix(top) else {
        return Vec::new();
    };
    let mut dir = top.to_path_buf();
    let mut dirs = vec![dir.clone()];
    for name in rest.components() {
        dir.push(name);
        dirs.push(dir.clone());
    }
    dirs.iter()
        .filter_map(|d| {
            [AGENTS_FILE, CLAUDE_FILE]
                .iter()
                .map(|n| d.join(n))
                .find(|p| p.is_file())
        })
        .collect()
}

/// Reads `files` in order into one section of at most `cap` bytes of file text, saying at its
/// end what the budget cut. `global` marks the last file as the person's own.
pub fn load(files: &[PathBuf], global: Option<&Path>, cap: usize) -> Loaded {
    let mut loaded = Loaded::default();
    let mut left = cap;
    let mut body = String::new();
    let all = files
        .iter()
        .map(|p| (p.as_path(), false))
        .chain(global.map(|g| (g, true)));
    for (path, is_global) in all {
        // A file that cannot be read is skipped as if absent; it shows up nowhere.
        let Ok(bytes) = read_prefix(path, cap + 1) else {
            continue;
        };
        let size = std::fs::metadata(path)
            .map(|m| usize::try_from(m.len()).unwrap_or(usize::MAX))
            .unwrap_or(bytes.len());
        let text = String::from_utf8_lossy(&bytes);
        let inclusion = if left == 0 {
            Inclusion::Left
        } else if size <= left {
            Inclusion::Whole
        } else {
            Inclusion::Cut
        };
        if inclusion != Inclusion::Left {
            let take = floor_char_boundary(&text, left.min(text.len()));
            let part = &text[..take];
            left -= part.len();
            body.push_str(&format!(
                "<file path=\"{}\">\n{}\n</file>\n\n",
                path.display(),
                part.trim_end()
            ));
        }
        loaded.files.push(LoadedFile {
            path: path.to_path_buf(),
            bytes: size,
            inclusion,
            global: is_global,
        });
    }
    if loaded.files.iter().all(|f| f.inclusion == Inclusion::Left) {
        return loaded;
    }
    let mut text = String::from(
        "The project's instruction files follow, outermost folder first, then the person's own \
         file. Follow them; where they disagree, the deeper folder's file wins for its folder.\n\n",
    );
    text.push_str(&body);
    if loaded.cut() {
        let cut: Vec<String> = loaded
            .files
            .iter()
            .filter(|f| f.inclusion != Inclusion::Whole)
            .map(|f| {
                let how = if f.inclusion == Inclusion::Cut {
                    "cut short"
                } else {
                    "left out"
                };
                format!("{} ({how})", f.path.display())
            })
            .collect();
        let budget = if cap.is_multiple_of(1024) {
            format!("{} KiB", cap / 1024)
        } else {
            format!("{cap} bytes")
        };
        text.push_str(&format!(
            "The instruction files are over the {budget} budget, so some were not given in full: \
             {}. Read them with the file tools when they matter.\n",
            cut.join(", ")
        ));
    }
    loaded.text = text;
    loaded
}

fn read_prefix(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(u64::try_from(limit).unwrap_or(u64::MAX))
        .read_to_end(&mut out)?;
    Ok(out)
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

impl ProjectSources {
    /// Finds and reads this run's files, asking the trust about a folder outside the served
    /// roots.
    pub async fn read(&self) -> Loaded {
        let cap = if self.cap == 0 {
            INSTRUCTIONS_CAP
        } else {
            self.cap
        };
        let root = served_root(&self.folder, &self.served);
        let top = project_top(&self.folder, root.as_deref());
        let mut files = instruction_files(&self.folder, &top);
        let mut withheld = Vec::new();
        if root.is_none() && !files.is_empty() {
            let allowed = match &self.trust {
                Some(trust) => trust.allow(&top, &files).await,
                None => false,
            };
            if !allowed {
                withheld = std::mem::take(&mut files);
            }
        }
        let global = self.global.as_deref().filter(|g| g.is_file());
        let mut loaded = load(&files, global, cap);
        loaded.withheld = withheld;
        loaded
    }
}

/// Told what each run's reading found.
pub type LoadObserver = Arc<dyn Fn(&Loaded) + Send + Sync>;

/// The capability that puts the project's instructions into each run's system prompt, and
/// tells `observer` what it read.
pub struct ProjectInstructions {
    sources: ProjectSources,
    observer: Option<LoadObserver>,
}

impl ProjectInstructions {
    /// The capability over these sources.
    pub fn new(sources: ProjectSources) -> ProjectInstructions {
        ProjectInstructions {
            sources,
            observer: None,
        }
    }

    /// Calls `observer` with every run's reading.
    pub fn observed(mut self, observer: LoadObserver) -> Self {
        self.observer = Some(observer);
        self
    }
}

#[async_trait]
impl Capability for ProjectInstructions {
    fn id(&self) -> &str {
        "project"
    }

    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        let loaded = self.sources.read().await;
        if let Some(observer) = &self.observer {
            observer(&loaded);
        }
        Ok((!loaded.text.is_empty()).then_some(loaded.text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp");
        let root = dir.path().canonicalize().expect("real");
        std::fs::create_dir_all(root.join("repo/.git")).expect("git");
        std::fs::create_dir_all(root.join("repo/a/b")).expect("dirs");
        std::fs::write(root.join("repo/AGENTS.md"), "root rules").expect("w");
        std::fs::write(root.join("repo/a/CLAUDE.md"), "claude rules").expect("w");
        std::fs::write(root.join("repo/a/b/AGENTS.md"), "deep rules").expect("w");
        std::fs::write(root.join("repo/a/b/CLAUDE.md"), "not read").expect("w");
        std::fs::write(root.join("AGENTS.md"), "above the repository").expect("w");
        (dir, root)
    }

    #[test]
    fn the_chain_runs_from_the_repository_root_down_with_claude_md_as_the_fallback() {
        let (_d, root) = tree();
        let folder = root.join("repo/a/b");
        let top = project_top(&folder, Some(&root));
        assert_eq!(top, root.join("repo"));
        assert_eq!(
            instruction_files(&folder, &top),
            [
                root.join("repo/AGENTS.md"),
                root.join("repo/a/CLAUDE.md"),
                root.join("repo/a/b/AGENTS.md")
            ]
        );
    }

    #[test]
    fn the_served_root_bounds_the_chain() {
        let (_d, root) = tree();
        let served = root.join("repo/a");
        let top = project_top(&root.join("repo/a/b"), Some(&served));
        assert_eq!(top, served);
    }

    #[test]
    fn the_budget_cuts_in_order_and_says_so() {
        let (_d, root) = tree();
        let files = [root.join("repo/AGENTS.md"), root.join("repo/a/CLAUDE.md")];
        let loaded = load(&files, None, 14);
        assert_eq!(loaded.files[0].inclusion, Inclusion::Whole);
        assert_eq!(loaded.files[1].inclusion, Inclusion::Cut);
        assert!(loaded.text.contains("root rules"));
        assert!(loaded.text.contains("<file path=") && loaded.text.contains("\nclau\n"));
        assert!(
            loaded.text.contains("over the 14 bytes budget"),
            "{}",
            loaded.text
        );
        let whole = load(&files, None, INSTRUCTIONS_CAP);
        assert!(!whole.cut() && !whole.text.contains("budget"));
    }

    #[tokio::test]
    async fn an_unserved_folder_is_read_only_when_trusted() {
        struct Yes(bool);
        #[async_trait]
        impl FolderTrust for Yes {
            async fn allow(&self, _top: &Path, _files: &[PathBuf]) -> bool {
                self.0
            }
        }
        let (_d, root) = tree();
        let mut sources = ProjectSources {
            folder: root.join("repo/a/b"),
            served: vec![root.join("elsewhere")],
            ..ProjectSources::default()
        };
        let refused = sources.read().await;
        assert!(refused.text.is_empty() && refused.withheld.len() == 3);
        sources.trust = Some(Arc::new(Yes(true)));
        let allowed = sources.read().await;
        assert_eq!(allowed.files.len(), 3);
        assert!(allowed.text.contains("deep rules") && !allowed.text.contains("not read"));
    }
}
