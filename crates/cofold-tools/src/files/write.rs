//! write_file and edit_file: every byte goes through the descriptor the checked
//! open returned, after the read-before-write check. Their previews take the same steps up to
//! the write, read-only, so what a person is shown is what the call does.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

use cofold_agents::tool::Preview;

use super::open::{OpenRefusal, Opened, checked_open, open_for_preview};
use super::read::BINARY_PROBE;
use super::record::{Seen, Stamp};
use super::{Refusal, Run};
use crate::paths::{ResolvedPath, display_path, resolve_within};

/// The most a preview shows of one side of a file: a larger file is described, not shown.
pub(crate) const PREVIEW_MAX_BYTES: u64 = 1024 * 1024;
/// The largest file an edit's preview still reads to tell whether the edit would go through.
const PREVIEW_READ_LIMIT: u64 = 16 * 1024 * 1024;

/// Runs write_file for one call.
pub(crate) fn write_file(run: &Run, path: &str, content: &str) -> Result<String, Refusal> {
    // Resolved again here, never reusing the resolution the permission decision saw (S6).
    let resolved = resolve_within(&run.workspace, path.as_ref());
    let shown = display_path(&run.workspace, &resolved.absolute);
    stays_inside(run, &resolved, &shown)?;
    let opened = checked_open(&resolved.real, true, run.options.before_open.as_deref())
        .map_err(|r| refusal_of(r, &shown))?;
    let (mut file, verb, bytes) = match opened {
        Opened::Created(file) => (file, "created", written_bytes(content, false)),
        Opened::Existing(mut file) => {
            check_read(run, &file, &resolved.real, &shown)?;
            let crlf = first_break_is_crlf(&mut file).map_err(|e| Refusal::io(&shown, &e))?;
            (file, "replaced", written_bytes(content, crlf))
        }
    };
    replace_contents(&mut file, &bytes).map_err(|e| Refusal::io(&shown, &e))?;
    stamp_after_write(run, &file, &resolved.real, &shown)?;
    Ok(format!("{verb} {shown} ({} bytes)", bytes.len()))
}

/// Runs edit_file for one call.
pub(crate) fn edit_file(
    run: &Run,
    path: &str,
    old: &str,
    new: &str,
    all: bool,
) -> Result<String, Refusal> {
    let resolved = resolve_within(&run.workspace, path.as_ref());
    let shown = display_path(&run.workspace, &resolved.absolute);
    stays_inside(run, &resolved, &shown)?;
    let opened = checked_open(&resolved.real, false, run.options.before_open.as_deref())
        .map_err(|r| refusal_of(r, &shown))?;
    let (Opened::Existing(mut file) | Opened::Created(mut file)) = opened;
    check_read(run, &file, &resolved.real, &shown)?;

    // Sized from fstat so a large file is read in one allocation.
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)
        .map_err(|e| Refusal::io(&shown, &e))?;
    let (output, count) = edited_bytes(&bytes, old, new, all, &shown)?;
    replace_contents(&mut file, &output).map_err(|e| Refusal::io(&shown, &e))?;
    stamp_after_write(run, &file, &resolved.real, &shown)?;
    Ok(if count == 1 {
        format!("edited {shown}: 1 replacement")
    } else {
        format!("edited {shown}: {count} replacements")
    })
}

/// What write_file puts in a file: `content`, with every line break as `\r\n` when the file
/// it replaces has CRLF line breaks (a new file gets `content` byte for byte).
fn written_bytes(content: &str, crlf: bool) -> Cow<'_, [u8]> {
    if crlf {
        Cow::Owned(to_crlf(content.as_bytes()))
    } else {
        Cow::Borrowed(content.as_bytes())
    }
}

fn is_binary(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(BINARY_PROBE)]).is_some()
}

/// Whether the first line break in `bytes` is `\r\n` (the same answer [`first_break_is_crlf`]
/// reads from a file).
fn crlf_of(bytes: &[u8]) -> bool {
    match memchr::memchr(b'\n', bytes) {
        Some(at) => at > 0 && bytes[at - 1] == b'\r',
        None => false,
    }
}

/// edit_file's rules applied to a file's bytes: what the file becomes and how many
/// replacements that took, or the refusal.
fn edited_bytes(
    bytes: &[u8],
    old: &str,
    new: &str,
    all: bool,
    shown: &str,
) -> Result<(Vec<u8>, usize), Refusal> {
    if is_binary(bytes) {
        return Err(Refusal(format!("{shown} is binary")));
    }
    let crlf = crlf_of(bytes);
    let view = to_lf(bytes);
    let old = to_lf(old.as_bytes());
    let new = to_lf(new.as_bytes());
    let found: Vec<usize> = memchr::memmem::find_iter(&view, &old).collect();
    let count = found.len();
    if count == 0 {
        return Err(Refusal(format!("old text not found in {shown}")));
    }
    if count > 1 && !all {
        return Err(Refusal(format!(
            "old text occurs {count} times in {shown}; add context to make it unique, or pass all: true"
        )));
    }
    let mut edited = Vec::with_capacity(view.len() + count * new.len());
    let mut at = 0;
    for start in &found {
        edited.extend_from_slice(&view[at..*start]);
        // Inserted as written: `$&` and `$1` mean nothing here.
        edited.extend_from_slice(&new);
        at = start + old.len();
    }
    edited.extend_from_slice(&view[at..]);
    let output = if crlf { to_crlf(&edited) } else { edited };
    Ok((output, count))
}

