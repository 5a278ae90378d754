//! File primitives: streamed JSONL reading that survives a torn last line, appends that keep every
//! line whole, and whole-file writes through a temporary file and a rename.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cofold_agents::error::AgentError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use crate::names::TEMP_PREFIX;

/// An I/O failure as the reader sees it: what was being done, to which file, and why.
pub(crate) fn io_error(action: &str, path: &Path, err: &io::Error) -> AgentError {
    AgentError::internal(format!("cannot {action} {}: {err}", path.display()))
}

/// Reads a JSONL file line by line, handing each non-blank line to `each`. A missing file reads as
/// empty. Returns whether the file existed.
///
/// A line `each` cannot parse is skipped and reported (file and line number) in the log, wherever
/// it is: a torn or NUL-filled last line is what a crash or a power loss leaves, and one damaged
/// line in the middle must not make the rest of a person's session unreadable. The file is never
/// changed by reading.
pub(crate) fn scan(
    path: &Path,
    each: impl FnMut(&[u8]) -> Result<(), serde_json::Error>,
) -> Result<bool, AgentError> {
    scan_from(path, 0, each)
}

/// [`scan`] from byte `offset` on, which must be the start of a line.
pub(crate) fn scan_from(
    path: &Path,
    offset: u64,
    mut each: impl FnMut(&[u8]) -> Result<(), serde_json::Error>,
) -> Result<bool, AgentError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(io_error("open", path, &err)),
    };
    if offset > 0 {
        file.seek(SeekFrom::Start(offset))
            .map_err(|err| io_error("seek in", path, &err))?;
    }
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut line = Vec::with_capacity(4096);
    let mut number = 0usize;
    let mut pending: Option<(usize, serde_json::Error)> = None;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|err| io_error("read", path, &err))?;
        if read == 0 {
            break;
        }
        number += 1;
        let text = trim_line(&line);
        if text.is_empty() {
            continue;
        }
        if let Some((at, err)) = pending.take() {
            report_damage(path, &Damage::Line(at, offset), Some(&err));
        }
        if let Err(err) = each(text) {
            pending = Some((number, err));
        }
    }
    if let Some((at, err)) = pending {
        if err.classify() == Category::Eof {
            tracing::warn!(file = %path.display(), line = at, "skipping a torn last line");
        } else {
            report_damage(path, &Damage::Line(at, offset), Some(&err));
        }
    }
    Ok(true)
}

/// Where a damaged line is.
pub(crate) enum Damage {
    /// Line number (from 1) counted from a byte offset (0: the start of the file).
    Line(usize, u64),
    /// Counted from the end of the file, for readers that go backwards.
    FromEnd(usize),
}

/// Logs a skipped damaged line: the file, where, and why.
pub(crate) fn report_damage(path: &Path, at: &Damage, err: Option<&serde_json::Error>) {
    let why = err.map_or_else(|| "not a record".to_owned(), ToString::to_string);
    match at {
        Damage::Line(line, 0) => tracing::error!(
            file = %path.display(), line, error = %why,
            "{} is damaged at line {line}; the line is skipped and the file left as it is", path.display()
        ),
        Damage::Line(line, offset) => tracing::error!(
            file = %path.display(), line, offset, error = %why,
            "{} is damaged at line {line} after byte {offset}; the line is skipped and the file left as it is", path.display()
        ),
        Damage::FromEnd(lines) => tracing::error!(
            file = %path.display(), from_end = lines, error = %why,
            "{} is damaged {lines} lines from its end; the line is skipped and the file left as it is", path.display()
        ),
    }
}

/// Visits the non-blank lines of a file from the last to the first until `each` breaks, reading
/// backwards in blocks, so a caller that wants the end of a long log reads only the end. Returns
/// whether the file existed.
pub(crate) fn scan_back(
    path: &Path,
    each: impl FnMut(&[u8]) -> Result<ControlFlow<()>, AgentError>,
) -> Result<bool, AgentError> {
    scan_back_from(path, None, each)
}

