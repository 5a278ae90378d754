//! The summary step of a compaction (harness §9.5, §9.6).

use serde_json::json;

use super::{Exit, Flow, RunKind, Runner, error_detail};
use crate::compaction::{
    COMPACT_ASK, context_of, estimate_messages, plan_summary, select_for_request,
    summary_instructions, summary_text,
};
use crate::error::{AgentError, ErrorCode};
use crate::event::EventBody;
use crate::id::{Timestamp, new_id};
use crate::message::{Message, MessageSource, Part, Role, text_of};
use crate::model::ModelRequest;
use crate::store::StepStatus;

impl Runner {
    /// Writes a summary of `history` and returns the summary message. Uses the current model
    /// step (the caller has counted it); never streams; calls no hook.
    pub(crate) async fn summarize(&mut self, history: &[Message]) -> Flow<Message> {
        let context = self.agent.context().clone();
        let estimate = context.estimator();
        let before = estimate_messages(&context_of(history), &*estimate);
        let plan = plan_summary(
            history,
            &self.input_message_id,
            context.compact_keep_tokens,
            &*estimate,
        );

        // A compact run's own input is the ask; an automatic compaction sends one it never stores.
        let ask = match self.kind {
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
        });
        let mut covered_ids: Vec<String> = plan.covered.iter().map(|m| m.id.clone()).collect();
        if self.kind == RunKind::Compact {
            covered_ids.push(ask.id.clone());
        }
        let newly_covered = covered_ids.len();
        // The new summary stands for the older ones too, so the model reads the newest of them
        // first and the new summary's `summarizes` carries everything they covered.
        let older: Vec<&Message> = history
            .iter()
            .filter(|m| m.source == MessageSource::Summary)
            .collect();
        let mut messages: Vec<Message> = older.last().map(|m| (*m).clone()).into_iter().collect();
        messages.extend(plan.covered.iter().cloned());
        messages.push(ask);
        let mut all_ids: Vec<String> = Vec::new();
        for summary in &older {
            for id in summary
                .summarizes
                .iter()
                .flatten()
                .chain(std::iter::once(&summary.id))
            {
                if !all_ids.contains(id) {
                    all_ids.push(id.clone());
                }
            }
        }
        all_ids.extend(covered_ids);
        let instructions = summary_instructions(&self.instructions);
        let request = ModelRequest {
            messages: select_for_request(&messages, &instructions, context.max_tokens, &*estimate),
            instructions,
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
        let detail = json!({ "compacted": newly_covered, "kept": plan.tail.len() });
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

        let summary = Message {
            id: new_id(),
            role: Role::User,
            parts: vec![Part::text(summary_text(&text))],
            source: MessageSource::Summary,
            created_at: Timestamp::now(),
            summarizes: Some(all_ids),
        };
        self.append(std::slice::from_ref(&summary)).await?;
        let mut after_history = history.to_vec();
        after_history.push(summary.clone());
        let after = estimate_messages(&context_of(&after_history), &*estimate);
        self.emit(EventBody::ContextCompacted {
            message_id: summary.id.clone(),
            summarized: newly_covered as u32,
            kept: plan.tail.len() as u32,
            estimated_tokens: before,
            after_tokens: after,
        })
        .await?;
        if self.kind == RunKind::Turn {
            // The answering model call is a step of its own.
            self.tally.steps += 1;
        }
        Ok(summary)
    }
}
