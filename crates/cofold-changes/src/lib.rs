//! What a cofold session's turns changed in its folders, and taking it back.
//!
//! - **Tool writes**: before a tool writes a file its content is kept by SHA-256
//!   ([`Journal::capture`]); after it, the new content's hash (and the content, for redo) is
//!   recorded ([`Journal::record_write`]).
//! - **Commands**: the folder is indexed (size, modification time, inode; ignore files
//!   honoured) before and after each command, and only the files that moved are read
//!   ([`Journal::index_before`], [`Journal::record_command`]). A walk stops at
//!   [`index::MAX_INDEXED_FILES`] files and the turn's record says so.
//! - **Bounds**: contents over [`journal::MAX_KEPT_FILE`] are recorded by hash only, and a session
//!   keeps at most [`journal::DEFAULT_STORAGE_BOUND`] bytes of contents, the oldest turns' dropped
//!   first ([`Journal::dropped_turns`]).
//! - **Undo and redo** put a file back only where its content now is exactly what this
//!   session's turn left (or, for redo, what the undo left); anything else is refused with a
//!   sentence naming the file, so work done since by someone else is never overwritten.
//!
//! The crate knows nothing of any protocol: a host shows [`TurnChanges`] as it likes.

mod blobs;
pub mod index;
pub mod journal;
pub mod record;

pub use blobs::hash_of;
pub use index::{FolderIndex, MAX_INDEXED_FILES};
pub use journal::{
    Bounds, DEFAULT_STORAGE_BOUND, FileChange, Image, Journal, JournalError, MAX_KEPT_FILE,
    Outcome, TurnChanges,
};
pub use record::{OnChange, Recorded, TurnRecorder, real_path, recording_tool};

/// Lines added and removed between two contents, when both are text; `None` for binary ones.
pub fn line_stats(before: &[u8], after: &[u8]) -> Option<(usize, usize)> {
    let before = std::str::from_utf8(before).ok()?;
    let after = std::str::from_utf8(after).ok()?;
    let diff = similar::TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    Some((added, removed))
}
