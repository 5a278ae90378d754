//! The glob dialect and the tree walk shared by list_files and search_files.
//!
//! A pattern is cut at `/` into segments and matched name by name, so the dot rule (a wildcard
//! never matches a leading `.`) and folder pruning fall out of the same small automaton: a folder
//! is entered only when some continuation of the pattern could still match below it.
//!
//! A glob is confined by construction to the folder it applies to: one that is absolute, starts
//! with `~`, has a `..` name, or whose leading names lead through a link out of that folder is
//! refused before anything is read ([`GlobError::Outside`]), and the walk never follows a link.
//! Reaching another folder is done by naming it as the folder (`cwd`, `path`), which the
//! permission modes judge. A walk has a time limit and says when it stopped on it.

use std::ffi::OsStr;
use std::fs::FileType;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobMatcher};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use tokio_util::sync::CancellationToken;

use crate::paths::{normalize, real_path};
use crate::private::PrivateSet;

/// Names neither listed nor entered unless the pattern's text contains them.
const SKIPPED: [&str; 2] = ["node_modules", ".git"];

/// Globs are case-sensitive only where file names are.
const CASE_INSENSITIVE: bool = cfg!(any(target_os = "macos", windows));

/// The automaton's live states as a bit set; a pattern has fewer segments than it has bits.
type States = u128;

/// Segments a pattern may have after its leading literal names.
const MAX_SEGMENTS: usize = 127;

/// Why a glob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    /// The glob compiler's one-line reason.
    #[error("{0}")]
    Invalid(String),
    /// The glob could reach outside the folder it applies to; the text says how.
    #[error("{0}")]
    Outside(&'static str),
}

/// How a pattern would leave the folder it applies to, judged before the walk: `None` when it
/// stays inside. The leading literal names are resolved (links followed, dangling ones too).
fn escape(base: &Path, pieces: &[String], start: &Path) -> Option<&'static str> {
    let first = pieces.first().map(String::as_str).unwrap_or("");
    if first.is_empty() && pieces.len() > 1 {
        return Some("is absolute");
    }
    if cfg!(windows) && (first.contains(':') || first.contains('\\')) {
        return Some("is absolute");
    }
    if first.starts_with('~') {
        return Some("starts with ~, which is not expanded");
    }
    if pieces.iter().any(|piece| piece == "..") {
        return Some("climbs out with ..");
    }
    if !real_path(start).starts_with(real_path(base)) {
        return Some("leads through a link out of the folder");
    }
    None
}

/// A compiled glob, anchored at the folder the walk starts from.
#[derive(Clone)]
pub(crate) struct Glob {
    inner: Arc<Inner>,
}

struct Inner {
    /// The folder the pattern applies to, as the call named it (what a host's check judged).
    base: PathBuf,
    /// Where the walk starts: the folder the pattern applies to plus its leading literal names.
    start: PathBuf,
    segments: Vec<Segment>,
    /// Which of `SKIPPED` the pattern names, by index.
    allowed: [bool; 2],
}

enum Segment {
    /// `**`: zero or more folders, none of them a dot name.
    AnyFolders,
    /// `*`: any one name that does not start with `.`.
    AnyName,
    /// A name without wildcards, compared as written.
    Literal(String),
    /// Any other one-name glob.
    Glob { matcher: GlobMatcher, dotted: bool },
}

impl Segment {
    fn matches(&self, name: &OsStr) -> bool {
        let dot_name = name.as_encoded_bytes().first() == Some(&b'.');
        match self {
            Segment::AnyFolders => false,
            Segment::AnyName => !dot_name,
            Segment::Literal(text) => name == OsStr::new(text),
            Segment::Glob { matcher, dotted } => (!dot_name || *dotted) && matcher.is_match(name),
        }
    }
}

