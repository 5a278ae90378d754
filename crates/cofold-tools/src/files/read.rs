//! read_file: numbered lines, one page at a time, streamed so a page deep in a huge file
//! costs memory in proportion to the page, not the file.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};

use super::record::Stamp;
use super::{Refusal, Run};
use crate::paths::{display_path, resolve_within};

/// Characters kept of one line before it is cut.
pub(crate) const LINE_CUT: usize = 2000;
/// Bytes looked at for a NUL before a file is called binary.
pub(crate) const BINARY_PROBE: usize = 8192;
/// Bytes of one line held at most: enough for `LINE_CUT + 1` characters of four bytes, so a line
/// over the cut is always recognised as such.
const LINE_KEEP: usize = (LINE_CUT + 1) * 4;
const CHUNK: usize = 64 * 1024;

/// Runs read_file for one call.
pub(crate) fn read_file(
    run: &Run,
    path: &str,
    offset: Option<u64>,
    limit: Option<u64>,
) -> Result<String, Refusal> {
    let resolved = resolve_within(&run.workspace, path.as_ref());
    let shown = display_path(&run.workspace, &resolved.absolute);
    // Judged before the open: opening a device can itself do something (a tape rewinds, a
    // terminal becomes the controlling one), and a FIFO would wait for a writer.
    if let Ok(meta) = std::fs::metadata(&resolved.absolute)
        && !meta.is_file()
        && !meta.is_dir()
    {
        return Err(not_regular(&shown));
    }
    let mut file = open_for_reading(&resolved.absolute).map_err(|error| {
        if matches!(
            error.kind(),
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
        ) {
            Refusal(format!("no file at {shown}"))
        } else {
            Refusal::io(&shown, &error)
        }
    })?;
    let meta = file.metadata().map_err(|e| Refusal::io(&shown, &e))?;
    if meta.is_dir() {
        return Err(Refusal(format!("{shown} is a folder; use list_files")));
    }
    if !meta.is_file() {
        return Err(not_regular(&shown));
    }
    // From here on every outcome counts as a read.
    run.record
        .record(&run.session, &resolved.real, Stamp::of(&meta));

    let offset = offset.unwrap_or(1).max(1);
    let from = offset - 1;
    let page = limit.unwrap_or(run.options.max_lines as u64).max(1);
    let outcome = read_page(&mut file, from, page).map_err(|e| Refusal::io(&shown, &e))?;
    let (rows, total) = match outcome {
        Page::Binary => return Err(Refusal(format!("{shown} is binary"))),
        Page::Empty => return Err(Refusal(format!("{shown} is empty"))),
        Page::Lines { rows, total } => (rows, total),
    };
    if from >= total {
        return Err(Refusal(format!(
            "{shown} has {total} lines; offset {offset} is past the end"
        )));
    }
    Ok(render(&rows, from, total))
}

fn not_regular(shown: &str) -> Refusal {
    Refusal(format!("{shown} is not a regular file"))
}

/// Opens without blocking on a FIFO; the flag changes nothing for regular files.
pub(crate) fn open_for_reading(path: &std::path::Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
        options.custom_flags(flags.bits() as i32);
    }
    options.open(path)
}

/// What streaming the file found.
pub(crate) enum Page {
    /// A NUL in the first 8192 bytes.
    Binary,
    /// No bytes at all.
    Empty,
    /// The page's lines (already decoded and cut) and the file's line count.
    Lines { rows: Vec<String>, total: u64 },
}

