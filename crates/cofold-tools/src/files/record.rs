//! The read-before-write record (S5): which files each session has seen, and in what state.

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The state of a file when a session last read or wrote it: modification time in nanoseconds
/// and size in bytes, both from `fstat` of an open descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    mtime_ns: i128,
    size: u64,
}

impl Stamp {
    /// The stamp of an open file's metadata.
    pub(crate) fn of(meta: &Metadata) -> Stamp {
        Stamp {
            mtime_ns: mtime_ns(meta),
            size: meta.len(),
        }
    }
}

#[cfg(unix)]
fn mtime_ns(meta: &Metadata) -> i128 {
    use std::os::unix::fs::MetadataExt;
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

#[cfg(not(unix))]
fn mtime_ns(meta: &Metadata) -> i128 {
    match meta
        .modified()
        .map(|t| t.duration_since(std::time::UNIX_EPOCH))
    {
        Ok(Ok(since)) => since.as_nanos() as i128,
        _ => 0,
    }
}

/// What a check of the record found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Read in this session, unchanged since.
    Current,
    /// Never read in this session.
    Never,
    /// Read in this session, but its mtime or size differ now.
    Changed,
}

/// Which files each session has read, keyed by session id and real path.
///
/// One process-wide record ([`ReadRecord::global`]) is shared by every files capability unless
/// another is injected; it lasts as long as the process, so after a restart a file has to be read
/// again before it is changed. Access is thread-safe.
#[derive(Debug, Default)]
pub struct ReadRecord {
    entries: Mutex<HashMap<(String, PathBuf), Stamp>>,
}

impl ReadRecord {
    /// An empty record, for a program (or a test) that wants its own.
    pub fn new() -> ReadRecord {
        ReadRecord::default()
    }

    /// The process-wide record, shared by every files capability that is not given another.
    pub fn global() -> Arc<ReadRecord> {
        static GLOBAL: OnceLock<Arc<ReadRecord>> = OnceLock::new();
        Arc::clone(GLOBAL.get_or_init(|| Arc::new(ReadRecord::new())))
    }

    pub(crate) fn record(&self, session: &str, real: &Path, stamp: Stamp) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert((session.to_owned(), real.to_path_buf()), stamp);
    }

    pub(crate) fn check(&self, session: &str, real: &Path, now: Stamp) -> Seen {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(&(session.to_owned(), real.to_path_buf())) {
            None => Seen::Never,
            Some(stamp) if *stamp == now => Seen::Current,
            Some(_) => Seen::Changed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_separate_and_changes_are_seen() {
        let record = ReadRecord::new();
        let path = Path::new("/x/a.txt");
        let first = Stamp {
            mtime_ns: 1,
            size: 2,
        };
        record.record("s", path, first);
        assert_eq!(record.check("s", path, first), Seen::Current);
        assert_eq!(record.check("t", path, first), Seen::Never);
        let later = Stamp {
            mtime_ns: 1,
            size: 3,
        };
        assert_eq!(record.check("s", path, later), Seen::Changed);
    }
}
