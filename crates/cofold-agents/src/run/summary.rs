//! The summary steps of a compaction.
//!
//! A summary is marked as covering only the messages its request carried. When what there is to
//! cover does not fit the model's budget in one request, it is summarized in chunks, oldest
//! first: each chunk's request holds the summary so far, the chunk's whole units and the ask, and
//! its reply is stored as a summary of its own, so a failure halfway keeps what was done. A turn
//! with nothing new to cover does not compact at all.

use std::collections::HashSet;

use serde_json::json;

use super::{Exit, Flow, RunKind, Runner, error_detail};
use crate::compaction::{
    COMPACT_ASK, context_of, cut_to_fit, estimate_message, estimate_messages, leading_units_within,
    plan_summary, strip_reasoning, summary_instructions, summary_text,
};
use crate::error::{AgentError, ErrorCode};
use crate::event::EventBody;
use crate::id::{Timestamp, new_id};
use crate::message::{Message, MessageSource, Part, Role, text_of};
use crate::model::ModelRequest;
use crate::pairing::pair_tool_results;
use crate::store::StepStatus;

/// The ids a summary stands for, in the order they were first covered.
#[derive(Default)]
struct Covered {
    ids: Vec<String>,
    seen: HashSet<String>,
}

impl Covered {
    fn add(&mut self, id: &str) {
        if self.seen.insert(id.to_owned()) {
            self.ids.push(id.to_owned());
        }
    }
}

/// One chunk's request and what its summary will stand for.
struct Chunk {
    messages: Vec<Message>,
    /// The ids this chunk newly covers.
    covered: Vec<String>,
    /// Messages still left out of every summary after this chunk (tail included).
    kept: usize,
}

/// Every message the summaries in `history` stand for, the summaries themselves included.
fn summarized_by(history: &[Message]) -> Covered {
    let mut all_ids = Covered::default();
    for summary in history
        .iter()
        .filter(|m| m.source == MessageSource::Summary)
    {
        for id in summary
            .summarizes
            .iter()
            .flatten()
            .chain(std::iter::once(&summary.id))
        {
            all_ids.add(id);
        }
    }
    all_ids
}

impl Runner {
    /// Summarizes what `history` has to cover and returns the newest summary message, or `None`
    /// for a turn when there is nothing to cover (the kept tail and the input are all there
    /// is). The first model step is the one the caller counted; later chunks count their own.
    /// Never streams; calls no hook.
    pub(crate) async fn summarize(&mut self, history: &[Message]) -> Flow<Option<Message>> {
        let context = self.agent.context().clone();
        let estimate = context.estimator();
        let plan = plan_summary(
            history,
            &self.input_message_id,
            context.compact_keep_tokens,
            &*estimate,
        );
        if plan.covered.is_empty() && self.kind == RunKind::Turn {
            return Ok(None);
        }

        let ask = self.summary_ask(history);
        let instructions = summary_instructions(self.offer.instructions());

        // A new summary stands for the older ones too: the model reads the newest of them first,
        // and the new summary's `summarizes` carries everything they covered.
        let mut previous: Option<Message> = history
            .iter()
            .rev()
            .find(|m| m.source == MessageSource::Summary)
            .cloned();
        let mut all_ids = summarized_by(history);

        let mut now = history.to_vec();
        let mut rest = plan.covered;
        let mut first = true;
        loop {
            let fixed = estimate(&instructions)
                + estimate_message(&ask, &*estimate)
                + previous
                    .as_ref()
                    .map_or(0, |m| estimate_message(m, &*estimate));
            let budget = context.max_tokens.saturating_sub(fixed);
            let take = leading_units_within(&rest, budget, &*estimate);
            let chunk: Vec<Message> = rest.drain(..take).collect();
            let last = rest.is_empty();
            let mut covered: Vec<String> = chunk.iter().map(|m| m.id.clone()).collect();
            if last && self.kind == RunKind::Compact {
                covered.push(ask.id.clone());
            }
            let mut messages: Vec<Message> = previous.iter().cloned().collect();
            messages.extend(pair_tool_results(&chunk));
            let room = context.max_tokens.saturating_sub(estimate(&instructions));
            let mut messages = cut_to_fit(
                &strip_reasoning(&messages),
                room.saturating_sub(estimate_message(&ask, &*estimate)),
                &*estimate,
            );
            messages.push(ask.clone());
            if !first {
                self.tally.steps += 1;
            }
            first = false;
            let kept = rest.len() + plan.tail.len();
            let chunk = Chunk {
                messages,
                covered,
                kept,
            };
            let summary = self
                .summary_step(&instructions, chunk, &mut all_ids, &now)
                .await?;
            now.push(summary.clone());
            previous = Some(summary);
            if last {
                break;
            }
        }
        if self.kind == RunKind::Turn {
            // The answering model call is a step of its own.
            self.tally.steps += 1;
        }
        Ok(previous)
    }

