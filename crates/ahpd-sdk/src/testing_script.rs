//! The scripts of the scripted test backend: what a turn does, chosen by its message's text.

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;

use crate::agent::{ApprovalOutcome, ApprovalRequest, ClientToolCall, SessionContext};

fn md(turn: &str, part: &str) -> StateAction {
    StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn.into(),
        part: ResponsePart::Markdown(MarkdownResponsePart {
            id: part.into(),
            content: String::new(),
        }),
        meta: None,
    })
}

fn delta(turn: &str, part: &str, text: &str) -> StateAction {
    StateAction::ChatDelta(ChatDeltaAction {
        turn_id: turn.into(),
        part_id: part.into(),
        content: text.into(),
        meta: None,
    })
}

fn complete(turn: &str) -> StateAction {
    StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: turn.into(),
        duration: 3,
        meta: None,
    })
}

fn tool_start(turn: &str, id: &str) -> StateAction {
    StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn.into(),
        tool_call_id: id.into(),
        meta: None,
        tool_name: "shell".into(),
        display_name: "Shell".into(),
        intention: None,
        contributor: None,
    })
}

fn tool_done(turn: &str, id: &str) -> StateAction {
    StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn.into(),
        tool_call_id: id.into(),
        meta: None,
        result: ToolCallResult {
            success: true,
            past_tense_message: StringOrMarkdown::Plain("Ran the command".into()),
            content: None,
            structured_content: None,
            error: None,
        },
        requires_result_confirmation: None,
    })
}

/// Plays the script a turn's text names: `reason`, `tool`, `ask` (an approval), `question`,
/// `error` (resumable, once), `hang`, `client-tool`, `deltas:<n>`; anything else streams a
/// short answer.
pub(crate) async fn run_script(ctx: SessionContext, turn: String, text: String, resumed: bool) {
    let t = turn.as_str();
    match text.as_str() {
        "reason" => reason(&ctx, t),
        "tool" => tool(&ctx, t),
        "ask" => ask(&ctx, t).await,
        "question" => question(&ctx, t).await,
        "error" if !resumed => fail(&ctx, t),
        "hang" => std::future::pending::<()>().await,
        "client-tool" => client_tool(&ctx, t).await,
        other => stream(&ctx, t, other).await,
    }
}

fn reason(ctx: &SessionContext, t: &str) {
    ctx.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: t.into(),
        part: ResponsePart::Reasoning(ReasoningResponsePart {
            id: "r".into(),
            content: String::new(),
        }),
        meta: None,
    }));
    ctx.emit(StateAction::ChatReasoning(ChatReasoningAction {
        turn_id: t.into(),
        part_id: "r".into(),
        content: "thinking".into(),
        meta: None,
    }));
    ctx.emit(md(t, "m"));
    ctx.emit(delta(t, "m", "answer"));
    ctx.emit(complete(t));
}

fn tool(ctx: &SessionContext, t: &str) {
    ctx.emit(tool_start(t, "call-run"));
    ctx.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: t.into(),
        tool_call_id: "call-run".into(),
        meta: None,
        contributor: None,
        intention: None,
        invocation_message: StringOrMarkdown::Plain("Run ls".into()),
        tool_input: None,
        confirmation_title: None,
        risk_assessment: None,
        edits: None,
        editable: None,
        confirmed: None,
        options: None,
    }));
    ctx.emit(tool_done(t, "call-run"));
    ctx.emit(complete(t));
}

async fn ask(ctx: &SessionContext, t: &str) {
    let id = format!("call-{t}");
    ctx.emit(tool_start(t, &id));
    let outcome = ctx
        .ask_approval(ApprovalRequest {
            turn_id: t.into(),
            tool_call_id: id.clone(),
            invocation_message: StringOrMarkdown::Plain("Run rm".into()),
            tool_input: None,
            confirmation_title: Some(StringOrMarkdown::Plain("Run a command?".into())),
            edits: None,
            risk_assessment: None,
            editable: None,
            meta: None,
        })
        .await;
    match outcome {
        ApprovalOutcome::Approved { .. } => {
            ctx.emit(tool_done(t, &id));
            ctx.emit(complete(t));
        }
        ApprovalOutcome::Denied { .. } => ctx.emit(complete(t)),
        ApprovalOutcome::Cancelled => {}
    }
}

async fn question(ctx: &SessionContext, t: &str) {
    let request: ChatInputRequest = match serde_json::from_value(serde_json::json!({
        "id": format!("q-{t}"),
        "message": "Which one?",
        "questions": [{"kind": "text", "id": "name", "title": "Name", "message": "Name?", "required": true}]
    })) {
        Ok(r) => r,
        Err(_) => return,
    };
    let outcome = ctx.ask_input(t, request).await;
    ctx.emit(md(t, "m"));
    ctx.emit(delta(t, "m", &format!("{:?}", outcome.response)));
    ctx.emit(complete(t));
}

fn fail(ctx: &SessionContext, t: &str) {
    ctx.emit(StateAction::ChatError(ChatErrorAction {
        turn_id: t.into(),
        duration: 2,
        part: ErrorResponsePart {
            error: ErrorInfo {
                error_type: "rateLimited".into(),
                message: "try again".into(),
                stack: None,
                meta: None,
            },
            resumable: Some(true),
        },
        meta: None,
    }));
}

async fn client_tool(ctx: &SessionContext, t: &str) {
    let Some((client_id, tool)) = ctx.client_tools().into_iter().next() else {
        ctx.emit(md(t, "m"));
        ctx.emit(delta(t, "m", "no client tools"));
        ctx.emit(complete(t));
        return;
    };
    let result = ctx
        .call_client_tool(ClientToolCall {
            turn_id: t.into(),
            tool_call_id: format!("ct-{t}"),
            client_id,
            tool_name: tool.name,
            input: "{}".into(),
        })
        .await;
    ctx.emit(md(t, "m"));
    ctx.emit(delta(
        t,
        "m",
        if result.success {
            "tool ok"
        } else {
            "tool failed"
        },
    ));
    ctx.emit(complete(t));
}

/// `deltas:<n>` streams `n` one-letter deltas, yielding between them; anything else streams
/// five words.
async fn stream(ctx: &SessionContext, t: &str, text: &str) {
    let n = text
        .strip_prefix("deltas:")
        .and_then(|n| n.parse::<usize>().ok());
    ctx.emit(md(t, "m"));
    match n {
        Some(n) => {
            for _ in 0..n {
                ctx.emit(delta(t, "m", "x"));
                tokio::task::yield_now().await;
            }
        }
        None => {
            for chunk in ["one ", "two ", "three ", "four ", "five"] {
                ctx.emit(delta(t, "m", chunk));
            }
        }
    }
    ctx.emit(complete(t));
}
