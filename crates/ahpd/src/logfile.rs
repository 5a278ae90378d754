//! `daemon.log` for the detached daemon, rotated by size so a daemon running for months keeps
//! a bounded amount of log: past [`MAX_BYTES`] the file becomes `daemon.log.1`, the older ones
//! shift up, and only [`KEEP`] of them are kept.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::fsutil;

/// Size at which `daemon.log` is rotated: 10 MiB.
pub const MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Rotated files kept beside it (`daemon.log.1` newest … `daemon.log.5` oldest).
pub const KEEP: usize = 5;

struct Inner {
    path: PathBuf,
    max_bytes: u64,
    keep: usize,
    file: File,
    written: u64,
    /// Point standard output and error at each new file, so a panic message or a stray print
    /// lands in the current log rather than in a rotated one.
    follow_stdio: bool,
}

/// A log file that rotates itself; cloning shares it.
#[derive(Clone)]
pub struct RotatingLog(Arc<Mutex<Inner>>);

fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(fsutil::PRIVATE_FILE)
        .open(path)?;
    let _ = fsutil::tighten(path);
    Ok(file)
}

fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

impl RotatingLog {
    /// Open (or continue) the log at `path`, rotating past `max_bytes` and keeping `keep`
    /// rotated files.
    pub fn open(path: &Path, max_bytes: u64, keep: usize, follow_stdio: bool) -> io::Result<Self> {
        let file = open_append(path)?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        let inner = Inner {
            path: path.to_owned(),
            max_bytes: max_bytes.max(1),
            keep,
            file,
            written,
            follow_stdio,
        };
        if follow_stdio {
            inner.redirect_stdio();
        }
        Ok(Self(Arc::new(Mutex::new(inner))))
    }
}

impl Inner {
    fn rotate(&mut self) -> io::Result<()> {
        if self.keep == 0 {
            let _ = std::fs::remove_file(&self.path);
        } else {
            let _ = std::fs::remove_file(numbered(&self.path, self.keep));
            for n in (1..self.keep).rev() {
                let from = numbered(&self.path, n);
                if from.exists() {
                    std::fs::rename(&from, numbered(&self.path, n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(&self.path, 1))?;
        }
        self.file = open_append(&self.path)?;
        self.written = 0;
        if self.follow_stdio {
            self.redirect_stdio();
        }
        Ok(())
    }

    fn redirect_stdio(&self) {
        let _ = rustix::stdio::dup2_stdout(&self.file);
        let _ = rustix::stdio::dup2_stderr(&self.file);
    }
}

impl Write for RotatingLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if inner.written > 0 && inner.written + buf.len() as u64 > inner.max_bytes {
            // A failed rotation keeps writing to the current file: losing log lines would be
            // worse than a file past its size.
            if let Err(e) = inner.rotate() {
                let _ = writeln!(inner.file, "ahpd: could not rotate the log: {e}");
            }
        }
        inner.file.write_all(buf)?;
        inner.written += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .file
            .flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RotatingLog {
    type Writer = RotatingLog;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rotates_past_the_size_and_keeps_only_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let mut log = RotatingLog::open(&path, 130, 2, false).unwrap();
        for i in 0..10 {
            // 60 bytes a line, written whole as the log formatter does: two lines a file.
            log.write_all(format!("{i:059}\n").as_bytes()).unwrap();
        }
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert!(read(&path).starts_with(&format!("{:059}", 8)));
        assert!(read(&numbered(&path, 1)).starts_with(&format!("{:059}", 6)));
        assert!(read(&numbered(&path, 2)).starts_with(&format!("{:059}", 4)));
        assert!(
            !numbered(&path, 3).exists(),
            "only two rotated files are kept"
        );
        for p in [path.clone(), numbered(&path, 1), numbered(&path, 2)] {
            assert!(std::fs::metadata(&p).unwrap().len() <= 120);
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
    }

    #[test]
    fn a_log_already_past_the_size_rotates_on_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        std::fs::write(&path, vec![b'x'; 500]).unwrap();
        let mut log = RotatingLog::open(&path, 100, 5, false).unwrap();
        log.write_all(b"fresh\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "fresh\n");
        assert_eq!(std::fs::metadata(numbered(&path, 1)).unwrap().len(), 500);
    }
}
