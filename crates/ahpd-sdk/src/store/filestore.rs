//! [`FileSessionStore`]: the session store as one JSON file, readable only by its owner and
//! replaced atomically on every save, so a crash at any moment leaves either the old file or
//! the new one.

use std::collections::HashSet;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::store::sessionstore::{SessionRecord, SessionStore, SessionStoreError};

/// The file format version this host writes and reads.
const VERSION: u64 = 1;

#[derive(Serialize)]
struct FileOut<'a> {
    version: u64,
    sessions: &'a [&'a SessionRecord],
}

/// What identifies one version of the file: every save writes a new file and renames it into
/// place, so a file still carrying the stamp of this store's last save was not written since.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let meta = fs::metadata(path).ok()?;
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        Some(Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        })
    }
}

#[derive(Deserialize)]
struct FileIn {
    version: u64,
    #[serde(default)]
    sessions: Vec<SessionRecord>,
}

/// A [`SessionStore`] kept in one JSON file (mode `0600` on Unix):
/// `{"version": 1, "sessions": [...]}`.
///
/// Reading never loses data: a file that is not a session store is moved aside to
/// `<file>.corrupt-<unix millis>` (and the host starts with no remembered sessions); a file
/// that cannot be read at all, or that a newer host wrote, is left alone and never written
/// over in this run. Every save goes to a temporary file in the same folder, is flushed to
/// disk, then renamed over the store.
///
/// Several hosts may share one file (two daemons on one configuration folder). A save holds an
/// advisory lock on `.<file>.lock` beside it, reads the file again when it is no longer the one
/// this store last wrote, and keeps the sessions this store has never seen: they belong to
/// another host. What it writes for its own sessions
/// replaces theirs, and a session it loaded or saved before and no longer has is gone.
#[derive(Debug)]
pub struct FileSessionStore {
    path: PathBuf,
    /// Set when reading failed in a way that makes writing unsafe: the reason.
    blocked: Mutex<Option<String>>,
    /// The URIs this store loaded or last saved: its own, as against another host's.
    seen: Mutex<HashSet<String>>,
    /// The file as this store last wrote it; while it is still so, a save need not read it
    /// for another host's sessions (reading and parsing every session once a second was most
    /// of what a save cost, in time and in memory).
    written: Mutex<Option<Stamp>>,
    temp_counter: AtomicU64,
}

impl FileSessionStore {
    /// A store at `path`. Creates the parent folder when it is missing (mode `0700` on Unix).
    /// Fails when `path` is a folder or its parent cannot be created; a missing file is fine
    /// (the store starts empty).
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, SessionStoreError> {
        let path = path.into();
        if path.is_dir() {
            return Err(SessionStoreError::BadPath {
                path,
                reason: "it is a folder".into(),
            });
        }
        if path.file_name().is_none() {
            return Err(SessionStoreError::BadPath {
                path,
                reason: "it names no file".into(),
            });
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            create_private_dir(parent).map_err(|e| SessionStoreError::BadPath {
                path: path.clone(),
                reason: format!("its folder could not be created: {e}"),
            })?;
        }
        Ok(Self {
            path,
            blocked: Mutex::new(None),
            seen: Mutex::new(HashSet::new()),
            written: Mutex::new(None),
            temp_counter: AtomicU64::new(0),
        })
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn remember<'a>(&self, records: impl IntoIterator<Item = &'a SessionRecord>) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.clear();
            seen.extend(records.into_iter().map(|r| r.uri.clone()));
        }
    }

    /// The sessions in the file now that this store has never seen and is not about to write.
    fn others_on_disk(
        &self,
        records: &[&SessionRecord],
    ) -> Result<Vec<SessionRecord>, SessionStoreError> {
        let last = self.written.lock().ok().and_then(|w| w.clone());
        if last.is_some() && last == Stamp::of(&self.path) {
            return Ok(Vec::new());
        }
        let on_disk = match self.read_file() {
            Ok(sessions) => sessions,
            // Another host left something that is not a store: it was moved aside; nothing
            // of it can be kept.
            Err(SessionStoreError::Corrupt { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let ours: HashSet<&str> = records.iter().map(|r| r.uri.as_str()).collect();
        Ok(on_disk
            .into_iter()
            .filter(|r| !seen.contains(&r.uri) && !ours.contains(r.uri.as_str()))
            .collect())
    }

    fn lock_file(&self) -> std::io::Result<fs::File> {
        let mut name = std::ffi::OsString::from(".");
        name.push(self.path.file_name().unwrap_or_default());
        name.push(".lock");
        let file = open_private(&self.path.with_file_name(name))?;
        file.lock()?;
        Ok(file)
    }

    fn block(&self, reason: String) {
        if let Ok(mut b) = self.blocked.lock() {
            *b = Some(reason);
        }
    }

    fn set_aside(&self, reason: String) -> SessionStoreError {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".corrupt-{millis}"));
        let moved_to = PathBuf::from(name);
        match fs::rename(&self.path, &moved_to) {
            Ok(()) => SessionStoreError::Corrupt {
                path: self.path.clone(),
                moved_to,
                reason,
            },
            Err(e) => {
                // It could not be moved: keep it where it is and write nothing over it.
                let err = SessionStoreError::Read {
                    path: self.path.clone(),
                    source: std::io::Error::other(format!(
                        "its contents are not a session store ({reason}) and moving it aside \
                         failed ({e})"
                    )),
                };
                self.block(err.to_string());
                err
            }
        }
    }
}