/// [`scan_back`] from byte `end` (the end of the file when `None`) towards the start.
pub(crate) fn scan_back_from(
    path: &Path,
    end: Option<u64>,
    mut each: impl FnMut(&[u8]) -> Result<ControlFlow<()>, AgentError>,
) -> Result<bool, AgentError> {
    const BLOCK: u64 = 64 * 1024;
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(io_error("open", path, &err)),
    };
    let length = file
        .metadata()
        .map_err(|err| io_error("inspect", path, &err))?
        .len();
    let mut position = end.map_or(length, |end| end.min(length));
    // The pieces of the line being assembled, latest first: the blocks read since the last
    // newline. Kept apart so a line longer than a block is copied once, not once per block.
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut block = Vec::new();
    let mut joined = Vec::new();
    while position > 0 {
        let size = BLOCK.min(position);
        position -= size;
        block.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
        file.seek(SeekFrom::Start(position))
            .map_err(|err| io_error("seek in", path, &err))?;
        file.read_exact(&mut block)
            .map_err(|err| io_error("read", path, &err))?;
        let mut end = block.len();
        while let Some(newline) = block[..end].iter().rposition(|byte| *byte == b'\n') {
            let head = &block[newline + 1..end];
            let line = if pieces.is_empty() {
                head
            } else {
                join(&mut joined, head, &mut pieces)
            };
            let line = trim_line(line);
            if !line.is_empty() && each(line)?.is_break() {
                return Ok(true);
            }
            end = newline;
        }
        pieces.push(block[..end].to_vec());
    }
    let line = trim_line(join(&mut joined, &[], &mut pieces));
    if !line.is_empty() {
        let _ = each(line)?;
    }
    Ok(true)
}

/// `head` followed by `pieces` in file order (they are kept latest first), in `buffer`; empties
/// `pieces`.
fn join<'b>(buffer: &'b mut Vec<u8>, head: &[u8], pieces: &mut Vec<Vec<u8>>) -> &'b [u8] {
    buffer.clear();
    buffer.extend_from_slice(head);
    for piece in pieces.drain(..).rev() {
        buffer.extend_from_slice(&piece);
    }
    buffer
}

/// Visits every line of a file from byte `start` (the start of a line) with the offset it starts
/// at, until `each` breaks. Lines are handed over as they are (trimmed), damaged or not.
pub(crate) fn scan_offsets(
    path: &Path,
    start: u64,
    mut each: impl FnMut(u64, &[u8]) -> ControlFlow<()>,
) -> Result<bool, AgentError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(io_error("open", path, &err)),
    };
    file.seek(SeekFrom::Start(start))
        .map_err(|err| io_error("seek in", path, &err))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut line = Vec::with_capacity(4096);
    let mut offset = start;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|err| io_error("read", path, &err))?;
        if read == 0 {
            break;
        }
        let text = trim_line(&line);
        if !text.is_empty() && each(offset, text).is_break() {
            break;
        }
        offset += read as u64;
    }
    Ok(true)
}

/// Reads every record of a JSONL file in order.
pub(crate) fn read_all<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, AgentError> {
    let mut out = Vec::new();
    scan(path, |line| {
        out.push(serde_json::from_slice(line)?);
        Ok(())
    })?;
    Ok(out)
}

fn trim_line(line: &[u8]) -> &[u8] {
    // NUL bytes are what a power loss leaves where data never reached the disk; they count as
    // blank so a zero-filled stretch reads as nothing.
    let blank = |byte: &u8| matches!(byte, b'\n' | b'\r' | b' ' | b'\t' | 0);
    let start = line
        .iter()
        .position(|byte| !blank(byte))
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|byte| !blank(byte))
        .map_or(start, |at| at + 1);
    &line[start..end]
}