impl Glob {
    /// Compiles `pattern` relative to `base` (absolute), refusing one that could reach outside
    /// `base` (see the module's documentation).
    pub(crate) fn new(base: &Path, pattern: &str) -> Result<Glob, GlobError> {
        let invalid = |e: globset::Error| GlobError::Invalid(e.kind().to_string());
        builder(pattern).build().map_err(invalid)?;
        let pieces = split(pattern);
        let literal_lead = pieces[..pieces.len().saturating_sub(1)]
            .iter()
            .take_while(|p| !has_wildcard(p))
            .count();
        let mut start = base.to_path_buf();
        if pattern.starts_with('/') {
            start = PathBuf::from("/");
        }
        for piece in &pieces[..literal_lead] {
            if !piece.is_empty() {
                start.push(piece);
            }
        }
        let start = normalize(&start);
        if let Some(how) = escape(base, &pieces, &start) {
            return Err(GlobError::Outside(how));
        }
        let mut segments = Vec::new();
        for piece in &pieces[literal_lead..] {
            let segment = match piece.as_str() {
                "" | "." => continue,
                "**" => Segment::AnyFolders,
                "*" => Segment::AnyName,
                text if !has_wildcard(text) && !CASE_INSENSITIVE => {
                    Segment::Literal(text.to_owned())
                }
                text => Segment::Glob {
                    matcher: builder(text).build().map_err(invalid)?.compile_matcher(),
                    dotted: text.starts_with('.'),
                },
            };
            if matches!(segment, Segment::AnyFolders)
                && matches!(segments.last(), Some(Segment::AnyFolders))
            {
                continue;
            }
            segments.push(segment);
        }
        if segments.len() > MAX_SEGMENTS {
            return Err(GlobError::Invalid(format!(
                "more than {MAX_SEGMENTS} names after its literal start"
            )));
        }
        let allowed = SKIPPED.map(|name| pattern.contains(name));
        Ok(Glob {
            inner: Arc::new(Inner {
                base: normalize(base),
                start,
                segments,
                allowed,
            }),
        })
    }

    /// The folder the walk starts from.
    #[cfg(test)]
    pub(crate) fn start(&self) -> &Path {
        &self.inner.start
    }

    /// Whether the entry at `path` (under the start) matches the pattern.
    pub(crate) fn matches(&self, path: &Path) -> bool {
        self.inner.states(path) & (1 << self.inner.segments.len()) != 0
    }
}

impl Inner {
    /// The automaton's states after consuming the names of `path` below the start, one bit per
    /// segment index (bit `segments.len()` is the accepting state).
    fn states(&self, path: &Path) -> States {
        let rel = path.strip_prefix(&self.start).unwrap_or(path);
        let mut states = self.close(1);
        for component in rel.components() {
            let Component::Normal(name) = component else {
                continue;
            };
            states = self.step(states, name);
            if states == 0 {
                break;
            }
        }
        states
    }

    fn step(&self, states: States, name: &OsStr) -> States {
        let dot_name = name.as_encoded_bytes().first() == Some(&b'.');
        let mut next: States = 0;
        for (state, segment) in self.segments.iter().enumerate() {
            if states & (1 << state) == 0 {
                continue;
            }
            match segment {
                // `**` never stands for a dot name (the dot rule).
                Segment::AnyFolders if !dot_name => next |= 1 << state,
                segment if segment.matches(name) => next |= 1 << (state + 1),
                _ => {}
            }
        }
        self.close(next)
    }

    /// `**` may match no folder at all, so its state also stands for the next one.
    fn close(&self, mut states: States) -> States {
        for (state, segment) in self.segments.iter().enumerate() {
            if matches!(segment, Segment::AnyFolders) && states & (1 << state) != 0 {
                states |= 1 << (state + 1);
            }
        }
        states
    }

    /// Whether the walk should keep this entry (and, for a folder, look inside it).
    fn keep(&self, entry: &DirEntry) -> bool {
        if entry.depth() == 0 {
            return true;
        }
        let name = entry.file_name();
        for (skipped, allowed) in SKIPPED.iter().zip(self.allowed) {
            if !allowed && name == OsStr::new(skipped) {
                return false;
            }
        }
        if !entry.file_type().is_some_and(|t| t.is_dir()) {
            return true;
        }
        self.states(entry.path()) != 0
    }
}

fn builder(pattern: &str) -> GlobBuilder<'_> {
    let mut builder = GlobBuilder::new(pattern);
    builder
        .literal_separator(true)
        .case_insensitive(CASE_INSENSITIVE)
        .backslash_escape(cfg!(unix));
    builder
}

fn has_wildcard(text: &str) -> bool {
    text.contains(['*', '?', '[', '{', '\\'])
}

