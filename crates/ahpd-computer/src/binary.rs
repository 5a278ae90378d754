//! The daemon's own build, copied once per build into the configuration folder and mounted
//! read-only in every machine, so inner hosts need nothing installed in the image.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the build folder appears inside a machine.
pub const BIN_DIR: &str = "/opt/ahpd/bin";

/// The oldest glibc a build made on Debian 12 runs on, for the sentence of an image without it.
pub const GLIBC: &str = "2.36";

/// One build file in `<configuration folder>/computer/bin`.
#[derive(Debug, Clone)]
pub struct Build {
    /// The folder mounted at [`BIN_DIR`].
    pub dir: PathBuf,
    /// The file's name, `ahpd-<version>-<8 hex of its sha256>`.
    pub file: String,
}

/// Copies `source` (the running executable unless another is named) into `dir`, atomically and
/// only when absent.
pub fn install(dir: &Path, source: Option<&Path>) -> std::io::Result<Build> {
    let source = match source {
        Some(s) => s.to_path_buf(),
        // Read through the process, so a replaced installation does not matter.
        None => PathBuf::from("/proc/self/exe"),
    };
    let bytes = std::fs::read(&source)?;
    let hash = Sha256::digest(&bytes);
    let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let file = format!("ahpd-{}-{hex}", env!("CARGO_PKG_VERSION"));
    std::fs::create_dir_all(dir)?;
    let path = dir.join(&file);
    if !path.exists() {
        use std::os::unix::fs::OpenOptionsExt as _;
        let tmp = dir.join(format!(".{file}.{}", std::process::id()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(Build {
        dir: dir.to_path_buf(),
        file,
    })
}

/// Removes build files no machine names, keeping the current one.
pub fn prune(build: &Build, named: &[String]) {
    let Ok(entries) = std::fs::read_dir(&build.dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("ahpd-")
            && name != build.file
            && !named.contains(&name)
            && std::fs::remove_file(e.path()).is_ok()
        {
            tracing::info!("removed the old build {name}, which no machine runs");
        }
    }
}