/// One compact JSON line, ending in `\n`.
pub(crate) fn to_line<T: Serialize>(value: &T) -> Result<Vec<u8>, AgentError> {
    let mut line = serde_json::to_vec(value)
        .map_err(|err| AgentError::internal(format!("a record could not be serialized: {err}")))?;
    line.push(b'\n');
    Ok(line)
}

/// Appends whole lines to a file, creating it when missing, in one write. With `sync` the data
/// is on the disk before this returns (`fdatasync`).
///
/// When the file does not end with `\n`, a crash left a fragment there. A fragment that is a whole
/// JSON value only lost its newline and gets one; anything else (half a line, NUL bytes, garbage)
/// is cut off, so the file ends on a clean line again before the new lines go on.
pub(crate) fn append_lines(path: &Path, lines: &[u8], sync: bool) -> Result<(), AgentError> {
    Appender::open(path)?.write(lines, sync)
}

/// A line file held open for appending, its end already mended (see [`append_lines`]).
///
/// Kept between appends by a writer that appends many small lines in a row (a run's streamed
/// events), so each costs one `write` instead of an open, a look at the last byte and a close.
/// Only this writer may append to the file while it is held.
#[derive(Debug)]
pub(crate) struct Appender {
    file: File,
    path: PathBuf,
    /// The mended end lacks its newline, which goes before the next lines.
    owes_newline: bool,
    /// When the file was last seen to have a name (see [`Appender::still_named`]).
    named_at: Instant,
}

/// How long after the file was seen to have a name the next append goes without looking: a
/// streamed reply appends every few microseconds, and a deleted session's folder only stops
/// receiving lines a moment later than it would have.
const NAMED_TRUST: Duration = Duration::from_millis(20);

impl Appender {
    /// Opens (or creates) `path` and mends its end.
    pub(crate) fn open(path: &Path) -> Result<Self, AgentError> {
        let mut file = crate::private::file_options()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(|err| io_error("open", path, &err))?;
        let length = file
            .metadata()
            .map_err(|err| io_error("inspect", path, &err))?
            .len();
        let mut owes_newline = false;
        if length > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::End(-1))
                .map_err(|err| io_error("seek in", path, &err))?;
            file.read_exact(&mut last)
                .map_err(|err| io_error("read", path, &err))?;
            if last[0] != b'\n' {
                owes_newline = mend_tail(&mut file, path, length)?;
            }
        }
        Ok(Self {
            file,
            path: path.to_path_buf(),
            owes_newline,
            named_at: Instant::now(),
        })
    }

    /// Appends whole lines in one write; with `sync`, `fdatasync` after it. After an error the
    /// file may end in part of a line: drop this appender, so the next one mends it.
    pub(crate) fn write(&mut self, lines: &[u8], sync: bool) -> Result<(), AgentError> {
        let written = if self.owes_newline {
            let mut buffer = Vec::with_capacity(lines.len() + 1);
            buffer.push(b'\n');
            buffer.extend_from_slice(lines);
            self.file.write_all(&buffer)
        } else {
            self.file.write_all(lines)
        };
        written.map_err(|err| io_error("append to", &self.path, &err))?;
        self.owes_newline = false;
        if sync {
            self.file
                .sync_data()
                .map_err(|err| io_error("sync", &self.path, &err))?;
        }
        Ok(())
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file still has a name: false once it (or its folder) was deleted, when
    /// appending to the open file would store lines nobody can read. Looked at no more often
    /// than every [`NAMED_TRUST`].
    pub(crate) fn still_named(&mut self) -> bool {
        if self.named_at.elapsed() < NAMED_TRUST {
            return true;
        }
        #[cfg(unix)]
        let named = {
            use std::os::unix::fs::MetadataExt;
            self.file.metadata().is_ok_and(|meta| meta.nlink() > 0)
        };
        #[cfg(not(unix))]
        let named = self.path.is_file();
        if named {
            self.named_at = Instant::now();
        }
        named
    }
}

