//! A stored turn, rebuilt the way clients saw it live.
//!
//! There is one mapping from a run's events to AHP actions, [`TurnMapper`]; a run's events are
//! stored as they are published, so replaying them through the mapper and reducing the actions
//! with the official chat reducer gives the turn a client's mirror held. What the host and the
//! clients added live (the start and message, each approval's question and answer, the stop)
//! comes from the [`turn_facts`](crate::turn_facts) the engine kept as they happened.

use std::collections::HashMap;

use ahp::reducers::apply_action_to_chat;
use ahp_types::actions::{
    ChatInputCompletedAction, ChatInputRequestedAction, ChatToolCallConfirmedAction,
    ChatToolCallReadyAction, ChatTurnCancelledAction, ChatTurnStartedAction, StateAction,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    ChatState, ErrorResponsePart, ResponsePart, ToolCallConfirmationReason, ToolCallState, Turn,
};
use ahpd_sdk::agent::ApprovalRequest;
use cofold_agents::event::{Event, EventBody};

use crate::previews::Note;
use crate::turn_facts::{Answer, Header};
use crate::turns::TurnMapper;

/// The host's `chat/toolCallReady` for an approval: the question with its options, or, for a
/// call a session setting let through, the call running without one.
fn ready(request: &ApprovalRequest, display: &str, setting: bool) -> StateAction {
    StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: request.turn_id.clone(),
        tool_call_id: request.tool_call_id.clone(),
        meta: request.meta.clone(),
        contributor: None,
        intention: None,
        invocation_message: request.invocation_message.clone(),
        tool_input: request.tool_input.clone(),
        confirmation_title: request.confirmation_title.clone(),
        risk_assessment: request.risk_assessment.clone(),
        edits: request.edits.clone(),
        editable: request.editable,
        confirmed: setting.then_some(ToolCallConfirmationReason::Setting),
        options: (!setting).then(|| ahpd_sdk::agent::approval_options(display)),
    })
}

/// The client's `chat/toolCallConfirmed` that carried a person's answer.
fn confirmed(request: &ApprovalRequest, answer: &Answer) -> StateAction {
    let (approved, confirmed, option, edited, reason) = match answer {
        Answer::Approved {
            confirmed,
            option,
            edited,
        } => (
            true,
            Some(confirmed.clone()),
            option.clone(),
            edited.clone(),
            None,
        ),
        Answer::Denied { reason, .. } => (false, None, None, None, *reason),
        Answer::Input { .. } => (false, None, None, None, None),
    };
    let said = match answer {
        Answer::Denied { message, .. } => message.clone().map(StringOrMarkdown::Plain),
        _ => None,
    };
    StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
        turn_id: request.turn_id.clone(),
        tool_call_id: request.tool_call_id.clone(),
        meta: None,
        approved,
        confirmed,
        reason,
        edited_tool_input: edited,
        user_suggestion: None,
        reason_message: said,
        selected_option_id: option,
    })
}

/// The name the chat shows a call under, which the host's options name.
fn display_name(chat: &ChatState, call_id: &str) -> Option<String> {
    let turn = chat.active_turn.as_ref()?;
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => {
            let (id, display) = match &tc.tool_call {
                ToolCallState::Streaming(s) => (&s.tool_call_id, &s.display_name),
                ToolCallState::PendingConfirmation(s) => (&s.tool_call_id, &s.display_name),
                ToolCallState::Running(s) => (&s.tool_call_id, &s.display_name),
                _ => return None,
            };
            (id == call_id).then(|| display.clone())
        }
        _ => None,
    })
}

/// The host's question and the client's answer for an input event of a replayed run.
fn input_actions(
    request_id: &str,
    questions: &[cofold_agents::question::Question],
    answer: Option<&Answer>,
) -> Vec<StateAction> {
    let mut out = vec![StateAction::ChatInputRequested(ChatInputRequestedAction {
        request: crate::asks::input_request(request_id, questions),
    })];
    if let Some(Answer::Input { response, answers }) = answer {
        out.push(StateAction::ChatInputCompleted(ChatInputCompletedAction {
            request_id: request_id.to_owned(),
            response: *response,
            answers: answers.clone(),
        }));
    }
    out
}

