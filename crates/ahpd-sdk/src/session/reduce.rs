//! How an action changes a session's or a chat's state: the reducers run, and a change is
//! told apart from a repeat so that only changes are published. Also the chat state's
//! constructors and summary.

use ahp::reducers::{ReduceOutcome, apply_action_to_chat};
use ahp_types::actions::*;
use ahp_types::state::*;

use crate::util;

/// The turn and part a streamed action writes into (for a tool call's input, its call id).
pub(crate) fn stream_target(action: &StateAction) -> Option<(&str, &str)> {
    match action {
        StateAction::ChatDelta(a) => Some((&a.turn_id, &a.part_id)),
        StateAction::ChatReasoning(a) => Some((&a.turn_id, &a.part_id)),
        StateAction::ChatToolCallDelta(a) => Some((&a.turn_id, &a.tool_call_id)),
        _ => None,
    }
}

/// Whether a reducer's `Applied` may still leave the state equal, so it must be compared.
fn replace_style(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::SessionTitleChanged(_)
            | StateAction::SessionActiveClientSet(_)
            | StateAction::SessionActiveClientRemoved(_)
            | StateAction::SessionActivityChanged(_)
            | StateAction::SessionIsReadChanged(_)
            | StateAction::SessionIsArchivedChanged(_)
            | StateAction::SessionConfigChanged(_)
            | StateAction::SessionChatUpdated(_)
            | StateAction::SessionMetaChanged(_)
            | StateAction::SessionServerToolsChanged(_)
            | StateAction::ChatDraftChanged(_)
            | StateAction::ChatActivityChanged(_)
            | StateAction::ChatIsReadChanged(_)
            | StateAction::ChatIsArchivedChanged(_)
            | StateAction::ChatToolCallReady(_)
            | StateAction::ChatToolCallConfirmed(_)
            | StateAction::ChatToolCallComplete(_)
            | StateAction::ChatToolCallContentChanged(_)
            | StateAction::ChatQueuedMessagesReordered(_)
            | StateAction::ChatInputAnswerChanged(_)
    )
    // `chat/usage` is deliberately not here: a backend's usage report is published whenever
    // it applies to the running turn, even when it repeats the last one. The no-change rule
    // is about client dispatches, usage is not among the actions it names, and a turn's final usage
    // often equals the last streamed report; dropping it left clients that act on the report
    // (not on the state) without the turn's final figures. Clients cannot dispatch it.
}

pub(crate) fn changed<S: Clone + PartialEq>(
    state: &mut S,
    action: &StateAction,
    reduce: fn(&mut S, &StateAction) -> ReduceOutcome,
) -> Result<bool, ReduceOutcome> {
    if replace_style(action) {
        let before = state.clone();
        match reduce(state, action) {
            ReduceOutcome::Applied => Ok(*state != before),
            other => Err(other),
        }
    } else {
        match reduce(state, action) {
            ReduceOutcome::Applied => Ok(true),
            other => Err(other),
        }
    }
}

/// As `changed`, for a chat, without copying or comparing its ended turns. The reducers of
/// the replace-style chat actions work on the active turn and the chat's own fields and never
/// read or change `turns`; copying the whole transcript for each of them made every tool call,
/// activity or draft change cost time in proportion to the chat's length.
pub(crate) fn chat_changed(
    state: &mut ChatState,
    action: &StateAction,
) -> Result<bool, ReduceOutcome> {
    if let StateAction::ChatToolCallDelta(delta) = action {
        // Streamed tool input arrives in many small deltas; comparing copies of the running turn
        // for each one cost time in proportion to the input streamed so far.
        let changes = tool_delta_changes(state, delta);
        return match apply_action_to_chat(state, action) {
            ReduceOutcome::Applied => Ok(changes),
            other => Err(other),
        };
    }
    if !replace_style(action) {
        return changed(state, action, apply_action_to_chat);
    }
    let mut turns = std::mem::take(&mut state.turns);
    let result = changed(state, action, apply_action_to_chat);
    // Anything a reducer appended to the (empty) list goes after the real turns, and counts
    // as a change.
    let mut added = std::mem::take(&mut state.turns);
    let grew = !added.is_empty();
    turns.append(&mut added);
    state.turns = turns;
    result.map(|changed| changed || grew)
}

/// Whether a tool-input delta changes the call it names: only a call still streaming its input
/// takes one, and then only what the delta carries that differs.
fn tool_delta_changes(state: &ChatState, delta: &ChatToolCallDeltaAction) -> bool {
    let Some(turn) = state.active_turn.as_ref().filter(|t| t.id == delta.turn_id) else {
        return false;
    };
    turn.response_parts.iter().any(|part| match part {
        ResponsePart::ToolCall(call) => match &call.tool_call {
            ToolCallState::Streaming(s) if s.tool_call_id == delta.tool_call_id => {
                delta
                    .content
                    .as_ref()
                    .is_some_and(|c| !c.is_empty() || s.partial_input.is_none())
                    || delta
                        .meta
                        .as_ref()
                        .is_some_and(|m| s.meta.as_ref() != Some(m))
                    || delta
                        .invocation_message
                        .as_ref()
                        .is_some_and(|i| s.invocation_message.as_ref() != Some(i))
            }
            _ => false,
        },
        _ => false,
    })
}