/// Streams `reader` once: keeps lines `from .. from + page` (0-based) and counts the rest.
pub(crate) fn read_page(reader: &mut impl Read, from: u64, page: u64) -> io::Result<Page> {
    let mut buf = vec![0u8; CHUNK];
    let mut filled = 0;
    while filled < BINARY_PROBE {
        let n = read_retrying(reader, &mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    if filled == 0 {
        return Ok(Page::Empty);
    }
    if memchr::memchr(0, &buf[..filled.min(BINARY_PROBE)]).is_some() {
        return Ok(Page::Binary);
    }
    let end = from.saturating_add(page);
    let mut lines = Lines {
        from,
        end,
        index: 0,
        current: Vec::new(),
        overflow: false,
        pending: false,
        rows: Vec::new(),
    };
    lines.feed(&buf[..filled]);
    loop {
        let n = read_retrying(reader, &mut buf)?;
        if n == 0 {
            break;
        }
        lines.feed(&buf[..n]);
    }
    Ok(lines.finish())
}

fn read_retrying(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The line splitter's state across chunks.
struct Lines {
    from: u64,
    end: u64,
    /// 0-based index of the line being read.
    index: u64,
    /// Bytes of the current line, when it is on the page (at most `LINE_KEEP`).
    current: Vec<u8>,
    /// The current line had more bytes than were kept.
    overflow: bool,
    /// Bytes were seen since the last line feed.
    pending: bool,
    rows: Vec<String>,
}

impl Lines {
    fn on_page(&self) -> bool {
        self.index >= self.from && self.index < self.end
    }

    fn feed(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        if self.index >= self.end {
            // Past the page: only the count matters.
            self.index += memchr::memchr_iter(b'\n', chunk).count() as u64;
            self.pending = chunk.last() != Some(&b'\n');
            return;
        }
        let mut start = 0;
        while let Some(found) = memchr::memchr(b'\n', &chunk[start..]) {
            let stop = start + found;
            if self.on_page() {
                self.keep(&chunk[start..stop]);
                self.finish_line(true);
            } else {
                self.current.clear();
            }
            self.index += 1;
            self.pending = false;
            start = stop + 1;
            if self.index >= self.end {
                return self.feed(&chunk[start..]);
            }
        }
        let rest = &chunk[start..];
        if self.on_page() {
            self.keep(rest);
        }
        if !rest.is_empty() {
            self.pending = true;
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = LINE_KEEP - self.current.len();
        if bytes.len() > room {
            self.current.extend_from_slice(&bytes[..room]);
            self.overflow = true;
        } else {
            self.current.extend_from_slice(bytes);
        }
    }

    fn finish_line(&mut self, ended_by_feed: bool) {
        let mut bytes = &self.current[..];
        if ended_by_feed && !self.overflow && bytes.last() == Some(&b'\r') {
            bytes = &bytes[..bytes.len() - 1];
        }
        let text = String::from_utf8_lossy(bytes);
        let mut chars = text.char_indices();
        let row = match chars.nth(LINE_CUT) {
            Some((cut, _)) => format!("{} [line cut at {LINE_CUT} characters]", &text[..cut]),
            None => text.into_owned(),
        };
        self.rows.push(row);
        self.current.clear();
        self.overflow = false;
        self.pending = false;
    }

    fn finish(mut self) -> Page {
        // The piece after the last line feed is a line only when it holds something.
        if self.pending {
            if self.on_page() {
                self.finish_line(false);
            }
            self.index += 1;
        }
        Page::Lines {
            rows: self.rows,
            total: self.index,
        }
    }
}

/// Numbered rows plus the trailer that says where to continue.
fn render(rows: &[String], from: u64, total: u64) -> String {
    let last = from + rows.len() as u64;
    let width = last.to_string().len();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let number = from + 1 + i as u64;
        out.push_str(&format!("{number:>width$}│{row}"));
    }
    if total > last {
        out.push_str(&format!(
            "\n[{} more lines; read from offset {}]",
            total - last,
            last + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(bytes: &[u8], from: u64, page: u64) -> (Vec<String>, u64) {
        match read_page(&mut &bytes[..], from, page).expect("read") {
            Page::Lines { rows, total } => (rows, total),
            Page::Binary => panic!("binary"),
            Page::Empty => panic!("empty"),
        }
    }

    #[test]
    fn lines_split_on_feeds_and_drop_cr_before_them() {
        assert_eq!(
            page(b"a\r\nb\r\n", 0, 10),
            (vec!["a".into(), "b".into()], 2)
        );
        assert_eq!(page(b"a\rb", 0, 10), (vec!["a\rb".into()], 1));
        assert_eq!(page(b"\n", 0, 10), (vec![String::new()], 1));
        assert_eq!(page(b"x\ny", 1, 10), (vec!["y".into()], 2));
        assert_eq!(page(b"x\ny\nz\n", 0, 1), (vec!["x".into()], 3));
        assert_eq!(page(b"x\ny\nz", 0, 1), (vec!["x".into()], 3));
    }

    #[test]
    fn counts_across_chunk_boundaries() {
        let mut text = Vec::new();
        for i in 0..50_000 {
            text.extend_from_slice(format!("line {i}\n").as_bytes());
        }
        text.extend_from_slice(b"tail");
        let (rows, total) = page(&text, 40_000, 2);
        assert_eq!(rows, vec!["line 40000".to_owned(), "line 40001".to_owned()]);
        assert_eq!(total, 50_001);
    }

    #[test]
    fn render_pads_to_last_number() {
        let rows = vec!["line 9".to_owned(), "line 10".to_owned()];
        assert_eq!(
            render(&rows, 8, 12),
            " 9│line 9\n10│line 10\n[2 more lines; read from offset 11]"
        );
    }
}
