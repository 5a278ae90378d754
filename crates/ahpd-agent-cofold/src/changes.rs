//! A session's recorded changes as AHP changesets: one per turn
//! (`<chat>/changes/turn/<turnId>`) and one for the whole session (`<chat>/changes/session`),
//! advertised on the chat and the session, with the operations that undo and redo them.
//! The record itself and the undo rule are `cofold-changes`'.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use ahp_types::actions::{
    ChangesetContentChangedAction, ChatChangesetsChangedAction, SessionChangesetsChangedAction,
    StateAction,
};
use ahp_types::commands::{
    ChangesetOperationTarget, ContentEncoding, InvokeChangesetOperationParams,
    InvokeChangesetOperationResult, ResourceListResult, ResourceReadResult, ResourceResolveResult,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    Changeset, ChangesetFile, ChangesetOperation, ChangesetOperationScope,
    ChangesetOperationStatus, ChangesetState, ChangesetStatus, ContentRef, FileEdit,
    FileEditDiffStats, FileEditSide,
};
use ahpd_sdk::{Refusal, RpcError, SessionContext};
use cofold_changes::{Bounds, FileChange, Image, Journal, Outcome, TurnRecorder, real_path};
use serde_json::{Value, json};

use crate::scratch::encode_scratch_segment;

/// The URI scheme of kept contents (`cofold-change:/<session>/<sha256>`).
pub const CONTENT_SCHEME: &str = "cofold-change";
/// The session `_meta` key saying what the record holds and what it dropped.
pub const META_KEY: &str = "ahpd.changes";

/// Undo this turn's (or the session's) changes.
pub const UNDO_ALL: &str = "undo";
/// Undo one file.
pub const UNDO_FILE: &str = "undo-file";
/// Redo a turn's undone changes.
pub const REDO_ALL: &str = "redo";
/// Redo one file.
pub const REDO_FILE: &str = "redo-file";

/// One session's record and how it is shown.
pub(crate) struct SessionChanges {
    pub(crate) journal: Arc<Mutex<Journal>>,
    /// The session's folder, real path.
    pub(crate) root: PathBuf,
    ctx: SessionContext,
    /// The record's folder name, used in content URIs.
    key: String,
    catalogued: AtomicBool,
}

fn lock(journal: &Mutex<Journal>) -> std::sync::MutexGuard<'_, Journal> {
    journal.lock().unwrap_or_else(|p| p.into_inner())
}

fn operation(
    id: &str,
    label: &str,
    scope: ChangesetOperationScope,
    confirm: &str,
) -> ChangesetOperation {
    let icon = if id.starts_with("undo") {
        "discard"
    } else {
        "redo"
    };
    ChangesetOperation {
        id: id.to_owned(),
        label: label.to_owned(),
        description: None,
        scopes: vec![scope],
        confirmation: Some(StringOrMarkdown::Plain(confirm.to_owned())),
        icon: Some(icon.to_owned()),
        group: Some("changes".to_owned()),
        status: ChangesetOperationStatus::Idle,
        error: None,
    }
}

const LEFT: &str = "A file that changed since (by another session, a person or a command) is left as it is and named.";