pub(crate) fn chat_summary_of(state: &ChatState) -> ChatSummary {
    ChatSummary {
        resource: state.resource.clone(),
        title: state.title.clone(),
        status: state.status,
        activity: state.activity.clone(),
        modified_at: state.modified_at.clone(),
        changes: state.changes.clone(),
        origin: state.origin.clone(),
        movable: state.movable,
        interactivity: state.interactivity,
        working_directories: state.working_directories.clone(),
    }
}

pub(crate) fn empty_chat(uri: &str, title: &str) -> ChatState {
    ChatState {
        resource: uri.to_owned(),
        title: title.to_owned(),
        status: SessionStatus::Idle.bits(),
        activity: None,
        modified_at: util::now_iso(),
        changes: None,
        origin: None,
        movable: None,
        interactivity: None,
        working_directories: None,
        changesets: None,
        background_work: None,
        canvases: None,
        turns: Vec::new(),
        turns_next_cursor: None,
        active_turn: None,
        steering_message: None,
        queued_messages: None,
        draft: None,
        meta: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahp_types::common::StringOrMarkdown;
    use serde_json::Value;

    fn ended(id: &str) -> Turn {
        Turn {
            id: id.to_owned(),
            started_at: Some("2026-01-01T00:00:00.000Z".into()),
            duration: Some(1),
            message: Message {
                text: format!("question {id}"),
                origin: MessageOrigin {
                    kind: MessageKind::User,
                },
                attachments: None,
                model: None,
                agent: None,
                meta: None,
            },
            response_parts: Vec::new(),
            usage: None,
            state: TurnState::Complete,
        }
    }

    fn read(is_read: bool) -> StateAction {
        StateAction::ChatIsReadChanged(ChatIsReadChangedAction { is_read })
    }

    /// The transcript is left out of the comparison, not out of the state: a replace-style
    /// action is still told apart from a repeat, and the turns come back untouched.
    #[test]
    fn replace_style_chat_actions_compare_without_losing_turns() {
        let mut state = empty_chat("ahp-chat:/c", "c");
        state.turns = (0..3).map(|i| ended(&format!("t{i}"))).collect();
        let before = state.turns.clone();
        assert_eq!(chat_changed(&mut state, &read(true)), Ok(true));
        assert_eq!(chat_changed(&mut state, &read(true)), Ok(false));
        assert_eq!(chat_changed(&mut state, &read(false)), Ok(true));
        assert_eq!(state.turns, before);
    }

    fn delta(call: &str, content: Option<&str>, meta: Option<Value>) -> StateAction {
        StateAction::ChatToolCallDelta(ChatToolCallDeltaAction {
            turn_id: "t".into(),
            tool_call_id: call.into(),
            meta: meta.and_then(|m| m.as_object().cloned()),
            content: content.map(str::to_owned),
            invocation_message: None,
        })
    }

    /// A tool-input delta says whether it changed the chat without a copy to compare with; what
    /// it says must agree with comparing copies.
    #[test]
    fn tool_input_deltas_report_a_change_exactly_when_they_make_one() {
        let mut state = empty_chat("ahp-chat:/c", "c");
        let mut message = ended("t").message;
        message.text = "go".into();
        let setup = [
            StateAction::ChatTurnStarted(ChatTurnStartedAction {
                turn_id: "t".into(),
                started_at: "2026-01-01T00:00:00.000Z".into(),
                message,
                queued_message_id: None,
                meta: None,
            }),
            StateAction::ChatToolCallStart(ChatToolCallStartAction {
                turn_id: "t".into(),
                tool_call_id: "c".into(),
                meta: None,
                tool_name: "write".into(),
                display_name: "Write".into(),
                intention: None,
                contributor: None,
            }),
        ];
        for action in &setup {
            assert_eq!(chat_changed(&mut state, action), Ok(true));
        }
        let meta = serde_json::json!({"k": 1});
        let steps = [
            (delta("c", Some(""), None), true),
            (delta("c", Some(""), None), false),
            (delta("c", Some("{\"pa"), None), true),
            (delta("c", None, None), false),
            (delta("c", None, Some(meta.clone())), true),
            (delta("c", None, Some(meta)), false),
        ];
        for (action, expected) in steps {
            let before = state.clone();
            let said = chat_changed(&mut state, &action);
            assert_eq!(said, Ok(state != before), "{action:?}");
            assert_eq!(said, Ok(expected), "{action:?}");
        }
        // Once the input is complete, a late delta changes nothing.
        let ready = StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: "t".into(),
            tool_call_id: "c".into(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain("write".into()),
            tool_input: None,
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: None,
            options: None,
        });
        assert_eq!(chat_changed(&mut state, &ready), Ok(true));
        let before = state.clone();
        assert_eq!(
            chat_changed(&mut state, &delta("c", Some("x"), None)),
            Ok(false)
        );
        assert_eq!(state, before);
        // A delta for a call that does not exist is the rule-7 case: not applied.
        assert!(chat_changed(&mut state, &delta("ghost", Some("x"), None)).is_err());
    }
}
