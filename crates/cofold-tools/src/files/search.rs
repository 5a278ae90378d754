//! search_files: a parallel walk, each file read into a per-thread buffer and searched
//! line by line, the best `limit` rows kept in a bounded heap so the answer is the same whatever
//! order the threads finish in.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::FileType;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use grep_matcher::LineTerminator;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use tokio_util::sync::CancellationToken;

use super::list::{glob_refusal, skipped_note, stopped_note};
use super::read::BINARY_PROBE;
use super::read::open_for_reading;
use super::{Refusal, Run};
use crate::paths::{display_path, resolve_within};
use crate::walk::{Glob, Visit, walk};

/// Files over this many bytes are skipped; a file of exactly this size is searched.
pub(crate) const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// Characters of a row's text kept before it is cut.
const ROW_CUT: usize = 200;

/// One search_files call's input.
pub(crate) struct SearchInput<'a> {
    pub pattern: &'a str,
    pub path: Option<&'a str>,
    pub glob: Option<&'a str>,
    pub ignore_case: bool,
    pub limit: Option<u64>,
}

/// Runs search_files for one call.
pub(crate) fn search_files(
    run: &Run,
    input: &SearchInput<'_>,
    cancel: &CancellationToken,
) -> Result<String, Refusal> {
    let pattern = input.pattern;
    let matcher = compile(pattern, input.ignore_case)
        .map_err(|reason| Refusal(format!("invalid regular expression /{pattern}/: {reason}")))?;
    let root = resolve_within(&run.workspace, Path::new(input.path.unwrap_or("."))).absolute;
    let shown_root = display_path(&run.workspace, &root);
    let meta =
        std::fs::metadata(&root).map_err(|_| Refusal(format!("nothing at {}", root.display())))?;
    if !meta.is_dir() && !meta.is_file() {
        // A FIFO would block the search for ever and a device could answer for ever.
        return Err(Refusal(format!(
            "{shown_root} is not a regular file or a folder"
        )));
    }
    let limit = input
        .limit
        .unwrap_or(run.options.max_matches as u64)
        .max(1)
        .try_into()
        .unwrap_or(usize::MAX);
    let make = || Searching::new(&matcher, limit);
    let (found, stopped, skipped) = if meta.is_dir() {
        let text = input.glob.unwrap_or("**/*");
        let glob = Glob::new(&root, text).map_err(|error| glob_refusal(text, &error, "path"))?;
        let walked = walk(
            &glob,
            cancel,
            run.options.walk_limit,
            run.options.private.as_ref(),
            make,
        );
        (walked.visits, walked.stopped, walked.skipped)
    } else {
        let mut one = make();
        one.search_file(&root);
        (vec![one], false, 0)
    };
    let mut rows: Vec<Row> = found.into_iter().flat_map(|s| s.heap.into_vec()).collect();
    if rows.is_empty() {
        let mut out = format!("no matches for /{pattern}/ under {shown_root}");
        out.push_str(&skipped_note(skipped));
        if stopped {
            out.push_str(&stopped_note(run));
        }
        return Ok(out);
    }
    rows.sort_unstable();
    let capped = rows.len() >= limit;
    rows.truncate(limit);
    let mut out = String::new();
    let mut shown_for: Option<(&Path, String)> = None;
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let shown = match &shown_for {
            Some((path, shown)) if *path == &*row.path => shown.clone(),
            _ => {
                let shown = display_path(&run.workspace, &row.path);
                shown_for = Some((&row.path, shown.clone()));
                shown
            }
        };
        out.push_str(&format!("{shown}:{}:{}", row.line, row.text));
    }
    if capped {
        out.push_str(&format!("\n[{limit} rows; narrow with path or glob]"));
    }
    out.push_str(&skipped_note(skipped));
    if stopped {
        out.push_str(&stopped_note(run));
    }
    Ok(out)
}

/// Compiles the pattern for line search; the error is the engine's one-line reason.
fn compile(pattern: &str, ignore_case: bool) -> Result<RegexMatcher, String> {
    RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .crlf(true)
        .case_insensitive(ignore_case)
        .build(pattern)
        .map_err(|error| {
            // The syntax error comes with a drawing of the pattern; its last line is the reason.
            let text = error.to_string();
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            last.strip_prefix("error: ").unwrap_or(last).to_owned()
        })
}

