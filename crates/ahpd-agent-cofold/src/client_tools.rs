//! Tools a client runs: offered to the model as `<clientId>__<name>`, each call
//! handed to the host, which asks the owning client and brings back its result.

use ahp_types::state::{ToolCallResult, ToolDefinition, ToolResultContent};
use ahpd_sdk::SessionContext;
use ahpd_sdk::agent::ClientToolCall;
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};
use serde_json::{Value, json};

/// The separator between the client id and the tool's own name.
pub(crate) const SEPARATOR: &str = "__";

/// The name a client's tool is offered under.
pub(crate) fn offered_name(client_id: &str, tool: &str) -> String {
    format!("{client_id}{SEPARATOR}{tool}")
}

/// What the model reads of a client's result: its text, then a line per other block.
pub(crate) fn result_text(result: &ToolCallResult) -> String {
    let mut lines: Vec<String> = Vec::new();
    for block in result.content.iter().flatten() {
        match block {
            ToolResultContent::Text(t) => lines.push(t.text.clone()),
            ToolResultContent::EmbeddedResource(r) => {
                // The data travels base64-encoded; its decoded size is what the block holds.
                let encoded = r.data.trim_end_matches('=').len();
                let bytes = encoded * 3 / 4;
                lines.push(format!("[{}, {bytes} bytes]", r.content_type));
            }
            other => lines.push(serde_json::to_string(other).unwrap_or_default()),
        }
    }
    lines.join("\n")
}

/// Why a failed client call failed, when its result carries no content: the host puts its own
/// sentence (the client left, it did not answer in time) in `error` and the past-tense message.
fn failure_reason(result: &ToolCallResult) -> String {
    let error = match &result.error {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => o.get("message").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let past = match &result.past_tense_message {
        ahp_types::common::StringOrMarkdown::Plain(s) => s.clone(),
        ahp_types::common::StringOrMarkdown::Markdown { markdown } => markdown.clone(),
    };
    error
        .filter(|e| !e.trim().is_empty())
        .or_else(|| (!past.trim().is_empty()).then_some(past))
        .unwrap_or_else(|| "The tool failed".to_owned())
}

/// The cofold tool wrapping one client tool for one turn.
pub(crate) fn client_tool(
    ctx: SessionContext,
    turn_id: &str,
    client_id: &str,
    definition: &ToolDefinition,
) -> Option<Tool> {
    let name = offered_name(client_id, &definition.name);
    let description = definition
        .description
        .clone()
        .or_else(|| definition.title.clone())
        .unwrap_or_else(|| definition.name.clone());
    let schema = definition
        .input_schema
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({ "type": "object" }));
    let turn_id = turn_id.to_owned();
    let client_id = client_id.to_owned();
    let tool_name = definition.name.clone();
    let offered = name.clone();
    let handler = handler_fn(move |input: Value, tcx| {
        let ctx = ctx.clone();
        let call = ClientToolCall {
            turn_id: turn_id.clone(),
            tool_call_id: tcx.call_id.clone(),
            client_id: client_id.clone(),
            tool_name: tool_name.clone(),
            input: input.to_string(),
        };
        // The start is said here rather than from the event stream, which may lag behind the
        // call: the host would otherwise start the call itself, without its contributor.
        ctx.emit(crate::actions::tool_start(
            &call.turn_id,
            &call.tool_call_id,
            &offered,
            None,
            None,
            Some(&call.client_id),
        ));
        async move {
            let result = ctx.call_client_tool(call).await;
            let text = result_text(&result);
            if result.success {
                Ok(ToolOutput {
                    content: text,
                    detail: None,
                })
            } else if text.is_empty() {
                Err(ToolError::failed(failure_reason(&result)))
            } else {
                Err(ToolError::failed(text))
            }
        }
    });
    Tool::new(ToolDef::new(name, description, schema, handler)).ok()
}
