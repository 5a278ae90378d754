//! What a call would do, told before it runs: the files it would change with their content
//! before and after, the refusal it would meet, or why no preview can be shown.
//!
//! A tool works its preview out by the same code its handler runs, so the change a person
//! approves is the change the call makes (unless the file changes in between).

use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// A function from validated input to what the call would do.
pub type PreviewFn = Arc<dyn Fn(&Value) -> Preview + Send + Sync>;

/// What a call would do, as far as the tool can tell without doing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preview {
    /// The call would change these files.
    Changes {
        /// One entry per file, in the order the call touches them.
        files: Vec<FileChange>,
    },
    /// The call as given would be refused with this sentence, the one it gives when run.
    WouldFail {
        /// The refusal.
        message: String,
    },
    /// No preview can be shown (a file too large, binary or unreadable); the sentence says
    /// why. The call itself may still succeed.
    Unavailable {
        /// Why there is no preview.
        message: String,
    },
}

impl Preview {
    /// The call would change one file from `before` (absent: it does not exist yet) to `after`
    /// (absent: it is removed).
    pub fn file(path: PathBuf, before: Option<Vec<u8>>, after: Option<Vec<u8>>) -> Preview {
        Preview::Changes {
            files: vec![FileChange {
                path,
                before,
                after,
            }],
        }
    }

    /// The call would be refused with `message`.
    pub fn would_fail(message: impl Into<String>) -> Preview {
        Preview::WouldFail {
            message: message.into(),
        }
    }

    /// No preview can be shown, for the reason `message` gives.
    pub fn unavailable(message: impl Into<String>) -> Preview {
        Preview::Unavailable {
            message: message.into(),
        }
    }
}

/// One file a call would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The absolute path of the file, where the write lands (links followed).
    pub path: PathBuf,
    /// Its bytes now; `None` when the call creates it.
    pub before: Option<Vec<u8>>,
    /// Its bytes after the call; `None` when the call removes it.
    pub after: Option<Vec<u8>>,
}

impl FileChange {
    /// Whether the call creates the file.
    pub fn is_creation(&self) -> bool {
        self.before.is_none() && self.after.is_some()
    }

    /// Whether the call removes the file.
    pub fn is_deletion(&self) -> bool {
        self.before.is_some() && self.after.is_none()
    }
}