/// A kept row, ordered by file path (component order) then line number.
struct Row {
    path: Arc<Path>,
    line: u64,
    text: String,
}

impl Row {
    fn key(&self) -> (&Path, u64) {
        (&self.path, self.line)
    }
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Row {}
impl PartialOrd for Row {
    fn partial_cmp(&self, other: &Row) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Row {
    fn cmp(&self, other: &Row) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// One thread's searcher, buffer and best rows so far.
struct Searching {
    matcher: RegexMatcher,
    searcher: Searcher,
    buf: Vec<u8>,
    heap: BinaryHeap<Row>,
    limit: usize,
}

impl Searching {
    fn new(matcher: &RegexMatcher, limit: usize) -> Searching {
        let searcher = SearcherBuilder::new()
            .line_number(true)
            .line_terminator(LineTerminator::crlf())
            .binary_detection(BinaryDetection::none())
            .bom_sniffing(false)
            .build();
        Searching {
            matcher: matcher.clone(),
            searcher,
            buf: Vec::with_capacity(64 * 1024),
            heap: BinaryHeap::new(),
            limit,
        }
    }

    /// Searches one file; files that cannot be read are skipped silently.
    fn search_file(&mut self, path: &Path) {
        if self.load(path).unwrap_or(false) {
            let mut sink = Collect {
                heap: &mut self.heap,
                limit: self.limit,
                file: path,
                shared: None,
            };
            // Errors come only from the sink, which never fails.
            let _ = self
                .searcher
                .search_slice(&self.matcher, &self.buf, &mut sink);
        }
    }

    /// Reads the file into the buffer; false when it is too large or binary.
    fn load(&mut self, path: &Path) -> io::Result<bool> {
        // Opened without blocking: a FIFO put in a file's place since the walk saw it is then
        // refused by the check below instead of hanging the search.
        let mut file = open_for_reading(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
            return Ok(false);
        }
        self.buf.clear();
        (&mut file)
            .take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut self.buf)?;
        if self.buf.len() as u64 > MAX_FILE_BYTES {
            return Ok(false);
        }
        let probe = &self.buf[..self.buf.len().min(BINARY_PROBE)];
        Ok(memchr::memchr(0, probe).is_none())
    }
}

impl Visit for Searching {
    fn entry(&mut self, path: &Path, file_type: FileType) -> bool {
        // Regular files only: links and folders are not searched.
        if file_type.is_file() {
            self.search_file(path);
        }
        true
    }
}

/// Receives one file's matching lines.
struct Collect<'a> {
    heap: &'a mut BinaryHeap<Row>,
    limit: usize,
    file: &'a Path,
    shared: Option<Arc<Path>>,
}

impl Sink for &mut Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let line = mat.line_number().unwrap_or(0);
        if self.heap.len() >= self.limit
            && let Some(worst) = self.heap.peek()
            && (self.file, line) >= worst.key()
        {
            // Later lines of this file sort later still: none of them can be kept.
            return Ok(false);
        }
        let path = match &self.shared {
            Some(path) => Arc::clone(path),
            None => {
                let path: Arc<Path> = Arc::from(PathBuf::from(self.file));
                self.shared = Some(Arc::clone(&path));
                path
            }
        };
        self.heap.push(Row {
            path,
            line,
            text: row_text(mat.bytes()),
        });
        if self.heap.len() > self.limit {
            self.heap.pop();
        }
        Ok(true)
    }
}

/// A line as a row shows it: decoded, trailing whitespace gone, cut at 200 characters.
fn row_text(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    match text.char_indices().nth(ROW_CUT) {
        Some((cut, _)) => format!("{} [line cut at {ROW_CUT} characters]", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_errors_are_one_line() {
        let Err(reason) = compile("(", false) else {
            panic!("an unclosed group compiled");
        };
        assert_eq!(reason, "unclosed group");
    }

    #[test]
    fn rows_drop_trailing_whitespace_and_cut() {
        assert_eq!(row_text(b"foo  \r\n"), "foo");
        let long = "x".repeat(250);
        assert_eq!(
            row_text(long.as_bytes()),
            format!("{} [line cut at 200 characters]", "x".repeat(200))
        );
    }
}
