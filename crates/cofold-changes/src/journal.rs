//! One session's record of changes: an append-only log of what each turn did to each file,
//! the contents kept by hash beside it, and the undo and redo that check, file by file, that
//! the content now there is the one this session left before putting anything back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::blobs::{Blobs, hash_of, private_file};
use crate::index::{FolderIndex, MAX_INDEXED_FILES};

/// Bytes of kept contents a session holds at most by default; past it the oldest turns'
/// contents are dropped first.
pub const DEFAULT_STORAGE_BOUND: u64 = 256 * 1024 * 1024;
/// A file larger than this is recorded by hash only: its content is not kept.
pub const MAX_KEPT_FILE: u64 = 16 * 1024 * 1024;

/// A file's content at one moment, as the record knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Image {
    /// The file did not exist.
    Absent,
    /// The file held content with this hash; `kept` when the content itself is in the store.
    Content {
        /// SHA-256, hex.
        hash: String,
        /// Size in bytes.
        size: u64,
    },
    /// The file existed but its content was never read (a command changed a file the session
    /// had not seen).
    Unknown,
}

impl Image {
    fn hash(&self) -> Option<&str> {
        match self {
            Image::Content { hash, .. } => Some(hash),
            _ => None,
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Record {
    /// A turn changed a file.
    Change {
        turn: String,
        path: PathBuf,
        before: Image,
        after: Image,
        /// The tool or command that did it.
        by: String,
    },
    /// A turn's comparison around a command stopped at the bound.
    Bound { turn: String, reason: String },
    /// A turn's change to a file was undone (`undone: true`) or redone.
    Undo {
        turn: String,
        path: PathBuf,
        undone: bool,
    },
    /// The contents a turn kept were dropped to stay within the storage bound.
    Dropped { turn: String },
}

/// What a turn did to one file, first content before to last content after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The file.
    pub path: PathBuf,
    /// Its content before the turn first changed it.
    pub before: Image,
    /// Its content after the turn last changed it.
    pub after: Image,
    /// What changed it (tool names, `command`), in order, once each.
    pub by: Vec<String>,
    /// Whether the change is undone now.
    pub undone: bool,
    /// Whether the content before is in the store (an undo can put it back).
    pub before_kept: bool,
    /// Whether the content after is in the store (a redo can put it back).
    pub after_kept: bool,
}

/// What a turn changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnChanges {
    /// The turn.
    pub turn: String,
    /// Files, in path order.
    pub files: Vec<FileChange>,
    /// Why the record of this turn is incomplete (a bound reached), once each.
    pub notes: Vec<String>,
    /// The contents this turn kept were dropped for the storage bound.
    pub dropped: bool,
}

/// The outcome for one file of an undo or redo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The earlier content is back.
    Restored(PathBuf),
    /// The file was removed (it did not exist before).
    Removed(PathBuf),
    /// Nothing was written; the sentence says why, naming the file.
    Refused(PathBuf, String),
}

impl Outcome {
    /// One sentence for a person.
    pub fn sentence(&self) -> String {
        match self {
            Outcome::Restored(p) => format!("{} restored", p.display()),
            Outcome::Removed(p) => format!("{} removed (it did not exist before)", p.display()),
            Outcome::Refused(_, why) => why.clone(),
        }
    }

    /// Whether this file was left as it was.
    pub fn refused(&self) -> bool {
        matches!(self, Outcome::Refused(..))
    }
}

/// Why the journal could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The log or a blob could not be written or read.
    #[error("the change record at {path} cannot be written: {source}")]
    Io {
        /// The folder or file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// No such turn in the record.
    #[error("this session recorded no change for turn {0}")]
    NoTurn(String),
    /// Every change of the turn is already undone (or, for redo, in place).
    #[error("turn {turn} has no change left to {what}")]
    NothingLeft {
        /// The turn.
        turn: String,
        /// `undo` or `redo`.
        what: &'static str,
    },
    /// The file was not changed by that turn.
    #[error("turn {turn} did not change {path}")]
    NoFile {
        /// The turn.
        turn: String,
        /// The file asked for.
        path: PathBuf,
    },
}

/// Bounds of one journal.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Kept bytes per session.
    pub storage: u64,
    /// Files one folder comparison walks.
    pub files: usize,
    /// Largest file whose content is kept.
    pub file: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            storage: DEFAULT_STORAGE_BOUND,
            files: MAX_INDEXED_FILES,
            file: MAX_KEPT_FILE,
        }
    }
}

