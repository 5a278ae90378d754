//! The session store port: what the host remembers of each session across restarts, the trait
//! of the store that keeps it, and the store's errors. See [`crate::ports`].

use ahp_types::common::JsonObject;
use serde::{Deserialize, Serialize};

/// What the host remembers about one session across restarts, keyed by the session URI
/// exactly as it was spelled when the session was created or opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session's channel URI as spelled (`mock:/abc`, `ahp-session:/abc`, …).
    pub uri: String,
    /// The agent's provider id.
    pub provider: String,
    /// The id the agent stores the conversation under.
    pub backend_id: String,
    /// When the session was created (RFC 3339).
    pub created_at: String,
    /// The title a client chose; `None` while the agent's own title is in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The session's `IsRead` flag.
    #[serde(default)]
    pub is_read: bool,
    /// The session's `IsArchived` flag.
    #[serde(default)]
    pub is_archived: bool,
    /// Configuration values in force.
    #[serde(default)]
    pub config: JsonObject,
    /// `file:` URIs of the session's working folders.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub working_directories: Vec<String>,
    /// Set when the session runs in a machine: its conversation lives there, so this record is
    /// what the catalogue shows of it while no inner host runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<NestedRecord>,
}

impl SessionRecord {
    /// The catalogue row of a session in a machine, from what its record keeps.
    pub(crate) fn nested_row(&self) -> Option<crate::agent::PastSession> {
        let n = self.nested.as_ref()?;
        Some(crate::agent::PastSession {
            id: self.backend_id.clone(),
            title: n.title.clone(),
            created_at: self.created_at.clone(),
            modified_at: n.modified_at.clone(),
            working_directories: self.working_directories.clone(),
        })
    }
}

/// What the host keeps of a session whose conversation lives in a machine, to list and open
/// it again without asking the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NestedRecord {
    /// The machine's id (`computer://<id>`).
    pub machine: String,
    /// The provider serving the conversation inside.
    pub inner_provider: String,
    /// The title the host inside gave the session.
    pub title: String,
    /// When the session last changed (RFC 3339).
    pub modified_at: String,
}

/// Why a session store could not be read or written. Every message names the file (or store)
/// and says what happened to its contents.
#[derive(Debug, thiserror::Error)]
pub enum SessionStoreError {
    /// The store could not be read; nothing will be written over it in this run.
    #[error(
        "could not read the session store {path}: {source}; it is left as it is and nothing \
         will be written over it until the host restarts"
    )]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The store's contents are not a session store; they were set aside, not deleted.
    #[error(
        "the session store {path} could not be read as a session store ({reason}); it was \
         moved to {moved_to} and the host starts with no remembered sessions"
    )]
    Corrupt {
        /// The file.
        path: std::path::PathBuf,
        /// Where the unreadable contents are now.
        moved_to: std::path::PathBuf,
        /// What was wrong with them.
        reason: String,
    },
    /// The store was written by a newer host; it is left alone.
    #[error(
        "the session store {path} has format version {version}, newer than this host's; it is \
         left as it is and nothing will be written over it"
    )]
    NewerVersion {
        /// The file.
        path: std::path::PathBuf,
        /// The version it names.
        version: u64,
    },
    /// Writing failed; the previous contents are still in place.
    #[error("could not write the session store {path}: {source}; its previous contents are kept")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The store refuses to write because reading it at start failed.
    #[error("not writing the session store {path}: {reason}")]
    Refused {
        /// The file.
        path: std::path::PathBuf,
        /// Why reading failed.
        reason: String,
    },
    /// The path cannot hold a session store.
    #[error("{path} cannot hold a session store: {reason}")]
    BadPath {
        /// The path given.
        path: std::path::PathBuf,
        /// Why not.
        reason: String,
    },
    /// A store other than the file store failed.
    #[error("the session store failed: {0}")]
    Other(String),
}

/// Where the host keeps [`SessionRecord`]s between runs. The host holds the records in memory,
/// calls [`SessionStore::load`] once when it is built, and hands the whole set to
/// [`SessionStore::save`] (from a blocking thread, at most once per second, and when
/// [`crate::HostHandle::flush_session_store`] is called). A save must be atomic: after a crash at any
/// point the store holds either the previous set or the new one.
pub trait SessionStore: Send + Sync + 'static {
    /// Every record, in any order. An empty or missing store is `Ok(vec![])`.
    fn load(&self) -> Result<Vec<SessionRecord>, SessionStoreError>;

    /// Replace the stored set with these records. They are borrowed from the host's own copy,
    /// so a save costs no copy of every record.
    fn save(&self, records: &[&SessionRecord]) -> Result<(), SessionStoreError>;
}