    /// The message that asks for a summary: a compact run's own input; an automatic compaction
    /// sends one it never stores.
    fn summary_ask(&self, history: &[Message]) -> Message {
        match self.kind {
            RunKind::Compact => history
                .iter()
                .find(|m| m.id == self.input_message_id)
                .cloned(),
            RunKind::Turn => None,
        }
        .unwrap_or_else(|| Message {
            id: new_id(),
            role: Role::User,
            parts: vec![Part::text(COMPACT_ASK)],
            source: MessageSource::System,
            created_at: Timestamp::now(),
            summarizes: None,
        })
    }

    // Longer than 80 lines: the step record, the model call raced against the abort, the stored
    // summary and its event belong to one step and fail together.
    /// One summary model step over `chunk`; stores the summary and announces it.
    async fn summary_step(
        &mut self,
        instructions: &str,
        chunk: Chunk,
        all_ids: &mut Covered,
        history: &[Message],
    ) -> Flow<Message> {
        let estimate = self.agent.context().estimator();
        let before = estimate_messages(&context_of(history), &*estimate);
        let request = ModelRequest {
            messages: chunk.messages,
            instructions: instructions.to_owned(),
            tools: Vec::new(),
            params: self.agent.params().clone(),
            cache_key: Some(self.session_id().to_owned()),
            signal: self.signal(),
        };

        let invocation_id = self.open_model_step(&request).await?;
        let model = self.agent.model().clone();
        let signal = self.signal();
        let result = tokio::select! {
            biased;
            _ = signal.cancelled() => Err(AgentError::new(ErrorCode::Aborted, "the summary request was stopped by the run's cancel")),
            reply = model.complete(request) => reply,
        };
        let reply = match result {
            Ok(reply) => reply,
            Err(error) => {
                self.close_step(
                    &invocation_id,
                    StepStatus::Failed,
                    None,
                    Some(error_detail(&error)),
                )
                .await?;
                if self.signal().is_aborted() {
                    return Err(self.interrupt().await);
                }
                return Err(Exit::Error(AgentError::new(
                    error.code,
                    format!("summary: {}", error.message),
                )));
            }
        };
        self.count(&reply);
        let text = text_of(&reply.message);
        if text.trim().is_empty() {
            self.close_step(&invocation_id, StepStatus::Failed, Some(&reply), None)
                .await?;
            return Err(Exit::Error(AgentError::new(
                ErrorCode::InvalidResponse,
                "summary: the model returned no summary",
            )));
        }
        let newly_covered = chunk.covered.len();
        let detail = json!({ "compacted": newly_covered, "kept": chunk.kept });
        self.close_step(
            &invocation_id,
            StepStatus::Completed,
            Some(&reply),
            Some(detail),
        )
        .await?;
        self.emit(EventBody::ModelCompleted {
            step: self.tally.steps,
            message: reply.message.clone(),
            usage: reply.usage,
            finish: reply.finish,
        })
        .await?;

        for id in &chunk.covered {
            all_ids.add(id);
        }
        let summary = Message {
            id: new_id(),
            role: Role::User,
            parts: vec![Part::text(summary_text(&text))],
            source: MessageSource::Summary,
            created_at: Timestamp::now(),
            summarizes: Some(all_ids.ids.clone()),
        };
        self.append(std::slice::from_ref(&summary)).await?;
        let mut after_history = history.to_vec();
        after_history.push(summary.clone());
        let after = estimate_messages(&context_of(&after_history), &*estimate);
        self.emit(EventBody::ContextCompacted {
            message_id: summary.id.clone(),
            summarized: newly_covered as u32,
            kept: chunk.kept as u32,
            estimated_tokens: before,
            after_tokens: after,
        })
        .await?;
        Ok(summary)
    }
}