/// The record of one session.
pub struct Journal {
    dir: Option<PathBuf>,
    blobs: Blobs,
    records: Vec<Record>,
    bounds: Bounds,
    /// The index after the last comparison, whose hashes the next one inherits.
    index: Option<FolderIndex>,
    /// Folders comparisons leave out.
    exclude: Vec<PathBuf>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.dir)
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

const LOG: &str = "changes.jsonl";

/// The content of `path` now, read whole.
fn current(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => std::fs::read(path).map(Some),
        Ok(_) => Err(std::io::Error::other("not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn matches(image: &Image, now: Option<&[u8]>) -> bool {
    match (image, now) {
        (Image::Absent, None) => true,
        (Image::Content { hash, .. }, Some(bytes)) => hash_of(bytes) == *hash,
        _ => false,
    }
}

/// Writes `bytes` to `path` through a file beside it, keeping the mode of what it replaces.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.undo-{}", std::process::id()));
    let mode = std::fs::metadata(path).ok().map(|m| m.permissions());
    {
        let mut file = private_file(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
    }
    if let Some(mode) = mode {
        std::fs::set_permissions(&temp, mode)?;
    } else {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644))?;
        }
    }
    std::fs::rename(&temp, path)
}

impl Journal {
    /// A journal held in memory only.
    pub fn in_memory(bounds: Bounds) -> Journal {
        Journal {
            dir: None,
            blobs: Blobs::in_memory(),
            records: Vec::new(),
            bounds,
            index: None,
            exclude: Vec::new(),
        }
    }

