//! The house rules, checked over the repository's own files: no module circles in any crate,
//! no section sign, no absolute path of the machine the tree was written on, and (as a warning) no
//! source file over the size a reader takes in at once.
//!
//! The tidy test (`cargo test -p testkit --test all tidy`) and `.ci/modgraph` (which prints
//! every crate's module graph) both use this module, so the rules are written once.

mod graph;
mod rules;
mod scan;

use std::path::{Path, PathBuf};

pub use graph::{Module, ModuleGraph};
pub use rules::{Finding, Report, check_text, check_tree, forbidden_prefixes};

/// The number of lines above which a source file draws a warning.
pub const FILE_LINES_WARN: usize = 600;

/// Why the repository could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TidyError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file, relative to the workspace root.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A `mod x;` names no file.
    #[error("{} declares `mod {name};` but neither {name}.rs nor {name}/mod.rs is there", file.display())]
    MissingModule {
        /// The declaring file, relative to the workspace root.
        file: PathBuf,
        /// The module's name.
        name: String,
    },
    /// The workspace root was not found.
    #[error("no Cargo.toml with a [workspace] table above {}", from.display())]
    NoWorkspace {
        /// Where the search started.
        from: PathBuf,
    },
}

/// The workspace root: the nearest folder at or above the current one whose `Cargo.toml` has
/// a `[workspace]` table.
pub fn workspace_root() -> Result<PathBuf, TidyError> {
    let from = std::env::current_dir().map_err(|source| TidyError::Read {
        path: PathBuf::from("."),
        source,
    })?;
    from.ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|t| t.lines().any(|l| l.trim() == "[workspace]"))
        })
        .map(Path::to_path_buf)
        .ok_or(TidyError::NoWorkspace { from })
}

/// The module graph of every library and binary target under `crates/` (a package's
/// `src/lib.rs` and `src/main.rs`), in name order.
pub fn module_graphs(workspace: &Path) -> Result<Vec<ModuleGraph>, TidyError> {
    let crates = workspace.join("crates");
    let entries = std::fs::read_dir(&crates).map_err(|source| TidyError::Read {
        path: PathBuf::from("crates"),
        source,
    })?;
    let mut packages: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    packages.sort();
    let mut out = Vec::new();
    for package in packages {
        for root in ["src/lib.rs", "src/main.rs"] {
            let file = Path::new("crates").join(&package).join(root);
            if workspace.join(&file).is_file() {
                out.push(ModuleGraph::read(workspace, &package, &file)?);
            }
        }
    }
    Ok(out)
}
