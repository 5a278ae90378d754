//! What the host keeps of each ACP session, whatever the agent keeps itself: the turns as the
//! clients saw them (so a session lists and reads back after a restart even when the agent
//! cannot `session/load`), the agent's own session id to load it by, and its state folder.
//!
//! One JSON file per conversation under the record's folder, written whole through a
//! temporary file and renamed, readable by the daemon's user alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use ahp_types::state::Turn;
use ahpd_sdk::PastSession;
use serde::{Deserialize, Serialize};

/// One stored conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Conversation {
    /// The backend id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub modified_at: String,
    /// `file:` URIs of its folders.
    #[serde(default)]
    pub working_directories: Vec<String>,
    /// The agent's own session id, once it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acp_session_id: Option<String>,
    /// Whether the agent said it can `session/load`.
    #[serde(default)]
    pub loadable: bool,
    /// The turns, oldest first.
    #[serde(default)]
    pub turns: Vec<Turn>,
}

/// The folder of one record's conversations.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// Backend ids become file names, so only plain ones are accepted.
pub fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes a file whole (through a temporary file, renamed), mode `0600`.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

impl Store {
    /// The store's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The store in `dir`, made (mode `0700`) if absent.
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        private_dir(&dir)?;
        Ok(Self { dir })
    }

    fn file(&self, id: &str) -> Option<PathBuf> {
        plain_id(id).then(|| self.dir.join(format!("{id}.json")))
    }

    /// The state folder of a conversation (the agent's home for it), made if absent; the bool
    /// says whether it was made now.
    pub fn state_dir(&self, id: &str) -> std::io::Result<(PathBuf, bool)> {
        if !plain_id(id) {
            return Err(std::io::Error::other(format!(
                "{id:?} is not an ACP conversation id"
            )));
        }
        let dir = self.dir.join(id);
        let fresh = !dir.exists();
        private_dir(&dir)?;
        Ok((dir, fresh))
    }

    /// A conversation, if stored.
    pub fn read(&self, id: &str) -> Option<Conversation> {
        let text = std::fs::read_to_string(self.file(id)?).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Store a conversation whole.
    pub fn write(&self, c: &Conversation) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = self
            .file(&c.id)
            .ok_or_else(|| std::io::Error::other("not a conversation id"))?;
        let tmp = self
            .dir
            .join(format!(".{}.{}.tmp", c.id, std::process::id()));
        let bytes = serde_json::to_vec(c).map_err(std::io::Error::other)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    }

    /// Every conversation with at least one turn.
    pub fn list(&self) -> Vec<PastSession> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if let Some(c) = self.read(id)
                && !c.turns.is_empty()
            {
                rows.push(PastSession {
                    id: c.id,
                    title: c.title,
                    created_at: c.created_at,
                    modified_at: c.modified_at,
                    working_directories: c.working_directories,
                });
            }
        }
        rows.sort_by(|a, b| b.modified_at.cmp(&a.modified_at));
        rows
    }

    /// Remove a conversation and its state folder; an absent one counts as removed.
    pub fn delete(&self, id: &str) -> std::io::Result<()> {
        let Some(path) = self.file(id) else {
            return Ok(());
        };
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match std::fs::remove_dir_all(self.dir.join(id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}
