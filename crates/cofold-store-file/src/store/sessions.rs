//! Sessions, the transcript and the writer claim on disk.

use std::fs;
use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{
    NewSession, RunRecord, RunStatus, SessionQuery, SessionRecord, sort_sessions,
};
use serde_json::error::Category;

use super::{Inner, MESSAGES_FILE, RUN_FILE, SESSION_FILE, lock_map};
use crate::durable::{Sync, remove_folder, rename, sync_folder, temp_path, write_json};
use crate::jsonl::{
    Damage, append_lines, create_dirs, io_error, read_json, report_damage, scan_back,
    sorted_entries, to_line,
};
use crate::lock::{self, Holder};
use crate::names::encode_segment;

impl Inner {
    /// Reads `session.json` and fills the writer fields from the lock.
    pub(crate) fn read_session(folder: &Path) -> Result<Option<SessionRecord>, AgentError> {
        let Some(mut record) = read_json::<SessionRecord>(&folder.join(SESSION_FILE))? else {
            return Ok(None);
        };
        let holder = lock::holder(folder)?;
        record.active_writer_run_id = holder.as_ref().map(|lock| lock.run_id.clone());
        record.active_writer_pid = holder.map(|lock| lock.pid);
        Ok(Some(record))
    }

    /// Writes `session.json` without the writer fields (they live in the lock).
    pub(crate) fn write_session(folder: &Path, record: &SessionRecord) -> Result<(), AgentError> {
        let mut stored = record.clone();
        stored.active_writer_run_id = None;
        stored.active_writer_pid = None;
        write_json(&folder.join(SESSION_FILE), &stored, Sync::Durable)
    }

    /// The status of a run of this session, when it has a record.
    pub(crate) fn run_status(folder: &Path, run_id: &str) -> Result<Option<RunStatus>, AgentError> {
        let path = Self::run_folder(folder, run_id)?.join(RUN_FILE);
        Ok(read_json::<RunRecord>(&path)?.map(|record| record.status))
    }

    /// True while the claim holder is a live process running a run whose status is `running`. A
    /// dead holder blocks nothing.
    pub(crate) fn held_by_running_run(&self, folder: &Path) -> Result<bool, AgentError> {
        match lock::holder(folder)? {
            Some(lock) if lock::judge_holder(&lock, self.options.stale_after) != Holder::Dead => {
                Ok(Self::run_status(folder, &lock.run_id)? == Some(RunStatus::Running))
            }
            _ => Ok(false),
        }
    }

    pub(crate) fn get_session(
        &self,
        session_id: &str,
    ) -> Result<Option<SessionRecord>, AgentError> {
        match self.find_session(session_id)? {
            Some(folder) => Self::read_session(&folder),
            None => Ok(None),
        }
    }

    pub(crate) fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError> {
        let taken =
            || AgentError::already_exists(format!("session {} already exists", new.session_id));
        if self.find_session(&new.session_id)?.is_some() {
            return Err(taken());
        }
        let parent = self.sessions_parent(new.workspace.as_deref());
        create_dirs(&parent)?;
        let folder = parent.join(encode_segment("session id", &new.session_id)?);
        let now = Timestamp::now();
        let record = SessionRecord {
            session_id: new.session_id.clone(),
            agent_id: new.agent_id,
            workspace: new.workspace,
            created_at: now.clone(),
            updated_at: now,
            active_writer_run_id: None,
            active_writer_pid: None,
        };
        // The session is made whole in a temporary folder and renamed into place, so its folder
        // never exists without its record.
        let staging = temp_path(&parent);
        create_dirs(&staging)?;
        if let Err(err) = Self::write_session(&staging, &record) {
            let _ = fs::remove_dir_all(&staging);
            return Err(err);
        }
        if folder.exists() && !folder.join(SESSION_FILE).is_file() {
            // A folder without its record is what an older version left when a crash cut a delete
            // or a create short: nothing in it belongs to the new session.
            tracing::warn!(folder = %folder.display(), "setting aside a session folder without its record");
            remove_folder(&folder)?;
        }
        if let Err(err) = rename(&staging, &folder) {
            let _ = fs::remove_dir_all(&staging);
            // Another process created the same session meanwhile.
            if matches!(
                err.kind(),
                io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::AlreadyExists
            ) {
                return Err(taken());
            }
            return Err(io_error("move the new session into", &folder, &err));
        }
        sync_folder(&parent)?;
        lock_map(&self.folders).insert(&new.session_id, folder);
        Ok(record)
    }