/// What write_file would do with `content` at `path`: the file created, or replaced from what
/// it holds now; or the refusal the call would meet; or why it cannot be shown.
pub(crate) fn preview_write(run: &Run, path: &str, content: &str) -> Preview {
    let resolved = resolve_within(&run.workspace, path.as_ref());
    let shown = display_path(&run.workspace, &resolved.absolute);
    if let Err(refusal) = stays_inside(run, &resolved, &shown) {
        return Preview::would_fail(refusal.0);
    }
    let file = match open_for_preview(&resolved.real) {
        Ok(file) => file,
        Err(refusal) => return preview_refusal(refusal, &shown),
    };
    let Some(file) = file else {
        let after = written_bytes(content, false);
        if let Some(why) = unshowable(&shown, &after, "the new content of") {
            return why;
        }
        return Preview::file(resolved.real, None, Some(after.into_owned()));
    };
    if let Err(refusal) = check_read(run, &file, &resolved.real, &shown) {
        return Preview::would_fail(refusal.0);
    }
    let before = match read_for_preview(file, &shown, PREVIEW_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(why) => return why,
    };
    let after = written_bytes(content, crlf_of(&before));
    for (side, what) in [(&before[..], ""), (&after[..], "the new content of")] {
        if let Some(why) = unshowable(&shown, side, what) {
            return why;
        }
    }
    let after = after.into_owned();
    Preview::file(resolved.real, Some(before), Some(after))
}

/// What edit_file would do: the file before and after the replacement, or the refusal the call
/// would meet (`old` missing or not unique among them), or why it cannot be shown.
pub(crate) fn preview_edit(run: &Run, path: &str, old: &str, new: &str, all: bool) -> Preview {
    let resolved = resolve_within(&run.workspace, path.as_ref());
    let shown = display_path(&run.workspace, &resolved.absolute);
    if let Err(refusal) = stays_inside(run, &resolved, &shown) {
        return Preview::would_fail(refusal.0);
    }
    let file = match open_for_preview(&resolved.real) {
        Ok(Some(file)) => file,
        Ok(None) => return Preview::would_fail(format!("no file at {shown}")),
        Err(refusal) => return preview_refusal(refusal, &shown),
    };
    if let Err(refusal) = check_read(run, &file, &resolved.real, &shown) {
        return Preview::would_fail(refusal.0);
    }
    let before = match read_for_preview(file, &shown, PREVIEW_READ_LIMIT) {
        Ok(bytes) => bytes,
        Err(why) => return why,
    };
    let after = match edited_bytes(&before, old, new, all, &shown) {
        Ok((after, _)) => after,
        Err(refusal) => return Preview::would_fail(refusal.0),
    };
    for side in [&before, &after] {
        if let Some(why) = unshowable(&shown, side, "") {
            return why;
        }
    }
    Preview::file(resolved.real, Some(before), Some(after))
}

/// The preview of a call the checked open would refuse: the same sentence.
fn preview_refusal(refusal: OpenRefusal, shown: &str) -> Preview {
    Preview::would_fail(refusal_of(refusal, shown).0)
}

/// Reads a whole file for a preview, up to `limit` bytes; a larger or unreadable file gets
/// the sentence saying so.
pub(crate) fn read_for_preview(
    mut file: File,
    shown: &str,
    limit: u64,
) -> Result<Vec<u8>, Preview> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > limit {
        return Err(too_large(shown, size));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    match (&mut file).take(limit + 1).read_to_end(&mut bytes) {
        Ok(_) if bytes.len() as u64 > limit => Err(too_large(shown, bytes.len() as u64)),
        Ok(_) => Ok(bytes),
        Err(error) => Err(Preview::unavailable(format!(
            "{shown} could not be read for a preview: {error}"
        ))),
    }
}

fn too_large(shown: &str, size: u64) -> Preview {
    Preview::unavailable(format!(
        "{shown} is too large to preview ({size} bytes; a preview shows at most 1 MiB)"
    ))
}

