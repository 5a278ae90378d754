//! Rewind (`truncate`) and `fork` on disk, both through the shared cut rule.
//!
//! A rewind changes several files (the transcript, the dropped runs' folders, the lock, the
//! session record), so it is written as an intent first: the new transcript is prepared beside the
//! old one, then `rewind.json` names what goes. Until that file is on disk the session is as it
//! was; once it is, the rewind is finished by whoever touches the session next, the same steps
//! again, each of which can be done twice. A crash at any point thus leaves the old session or,
//! after the next use, the new one.

use std::fs;
use std::io;
use std::path::Path;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::Event;
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{SessionRecord, TruncationResult, select_cut};
use serde::{Deserialize, Serialize};

use super::context::CONTEXT_INDEX_FILE;
use super::runs::{read_events, read_runs};
use super::steps::read_steps;
use super::{EVENTS_FILE, Inner, MESSAGES_FILE, RUN_FILE, STEPS_FILE, lock_map};
use crate::crash;
use crate::durable::{
    Sync, remove_folder, rename, sync_folder, temp_path, write_atomic, write_json,
};
use crate::jsonl::{create_dirs, io_error, read_all, read_json, to_line};
use crate::lock;
use crate::names::encode_segment;

/// The intent of a rewind under way.
const REWIND_FILE: &str = "rewind.json";
/// The transcript a rewind under way puts in place.
const REWIND_MESSAGES_FILE: &str = "rewind.messages.jsonl";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RewindIntent {
    through_message_id: String,
    dropped_runs: Vec<String>,
}

fn busy(session_id: &str, action: &str) -> AgentError {
    AgentError::new(
        ErrorCode::WriterBusy,
        format!("session {session_id} cannot be {action} while a running run holds it"),
    )
}

fn remove_file(path: &Path) -> Result<(), AgentError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error("remove", path, &err)),
    }
}

fn lines_of<T: serde::Serialize>(records: &[T]) -> Result<Vec<u8>, AgentError> {
    let mut bytes = Vec::new();
    for record in records {
        bytes.extend_from_slice(&to_line(record)?);
    }
    Ok(bytes)
}

impl Inner {
    pub(crate) fn truncate(
        &self,
        session_id: &str,
        through_message_id: &str,
    ) -> Result<TruncationResult, AgentError> {
        let folder = self.session_folder(session_id)?;
        let guard = self.guard(&folder);
        let _held = lock_map(&guard);
        // Checked before the message lookup: a bad id still hears that the session is busy.
        if self.held_by_running_run(&folder)? {
            return Err(busy(session_id, "rewound"));
        }
        let messages: Vec<Message> = read_all(&folder.join(MESSAGES_FILE))?;
        let runs = read_runs(&folder)?;
        let plan = select_cut(session_id, &messages, &runs, through_message_id)?;
        write_atomic(
            &folder.join(REWIND_MESSAGES_FILE),
            &lines_of(&messages[..plan.keep_messages])?,
            Sync::Durable,
        )?;
        crash::point("rewind:prepared")?;
        let intent = RewindIntent {
            through_message_id: through_message_id.to_owned(),
            dropped_runs: plan.dropped_runs.clone(),
        };
        write_json(&folder.join(REWIND_FILE), &intent, Sync::Durable)?;
        crash::point("rewind:intended")?;
        self.apply_rewind(&folder, session_id)?;
        Ok(TruncationResult {
            remaining_messages: plan.keep_messages,
            removed_messages: messages.len() - plan.keep_messages,
            removed_runs: plan.dropped_runs.len(),
        })
    }

    /// Finishes a rewind a crash interrupted, if the session has one.
    pub(crate) fn finish_rewind(&self, folder: &Path, session_id: &str) -> Result<(), AgentError> {
        if !folder.join(REWIND_FILE).is_file() {
            return Ok(());
        }
        let guard = self.guard(folder);
        let _held = lock_map(&guard);
        tracing::warn!(session = %folder.display(), "finishing a rewind that a crash interrupted");
        self.apply_rewind(folder, session_id)
    }