/// Cuts a pattern at `/` outside classes and alternatives.
fn split(pattern: &str) -> Vec<String> {
    let mut pieces = vec![String::new()];
    let mut braces = 0usize;
    let mut in_class = false;
    for c in pattern.chars() {
        match c {
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => braces += 1,
            '}' if !in_class => braces = braces.saturating_sub(1),
            '/' if !in_class && braces == 0 => {
                pieces.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = pieces.last_mut() {
            last.push(c);
        }
    }
    pieces
}

/// One walker thread's work: it sees every matching entry and keeps what it needs.
pub(crate) trait Visit: Send {
    /// Called with a matching entry below the start. Returning false stops the walk.
    fn entry(&mut self, path: &Path, file_type: FileType) -> bool;
}

/// What a walk gives back: one `V` per walker thread, and whether the time limit stopped it.
pub(crate) struct Walked<V> {
    /// The visitors, each holding what it kept.
    pub(crate) visits: Vec<V>,
    /// The time limit passed before the walk was done, so the visitors saw part of the tree.
    pub(crate) stopped: bool,
    /// Entries left out because they are private (credential stores, the host's own files),
    /// folders counted once and not entered.
    pub(crate) skipped: usize,
}

/// Walks the glob's start in parallel with one `V` per thread, and returns them all.
///
/// Ignore files are honoured as ripgrep honours them; links are entries, never followed; a
/// cancelled token stops the walk, and so does `limit` passing (said in [`Walked::stopped`]).
pub(crate) fn walk<V: Visit>(
    glob: &Glob,
    cancel: &CancellationToken,
    limit: Duration,
    private: Option<&Arc<PrivateSet>>,
    make: impl Fn() -> V + Sync,
) -> Walked<V> {
    // A limit too far away to add is no limit.
    let deadline = Instant::now().checked_add(limit);
    let stopped = AtomicBool::new(false);
    let filter = Arc::clone(&glob.inner);
    let skipped = Arc::new(AtomicUsize::new(0));
    // A walk whose folder is itself private was asked about as such: it sees what it names.
    // Otherwise a private start (leading literal names such as `.ssh/*`) is not entered at all.
    let start = &glob.inner.start;
    let private = private.filter(|p| !p.is_empty() && p.judge(&glob.inner.base).is_none());
    if private.is_some_and(|p| p.judge(start).is_some()) {
        return Walked {
            visits: Vec::new(),
            stopped: false,
            skipped: 1,
        };
    }
    let private = private.map(|set| {
        // Below its start the walk follows no link, so an entry's real path is the start's
        // real path and the names under it.
        let real = crate::private::resolved(start);
        (Arc::clone(set), start.clone(), real, Arc::clone(&skipped))
    });
    let mut walker = WalkBuilder::new(&glob.inner.start);
    walker
        .hidden(false)
        .follow_links(false)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .filter_entry(move |entry| {
            if !filter.keep(entry) {
                return false;
            }
            if let Some((set, start, real, skipped)) = &private
                && entry.depth() > 0
                && let Ok(rest) = entry.path().strip_prefix(start)
                && set.judge_entry(&real.join(rest)).is_some()
            {
                skipped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            true
        });
    let done = Mutex::new(Vec::new());
    let mut builder = Builder {
        glob,
        cancel,
        deadline,
        stopped: &stopped,
        make: &make,
        done: &done,
    };
    walker.build_parallel().visit(&mut builder);
    Walked {
        visits: done.into_inner().unwrap_or_else(|e| e.into_inner()),
        stopped: stopped.into_inner(),
        skipped: skipped.load(Ordering::Relaxed),
    }
}

struct Builder<'s, V, M> {
    glob: &'s Glob,
    cancel: &'s CancellationToken,
    deadline: Option<Instant>,
    stopped: &'s AtomicBool,
    make: &'s M,
    done: &'s Mutex<Vec<V>>,
}

impl<'s, V: Visit + 's, M: Fn() -> V + Sync> ParallelVisitorBuilder<'s> for Builder<'s, V, M> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            glob: self.glob,
            cancel: self.cancel,
            deadline: self.deadline,
            stopped: self.stopped,
            visit: Some((self.make)()),
            done: self.done,
        })
    }
}

struct Visitor<'s, V: Visit> {
    glob: &'s Glob,
    cancel: &'s CancellationToken,
    deadline: Option<Instant>,
    stopped: &'s AtomicBool,
    visit: Option<V>,
    done: &'s Mutex<Vec<V>>,
}