impl SessionChanges {
    /// The record of a conversation: on disk under the store's `changes/` folder, in memory for
    /// a store in memory.
    pub(crate) fn open(
        store_root: Option<&Path>,
        backend_id: &str,
        workspace: &Path,
        ctx: SessionContext,
    ) -> SessionChanges {
        let key = encode_scratch_segment(backend_id);
        let journal = match store_root {
            Some(store) => {
                let dir = store.join("changes").join(&key);
                match Journal::open(&dir, Bounds::default()) {
                    Ok(mut j) => {
                        j.exclude(vec![real_path(store)]);
                        j
                    }
                    Err(e) => {
                        tracing::warn!("{e}; this session's changes are kept in memory only");
                        Journal::in_memory(Bounds::default())
                    }
                }
            }
            None => Journal::in_memory(Bounds::default()),
        };
        let journal = Arc::new(Mutex::new(journal));
        let mut open = open_records().lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|_, j| j.strong_count() > 0);
        open.insert(key.clone(), Arc::downgrade(&journal));
        drop(open);
        SessionChanges {
            journal,
            root: real_path(workspace),
            ctx,
            key,
            catalogued: AtomicBool::new(false),
        }
    }

    fn base(&self) -> String {
        format!(
            "{}{}",
            self.ctx.chat_uri(),
            ahpd_sdk::changesets::CHANGES_SEGMENT
        )
    }

    /// The channel of one turn's changeset.
    pub(crate) fn turn_uri(&self, turn: &str) -> String {
        format!("{}turn/{}", self.base(), encode_scratch_segment(turn))
    }

    /// The channel of the session's changeset.
    pub(crate) fn session_uri(&self) -> String {
        format!("{}session", self.base())
    }

    /// Says the changesets this chat offers, once.
    pub(crate) fn advertise(&self) {
        if self.catalogued.swap(true, Ordering::SeqCst) {
            return;
        }
        let session = Changeset {
            label: "Changes in this session".to_owned(),
            uri_template: self.session_uri(),
            description: Some(
                "Every file this session's turns changed in its folder, with undo".to_owned(),
            ),
            change_kind: "session".to_owned(),
            capabilities: None,
        };
        let turn = Changeset {
            label: "Changes in this turn".to_owned(),
            uri_template: format!("{}turn/{{turnId}}", self.base()),
            description: Some("The files one turn changed, with undo and redo".to_owned()),
            change_kind: "turn".to_owned(),
            capabilities: None,
        };
        self.ctx.emit(StateAction::ChatChangesetsChanged(
            ChatChangesetsChangedAction {
                changesets: Some(vec![turn, session.clone()]),
            },
        ));
        self.ctx.emit(StateAction::SessionChangesetsChanged(
            SessionChangesetsChangedAction {
                changesets: Some(vec![session]),
            },
        ));
    }

    /// Whether anything was recorded (a conversation opened again advertises its changesets at
    /// once).
    pub(crate) fn recorded(&self) -> bool {
        !lock(&self.journal).turns().is_empty()
    }

    /// The recorder of one turn's tool calls; `on_change` hears of each recorded call.
    pub(crate) fn recorder(&self, turn: &str, on_change: cofold_changes::OnChange) -> TurnRecorder {
        TurnRecorder {
            journal: self.journal.clone(),
            turn: turn.to_owned(),
            root: self.root.clone(),
            on_change: Some(on_change),
        }
    }

    fn content_uri(&self, hash: &str) -> String {
        format!("{CONTENT_SCHEME}:/{}/{hash}", self.key)
    }

    fn side(&self, path: &Path, image: &Image) -> Option<FileEditSide> {
        let uri = ahpd_sdk::util::file_uri(path);
        match image {
            Image::Absent => None,
            Image::Content { hash, size } => Some(FileEditSide {
                uri,
                content: ContentRef {
                    uri: self.content_uri(hash),
                    size_hint: i64::try_from(*size).ok(),
                    content_type: None,
                    nonce: None,
                },
            }),
            // Never read: the side names the file itself.
            Image::Unknown => Some(FileEditSide {
                uri: uri.clone(),
                content: ContentRef {
                    uri,
                    size_hint: None,
                    content_type: None,
                    nonce: None,
                },
            }),
        }
    }

    fn file(&self, journal: &Journal, f: &FileChange, turn: Option<&str>) -> ChangesetFile {
        let text = |image: &Image| match image {
            Image::Absent => Some(Vec::new()),
            Image::Content { hash, .. } => journal.content(hash),
            Image::Unknown => None,
        };
        let diff = match (text(&f.before), text(&f.after)) {
            (Some(b), Some(a)) => {
                cofold_changes::line_stats(&b, &a).map(|(added, removed)| FileEditDiffStats {
                    added: i64::try_from(added).ok(),
                    removed: i64::try_from(removed).ok(),
                })
            }
            _ => None,
        };
        let mut meta = serde_json::Map::new();
        meta.insert("ahpd.by".into(), json!(f.by));
        meta.insert("ahpd.undone".into(), json!(f.undone));
        meta.insert("ahpd.undoable".into(), json!(!f.undone && f.before_kept));
        if let Some(turn) = turn {
            meta.insert("ahpd.turn".into(), json!(turn));
        }
        ChangesetFile {
            id: ahpd_sdk::util::file_uri(&f.path),
            edit: FileEdit {
                before: self.side(&f.path, &f.before),
                after: self.side(&f.path, &f.after),
                diff,
            },
            reviewed: None,
            meta: Some(meta),
        }
    }

    fn turn_state(&self, journal: &Journal, turn: &str) -> ChangesetState {
        let changes = journal.turn(turn);
        let files = changes
            .files
            .iter()
            .map(|f| self.file(journal, f, Some(turn)))
            .collect();
        ChangesetState {
            status: ChangesetStatus::Ready,
            // What the record missed is said in the session's `_meta` (`ahpd.changes`).
            error: None,
            files,
            operations: Some(vec![
                operation(
                    UNDO_ALL,
                    "Undo this turn",
                    ChangesetOperationScope::Changeset,
                    &format!("Put back every file this turn changed? {LEFT}"),
                ),
                operation(
                    UNDO_FILE,
                    "Undo this file",
                    ChangesetOperationScope::Resource,
                    &format!("Put this file back as it was before the turn? {LEFT}"),
                ),
                operation(
                    REDO_ALL,
                    "Redo this turn",
                    ChangesetOperationScope::Changeset,
                    &format!("Write this turn's undone changes again? {LEFT}"),
                ),
                operation(
                    REDO_FILE,
                    "Redo this file",
                    ChangesetOperationScope::Resource,
                    &format!("Write this turn's change to the file again? {LEFT}"),
                ),
            ]),
        }
    }

    /// The session's changes: per file, from the content before its first applied change to
    /// the one after its last.
    fn session_state(&self, journal: &Journal) -> ChangesetState {
        let mut by_path: std::collections::BTreeMap<PathBuf, FileChange> = Default::default();
        for turn in journal.all() {
            for f in turn.files.iter().filter(|f| !f.undone) {
                by_path
                    .entry(f.path.clone())
                    .and_modify(|e| {
                        e.after = f.after.clone();
                        e.after_kept = f.after_kept;
                        for b in &f.by {
                            if !e.by.contains(b) {
                                e.by.push(b.clone());
                            }
                        }
                    })
                    .or_insert_with(|| f.clone());
            }
        }
        let files = by_path
            .values()
            .filter(|f| f.before != f.after)
            .map(|f| self.file(journal, f, None))
            .collect();
        ChangesetState {
            status: ChangesetStatus::Ready,
            error: None,
            files,
            operations: Some(vec![
                operation(
                    UNDO_ALL,
                    "Undo the session's changes",
                    ChangesetOperationScope::Changeset,
                    &format!("Put back every file this session changed, newest turn first? {LEFT}"),
                ),
                operation(
                    UNDO_FILE,
                    "Undo this file",
                    ChangesetOperationScope::Resource,
                    &format!("Put this file back as it was before this session changed it? {LEFT}"),
                ),
            ]),
        }
    }

    /// The state of one of the chat's changeset channels.
    pub(crate) fn state(&self, channel: &str) -> Option<ChangesetState> {
        let journal = lock(&self.journal);
        if channel == self.session_uri() {
            return Some(self.session_state(&journal));
        }
        let encoded = channel.strip_prefix(&format!("{}turn/", self.base()))?;
        let turn = journal
            .turns()
            .into_iter()
            .find(|t| encode_scratch_segment(t) == encoded);
        Some(match turn {
            Some(t) => self.turn_state(&journal, &t),
            // A turn that changed nothing has an empty changeset.
            None => ChangesetState {
                status: ChangesetStatus::Ready,
                error: None,
                files: Vec::new(),
                operations: None,
            },
        })
    }

    /// Publishes the turn's and the session's changesets to whoever watches them.
    pub(crate) fn publish(&self, turn: &str) {
        for channel in [self.turn_uri(turn), self.session_uri()] {
            if let Some(state) = self.state(&channel) {
                self.ctx.emit_changeset(
                    &channel,
                    StateAction::ChangesetContentChanged(Box::new(ChangesetContentChangedAction {
                        files: state.files,
                        operations: state.operations,
                    })),
                );
            }
        }
    }

    /// What the session's `_meta` says of the record.
    pub(crate) fn meta(&self) -> Value {
        let journal = lock(&self.journal);
        let mut incomplete = serde_json::Map::new();
        for turn in journal.all() {
            if !turn.notes.is_empty() {
                incomplete.insert(turn.turn.clone(), json!(turn.notes));
            }
        }
        json!({
            "turns": journal.turns().len(),
            "storedBytes": journal.stored_bytes(),
            "storageBound": journal.bounds().storage,
            "droppedTurns": journal.dropped_turns(),
            "incomplete": incomplete,
        })
    }

    /// Runs a changeset operation; the sentences of every file's outcome come back.
    pub(crate) fn operate(
        &self,
        params: &InvokeChangesetOperationParams,
    ) -> Result<(Vec<String>, InvokeChangesetOperationResult), Refusal> {
        let file = match &params.target {
            Some(ChangesetOperationTarget::Resource { resource, .. }) => Some(
                ahpd_sdk::util::path_of(resource)
                    .ok_or_else(|| Refusal::new(format!("{resource} is not a file URI")))?,
            ),
            _ => None,
        };
        let undo = matches!(params.operation_id.as_str(), UNDO_ALL | UNDO_FILE);
        let mut journal = lock(&self.journal);
        let (outcomes, turns) = if params.channel == self.session_uri() {
            // Newest turn first, so each undo finds the content the next one left.
            let mut all = Vec::new();
            let mut touched = Vec::new();
            for t in journal.turns().into_iter().rev() {
                let changes = journal.turn(&t);
                let relevant: Vec<&FileChange> = changes
                    .files
                    .iter()
                    .filter(|f| !f.undone && file.as_ref().is_none_or(|p| f.path == *p))
                    .collect();
                if relevant.is_empty() {
                    continue;
                }
                let out = match journal.undo(&t, file.as_deref()) {
                    Ok(out) => out,
                    Err(cofold_changes::JournalError::NothingLeft { .. }) => continue,
                    Err(e) => return Err(Refusal::new(e.to_string())),
                };
                let stop = out.iter().any(Outcome::refused);
                all.extend(out);
                touched.push(t);
                if stop {
                    break;
                }
            }
            if all.is_empty() {
                return Err(Refusal::new("this session has no change left to undo"));
            }
            (all, touched)
        } else {
            let encoded = params
                .channel
                .strip_prefix(&format!("{}turn/", self.base()))
                .ok_or_else(|| {
                    Refusal::new(format!(
                        "{} is not a changeset of this chat",
                        params.channel
                    ))
                })?;
            let turn = journal
                .turns()
                .into_iter()
                .find(|t| encode_scratch_segment(t) == encoded)
                .ok_or_else(|| Refusal::new("this turn changed no file"))?;
            let out = if undo {
                journal.undo(&turn, file.as_deref())
            } else {
                journal.redo(&turn, file.as_deref())
            }
            .map_err(|e| Refusal::new(e.to_string()))?;
            (out, vec![turn])
        };
        drop(journal);
        for t in &turns {
            self.publish(t);
        }
        let sentences: Vec<String> = outcomes.iter().map(Outcome::sentence).collect();
        if outcomes.iter().all(Outcome::refused) {
            return Err(Refusal::new(sentences.join("\n")));
        }
        let result = InvokeChangesetOperationResult {
            message: Some(StringOrMarkdown::Plain(sentences.join("\n"))),
            follow_up: None,
        };
        Ok((sentences, result))
    }
}

