//! Runs, their event logs, step records and pending requests on disk.

use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use cofold_agents::error::AgentError;
use cofold_agents::event::{Event, EventBody};
use cofold_agents::id::Timestamp;
use cofold_agents::store::{
    PendingRequest, RunRecord, RunRef, RunStatus, RunUpdate, seq_gap, sort_runs, unknown_request,
};
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::error::Category;

use super::{EVENTS_FILE, Inner, OpenLog, RUN_FILE, Tail, lock_map};
use crate::durable::{Sync, write_json};
use crate::jsonl::{
    Appender, Damage, create_dirs, io_error, read_json, report_damage, scan, scan_back,
    sorted_entries, to_line,
};
use crate::lock;
use crate::names::encode_segment;

impl Inner {
    pub(crate) fn create_run(&self, record: RunRecord) -> Result<(), AgentError> {
        let session = self.session_folder(&record.session_id)?;
        let runs = session.join("runs");
        create_dirs(&runs)?;
        let folder = Self::run_folder(&session, &record.run_id)?;
        match crate::private::create_dir(&folder) {
            // The new folder's name must outlast a power loss as much as the record in it.
            Ok(()) => crate::durable::sync_folder(&runs)?,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                if folder.join(RUN_FILE).is_file() {
                    return Err(AgentError::already_exists(format!(
                        "session {} already has a run {}",
                        record.session_id, record.run_id
                    )));
                }
            }
            Err(err) => return Err(io_error("create the folder", &folder, &err)),
        }
        write_json(&folder.join(RUN_FILE), &record, Sync::Durable)
    }

    pub(crate) fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError> {
        let Some(session) = self.find_session(&run.session_id)? else {
            return Ok(None);
        };
        read_json(&Self::run_folder(&session, &run.run_id)?.join(RUN_FILE))
    }

    pub(crate) fn list_runs(
        &self,
        session_id: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError> {
        let session = self.session_folder(session_id)?;
        let mut runs = read_runs(&session)?;
        runs.retain(|run| status.is_none_or(|status| run.status == status));
        sort_runs(&mut runs);
        Ok(runs)
    }

    pub(crate) fn update_run(&self, update: &RunUpdate) -> Result<RunRecord, AgentError> {
        let (session, folder) = self.existing_run(&update.run)?;
        let guard = self.guard(&session);
        let _held = lock_map(&guard);
        lock::fence(&session, &update.run.session_id, &update.run.run_id)?;
        let path = folder.join(RUN_FILE);
        let mut record: RunRecord = read_json(&path)?.ok_or_else(|| {
            AgentError::not_found(format!(
                "session {} has no run {}",
                update.run.session_id, update.run.run_id
            ))
        })?;
        update.apply_to(&mut record);
        record.updated_at = Timestamp::now();
        write_json(&path, &record, Sync::Durable)?;
        Ok(record)
    }

    /// Appends one event; `tail` is what the run's queue remembers (the last seq, filled from
    /// the file on first use, the writer lock last seen, and the log while it is held open),
    /// held under the queue.
    ///
    /// A streamed reply is thousands of small events in a row. Looking the run up and opening
    /// the file for each cost about ten system calls and dominated the daemon's time per
    /// fragment, so the log stays open from one event to the next while they are not boundaries
    /// (the synced events that end a step or wait for someone), and is let go at the first
    /// boundary: a paused run holds no file. The writer lock is still checked before each
    /// append, and a log whose file was deleted meanwhile is looked up again, which fails as
    /// it did.
    pub(crate) fn append_event(&self, event: &Event, tail: &mut Tail) -> Result<(), AgentError> {
        let log = match tail.log.take_if(|log| log.appender.still_named()) {
            Some(log) => log,
            None => self.open_log(event)?,
        };
        self.append_through(log, event, tail)
    }

    /// [`Inner::append_event`] through the log held open since the previous event, when there
    /// is one and `event` is not a boundary: no look-up, no open, no sync, so nothing that waits
    /// on the disk. `None` when the full path must be taken.
    pub(crate) fn append_held(
        &self,
        event: &Event,
        tail: &mut Tail,
    ) -> Option<Result<(), AgentError>> {
        if is_boundary(&event.body) {
            return None;
        }
        let log = tail.log.take_if(|log| log.appender.still_named())?;
        Some(self.append_through(log, event, tail))
    }

    /// Checks the writer lock and the sequence, appends, and keeps the log open unless the
    /// event is a boundary.
    fn append_through(
        &self,
        mut log: OpenLog,
        event: &Event,
        tail: &mut Tail,
    ) -> Result<(), AgentError> {
        lock::fence_seen(
            &log.session,
            &event.session_id,
            &event.run_id,
            &mut tail.fence,
        )?;
        let last = match tail.last_seq {
            Some(last) => last,
            None => last_intact_seq(log.appender.path())?,
        };
        tail.last_seq = Some(last);
        if event.seq != last + 1 {
            return Err(seq_gap(&event.run_id, last + 1, event.seq));
        }
        let boundary = is_boundary(&event.body);
        log.appender.write(&to_line(event)?, boundary)?;
        tail.last_seq = Some(event.seq);
        if !boundary {
            tail.log = Some(log);
        }
        Ok(())
    }

    /// Looks the run up and opens its event log for appending.
    fn open_log(&self, event: &Event) -> Result<OpenLog, AgentError> {
        let run = RunRef::new(event.session_id.clone(), event.run_id.clone());
        let (session, folder) = self.existing_run(&run)?;
        let appender = Appender::open(&folder.join(EVENTS_FILE))?;
        Ok(OpenLog { session, appender })
    }

    pub(crate) fn list_events(
        &self,
        run: &RunRef,
        after_seq: Option<u64>,
    ) -> Result<Vec<Event>, AgentError> {
        let (_, folder) = self.existing_run(run)?;
        read_events(&folder.join(EVENTS_FILE), after_seq.unwrap_or(0))
    }

    pub(crate) fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError> {
        let run = request.run_ref();
        let (session, folder) = self.existing_run(&run)?;
        lock::fence(&session, &run.session_id, &run.run_id)?;
        let requests = folder.join("requests");
        create_dirs(&requests)?;
        let name = format!(
            "{}.json",
            encode_segment("request id", &request.request_id)?
        );
        write_json(&requests.join(name), request, Sync::Durable)
    }

    pub(crate) fn get_request(
        &self,
        run: &RunRef,
        request_id: &str,
    ) -> Result<Option<PendingRequest>, AgentError> {
        let Ok((_, folder)) = self.existing_run(run) else {
            return Ok(None);
        };
        let name = format!("{}.json", encode_segment("request id", request_id)?);
        read_json(&folder.join("requests").join(name))
    }

    pub(crate) fn resolve_request(
        &self,
        run: &RunRef,
        request_id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError> {
        let (session, folder) = self
            .existing_run(run)
            .map_err(|_| unknown_request(run, request_id))?;
        let guard = self.guard(&session);
        let _held = lock_map(&guard);
        lock::fence(&session, &run.session_id, &run.run_id)?;
        let path = folder.join("requests").join(format!(
            "{}.json",
            encode_segment("request id", request_id)?
        ));
        let mut request: PendingRequest =
            read_json(&path)?.ok_or_else(|| unknown_request(run, request_id))?;
        request.resolution = Some(resolution);
        request.resolved_at = Some(Timestamp::now());
        write_json(&path, &request, Sync::Durable)?;
        Ok(request)
    }
}

/// Every run record of a session folder, in folder order.
pub(crate) fn read_runs(session: &Path) -> Result<Vec<RunRecord>, AgentError> {
    let runs = session.join("runs");
    let mut records = Vec::new();
    for name in sorted_entries(&runs)? {
        if let Some(record) = read_json::<RunRecord>(&runs.join(name).join(RUN_FILE))? {
            records.push(record);
        }
    }
    Ok(records)
}

/// The `seq` of an event line, read straight from its start (events are written with `seq`
/// first); `None` when the line is not in that shape.
fn leading_seq(line: &[u8]) -> Option<u64> {
    let digits = line.strip_prefix(b"{\"seq\":")?;
    let end = digits.iter().position(|byte| !byte.is_ascii_digit())?;
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// The seq of the last intact line of an event log (0 when there is none). Reads from the end,
/// passing over torn lines, so its cost does not grow with the log.
pub(crate) fn last_intact_seq(path: &Path) -> Result<u64, AgentError> {
    #[derive(serde::Deserialize)]
    struct SeqOnly {
        seq: u64,
    }
    let mut last = 0;
    scan_back(path, |line| {
        // Checking the whole line keeps a torn line from counting.
        if serde_json::from_slice::<IgnoredAny>(line).is_err() {
            return Ok(ControlFlow::Continue(()));
        }
        last = match leading_seq(line) {
            Some(seq) => seq,
            None => serde_json::from_slice::<SeqOnly>(line).map_or(0, |only| only.seq),
        };
        Ok(ControlFlow::Break(()))
    })?;
    Ok(last)
}

/// The events of a log with `seq > after`. With `after` set, the log is read from its end back to
/// that point only, so replaying the tail of a long run costs the tail.
pub(crate) fn read_events(path: &Path, after: u64) -> Result<Vec<Event>, AgentError> {
    if after > 0 {
        return read_events_back(path, after);
    }
    let mut events = Vec::new();
    scan(path, |line| {
        if leading_seq(line).is_some_and(|seq| seq <= after) {
            return Ok(());
        }
        let event: Event = serde_json::from_slice(line)?;
        if event.seq > after {
            events.push(event);
        }
        Ok(())
    })?;
    Ok(events)
}

fn read_events_back(path: &Path, after: u64) -> Result<Vec<Event>, AgentError> {
    let mut events = Vec::new();
    let mut visited = 0usize;
    scan_back(path, |line| {
        visited += 1;
        if leading_seq(line).is_some_and(|seq| seq <= after) {
            return Ok(ControlFlow::Break(()));
        }
        match serde_json::from_slice::<Event>(line) {
            Ok(event) if event.seq <= after => Ok(ControlFlow::Break(())),
            Ok(event) => {
                events.push(event);
                Ok(ControlFlow::Continue(()))
            }
            // The same rule as reading forwards: a torn line anywhere, or any bad last line, is
            // what a crash leaves; other damage is reported.
            Err(err) if visited == 1 || err.classify() == Category::Eof => {
                Ok(ControlFlow::Continue(()))
            }
            Err(err) => {
                report_damage(path, &Damage::FromEnd(visited), Some(&err));
                Ok(ControlFlow::Continue(()))
            }
        }
    })?;
    events.reverse();
    Ok(events)
}

/// Whether an event marks a point a person would not want to lose, so the log is synced after
/// it: everything but the stream of a model's reply and the announcements of work whose own
/// record (the step, synced when a tool starts) says more.
fn is_boundary(body: &EventBody) -> bool {
    !matches!(
        body,
        EventBody::ModelDelta { .. }
            | EventBody::ModelStarted { .. }
            | EventBody::ToolProposed { .. }
            | EventBody::ToolStarted { .. }
    )
}