/// The host's (and its clients') actions around one approval or question of a replayed run.
fn host_actions(
    chat: &ChatState,
    mapper: &TurnMapper,
    event: &Event,
    facts: (&HashMap<String, Answer>, &HashMap<String, Note>),
) -> Vec<StateAction> {
    let (answers, notes) = facts;
    let (request_id, call_id, name, prompt, risk) = match &event.body {
        EventBody::InputRequested {
            request_id,
            questions,
            ..
        } => return input_actions(request_id, questions, answers.get(request_id)),
        EventBody::ApprovalRequested {
            request_id,
            call_id,
            name,
            prompt,
            risk,
            ..
        } => (request_id, call_id, name, prompt, risk),
        _ => return Vec::new(),
    };
    let mut request = mapper.approval_request(call_id, name, prompt.as_deref(), risk.as_deref());
    if let Some(note) = notes.get(request_id) {
        crate::previews::apply_note(&mut request, note, &mapper.title_of(call_id));
    }
    let display = display_name(chat, &request.tool_call_id).unwrap_or_else(|| name.clone());
    match answers.get(request_id) {
        Some(Answer::Approved {
            confirmed: ToolCallConfirmationReason::Setting,
            ..
        }) => vec![ready(&request, &display, true)],
        Some(answer @ (Answer::Approved { .. } | Answer::Denied { .. })) => vec![
            ready(&request, &display, false),
            confirmed(&request, answer),
        ],
        _ => vec![ready(&request, &display, false)],
    }
}

/// What one stored run of a turn needs to be read back.
pub(crate) struct StoredRun<'a> {
    pub header: Header,
    pub events: &'a [Event],
    pub answers: &'a HashMap<String, Answer>,
    /// Why approvals showed no edits, by request.
    pub notes: &'a HashMap<String, Note>,
    /// The duration the stopping client gave, when a client stopped the turn.
    pub stopped: Option<i64>,
}

/// Replays a turn's stored run through the live mapping and reduces it as a client does.
pub(crate) fn rebuild(turn_id: &str, mut mapper: TurnMapper, run: StoredRun<'_>) -> Option<Turn> {
    let mut chat: ChatState = serde_json::from_value(serde_json::json!({
        "resource": "", "title": "", "status": 0, "modifiedAt": run.header.started_at, "turns": [],
    }))
    .ok()?;
    let started = StateAction::ChatTurnStarted(ChatTurnStartedAction {
        turn_id: turn_id.to_owned(),
        started_at: run.header.started_at.clone(),
        message: run.header.message,
        queued_message_id: None,
        meta: None,
    });
    apply_action_to_chat(&mut chat, &started);
    for event in run.events {
        let host = host_actions(&chat, &mapper, event, (run.answers, run.notes));
        // The host put the question before the mapping of later events could show the call
        // running, just as live.
        for action in host.iter().chain(mapper.map(event).iter()) {
            apply_action_to_chat(&mut chat, action);
        }
    }
    if chat.active_turn.is_some() {
        // A run cancelled (or cut short by a stopped process) sends nothing at its end: the
        // stop is its client's, and a dead run reads as stopped.
        let duration = match (run.stopped, run.events.first(), run.events.last()) {
            (Some(d), _, _) => d,
            (None, Some(first), Some(last)) => {
                (last.at.unix_micros() - first.at.unix_micros()) / 1000
            }
            _ => 0,
        };
        apply_action_to_chat(
            &mut chat,
            &StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
                turn_id: turn_id.to_owned(),
                duration,
                meta: None,
            }),
        );
    }
    let mut turn = chat.turns.pop()?;
    // Only this process can try a failed turn again: read back, it is not offered.
    for part in &mut turn.response_parts {
        if let ResponsePart::Error(ErrorResponsePart { resumable, .. }) = part {
            *resumable = None;
        }
    }
    Some(turn)
}
