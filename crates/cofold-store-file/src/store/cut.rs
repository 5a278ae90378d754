//! Rewind (`truncate`) and `fork` on disk, both through the shared cut rule.

use std::fs;
use std::path::Path;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::Event;
use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{SessionRecord, TruncationResult, select_cut};

use super::runs::{read_events, read_runs, read_steps};
use super::{EVENTS_FILE, Inner, MESSAGES_FILE, RUN_FILE, STEPS_FILE, lock_map};
use crate::jsonl::{create_dirs, io_error, read_all, temp_path, to_line, write_atomic, write_json};
use crate::lock;
use crate::names::encode_segment;

fn busy(session_id: &str, action: &str) -> AgentError {
    AgentError::new(
        ErrorCode::WriterBusy,
        format!("session {session_id} cannot be {action} while a running run holds it"),
    )
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
        if Self::held_by_running_run(&folder)? {
            return Err(busy(session_id, "rewound"));
        }
        let messages: Vec<Message> = read_all(&folder.join(MESSAGES_FILE))?;
        let runs = read_runs(&folder)?;
        let plan = select_cut(session_id, &messages, &runs, through_message_id)?;
        // The transcript first: once it is cut, a crash before the rest leaves only runs that a
        // second rewind removes.
        write_atomic(
            &folder.join(MESSAGES_FILE),
            &lines_of(&messages[..plan.keep_messages])?,
        )?;
        for run_id in &plan.dropped_runs {
            let run_folder = Self::run_folder(&folder, run_id)?;
            fs::remove_dir_all(&run_folder).map_err(|err| io_error("remove", &run_folder, &err))?;
        }
        if let Some(holder) = lock::holder(&folder)?
            && plan.dropped_runs.contains(&holder.run_id)
        {
            lock::remove(&folder)?;
        }
        if let Some(mut record) = Self::read_session(&folder)? {
            record.updated_at = Timestamp::now();
            Self::write_session(&folder, &record)?;
        }
        self.forget_runs(session_id, Some(&plan.dropped_runs));
        Ok(TruncationResult {
            remaining_messages: plan.keep_messages,
            removed_messages: messages.len() - plan.keep_messages,
            removed_runs: plan.dropped_runs.len(),
        })
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
        if Self::held_by_running_run(&source)? {
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
        if let Err(err) = crate::jsonl::rename(&staging, &target) {
            let _ = fs::remove_dir_all(&staging);
            return Err(io_error("move the forked session into", &target, &err));
        }
        lock_map(&self.folders).insert(new_id.to_owned(), target);
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
    write_atomic(&staging.join(MESSAGES_FILE), &lines_of(messages)?)?;
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
        write_json(&to.join(RUN_FILE), &run)?;
        let mut events: Vec<Event> = read_events(&from.join(EVENTS_FILE), 0)?;
        for event in &mut events {
            event.session_id = new_id.to_owned();
        }
        write_atomic(&to.join(EVENTS_FILE), &lines_of(&events)?)?;
        let mut steps = read_steps(&from.join(STEPS_FILE))?;
        for step in &mut steps {
            step.set_session_id(new_id);
        }
        write_atomic(&to.join(STEPS_FILE), &lines_of(&steps)?)?;
    }
    Ok(record)
}