/// The records of the sessions open in this process, by their folder name, so the contents
/// their changesets point at (`cofold-change:/<session>/<sha256>`) can be read.
fn open_records() -> &'static Mutex<HashMap<String, Weak<Mutex<Journal>>>> {
    static OPEN: OnceLock<Mutex<HashMap<String, Weak<Mutex<Journal>>>>> = OnceLock::new();
    OPEN.get_or_init(Mutex::default)
}

/// Serves `cofold-change:` URIs: the kept contents of the open sessions' changes, read-only.
pub struct ContentProvider;

fn not_served(uri: &str) -> RpcError {
    RpcError::new(
        ahpd_sdk::error::codes::NOT_FOUND,
        format!("{uri} is not a content of an open session's changes"),
    )
}

#[async_trait::async_trait]
impl ahpd_sdk::ports::ResourceProvider for ContentProvider {
    async fn read(&self, uri: &str) -> Result<ResourceReadResult, RpcError> {
        use base64::Engine as _;
        let rest = uri
            .strip_prefix(&format!("{CONTENT_SCHEME}:/"))
            .ok_or_else(|| not_served(uri))?;
        let (key, hash) = rest.split_once('/').ok_or_else(|| not_served(uri))?;
        let journal = open_records()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .and_then(Weak::upgrade)
            .ok_or_else(|| not_served(uri))?;
        let bytes = lock(&journal)
            .content(hash)
            .ok_or_else(|| not_served(uri))?;
        Ok(match String::from_utf8(bytes) {
            Ok(text) => ResourceReadResult {
                data: text,
                encoding: ContentEncoding::Utf8,
                content_type: Some("text/plain".to_owned()),
            },
            Err(e) => ResourceReadResult {
                data: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                encoding: ContentEncoding::Base64,
                content_type: Some("application/octet-stream".to_owned()),
            },
        })
    }

    async fn list(&self, uri: &str) -> Result<ResourceListResult, RpcError> {
        Err(not_served(uri))
    }

    async fn resolve(&self, uri: &str) -> Result<ResourceResolveResult, RpcError> {
        Err(not_served(uri))
    }

    async fn write(&self, uri: &str, _data: &str, _create_only: bool) -> Result<(), RpcError> {
        Err(RpcError::new(
            ahpd_sdk::error::codes::PERMISSION_DENIED,
            format!("{uri} is a kept content of a change and cannot be written"),
        ))
    }

    async fn delete(&self, uri: &str) -> Result<(), RpcError> {
        self.write(uri, "", false).await
    }
}
