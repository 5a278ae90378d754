//! The part of a transcript a run reads, without reading the rest.
//!
//! Once a session was compacted, what a run needs is the newest summary and the messages no
//! summary covers, and on a long session they sit near the end of `messages.jsonl`. The index
//! file `context.json` records where they start: every message line before byte `from` is a summary
//! or covered by one. It is written when a summary is stored (and by the first read that had to
//! scan the whole transcript), and trusted only while the line ending at `summaryEnd` is still the
//! summary it names, so a transcript rewritten behind its back is read whole instead.
//!
//! The rule relies on what makes a summary: it covers messages stored before it. A summary before
//! `from` therefore covers nothing after it, and the messages from `from` on, with the summaries
//! among them, give the same context as the whole transcript.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;

use cofold_agents::error::AgentError;
use cofold_agents::message::{Message, MessageSource};
use cofold_agents::store::uncovered_messages;
use serde::{Deserialize, Serialize};

use super::{Inner, MESSAGES_FILE, lock_map};
use crate::durable::{Sync, write_json};
use crate::jsonl::{read_json, scan_back_from, scan_from, scan_offsets};

/// Where the context of a compacted session starts.
pub(crate) const CONTEXT_INDEX_FILE: &str = "context.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContextIndex {
    /// The newest summary when the index was written.
    summary_id: String,
    /// The byte just after that summary's line.
    summary_end: u64,
    /// The first byte a run needs to read.
    from: u64,
}

/// What checking the index needs of a message line.
#[derive(Deserialize)]
struct Name {
    id: String,
    source: MessageSource,
}

/// What the index needs of a message line; the parts are passed over.
#[derive(Deserialize)]
struct Head {
    id: String,
    source: MessageSource,
    #[serde(default)]
    summarizes: Option<Vec<String>>,
}

impl Inner {
    pub(crate) fn list_context_messages(
        &self,
        session_id: &str,
    ) -> Result<Vec<Message>, AgentError> {
        let folder = self.session_folder(session_id)?;
        let from = match valid_index(&folder)? {
            Some(index) => index.from,
            None => {
                let guard = self.guard(&folder);
                let _held = lock_map(&guard);
                index_from(&folder, 0)?.map_or(0, |index| index.from)
            }
        };
        let mut region = Vec::new();
        scan_from(&folder.join(MESSAGES_FILE), from, |line| {
            region.push(serde_json::from_slice::<Message>(line)?);
            Ok(())
        })?;
        Ok(uncovered_messages(region))
    }

    /// Moves the index on after `messages` were stored; called under the session's guard.
    pub(crate) fn index_after_append(
        folder: &Path,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        if !messages.iter().any(|m| m.source == MessageSource::Summary) {
            return Ok(());
        }
        let start = valid_index(folder)?.map_or(0, |index| index.from);
        index_from(folder, start)?;
        Ok(())
    }
}

/// The index of a session folder, when it still describes the transcript.
fn valid_index(folder: &Path) -> Result<Option<ContextIndex>, AgentError> {
    let Some(index) = read_json::<ContextIndex>(&folder.join(CONTEXT_INDEX_FILE))
        .ok()
        .flatten()
    else {
        return Ok(None);
    };
    if index.from > index.summary_end {
        return Ok(None);
    }
    let mut matches = false;
    let mut first = true;
    scan_back_from(
        &folder.join(MESSAGES_FILE),
        Some(index.summary_end),
        |line| {
            // The line must end exactly at `summaryEnd`; a longer one means the bytes moved.
            if first {
                first = false;
                matches = serde_json::from_slice::<Name>(line).is_ok_and(|head| {
                    head.id == index.summary_id && head.source == MessageSource::Summary
                });
            }
            Ok(ControlFlow::Break(()))
        },
    )?;
    Ok(matches.then_some(index))
}

/// Computes and stores the index of a transcript whose lines before `start` are all summaries or
/// covered; `None` (and no file) when the transcript holds no summary.
fn index_from(folder: &Path, start: u64) -> Result<Option<ContextIndex>, AgentError> {
    let path = folder.join(MESSAGES_FILE);
    // First pass: what the summaries from `start` on cover, and the newest of them.
    let mut covered: HashSet<String> = HashSet::new();
    let mut newest: Option<(String, u64, u64)> = None;
    let mut previous: Option<(u64, Head)> = None;
    let mut end_of = |offset: u64, previous: &mut Option<(u64, Head)>| {
        if let Some((at, head)) = previous.take()
            && head.source == MessageSource::Summary
        {
            newest = Some((head.id, at, offset));
        }
    };
    scan_offsets(&path, start, |offset, line| {
        end_of(offset, &mut previous);
        if let Ok(head) = serde_json::from_slice::<Head>(line) {
            if head.source == MessageSource::Summary {
                covered.extend(head.summarizes.iter().flatten().cloned());
            }
            previous = Some((offset, head));
        }
        ControlFlow::Continue(())
    })?;
    let length = std::fs::metadata(&path).map_or(0, |meta| meta.len());
    end_of(length, &mut previous);
    // The summary's line ends where the next line starts (or the file ends).
    let Some((summary_id, summary_at, summary_end)) = newest else {
        return Ok(None);
    };
    // Second pass: the first message a run needs.
    let mut from = summary_at;
    scan_offsets(&path, start, |offset, line| {
        if offset >= summary_at {
            return ControlFlow::Break(());
        }
        match serde_json::from_slice::<Head>(line) {
            Ok(head) if head.source != MessageSource::Summary && !covered.contains(&head.id) => {
                from = offset;
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        }
    })?;
    let index = ContextIndex {
        summary_id,
        summary_end,
        from,
    };
    write_json(&folder.join(CONTEXT_INDEX_FILE), &index, Sync::Durable)?;
    Ok(Some(index))
}
