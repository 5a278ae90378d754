//! Small constructors for the AHP actions the engine emits, so the mapping from runtime events
//! reads as a table rather than as struct literals.

use ahp_types::actions::{
    ChatActivityChangedAction, ChatDeltaAction, ChatErrorAction, ChatPendingMessageRemovedAction,
    ChatReasoningAction, ChatResponsePartAction, ChatToolCallCompleteAction,
    ChatToolCallReadyAction, ChatToolCallStartAction, ChatTurnCompleteAction, ChatUsageAction,
    SessionTitleChangedAction, StateAction,
};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ErrorInfo, ErrorResponsePart, MarkdownResponsePart, PendingMessageKind, ReasoningResponsePart,
    ResponsePart, SystemNotificationResponsePart, ToolCallClientContributor,
    ToolCallConfirmationReason, ToolCallContributor, ToolCallResult, ToolInput, ToolResultContent,
    ToolResultTextContent, UsageInfo,
};
use serde_json::Value;

pub(crate) fn markdown_part(turn_id: &str, id: &str) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn_id.to_owned(),
        part: ResponsePart::Markdown(MarkdownResponsePart {
            id: id.to_owned(),
            content: String::new(),
        }),
        meta: None,
    })
}

pub(crate) fn reasoning_part(turn_id: &str, id: &str) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn_id.to_owned(),
        part: ResponsePart::Reasoning(ReasoningResponsePart {
            id: id.to_owned(),
            content: String::new(),
        }),
        meta: None,
    })
}

pub(crate) fn notice(turn_id: &str, text: &str) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn_id.to_owned(),
        part: ResponsePart::SystemNotification(SystemNotificationResponsePart {
            content: StringOrMarkdown::Plain(text.to_owned()),
            meta: None,
        }),
        meta: None,
    })
}

pub(crate) fn delta(turn_id: &str, part_id: &str, content: String) -> StateAction {
    StateAction::ChatDelta(ChatDeltaAction {
        turn_id: turn_id.to_owned(),
        part_id: part_id.to_owned(),
        content,
        meta: None,
    })
}

pub(crate) fn reasoning(turn_id: &str, part_id: &str, content: String) -> StateAction {
    StateAction::ChatReasoning(ChatReasoningAction {
        turn_id: turn_id.to_owned(),
        part_id: part_id.to_owned(),
        content,
        meta: None,
    })
}

pub(crate) fn usage(turn_id: &str, usage: UsageInfo) -> StateAction {
    StateAction::ChatUsage(ChatUsageAction {
        turn_id: turn_id.to_owned(),
        usage,
        meta: None,
    })
}

pub(crate) fn tool_start(
    turn_id: &str,
    call_id: &str,
    name: &str,
    intention: Option<String>,
    meta: Option<JsonObject>,
    client: Option<&str>,
) -> StateAction {
    StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: call_id.to_owned(),
        meta,
        tool_name: name.to_owned(),
        display_name: name.to_owned(),
        intention,
        contributor: client.map(|id| {
            ToolCallContributor::Client(ToolCallClientContributor {
                client_id: id.to_owned(),
            })
        }),
    })
}

pub(crate) fn tool_ready(
    turn_id: &str,
    call_id: &str,
    title: &str,
    tool_input: Option<String>,
    intention: Option<String>,
    meta: Option<JsonObject>,
) -> StateAction {
    StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: call_id.to_owned(),
        meta,
        contributor: None,
        intention,
        invocation_message: StringOrMarkdown::Plain(title.to_owned()),
        tool_input: tool_input.map(ToolInput::Inline),
        confirmation_title: None,
        risk_assessment: None,
        edits: None,
        editable: None,
        confirmed: Some(ToolCallConfirmationReason::NotNeeded),
        options: None,
    })
}

pub(crate) fn tool_complete(
    turn_id: &str,
    call_id: &str,
    title: &str,
    content: &str,
    is_error: bool,
    meta: Option<JsonObject>,
) -> StateAction {
    let blocks = (!content.is_empty()).then(|| {
        vec![ToolResultContent::Text(ToolResultTextContent {
            text: content.to_owned(),
        })]
    });
    let error = is_error.then(|| {
        let message = if content.is_empty() {
            "The tool failed"
        } else {
            content
        };
        serde_json::json!({ "message": message })
    });
    StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn_id.to_owned(),
        tool_call_id: call_id.to_owned(),
        meta,
        result: ToolCallResult {
            success: !is_error,
            past_tense_message: StringOrMarkdown::Plain(title.to_owned()),
            content: blocks,
            structured_content: None,
            error,
        },
        requires_result_confirmation: None,
    })
}

pub(crate) fn turn_complete(turn_id: &str, duration: i64) -> StateAction {
    StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: turn_id.to_owned(),
        duration,
        meta: None,
    })
}

pub(crate) fn turn_error(
    turn_id: &str,
    duration: i64,
    message: &str,
    resumable: bool,
) -> StateAction {
    StateAction::ChatError(ChatErrorAction {
        turn_id: turn_id.to_owned(),
        duration,
        part: ErrorResponsePart {
            error: ErrorInfo {
                error_type: "turnFailed".to_owned(),
                message: message.to_owned(),
                stack: None,
                meta: None,
            },
            resumable: resumable.then_some(true),
        },
        meta: None,
    })
}

pub(crate) fn activity(text: Option<&str>) -> StateAction {
    StateAction::ChatActivityChanged(ChatActivityChangedAction {
        activity: text.map(str::to_owned),
    })
}

pub(crate) fn title(text: &str) -> StateAction {
    StateAction::SessionTitleChanged(SessionTitleChangedAction {
        title: text.to_owned(),
    })
}

pub(crate) fn steering_removed(id: &str) -> StateAction {
    StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction {
        kind: PendingMessageKind::Steering,
        id: id.to_owned(),
    })
}

/// `_meta` object from key/value pairs, or `None` when empty.
pub(crate) fn meta(pairs: Vec<(&str, Value)>) -> Option<JsonObject> {
    let map: JsonObject = pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    (!map.is_empty()).then_some(map)
}