impl SessionStore for FileSessionStore {
    fn load(&self) -> Result<Vec<SessionRecord>, SessionStoreError> {
        let sessions = self.read_file()?;
        self.remember(&sessions);
        Ok(sessions)
    }

    fn save(&self, records: &[&SessionRecord]) -> Result<(), SessionStoreError> {
        if let Some(reason) = self.blocked.lock().ok().and_then(|b| b.clone()) {
            return Err(SessionStoreError::Refused {
                path: self.path.clone(),
                reason,
            });
        }
        let _lock = self
            .lock_file()
            .map_err(|source| SessionStoreError::Write {
                path: self.path.clone(),
                source,
            })?;
        let others = self.others_on_disk(records)?;
        let mut all = records.to_vec();
        all.extend(others.iter());
        self.write_file(&all)?;
        // Another host's sessions kept in the file are not held here: the next save must read
        // them again.
        if let Ok(mut written) = self.written.lock() {
            *written = others.is_empty().then(|| Stamp::of(&self.path)).flatten();
        }
        self.remember(records.iter().copied());
        Ok(())
    }
}

impl FileSessionStore {
    fn read_file(&self) -> Result<Vec<SessionRecord>, SessionStoreError> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                let err = SessionStoreError::Read {
                    path: self.path.clone(),
                    source,
                };
                self.block(err.to_string());
                return Err(err);
            }
        };
        // A file cut to nothing (a full disk before the first save) holds no sessions.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let file: FileIn = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => return Err(self.set_aside(e.to_string())),
        };
        if file.version > VERSION {
            let err = SessionStoreError::NewerVersion {
                path: self.path.clone(),
                version: file.version,
            };
            self.block(err.to_string());
            return Err(err);
        }
        if file.version == 0 {
            return Err(self.set_aside("version 0 is not a session store version".into()));
        }
        Ok(file.sessions)
    }

    fn write_file(&self, records: &[&SessionRecord]) -> Result<(), SessionStoreError> {
        let write_err = |source| SessionStoreError::Write {
            path: self.path.clone(),
            source,
        };
        let dir = self
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        let result = (|| {
            // Written as it is serialised, so a save holds no text of the whole file.
            let mut out = std::io::BufWriter::new(private_file(&temp)?);
            let file = FileOut {
                version: VERSION,
                sessions: records,
            };
            serde_json::to_writer_pretty(&mut out, &file).map_err(std::io::Error::other)?;
            out.write_all(b"\n")?;
            let f = out.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            drop(f);
            fs::rename(&temp, &self.path)?;
            // Make the rename itself durable; a folder that cannot be synced is not an error.
            if let Ok(d) = fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result.map_err(write_err)
    }
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// Opens a file, creating it readable only by its owner when it is missing.
#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

#[cfg(unix)]
fn create_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

#[cfg(not(unix))]
fn create_private_dir(path: &Path) -> std::io::Result<()> {
    fs::create_dir_all(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record(uri: &str) -> SessionRecord {
        SessionRecord {
            uri: uri.into(),
            provider: "mock".into(),
            backend_id: "abc".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            title: Some("Mine".into()),
            is_read: true,
            is_archived: false,
            config: serde_json::from_str(r#"{"permissionMode":"plan"}"#).unwrap(),
            working_directories: vec!["file:///tmp".into()],
            nested: None,
        }
    }

    #[test]
    fn saves_and_loads_with_owner_only_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("sessions.json");
        let store = FileSessionStore::open(&path).unwrap();
        assert!(store.load().unwrap().is_empty(), "a missing file is empty");
        store.save(&[&record("mock:/abc")]).unwrap();
        assert_eq!(store.load().unwrap(), vec![record("mock:/abc")]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        // No temporary file is left behind; the lock file stays, as private as the store.
        let mut names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".sessions.json.lock", "sessions.json"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let lock = path.with_file_name(".sessions.json.lock");
            let mode = fs::metadata(lock).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
    }

    fn uris_in(path: &Path) -> Vec<String> {
        let mut uris: Vec<String> = FileSessionStore::open(path)
            .unwrap()
            .load()
            .unwrap()
            .into_iter()
            .map(|r| r.uri)
            .collect();
        uris.sort();
        uris
    }

    #[test]
    fn two_hosts_on_one_file_keep_each_others_sessions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        let a = FileSessionStore::open(&path).unwrap();
        let b = FileSessionStore::open(&path).unwrap();
        assert!(a.load().unwrap().is_empty());
        assert!(b.load().unwrap().is_empty());
        a.save(&[&record("mock:/a1")]).unwrap();
        b.save(&[&record("mock:/b1")]).unwrap();
        assert_eq!(uris_in(&path), ["mock:/a1", "mock:/b1"]);
        // A host's change to its own session replaces the record; the other's stays.
        let mut renamed = record("mock:/a1");
        renamed.title = Some("Renamed".into());
        a.save(&[&renamed]).unwrap();
        // A host that drops its own session removes that one only.
        b.save(&[]).unwrap();
        let left = FileSessionStore::open(&path).unwrap().load().unwrap();
        assert_eq!(left, vec![renamed]);
        // A session a host loaded and then dropped (pruned at start) is removed too.
        let c = FileSessionStore::open(&path).unwrap();
        assert_eq!(c.load().unwrap().len(), 1);
        c.save(&[]).unwrap();
        assert!(uris_in(&path).is_empty());
    }

    #[test]
    fn a_file_changed_since_the_last_save_is_read_again_and_one_left_alone_is_kept_as_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        let a = FileSessionStore::open(&path).unwrap();
        a.save(&[&record("mock:/a1")]).unwrap();
        a.save(&[&record("mock:/a1"), &record("mock:/a2")]).unwrap();
        assert_eq!(uris_in(&path), ["mock:/a1", "mock:/a2"]);
        // Someone writes the file in place (same file, new contents) with a session of theirs.
        let mut text: serde_json::Value =
            serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let mut theirs = serde_json::to_value(record("mock:/x1")).unwrap();
        theirs["title"] = "Theirs".into();
        text["sessions"].as_array_mut().unwrap().push(theirs);
        fs::write(&path, serde_json::to_vec(&text).unwrap()).unwrap();
        a.save(&[&record("mock:/a1")]).unwrap();
        assert_eq!(uris_in(&path), ["mock:/a1", "mock:/x1"]);
        // Their session is in the file this store wrote, not in its own set: the next save
        // still keeps it.
        a.save(&[&record("mock:/a3")]).unwrap();
        assert_eq!(uris_in(&path), ["mock:/a3", "mock:/x1"]);
    }

    #[test]
    fn a_corrupt_file_is_set_aside_whole_and_the_store_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        fs::write(&path, b"{\"version\": 1, \"sessions\": [ {oops").unwrap();
        let store = FileSessionStore::open(&path).unwrap();
        let err = store.load().unwrap_err();
        let SessionStoreError::Corrupt { moved_to, .. } = &err else {
            panic!("expected Corrupt, got {err}");
        };
        assert!(err.to_string().contains("sessions.json"), "{err}");
        assert_eq!(
            fs::read(moved_to).unwrap(),
            b"{\"version\": 1, \"sessions\": [ {oops"
        );
        store.save(&[&record("mock:/abc")]).unwrap();
        assert_eq!(store.load().unwrap().len(), 1);
    }

    #[test]
    fn a_newer_file_is_never_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        fs::write(&path, br#"{"version": 9, "sessions": []}"#).unwrap();
        let store = FileSessionStore::open(&path).unwrap();
        assert!(matches!(
            store.load(),
            Err(SessionStoreError::NewerVersion { version: 9, .. })
        ));
        let err = store.save(&[&record("mock:/abc")]).unwrap_err();
        assert!(matches!(err, SessionStoreError::Refused { .. }), "{err}");
        assert_eq!(
            fs::read(&path).unwrap(),
            br#"{"version": 9, "sessions": []}"#
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_unreadable_file_is_never_written_over() {
        // A link to itself cannot be read even by root, for whom permission bits stop nothing.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.json");
        std::os::unix::fs::symlink("sessions.json", &path).unwrap();
        let store = FileSessionStore::open(&path).unwrap();
        assert!(matches!(store.load(), Err(SessionStoreError::Read { .. })));
        assert!(matches!(
            store.save(&[]),
            Err(SessionStoreError::Refused { .. })
        ));
        assert!(
            fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the unreadable entry is left as it was"
        );
    }

    #[test]
    fn a_folder_is_not_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let err = FileSessionStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, SessionStoreError::BadPath { .. }));
    }
}
