//! File primitives: streamed JSONL reading that survives a torn last line, appends that keep every
//! line whole, and whole-file writes through a temporary file and a rename.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

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
/// A line `each` cannot parse is judged by where it is and how it broke. A line cut short (the JSON
/// ends early) is what a crash leaves: it is skipped wherever it is, since a later append starts on
/// a fresh line after it. Any other broken line is skipped when it is the last one, and is an error
/// naming the file and line when more lines follow: then the file was damaged, and reading on would
/// hide the damage. The file is never changed by reading.
pub(crate) fn scan(
    path: &Path,
    mut each: impl FnMut(&[u8]) -> Result<(), serde_json::Error>,
) -> Result<bool, AgentError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(io_error("open", path, &err)),
    };
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
            if err.classify() != Category::Eof {
                return Err(AgentError::internal(format!(
                    "{} is damaged at line {at} ({err}); the file was left as it is, so mend or remove that line",
                    path.display()
                )));
            }
            tracing::warn!(file = %path.display(), line = at, "skipping a line cut short by a crash");
        }
        if let Err(err) = each(text) {
            pending = Some((number, err));
        }
    }
    if let Some((at, _)) = pending {
        tracing::warn!(file = %path.display(), line = at, "skipping a torn last line");
    }
    Ok(true)
}

/// Visits the non-blank lines of a file from the last to the first until `each` breaks, reading
/// backwards in blocks, so a caller that wants the end of a long log reads only the end. Returns
/// whether the file existed.
pub(crate) fn scan_back(
    path: &Path,
    mut each: impl FnMut(&[u8]) -> Result<ControlFlow<()>, AgentError>,
) -> Result<bool, AgentError> {
    const BLOCK: u64 = 64 * 1024;
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(io_error("open", path, &err)),
    };
    let mut position = file
        .metadata()
        .map_err(|err| io_error("inspect", path, &err))?
        .len();
    // The start of the line being assembled: everything after the last newline seen so far.
    let mut carry: Vec<u8> = Vec::new();
    let mut block = Vec::new();
    while position > 0 {
        let size = BLOCK.min(position);
        position -= size;
        block.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
        file.seek(SeekFrom::Start(position))
            .map_err(|err| io_error("seek in", path, &err))?;
        file.read_exact(&mut block)
            .map_err(|err| io_error("read", path, &err))?;
        block.extend_from_slice(&carry);
        let mut end = block.len();
        while let Some(newline) = block[..end].iter().rposition(|byte| *byte == b'\n') {
            let line = trim_line(&block[newline + 1..end]);
            if !line.is_empty() && each(line)?.is_break() {
                return Ok(true);
            }
            end = newline;
        }
        carry.clear();
        carry.extend_from_slice(&block[..end]);
    }
    let line = trim_line(&carry);
    if !line.is_empty() {
        let _ = each(line)?;
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
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    &line[..end]
}

/// One compact JSON line, ending in `\n`.
pub(crate) fn to_line<T: Serialize>(value: &T) -> Result<Vec<u8>, AgentError> {
    let mut line = serde_json::to_vec(value)
        .map_err(|err| AgentError::internal(format!("a record could not be serialized: {err}")))?;
    line.push(b'\n');
    Ok(line)
}

/// Appends whole lines to a file, creating it when missing. When the file does not end with `\n`
/// (a torn last line), a `\n` goes first so the new lines stay whole. One write per call; no fsync.
pub(crate) fn append_lines(path: &Path, lines: &[u8]) -> Result<(), AgentError> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(|err| io_error("open", path, &err))?;
    let length = file
        .metadata()
        .map_err(|err| io_error("inspect", path, &err))?
        .len();
    let mut needs_newline = false;
    if length > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::End(-1))
            .map_err(|err| io_error("seek in", path, &err))?;
        file.read_exact(&mut last)
            .map_err(|err| io_error("read", path, &err))?;
        needs_newline = last[0] != b'\n';
    }
    if needs_newline {
        let mut buffer = Vec::with_capacity(lines.len() + 1);
        buffer.push(b'\n');
        buffer.extend_from_slice(lines);
        file.write_all(&buffer)
    } else {
        file.write_all(lines)
    }
    .map_err(|err| io_error("append to", path, &err))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temporary name in `folder` that no encoded id or key can take.
pub(crate) fn temp_path(folder: &Path) -> std::path::PathBuf {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    folder.join(format!("{TEMP_PREFIX}-{}-{n}", std::process::id()))
}

/// Writes `bytes` to `path` whole: into a temporary file in the same folder, then renamed over the
/// target, so a reader sees the old content or the new, never half of one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), AgentError> {
    let folder = path.parent().unwrap_or(Path::new("."));
    let temp = temp_path(folder);
    let written = fs::write(&temp, bytes).and_then(|()| rename(&temp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&temp);
        return Err(io_error("write", path, &err));
    }
    Ok(())
}

/// Renames, retrying for up to a second on Windows, where a reader holding the target open makes
/// the rename fail with a sharing error.
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(windows)]
    {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match fs::rename(from, to) {
                Err(err)
                    if err.kind() == io::ErrorKind::PermissionDenied
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => return other,
            }
        }
    }
    #[cfg(not(windows))]
    {
        fs::rename(from, to)
    }
}

/// Writes a value as pretty JSON (2-space indent) through [`write_atomic`].
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), AgentError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|err| AgentError::internal(format!("a record could not be serialized: {err}")))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
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
    fs::create_dir_all(path).map_err(|err| io_error("create the folder", path, &err))
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
        append_lines(&path, b"{\"a\":4}\n").unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.ends_with("\"par\n{\"a\":4}\n"), "{text:?}");
        let read = values(&path).unwrap();
        assert_eq!(
            read.iter()
                .map(|v| v["a"].as_i64().unwrap())
                .collect::<Vec<_>>(),
            [1, 2, 4]
        );
    }

    #[test]
    fn a_damaged_middle_line_is_an_error_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let original = "{\"a\":1}\nnot json at all}\n{\"a\":3}\n";
        fs::write(&path, original).unwrap();
        let err = values(&path).unwrap_err();
        assert!(
            err.message.contains("log.jsonl is damaged at line 2"),
            "{}",
            err.message
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            original,
            "reading changes nothing"
        );
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
            text.push_str(&format!(
                "{{\"n\":{n},\"pad\":\"{}\"}}\n",
                "x".repeat(n % 97)
            ));
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
        write_json(&path, &serde_json::json!({"k": 1})).unwrap();
        write_json(&path, &serde_json::json!({"k": 2})).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\n  \"k\": 2\n}\n");
        assert_eq!(sorted_entries(dir.path()).unwrap(), ["x.json"]);
    }
}