    /// Carries out the rewind `rewind.json` describes; every step may already have been done.
    fn apply_rewind(&self, folder: &Path, session_id: &str) -> Result<(), AgentError> {
        let intent_path = folder.join(REWIND_FILE);
        let Some(intent) = read_json::<RewindIntent>(&intent_path)? else {
            return Ok(());
        };
        // The compaction index describes the old transcript.
        remove_file(&folder.join(CONTEXT_INDEX_FILE))?;
        let prepared = folder.join(REWIND_MESSAGES_FILE);
        if prepared.is_file() {
            let messages = folder.join(MESSAGES_FILE);
            rename(&prepared, &messages).map_err(|err| io_error("replace", &messages, &err))?;
            sync_folder(folder)?;
        }
        crash::point("rewind:transcript")?;
        for run_id in &intent.dropped_runs {
            let run_folder = Self::run_folder(folder, run_id)?;
            if run_folder.exists() {
                remove_folder(&run_folder)?;
            }
            crash::point("rewind:run")?;
        }
        if let Some(holder) = lock::holder(folder)?
            && intent.dropped_runs.contains(&holder.run_id)
        {
            lock::remove(folder)?;
        }
        if let Some(mut record) = Self::read_session(folder)? {
            record.updated_at = Timestamp::now();
            Self::write_session(folder, &record)?;
        }
        remove_file(&intent_path)?;
        sync_folder(folder)?;
        crate::durable::sweep_tombstones(&folder.join("runs"));
        tracing::debug!(
            session = %session_id, through = %intent.through_message_id,
            "rewound"
        );
        self.forget_runs(session_id, Some(&intent.dropped_runs));
        Ok(())
    }

    pub(crate) fn fork(
        &self,
        from_id: &str,
        through_message_id: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError> {
        let source = self.session_folder(from_id)?;
        let guard = self.guard(&source);
        let _held = lock_map(&guard);
        if self.held_by_running_run(&source)? {
            return Err(busy(from_id, "forked"));
        }
        let taken = || AgentError::already_exists(format!("session {new_id} already exists"));
        if self.find_session(new_id)?.is_some() {
            return Err(taken());
        }
        let Some(source_record) = Self::read_session(&source)? else {
            return Err(AgentError::not_found(format!(
                "there is no session {from_id}"
            )));
        };
        let messages: Vec<Message> = read_all(&source.join(MESSAGES_FILE))?;
        let runs = read_runs(&source)?;
        let plan = select_cut(from_id, &messages, &runs, through_message_id)?;

        // Build the copy in a temporary folder beside its final place, then rename it in: a
        // refusal or a crash leaves no half-made session behind.
        let parent = self.sessions_parent(source_record.workspace.as_deref());
        create_dirs(&parent)?;
        let target = parent.join(encode_segment("session id", new_id)?);
        let staging = temp_path(&parent);
        let built = build_copy(
            &source,
            &staging,
            &source_record,
            new_id,
            &messages[..plan.keep_messages],
            &plan.kept_runs,
        );
        let record = match built {
            Ok(record) => record,
            Err(err) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(err);
            }
        };
        if target.exists() {
            let _ = fs::remove_dir_all(&staging);
            return Err(taken());
        }
        if let Err(err) = rename(&staging, &target) {
            let _ = fs::remove_dir_all(&staging);
            return Err(io_error("move the forked session into", &target, &err));
        }
        sync_folder(&parent)?;
        lock_map(&self.folders).insert(new_id, target);
        Ok(record)
    }
}

/// Writes the forked session into `staging`: its record, the kept messages, and the kept runs with
/// their events and steps (every `sessionId` rewritten); requests are not copied.
fn build_copy(
    source: &Path,
    staging: &Path,
    source_record: &SessionRecord,
    new_id: &str,
    messages: &[Message],
    kept_runs: &[String],
) -> Result<SessionRecord, AgentError> {
    create_dirs(staging)?;
    let now = Timestamp::now();
    let record = SessionRecord {
        session_id: new_id.to_owned(),
        agent_id: source_record.agent_id.clone(),
        workspace: source_record.workspace.clone(),
        created_at: now.clone(),
        updated_at: now,
        active_writer_run_id: None,
        active_writer_pid: None,
    };
    Inner::write_session(staging, &record)?;
    write_atomic(
        &staging.join(MESSAGES_FILE),
        &lines_of(messages)?,
        Sync::Durable,
    )?;
    for run_id in kept_runs {
        let from = Inner::run_folder(source, run_id)?;
        let to = Inner::run_folder(staging, run_id)?;
        create_dirs(&to)?;
        let Some(mut run) =
            crate::jsonl::read_json::<cofold_agents::store::RunRecord>(&from.join(RUN_FILE))?
        else {
            continue;
        };
        run.session_id = new_id.to_owned();
        run.pending_request_id = None;
        write_json(&to.join(RUN_FILE), &run, Sync::Durable)?;
        let mut events: Vec<Event> = read_events(&from.join(EVENTS_FILE), 0)?;
        for event in &mut events {
            event.session_id = new_id.to_owned();
        }
        write_atomic(&to.join(EVENTS_FILE), &lines_of(&events)?, Sync::Durable)?;
        let mut steps = read_steps(&from.join(STEPS_FILE))?;
        for step in &mut steps {
            step.set_session_id(new_id);
        }
        write_atomic(&to.join(STEPS_FILE), &lines_of(&steps)?, Sync::Durable)?;
    }
    if !kept_runs.is_empty() {
        sync_folder(&staging.join("runs"))?;
    }
    Ok(record)
}