/// Why one side of a change cannot be shown (too large, binary), as a sentence about `what`
/// `shown` (empty `what`: the file itself).
pub(crate) fn unshowable(shown: &str, bytes: &[u8], what: &str) -> Option<Preview> {
    let name = if what.is_empty() {
        shown.to_owned()
    } else {
        format!("{what} {shown}")
    };
    if bytes.len() as u64 > PREVIEW_MAX_BYTES {
        return Some(Preview::unavailable(format!(
            "{name} is too large to preview ({} bytes; a preview shows at most 1 MiB)",
            bytes.len()
        )));
    }
    if is_binary(bytes) {
        return Some(Preview::unavailable(format!(
            "{name} is binary, so there is no preview"
        )));
    }
    None
}

/// A write spelled inside the workspace lands inside it: a path whose links now lead out (one
/// swapped in after the permission decision, or one that always did) is refused here, and the
/// checked open then goes to exactly the real path judged, refusing any link that appears
/// meanwhile. Writing outside stays possible by naming the outside path, which the modes judge.
fn stays_inside(run: &Run, resolved: &ResolvedPath, shown: &str) -> Result<(), Refusal> {
    if resolved.inside || !resolved.absolute.starts_with(&run.workspace) {
        return Ok(());
    }
    Err(Refusal(format!(
        "{shown} leads out of the workspace through a link; nothing was written"
    )))
}

fn refusal_of(refusal: OpenRefusal, shown: &str) -> Refusal {
    Refusal(match refusal {
        OpenRefusal::Missing => format!("no file at {shown}"),
        OpenRefusal::Folder => format!("{shown} is a folder; use list_files"),
        OpenRefusal::NotRegular => format!("{shown} is not a regular file"),
        OpenRefusal::Changed => {
            format!("{shown} changed after it was checked; nothing was written")
        }
        OpenRefusal::Io(error) => return Refusal::io(shown, &error),
    })
}

/// The read-before-write check (S5), against the descriptor just opened.
fn check_read(run: &Run, file: &File, real: &std::path::Path, shown: &str) -> Result<(), Refusal> {
    if !run.options.require_read {
        return Ok(());
    }
    let meta = file.metadata().map_err(|e| Refusal::io(shown, &e))?;
    match run.record.check(&run.session, real, Stamp::of(&meta)) {
        Seen::Current => Ok(()),
        Seen::Never => Err(Refusal(format!(
            "{shown} was not read in this session; read it with read_file first"
        ))),
        Seen::Changed => Err(Refusal(format!(
            "{shown} changed since it was read; read it again with read_file first"
        ))),
    }
}

/// The tool's own write counts as a read.
fn stamp_after_write(
    run: &Run,
    file: &File,
    real: &std::path::Path,
    shown: &str,
) -> Result<(), Refusal> {
    let meta = file.metadata().map_err(|e| Refusal::io(shown, &e))?;
    run.record.record(&run.session, real, Stamp::of(&meta));
    Ok(())
}

/// Writes from offset 0 and cuts the file to what was written, so no old tail survives (S9).
fn replace_contents(file: &mut File, bytes: &[u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(0))?;
    file.write_all(bytes)?;
    file.set_len(bytes.len() as u64)
}

/// Whether the file's first line break is `\r\n`, reading only as far as that break.
fn first_break_is_crlf(file: &mut File) -> io::Result<bool> {
    let mut buf = [0u8; 8192];
    let mut previous = None;
    loop {
        let n = match file.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(false);
        }
        if let Some(at) = memchr::memchr(b'\n', &buf[..n]) {
            let before = if at == 0 { previous } else { Some(buf[at - 1]) };
            return Ok(before == Some(b'\r'));
        }
        previous = Some(buf[n - 1]);
    }
}

/// Every `\r\n` becomes `\n`; lone `\r`s stay. Borrowed when there is nothing to change.
fn to_lf(bytes: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memmem::find(bytes, b"\r\n").is_none() {
        return Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    for found in memchr::memmem::find_iter(bytes, b"\r\n") {
        out.extend_from_slice(&bytes[at..found]);
        out.push(b'\n');
        at = found + 2;
    }
    out.extend_from_slice(&bytes[at..]);
    Cow::Owned(out)
}

/// Every `\n` not already preceded by `\r` becomes `\r\n`.
fn to_crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 16);
    let mut at = 0;
    for found in memchr::memchr_iter(b'\n', bytes) {
        out.extend_from_slice(&bytes[at..found]);
        if found == 0 || bytes[found - 1] != b'\r' {
            out.push(b'\r');
        }
        out.push(b'\n');
        at = found + 1;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_break_conversions() {
        assert_eq!(&*to_lf(b"a\r\nb\rc\n"), b"a\nb\rc\n");
        assert!(matches!(to_lf(b"a\nb"), Cow::Borrowed(_)));
        assert_eq!(to_crlf(b"one\ntwo\r\n"), b"one\r\ntwo\r\n");
        assert_eq!(to_crlf(b"\n"), b"\r\n");
    }
}