impl<V: Visit> ParallelVisitor for Visitor<'_, V> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            self.stopped.store(true, Ordering::Relaxed);
            return WalkState::Quit;
        }
        // Entries that cannot be read are skipped silently.
        let Ok(entry) = entry else {
            return WalkState::Continue;
        };
        if entry.depth() == 0 {
            return WalkState::Continue;
        }
        let Some(file_type) = entry.file_type() else {
            return WalkState::Continue;
        };
        if !self.glob.matches(entry.path()) {
            return WalkState::Continue;
        }
        let keep_going = match &mut self.visit {
            Some(visit) => visit.entry(entry.path(), file_type),
            None => true,
        };
        if keep_going {
            WalkState::Continue
        } else {
            WalkState::Quit
        }
    }
}

impl<V: Visit> Drop for Visitor<'_, V> {
    fn drop(&mut self) {
        if let Some(visit) = self.visit.take() {
            self.done
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(visit);
        }
    }
}

/// Every entry under `base` that `pattern` matches, found by list_files' walk: not capped and not
/// sorted, with `true` for real folders. Benchmarks use it to compare the full set with ripgrep's.
#[doc(hidden)]
pub fn matching_entries(base: &Path, pattern: &str) -> Result<Vec<(PathBuf, bool)>, GlobError> {
    let glob = Glob::new(base, pattern)?;
    let found = walk(
        &glob,
        &CancellationToken::new(),
        Duration::MAX,
        None,
        Vec::<(PathBuf, bool)>::new,
    );
    Ok(found.visits.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str) -> Glob {
        Glob::new(Path::new("/w"), pattern).expect("compiles")
    }

    #[test]
    fn leading_literal_names_move_the_start() {
        assert_eq!(glob("src/**/*.ts").start(), Path::new("/w/src"));
        assert_eq!(glob("README.md").start(), Path::new("/w"));
        assert_eq!(glob("./a/./*.md").start(), Path::new("/w/a"));
    }

    #[test]
    fn globs_that_could_leave_the_folder_are_refused() {
        let outside = |pattern: &str| match Glob::new(Path::new("/w"), pattern) {
            Err(GlobError::Outside(how)) => how,
            Err(GlobError::Invalid(reason)) => panic!("{pattern}: invalid, {reason}"),
            Ok(_) => panic!("{pattern} was accepted"),
        };
        assert_eq!(outside("../x/*.md"), "climbs out with ..");
        assert_eq!(outside("src/../../x/*"), "climbs out with ..");
        assert_eq!(outside("*/../*"), "climbs out with ..");
        assert_eq!(outside("/etc/*.conf"), "is absolute");
        assert_eq!(outside("/"), "is absolute");
        assert_eq!(outside("~/.ssh/*"), "starts with ~, which is not expanded");
        assert!(Glob::new(Path::new("/w"), "a~/*").is_ok());
        assert!(Glob::new(Path::new("/w"), "..hidden/*").is_ok());
    }

    #[test]
    fn dot_rule_and_double_star() {
        let any = glob("**/*");
        assert!(any.matches(Path::new("/w/a/b.ts")));
        assert!(!any.matches(Path::new("/w/.env")));
        assert!(!any.matches(Path::new("/w/.hidden/x.ts")));
        let env = glob("**/.env");
        assert!(env.matches(Path::new("/w/.env")));
        assert!(env.matches(Path::new("/w/a/.env")));
        assert!(!env.matches(Path::new("/w/.h/.env")));
        let hidden = glob(".hidden/*");
        assert!(hidden.matches(Path::new("/w/.hidden/x.ts")));
        let ts = glob("src/**/*.ts");
        assert!(ts.matches(Path::new("/w/src/a.ts")));
        assert!(ts.matches(Path::new("/w/src/deep/c.ts")));
        assert!(!ts.matches(Path::new("/w/src/deep/c.js")));
        assert!(glob("*.{md,ts}").matches(Path::new("/w/a.md")));
    }

    #[test]
    fn very_deep_patterns_are_refused_not_overflowed() {
        let deep = vec!["*"; 128].join("/");
        assert!(Glob::new(Path::new("/w"), &deep).is_err());
        let ok = vec!["*"; 127].join("/");
        let glob = glob(&ok);
        let path = format!("/w/{}", vec!["a"; 127].join("/"));
        assert!(glob.matches(Path::new(&path)));
    }

    #[test]
    fn bad_globs_give_the_compilers_reason() {
        let Err(GlobError::Invalid(error)) = Glob::new(Path::new("/w"), "a[") else {
            panic!("an unclosed class compiled");
        };
        assert!(error.contains("unclosed"), "{error}");
    }
}
