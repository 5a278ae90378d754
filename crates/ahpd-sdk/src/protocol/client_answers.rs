//! A client's answers to what a backend parked: approvals, questions and the results of tools
//! a client runs. Each is taken only while its request is open, and only from whoever may
//! answer it.

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;

use crate::agent::{ApprovalOutcome, InputOutcome};
use crate::protocol::dispatch::ChatDispatch;
use crate::session::actor::Actor;
use crate::session::asks::PendingKind;

/// What a person wrote with a denial: its explanation, else what they suggested instead;
/// nothing when both are blank.
fn denial_message(a: &ChatToolCallConfirmedAction) -> Option<String> {
    let explained = a.reason_message.as_ref().map(|m| match m {
        StringOrMarkdown::Plain(text) => text.clone(),
        StringOrMarkdown::Markdown { markdown, .. } => markdown.clone(),
    });
    let suggested = a.user_suggestion.as_ref().map(|m| m.text.clone());
    [explained, suggested]
        .into_iter()
        .flatten()
        .map(|t| t.trim().to_owned())
        .find(|t| !t.is_empty())
}

impl Actor {
    /// A person's answer to a parked approval, handed to the backend waiting on it.
    pub(crate) fn client_confirmed(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatToolCallConfirmedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            ..
        } = *d;
        let entry = format!("tool:{}", a.tool_call_id);
        let open = self.asks.approval_open(&entry, chat, &a.turn_id);
        if !open {
            return Err("that tool call is not waiting for a confirmation".into());
        }
        self.apply_chat(chat, action, Some(origin));
        if let Some(p) = self.asks.take(&entry)
            && let PendingKind::Approval { reply, scope } = p.kind
        {
            let outcome = if a.approved {
                if a.selected_option_id.as_deref() == Some("allow-session") {
                    self.allow_for_session(scope);
                }
                ApprovalOutcome::Approved {
                    edited_input: a.edited_tool_input.clone(),
                    option_id: a.selected_option_id.clone(),
                    confirmed: a
                        .confirmed
                        .clone()
                        .unwrap_or(ToolCallConfirmationReason::NotNeeded),
                }
            } else {
                ApprovalOutcome::Denied {
                    reason: a.reason,
                    message: denial_message(a),
                }
            };
            let _ = reply.send(outcome);
        }
        self.remove_input_needed(&entry);
        Ok(())
    }

    /// A client's result of a tool it runs, handed to the backend waiting on it.
    pub(crate) fn client_tool_complete(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatToolCallCompleteAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            conn,
            chat,
            action,
            origin,
            ..
        } = *d;
        let entry = format!("client:{}", a.tool_call_id);
        let mine = self.asks.run_by(&entry, &conn.client_id);
        if !mine {
            return Err("only the client running that tool call may complete it".into());
        }
        self.apply_chat(chat, action, Some(origin));
        if let Some(p) = self.asks.take(&entry)
            && let PendingKind::ClientTool { reply, timer, .. } = p.kind
        {
            if let Some(t) = timer {
                t.abort();
            }
            let _ = reply.send(a.result.clone());
        }
        self.remove_input_needed(&entry);
        Ok(())
    }

    /// A client's progress on a tool it runs; only that client may report it.
    pub(crate) fn client_tool_content(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatToolCallContentChangedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            conn,
            chat,
            action,
            origin,
            ..
        } = *d;
        let entry = format!("client:{}", a.tool_call_id);
        let mine = self.asks.run_by(&entry, &conn.client_id);
        if !mine {
            return Err("only the client running that tool call may change its content".into());
        }
        self.apply_chat(chat, action, Some(origin));
        Ok(())
    }

    /// A draft answer to an open question.
    pub(crate) fn client_answer_changed(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatInputAnswerChangedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            ..
        } = *d;
        if !self.asks.is_open(&format!("input:{}", a.request_id)) {
            return Err("that question is not open".into());
        }
        self.apply_chat(chat, action, Some(origin));
        Ok(())
    }

    /// The answers to an open question (every required one, when accepted), handed to the backend.
    pub(crate) fn client_input_completed(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatInputCompletedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            ..
        } = *d;
        let entry = format!("input:{}", a.request_id);
        let Some(PendingKind::Input { required, .. }) = self.asks.get(&entry).map(|p| &p.kind)
        else {
            return Err("that question is not open".into());
        };
        if a.response == ChatInputResponseKind::Accept {
            let answers = a.answers.clone().unwrap_or_default();
            if let Some(missing) = required.iter().find(|q| !answers.contains_key(*q)) {
                return Err(format!("the required question {missing} has no answer"));
            }
        }
        self.apply_chat(chat, action, Some(origin));
        if let Some(p) = self.asks.take(&entry)
            && let PendingKind::Input { reply, .. } = p.kind
        {
            let _ = reply.send(InputOutcome {
                response: a.response,
                answers: a.answers.clone(),
            });
        }
        self.remove_input_needed(&entry);
        Ok(())
    }
}