    pub(crate) fn list_sessions(
        &self,
        query: &SessionQuery,
    ) -> Result<Vec<SessionRecord>, AgentError> {
        let mut parents = Vec::new();
        match &query.workspace {
            Some(workspace) => parents.push(self.sessions_parent(Some(workspace))),
            None => {
                parents.push(self.root.join("sessions"));
                let workspaces = self.root.join("workspaces");
                for slug in sorted_entries(&workspaces)? {
                    parents.push(workspaces.join(slug).join("sessions"));
                }
            }
        }
        let mut found = Vec::new();
        for parent in parents {
            for name in sorted_entries(&parent)? {
                let folder = parent.join(name);
                let record = match Self::read_session(&folder) {
                    Ok(Some(record)) => record,
                    Ok(None) => continue,
                    // One damaged session must not hide the others; the damage is reported.
                    Err(err) => {
                        tracing::warn!(folder = %folder.display(), error = %err, "skipping a session that cannot be read");
                        continue;
                    }
                };
                // Two workspace spellings can share a slug; only the exact one is asked for.
                if query.workspace.is_some() && record.workspace != query.workspace {
                    continue;
                }
                if query
                    .agent_id
                    .as_ref()
                    .is_some_and(|agent| &record.agent_id != agent)
                {
                    continue;
                }
                found.push(record);
            }
        }
        sort_sessions(&mut found);
        if let Some(limit) = query.limit {
            found.truncate(limit);
        }
        Ok(found)
    }

    pub(crate) fn delete_session(&self, session_id: &str) -> Result<(), AgentError> {
        let folder = self.session_folder(session_id)?;
        let guard = self.guard(&folder);
        let _held = lock_map(&guard);
        if self.held_by_running_run(&folder)? {
            return Err(AgentError::new(
                ErrorCode::WriterBusy,
                format!("session {session_id} cannot be deleted while a running run holds it"),
            ));
        }
        // One rename takes the whole session out of sight, so a crash leaves it whole or gone,
        // and an id created again later starts empty.
        let removed = remove_folder(&folder);
        self.forget_session(session_id);
        removed
    }

    pub(crate) fn append_messages(
        &self,
        session_id: &str,
        run_id: &str,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        let folder = self.session_folder(session_id)?;
        let guard = self.guard(&folder);
        let _held = lock_map(&guard);
        lock::require_holder(&folder, session_id, run_id)?;
        let Some(last) = messages.last() else {
            return Ok(());
        };
        let mut lines = Vec::new();
        for message in messages {
            lines.extend_from_slice(&to_line(message)?);
        }
        // Every stored message is a boundary a person would not want to lose: a user message, an
        // answer, a tool result.
        append_lines(&folder.join(MESSAGES_FILE), &lines, true)?;
        Self::index_after_append(&folder, messages)?;
        // The messages are on disk; these two refreshes may be lost to a power loss without harm
        // (the old record stays whole), so the folder is not synced for them.
        let now = Timestamp::now();
        if let Some(mut session) = read_json::<SessionRecord>(&folder.join(SESSION_FILE))? {
            session.updated_at = now.clone();
            session.active_writer_run_id = None;
            session.active_writer_pid = None;
            write_json(&folder.join(SESSION_FILE), &session, Sync::Replace)?;
        }
        let run_path = Self::run_folder(&folder, run_id)?.join(RUN_FILE);
        if let Some(mut run) = read_json::<RunRecord>(&run_path)? {
            run.last_message_id = Some(last.id.clone());
            run.updated_at = now;
            write_json(&run_path, &run, Sync::Replace)?;
        }
        Ok(())
    }

    pub(crate) fn list_messages(
        &self,
        session_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError> {
        let folder = self.session_folder(session_id)?;
        read_messages(&folder.join(MESSAGES_FILE), limit)
    }

    pub(crate) fn claim_writer(&self, session_id: &str, run_id: &str) -> Result<bool, AgentError> {
        let folder = self.session_folder(session_id)?;
        lock::claim(&folder, run_id, self.options.stale_after, |holder| {
            Self::run_status(&folder, holder)
        })
    }

    pub(crate) fn dead_writer(&self, session_id: &str) -> Result<Option<String>, AgentError> {
        let folder = self.session_folder(session_id)?;
        lock::dead_holder(&folder, self.options.stale_after)
    }

    pub(crate) fn release_writer(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let folder = self.session_folder(session_id)?;
        lock::release(&folder, run_id)
    }

    pub(crate) fn heartbeat(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let folder = self.session_folder(session_id)?;
        lock::heartbeat(&folder, session_id, run_id)
    }
}

/// Reads a transcript, or only its last `limit` messages. With a limit the file is read from its
/// end, so the cost and the memory follow the window, not the length of the session.
pub(crate) fn read_messages(path: &Path, limit: Option<usize>) -> Result<Vec<Message>, AgentError> {
    let Some(limit) = limit else {
        return crate::jsonl::read_all(path);
    };
    let mut window = Vec::with_capacity(limit.min(4096));
    let mut visited = 0usize;
    if limit > 0 {
        scan_back(path, |line| {
            visited += 1;
            match serde_json::from_slice::<Message>(line) {
                Ok(message) => window.push(message),
                // A torn line anywhere, or any bad last line, is what a crash leaves.
                Err(err) if visited == 1 || err.classify() == Category::Eof => {}
                Err(err) => report_damage(path, &Damage::FromEnd(visited), Some(&err)),
            }
            Ok(if window.len() == limit {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
        })?;
    }
    window.reverse();
    Ok(window)
}