/// Deals with the bytes after the last newline of a file of `length` bytes: true when they are a
/// whole JSON value that only needs a newline, false once they were cut off.
fn mend_tail(file: &mut File, path: &Path, length: u64) -> Result<bool, AgentError> {
    const BLOCK: u64 = 64 * 1024;
    let mut start = length;
    let mut fragment: Vec<u8> = Vec::new();
    let mut block = Vec::new();
    while start > 0 {
        let size = BLOCK.min(start);
        let from = start - size;
        block.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
        file.seek(SeekFrom::Start(from))
            .map_err(|err| io_error("seek in", path, &err))?;
        file.read_exact(&mut block)
            .map_err(|err| io_error("read", path, &err))?;
        if let Some(newline) = block.iter().rposition(|byte| *byte == b'\n') {
            let cut = from + newline as u64 + 1;
            block.drain(..=newline);
            block.extend_from_slice(&fragment);
            fragment = std::mem::take(&mut block);
            start = cut;
            break;
        }
        block.extend_from_slice(&fragment);
        fragment = std::mem::take(&mut block);
        start = from;
    }
    let text = trim_line(&fragment);
    if !text.is_empty() && serde_json::from_slice::<serde::de::IgnoredAny>(text).is_ok() {
        return Ok(true);
    }
    tracing::warn!(
        file = %path.display(), offset = start, bytes = length - start,
        "cutting off a damaged last line before appending"
    );
    file.set_len(start)
        .map_err(|err| io_error("cut the damaged end of", path, &err))?;
    Ok(false)
}

/// Reads a JSON file; `None` when it does not exist. A file that does not parse is an error naming
/// it.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, AgentError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(io_error("read", path, &err)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|err| {
        AgentError::internal(format!("{} is not a valid record: {err}", path.display()))
    })
}

/// Creates a folder and its parents.
pub(crate) fn create_dirs(path: &Path) -> Result<(), AgentError> {
    crate::private::create_dir_all(path).map_err(|err| io_error("create the folder", path, &err))
}