    /// Opens (or starts) the journal kept in `dir`; a torn last line is ignored.
    pub fn open(dir: &Path, bounds: Bounds) -> Result<Journal, JournalError> {
        let io = |source| JournalError::Io {
            path: dir.to_path_buf(),
            source,
        };
        crate::blobs::private_dir(dir).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let records = match std::fs::read_to_string(dir.join(LOG)) {
            Ok(text) => text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(e)),
        };
        Ok(Journal {
            dir: Some(dir.to_path_buf()),
            blobs: Blobs::Dir(dir.join("blobs")),
            records,
            bounds,
            index: None,
            exclude: Vec::new(),
        })
    }

    fn append(&mut self, record: Record) -> Result<(), JournalError> {
        if let Some(dir) = &self.dir {
            let path = dir.join(LOG);
            let io = |source| JournalError::Io {
                path: path.clone(),
                source,
            };
            let mut options = std::fs::OpenOptions::new();
            options.create(true).append(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = options.open(&path).map_err(io)?;
            let mut line = serde_json::to_string(&record).map_err(|e| io(e.into()))?;
            line.push('\n');
            file.write_all(line.as_bytes()).map_err(io)?;
        }
        self.records.push(record);
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> JournalError {
        JournalError::Io {
            path: self.dir.clone().unwrap_or_default(),
            source,
        }
    }

    /// Keeps `bytes` when within the per-file bound; gives its image.
    fn keep(&self, bytes: &[u8]) -> Result<Image, JournalError> {
        let size = bytes.len() as u64;
        if size > self.bounds.file {
            return Ok(Image::Content {
                hash: hash_of(bytes),
                size,
            });
        }
        let hash = self.blobs.put(bytes).map_err(|e| self.io(e))?;
        Ok(Image::Content { hash, size })
    }

    /// The image of `path` now, its content kept. Called before a tool writes it.
    pub fn capture(&self, path: &Path) -> Result<Image, JournalError> {
        match current(path).map_err(|e| self.io(e))? {
            None => Ok(Image::Absent),
            Some(bytes) => self.keep(&bytes),
        }
    }

    /// Records what a tool did to `path` in `turn`, given the image captured before it ran.
    /// Nothing is recorded when the file is as it was.
    pub fn record_write(
        &mut self,
        turn: &str,
        path: &Path,
        before: Image,
        by: &str,
    ) -> Result<(), JournalError> {
        let after = self.capture(path)?;
        if after == before {
            return Ok(());
        }
        if let Some(index) = &mut self.index {
            index.note(path, after.hash().map(str::to_owned));
        }
        self.append(Record::Change {
            turn: turn.to_owned(),
            path: path.to_path_buf(),
            before,
            after,
            by: by.to_owned(),
        })?;
        self.enforce_storage()
    }

    /// The folder's index before a command, hashes carried from the last comparison.
    pub fn index_before(&self, root: &Path) -> FolderIndex {
        let mut index = FolderIndex::scan_excluding(root, self.bounds.files, &self.excluded());
        if let Some(earlier) = &self.index {
            index.inherit(earlier);
        }
        index
    }

    /// Records what changed in the folder between `before` (from [`Journal::index_before`])
    /// and now, as the doing of a command in `turn`.
    pub fn record_command(
        &mut self,
        turn: &str,
        before: FolderIndex,
        by: &str,
    ) -> Result<usize, JournalError> {
        let mut after =
            FolderIndex::scan_excluding(&before.root, self.bounds.files, &self.excluded());
        after.inherit(&before);
        if before.over_bound || after.over_bound {
            let reason = format!(
                "{} holds more than {} files, so what commands changed there was not recorded",
                before.root.display(),
                self.bounds.files
            );
            let said = self.records.iter().any(|record| {
                matches!(record, Record::Bound { turn: t, reason: said } if t == turn && *said == reason)
            });
            if !said {
                self.append(Record::Bound {
                    turn: turn.to_owned(),
                    reason,
                })?;
            }
            self.index = None;
            return Ok(0);
        }
        let moved = after.moved_since(&before);
        let mut count = 0;
        for m in moved {
            let before_image = match &m.before {
                None => Image::Absent,
                Some(stat) => match &stat.hash {
                    Some(hash) => Image::Content {
                        hash: hash.clone(),
                        size: stat.size,
                    },
                    None => Image::Unknown,
                },
            };
            let after_image = match m.after {
                None => Image::Absent,
                Some(_) => match current(&m.path) {
                    Ok(Some(bytes)) => self.keep(&bytes)?,
                    Ok(None) => Image::Absent,
                    Err(_) => continue,
                },
            };
            if after_image == before_image {
                continue;
            }
            if let Some(hash) = after_image.hash()
                && let Some(stat) = after.files.get_mut(&m.path)
            {
                stat.hash = Some(hash.to_owned());
            }
            self.append(Record::Change {
                turn: turn.to_owned(),
                path: m.path,
                before: before_image,
                after: after_image,
                by: by.to_owned(),
            })?;
            count += 1;
        }
        self.index = Some(after);
        self.enforce_storage()?;
        Ok(count)
    }

    /// Notes that `path` holds content the session read (so a command changing it later can
    /// be undone): the content is kept and the index learns its hash.
    pub fn note_read(&mut self, path: &Path) -> Result<(), JournalError> {
        let Some(index) = &mut self.index else {
            return Ok(());
        };
        if let Ok(Some(bytes)) = current(path)
            && (bytes.len() as u64) <= self.bounds.file
        {
            let hash = self.blobs.put(&bytes).map_err(|e| JournalError::Io {
                path: path.to_path_buf(),
                source: e,
            })?;
            index.note(path, Some(hash));
        }
        Ok(())
    }

    /// The turns that changed something, oldest first.
    pub fn turns(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for r in &self.records {
            let turn = match r {
                Record::Change { turn, .. } | Record::Bound { turn, .. } => turn,
                _ => continue,
            };
            if seen.insert(turn.clone()) {
                out.push(turn.clone());
            }
        }
        out
    }

    /// What `turn` changed, per file.
    pub fn turn(&self, turn: &str) -> TurnChanges {
        let mut files: BTreeMap<PathBuf, FileChange> = BTreeMap::new();
        let mut notes = Vec::new();
        let mut dropped = false;
        for r in &self.records {
            match r {
                Record::Change {
                    turn: t,
                    path,
                    before,
                    after,
                    by,
                } if t == turn => {
                    let entry = files.entry(path.clone()).or_insert_with(|| FileChange {
                        path: path.clone(),
                        before: before.clone(),
                        after: after.clone(),
                        by: Vec::new(),
                        undone: false,
                        before_kept: false,
                        after_kept: false,
                    });
                    entry.after = after.clone();
                    if !entry.by.contains(by) {
                        entry.by.push(by.clone());
                    }
                }
                Record::Bound { turn: t, reason } if t == turn && !notes.contains(reason) => {
                    notes.push(reason.clone());
                }
                Record::Undo {
                    turn: t,
                    path,
                    undone,
                } if t == turn => {
                    if let Some(f) = files.get_mut(path) {
                        f.undone = *undone;
                    }
                }
                Record::Dropped { turn: t } if t == turn => dropped = true,
                _ => {}
            }
        }
        let kept = |image: &Image| match image {
            Image::Absent => true,
            Image::Content { hash, .. } => self.blobs.has(hash),
            Image::Unknown => false,
        };
        let files = files
            .into_values()
            .filter(|f| f.before != f.after)
            .map(|mut f| {
                f.before_kept = kept(&f.before);
                f.after_kept = kept(&f.after);
                f
            })
            .collect();
        TurnChanges {
            turn: turn.to_owned(),
            files,
            notes,
            dropped,
        }
    }

    /// Every turn's changes, oldest first.
    pub fn all(&self) -> Vec<TurnChanges> {
        self.turns().iter().map(|t| self.turn(t)).collect()
    }

    /// Undoes `turn`'s change to each file (or to `only`), file by file: a file is put back
    /// only where its content now is the one this turn left.
    pub fn undo(&mut self, turn: &str, only: Option<&Path>) -> Result<Vec<Outcome>, JournalError> {
        self.apply(turn, only, true)
    }

    /// Puts `turn`'s content back where an undo took it away, under the same rule: only
    /// where the file's content now is the one the undo left.
    pub fn redo(&mut self, turn: &str, only: Option<&Path>) -> Result<Vec<Outcome>, JournalError> {
        self.apply(turn, only, false)
    }

    fn apply(
        &mut self,
        turn: &str,
        only: Option<&Path>,
        undo: bool,
    ) -> Result<Vec<Outcome>, JournalError> {
        let changes = self.turn(turn);
        if changes.files.is_empty() {
            return Err(JournalError::NoTurn(turn.to_owned()));
        }
        let files: Vec<FileChange> = match only {
            Some(p) => {
                let picked: Vec<FileChange> = changes
                    .files
                    .iter()
                    .filter(|f| f.path == p)
                    .cloned()
                    .collect();
                if picked.is_empty() {
                    return Err(JournalError::NoFile {
                        turn: turn.to_owned(),
                        path: p.to_path_buf(),
                    });
                }
                picked
            }
            // Asked for the whole turn, files already in the state asked for are passed over.
            None => {
                let left: Vec<FileChange> = changes
                    .files
                    .iter()
                    .filter(|f| f.undone != undo)
                    .cloned()
                    .collect();
                if left.is_empty() {
                    return Err(JournalError::NothingLeft {
                        turn: turn.to_owned(),
                        what: if undo { "undo" } else { "redo" },
                    });
                }
                left
            }
        };
        let later = self.later_images(turn);
        let mut out = Vec::new();
        for f in files {
            let outcome = self.apply_one(turn, &f, undo, &later)?;
            if !outcome.refused() {
                self.append(Record::Undo {
                    turn: turn.to_owned(),
                    path: f.path.clone(),
                    undone: undo,
                })?;
            }
            out.push(outcome);
        }
        Ok(out)
    }

    /// Per file, the hashes later turns of this session left, to tell "a later turn" apart.
    fn later_images(&self, turn: &str) -> HashMap<PathBuf, Vec<(String, Image)>> {
        let turns = self.turns();
        let after: Vec<&String> = turns.iter().skip_while(|t| *t != turn).skip(1).collect();
        let mut out: HashMap<PathBuf, Vec<(String, Image)>> = HashMap::new();
        for t in after {
            for f in self.turn(t).files {
                if !f.undone {
                    out.entry(f.path.clone())
                        .or_default()
                        .push((t.clone(), f.after.clone()));
                }
            }
        }
        out
    }

    fn apply_one(
        &mut self,
        turn: &str,
        f: &FileChange,
        undo: bool,
        later: &HashMap<PathBuf, Vec<(String, Image)>>,
    ) -> Result<Outcome, JournalError> {
        let shown = f.path.display();
        let refuse = |why: String| Ok(Outcome::Refused(f.path.clone(), why));
        if undo && f.undone {
            return refuse(format!("{shown} is already undone"));
        }
        if !undo && !f.undone {
            return refuse(format!(
                "{shown} has no undone change of turn {turn} to redo"
            ));
        }
        let (expected, target) = if undo {
            (&f.after, &f.before)
        } else {
            (&f.before, &f.after)
        };
        let now = match current(&f.path) {
            Ok(now) => now,
            Err(e) => {
                return refuse(format!(
                    "{shown} cannot be read ({e}), so it was left as it is"
                ));
            }
        };
        if !matches(expected, now.as_deref()) {
            let by_later = now.as_deref().and_then(|bytes| {
                let hash = hash_of(bytes);
                later
                    .get(&f.path)?
                    .iter()
                    .rev()
                    .find(|(_, image)| image.hash() == Some(hash.as_str()))
                    .map(|(t, _)| t.clone())
            });
            let since = if undo {
                format!("this session's turn {turn} changed it")
            } else {
                format!("turn {turn}'s change was undone")
            };
            return refuse(match by_later {
                Some(t) => format!(
                    "{shown} changed since {since}: turn {t} of this session changed it again; undo that turn first"
                ),
                None => format!(
                    "{shown} changed since {since} (by another session, a person or a command), so it was left as it is"
                ),
            });
        }
        match target {
            Image::Absent => {
                if now.is_some() {
                    std::fs::remove_file(&f.path).map_err(|e| self.io(e))?;
                }
                Ok(Outcome::Removed(f.path.clone()))
            }
            Image::Unknown => refuse(format!(
                "{shown} was changed by a command before this session had read it, so its earlier content was never kept"
            )),
            Image::Content { hash, .. } => {
                let Some(bytes) = self.blobs.get(hash) else {
                    return refuse(if undo {
                        format!(
                            "{shown}'s earlier content is no longer kept (it was too large, or dropped to stay within the session's storage bound)"
                        )
                    } else {
                        format!("{shown}'s content from turn {turn} is no longer kept")
                    });
                };
                // Keeps what is there now, so the opposite operation can bring it back.
                if let Some(bytes) = &now
                    && bytes.len() as u64 <= self.bounds.file
                {
                    self.blobs.put(bytes).map_err(|e| self.io(e))?;
                }
                replace(&f.path, &bytes).map_err(|e| self.io(e))?;
                if let Some(index) = &mut self.index {
                    index.note(&f.path, Some(hash.clone()));
                }
                Ok(Outcome::Restored(f.path.clone()))
            }
        }
    }

    /// Bytes the kept contents take.
    pub fn stored_bytes(&self) -> u64 {
        self.referenced().values().map(|(size, _)| *size).sum()
    }

    /// Each kept hash → (size, the newest turn index referencing it).
    fn referenced(&self) -> HashMap<String, (u64, usize)> {
        let turns = self.turns();
        let order: HashMap<&str, usize> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let mut out: HashMap<String, (u64, usize)> = HashMap::new();
        for r in &self.records {
            if let Record::Change {
                turn,
                before,
                after,
                ..
            } = r
            {
                let at = order.get(turn.as_str()).copied().unwrap_or(0);
                for image in [before, after] {
                    if let Image::Content { hash, size } = image
                        && self.blobs.has(hash)
                    {
                        let e = out.entry(hash.clone()).or_insert((*size, at));
                        e.1 = e.1.max(at);
                    }
                }
            }
        }
        out
    }

    /// Drops the oldest turns' kept contents until the rest fit the storage bound.
    fn enforce_storage(&mut self) -> Result<(), JournalError> {
        let referenced = self.referenced();
        let mut total: u64 = referenced.values().map(|(s, _)| *s).sum();
        if total <= self.bounds.storage {
            return Ok(());
        }
        let turns = self.turns();
        let dropped: HashSet<String> = self
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Dropped { turn } => Some(turn.clone()),
                _ => None,
            })
            .collect();
        // The newest turn keeps its contents whatever they weigh: it is the one most likely
        // to be undone.
        for (i, turn) in turns.iter().enumerate().take(turns.len().saturating_sub(1)) {
            if total <= self.bounds.storage {
                break;
            }
            if dropped.contains(turn) {
                continue;
            }
            for (hash, (size, newest)) in &referenced {
                if *newest == i {
                    self.blobs.remove(hash);
                    total = total.saturating_sub(*size);
                }
            }
            self.append(Record::Dropped { turn: turn.clone() })?;
        }
        Ok(())
    }

    /// The turns whose kept contents were dropped, oldest first.
    pub fn dropped_turns(&self) -> Vec<String> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Dropped { turn } => Some(turn.clone()),
                _ => None,
            })
            .collect()
    }

    /// The kept content under `hash`, for showing a change's two sides.
    pub fn content(&self, hash: &str) -> Option<Vec<u8>> {
        self.blobs.get(hash)
    }

    /// Leaves these folders (a store inside the workspace) out of every comparison; the
    /// journal's own folder is always left out.
    pub fn exclude(&mut self, folders: Vec<PathBuf>) {
        self.exclude = folders;
    }

    fn excluded(&self) -> Vec<PathBuf> {
        self.exclude
            .iter()
            .cloned()
            .chain(self.dir.clone())
            .collect()
    }

    /// The bounds in force.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }
}
