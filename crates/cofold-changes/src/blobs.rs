//! File contents kept by their SHA-256: on disk in one folder per session (each blob a file
//! named by its hash, readable by the person alone), or in memory for a session whose store is.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The hex SHA-256 of `bytes`.
pub fn hash_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Where blobs live.
pub(crate) enum Blobs {
    /// A folder of files named by hash.
    Dir(PathBuf),
    /// A map, for a session held in memory.
    Memory(Mutex<HashMap<String, Vec<u8>>>),
}

fn valid(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Blobs {
    pub(crate) fn in_memory() -> Blobs {
        Blobs::Memory(Mutex::default())
    }

    /// Keeps `bytes` under its hash (once), and gives the hash.
    pub(crate) fn put(&self, bytes: &[u8]) -> std::io::Result<String> {
        let hash = hash_of(bytes);
        match self {
            Blobs::Dir(dir) => {
                let path = dir.join(&hash);
                if path.exists() {
                    return Ok(hash);
                }
                private_dir(dir)?;
                let temp = dir.join(format!(".{hash}.{}", std::process::id()));
                {
                    let mut file = private_file(&temp)?;
                    file.write_all(bytes)?;
                }
                std::fs::rename(&temp, &path)?;
            }
            Blobs::Memory(map) => {
                map.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(hash.clone())
                    .or_insert_with(|| bytes.to_vec());
            }
        }
        Ok(hash)
    }

    /// The content kept under `hash`, if any.
    pub(crate) fn get(&self, hash: &str) -> Option<Vec<u8>> {
        if !valid(hash) {
            return None;
        }
        match self {
            Blobs::Dir(dir) => std::fs::read(dir.join(hash)).ok(),
            Blobs::Memory(map) => map
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(hash)
                .cloned(),
        }
    }

    pub(crate) fn has(&self, hash: &str) -> bool {
        if !valid(hash) {
            return false;
        }
        match self {
            Blobs::Dir(dir) => dir.join(hash).is_file(),
            Blobs::Memory(map) => map
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(hash),
        }
    }

    pub(crate) fn remove(&self, hash: &str) {
        if !valid(hash) {
            return;
        }
        match self {
            Blobs::Dir(dir) => {
                let _ = std::fs::remove_file(dir.join(hash));
            }
            Blobs::Memory(map) => {
                map.lock().unwrap_or_else(|p| p.into_inner()).remove(hash);
            }
        }
    }
}

/// A new file only its owner can read and write.
pub(crate) fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Makes `dir` and any missing parent readable by its owner alone, whatever the umask: the
/// store holds copies of the person's files.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}