/// The names of the entries of a folder, sorted; a missing folder has none.
pub(crate) fn sorted_entries(folder: &Path) -> Result<Vec<String>, AgentError> {
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io_error("list", folder, &err)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| io_error("list", folder, &err))?;
        if let Ok(name) = entry.file_name().into_string()
            && !name.starts_with(TEMP_PREFIX)
        {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::durable::{Sync, write_json};
    use serde_json::Value;

    fn values(path: &Path) -> Result<Vec<Value>, AgentError> {
        read_all(path)
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_next_append_starts_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        fs::write(&path, "{\"a\":1}\n{\"a\":2}\n{\"a\":3,\"b\":\"par").unwrap();
        assert_eq!(values(&path).unwrap().len(), 2);
        append_lines(&path, b"{\"a\":4}\n", false).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(
            text.ends_with("{\"a\":2}\n{\"a\":4}\n"),
            "the torn line was cut off: {text:?}"
        );
        let read = values(&path).unwrap();
        assert_eq!(
            read.iter()
                .map(|v| v["a"].as_i64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2, 4]
        );
    }

    #[test]
    fn a_damaged_middle_line_is_skipped_and_the_rest_stays_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let original = "{\"a\":1}\nnot json at all}\n{\"a\":3}\n";
        fs::write(&path, original).unwrap();
        let read = values(&path).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[1]["a"], 3);
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            original,
            "reading changes nothing"
        );
    }

    fn appended_after(tail: &[u8]) -> (Vec<u8>, Vec<i64>) {
        appended_after_reading(tail, &[1, 2])
    }

    fn appended_after_reading(tail: &[u8], expected: &[i64]) -> (Vec<u8>, Vec<i64>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut bytes = b"{\"a\":1}\n{\"a\":2}\n".to_vec();
        bytes.extend_from_slice(tail);
        fs::write(&path, &bytes).unwrap();
        let before: Vec<i64> = values(&path)
            .unwrap()
            .iter()
            .map(|v| v["a"].as_i64().unwrap())
            .collect();
        assert_eq!(before, expected, "the damaged tail is ignored");
        append_lines(&path, b"{\"a\":4}\n", true).unwrap();
        let after = values(&path)
            .unwrap()
            .iter()
            .map(|v| v["a"].as_i64().unwrap())
            .collect();
        (fs::read(&path).unwrap(), after)
    }

    #[test]
    fn a_nul_tail_then_an_append_leaves_a_clean_file() {
        let (bytes, read) = appended_after(&[0u8; 4096]);
        assert_eq!(read, [1, 2, 4]);
        assert_eq!(
            bytes, b"{\"a\":1}\n{\"a\":2}\n{\"a\":4}\n",
            "the NULs were cut off"
        );
        let (bytes, read) = appended_after(b"{\"a\":3,\"b\":\"x\0\0\0\0");
        assert_eq!(read, [1, 2, 4]);
        assert_eq!(bytes, b"{\"a\":1}\n{\"a\":2}\n{\"a\":4}\n");
    }

    #[test]
    fn a_garbage_tail_then_an_append_leaves_a_clean_file() {
        let garbage: Vec<u8> = (0..3000u32)
            .map(|n| (n * 7919 % 251) as u8)
            .filter(|b| *b != b'\n')
            .collect();
        let (bytes, read) = appended_after(&garbage);
        assert_eq!(read, [1, 2, 4]);
        assert_eq!(bytes, b"{\"a\":1}\n{\"a\":2}\n{\"a\":4}\n");
        // A whole record that only lost its newline is kept.
        let (bytes, read) = appended_after_reading(b"{\"a\":3}", &[1, 2, 3]);
        assert_eq!(read, [1, 2, 3, 4]);
        assert!(bytes.ends_with(b"{\"a\":3}\n{\"a\":4}\n"));
        // Garbage holding newlines: the last fragment is cut, the earlier lines are skipped on
        // reading, and the file stays readable.
        let (_, read) = appended_after(b"junk\n\x01\x02{\n{\"a\"");
        assert_eq!(read, [1, 2, 4]);
    }

    #[test]
    fn a_damaged_last_line_and_blank_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        fs::write(&path, "\n{\"a\":1}\n\n\u{0}\u{0}\u{0}").unwrap();
        assert_eq!(values(&path).unwrap().len(), 1);
        assert_eq!(values(&dir.path().join("missing.jsonl")).unwrap().len(), 0);
    }

    #[test]
    fn backwards_reading_sees_every_line_in_reverse_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut text = String::new();
        for n in 0..20_000 {
            // Now and then a line longer than several blocks.
            let pad = if n % 5000 == 7 { 200_000 } else { n % 97 };
            text.push_str(&format!("{{\"n\":{n},\"pad\":\"{}\"}}\n", "x".repeat(pad)));
            if n % 1000 == 0 {
                text.push('\n');
            }
        }
        text.push_str("{\"n\":20000");
        fs::write(&path, &text).unwrap();
        let mut seen = Vec::new();
        scan_back(&path, |line| {
            seen.push(String::from_utf8(line.to_vec()).unwrap());
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
        let forward: Vec<&str> = text.lines().filter(|line| !line.is_empty()).collect();
        let mut backward: Vec<&str> = seen.iter().map(String::as_str).collect();
        backward.reverse();
        assert_eq!(backward, forward);
        let mut first = None;
        scan_back(&path, |line| {
            first = Some(line.to_vec());
            Ok(ControlFlow::Break(()))
        })
        .unwrap();
        assert_eq!(first.unwrap(), b"{\"n\":20000");
    }

    #[test]
    fn atomic_writes_leave_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_json(&path, &serde_json::json!({"k": 1}), Sync::Durable).unwrap();
        write_json(&path, &serde_json::json!({"k": 2}), Sync::Durable).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\n  \"k\": 2\n}\n");
        assert_eq!(sorted_entries(dir.path()).unwrap(), ["x.json"]);
    }
}
