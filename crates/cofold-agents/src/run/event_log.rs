//! The events a run handle keeps, compactly.
//!
//! A streamed answer is mostly `model.delta` events, one per fragment, and the handle keeps
//! every event for as long as it lives (each `events()` call starts from the first). Kept whole,
//! a fragment of a few bytes cost about half a kilobyte (the event and its own copies of the
//! run's, session's and agent's ids and of its timestamp), so a 2,000-fragment answer held about
//! a megabyte per run. [`Log`] keeps a fragment as a few numbers (its timestamp as microseconds)
//! and its text in one shared buffer, about 40 bytes besides the text, and rebuilds the event
//! when it is read.

use crate::event::{DeltaKind, Event, EventBody, RunStatus};
use crate::id::Timestamp;

/// One event as a handle keeps it.
enum Kept {
    /// A `model.delta` of this handle's run with a timestamp in the canonical form: its text is
    /// `Log::text[start..start + len]`.
    Fragment {
        seq: u64,
        at_micros: i64,
        start: u32,
        len: u32,
        step: u32,
        kind: DeltaKind,
    },
    Whole(Box<Event>),
}

/// The events a handle holds, in order (see the module's notes).
#[derive(Default)]
pub(super) struct Log {
    kept: Vec<Kept>,
    /// The texts of the kept fragments, end to end.
    text: String,
}

impl Log {
    /// Keeps `event`: a fragment as numbers and text (no copy of the event is made), anything
    /// else as a copy.
    pub(super) fn push(&mut self, names: &Names<'_>, event: &Event) {
        let kept = self.fragment(names, event);
        self.kept
            .push(kept.unwrap_or_else(|| Kept::Whole(Box::new(event.clone()))));
    }

    /// The compact form of `event`, when it is a fragment of this run that can be rebuilt
    /// exactly.
    fn fragment(&mut self, names: &Names<'_>, event: &Event) -> Option<Kept> {
        let EventBody::ModelDelta { step, kind, text } = &event.body else {
            return None;
        };
        if event.run_id != names.run_id
            || event.session_id != names.session_id
            || event.agent_id != names.agent_id
        {
            return None;
        }
        let at_micros = event.at.canonical_micros()?;
        let start = u32::try_from(self.text.len()).ok()?;
        let len = u32::try_from(text.len()).ok()?;
        start.checked_add(len)?;
        self.text.push_str(text);
        Some(Kept::Fragment {
            seq: event.seq,
            at_micros,
            start,
            len,
            step: *step,
            kind: *kind,
        })
    }

    pub(super) fn get(&self, names: &Names<'_>, index: usize) -> Option<Event> {
        Some(match self.kept.get(index)? {
            Kept::Whole(event) => (**event).clone(),
            Kept::Fragment {
                seq,
                at_micros,
                start,
                len,
                step,
                kind,
            } => {
                let start = *start as usize;
                let text = self.text.get(start..start + *len as usize)?;
                Event {
                    seq: *seq,
                    run_id: names.run_id.to_owned(),
                    session_id: names.session_id.to_owned(),
                    agent_id: names.agent_id.to_owned(),
                    at: Timestamp::from_unix_micros(*at_micros),
                    body: EventBody::ModelDelta {
                        step: *step,
                        kind: *kind,
                        text: text.to_owned(),
                    },
                }
            }
        })
    }

    pub(super) fn last_seq(&self) -> Option<u64> {
        self.kept.last().map(|kept| match kept {
            Kept::Fragment { seq, .. } => *seq,
            Kept::Whole(event) => event.seq,
        })
    }

    pub(super) fn last_outcome_status(&self) -> Option<RunStatus> {
        match self.kept.last()? {
            Kept::Whole(event) => match &event.body {
                EventBody::RunFinished { outcome } => Some(outcome.status()),
                _ => None,
            },
            Kept::Fragment { .. } => None,
        }
    }
}

/// The names every event of a handle's run carries.
pub(super) struct Names<'a> {
    pub(super) run_id: &'a str,
    pub(super) session_id: &'a str,
    pub(super) agent_id: &'a str,
}
