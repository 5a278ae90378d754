//! Building the body of `POST <base>/chat/completions` from a [`ModelRequest`].

use std::collections::HashMap;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::message::{Message, Part, Role};
use cofold_agents::model::{
    ModelFeatures, ModelParams, ModelRequest, ReasoningEffort, ReasoningParams,
};
use serde_json::{Map, Value, json};

use crate::dialect::{Dialect, EffortParam, MaxTokensField, ReasoningField};

/// What the body depends on besides the request.
pub(crate) struct BodyContext<'a> {
    pub model_id: &'a str,
    pub features: ModelFeatures,
    pub default_params: Option<&'a ModelParams>,
    pub reasoning_budgets: &'a HashMap<ReasoningEffort, u64>,
    pub dialect: &'a Dialect,
    /// The field reasoning goes back under on the assistant messages of the tool loop; `None`
    /// sends none back.
    pub echo: Option<ReasoningField>,
}

/// Refuses a request the model cannot take, before anything is sent.
pub(crate) fn check_features(
    ctx: &BodyContext<'_>,
    request: &ModelRequest,
) -> Result<(), AgentError> {
    if !request.tools.is_empty() && !ctx.features.tools {
        return Err(AgentError::new(
            ErrorCode::UnsupportedFeature,
            format!("{} does not support tools", ctx.model_id),
        ));
    }
    let has_image = request
        .messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .any(|p| matches!(p, Part::Image { .. }));
    if has_image && !ctx.features.images {
        return Err(AgentError::new(
            ErrorCode::UnsupportedFeature,
            format!("{} does not support images", ctx.model_id),
        ));
    }
    Ok(())
}

/// The JSON body; `stream` picks the streaming form.
pub(crate) fn build_body(ctx: &BodyContext<'_>, request: &ModelRequest, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(ctx.model_id));
    let mut messages = vec![json!({ "role": "system", "content": request.instructions })];
    // The tool loop: what follows the person's last message. Servers that want reasoning back
    // want it there; earlier turns' reasoning they ignore, so it is not sent.
    let loop_start = request
        .messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .map_or(0, |i| i + 1);
    for (i, m) in request.messages.iter().enumerate() {
        let echo = ctx.echo.filter(|_| i >= loop_start);
        map_message(m, echo, &mut messages);
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input } })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
        if let Some(parallel) = ctx.dialect.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }
    let params = merged_params(ctx.default_params, &request.params);
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(n) = params.max_output_tokens {
        let field = match ctx.dialect.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), json!(n));
    }
    if let Some(stop) = &params.stop {
        body.insert("stop".into(), json!(stop));
    }
    if let Some(seed) = params.seed {
        body.insert("seed".into(), json!(seed));
    }
    if ctx.features.reasoning
        && let Some(reasoning) = &params.reasoning
    {
        insert_reasoning(ctx, reasoning, &mut body);
    }
    if let Some(key) = request
        .cache_key
        .as_ref()
        .filter(|_| ctx.dialect.prompt_cache_key)
    {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    body.insert("stream".into(), json!(stream));
    if stream && ctx.dialect.stream_options {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    Value::Object(body)
}

/// The reasoning settings in the body, in the form the dialect takes: a token budget as
/// `reasoning.max_tokens`, an effort as the model's budget for it when one is configured, else as
/// `reasoning_effort` or `reasoning.effort`.
fn insert_reasoning(
    ctx: &BodyContext<'_>,
    reasoning: &ReasoningParams,
    body: &mut Map<String, Value>,
) {
    match (reasoning.effort, reasoning.max_tokens) {
        (effort, Some(max)) => {
            let mut r = Map::new();
            if let Some(e) = effort {
                r.insert("effort".into(), json!(e.as_str()));
            }
            r.insert("max_tokens".into(), json!(max));
            body.insert("reasoning".into(), Value::Object(r));
        }
        (Some(effort), None) => match ctx.reasoning_budgets.get(&effort) {
            Some(budget) => {
                body.insert("reasoning".into(), json!({ "max_tokens": budget }));
            }
            None => match ctx.dialect.reasoning_effort {
                EffortParam::ReasoningEffort => {
                    body.insert("reasoning_effort".into(), json!(effort.as_str()));
                }
                EffortParam::ReasoningObject => {
                    body.insert("reasoning".into(), json!({ "effort": effort.as_str() }));
                }
                EffortParam::Omit => {}
            },
        },
        (None, None) => {}
    }
}

/// The model's default params overridden key by key by the request's.
pub(crate) fn merged_params(defaults: Option<&ModelParams>, request: &ModelParams) -> ModelParams {
    let Some(d) = defaults else {
        return request.clone();
    };
    ModelParams {
        temperature: request.temperature.or(d.temperature),
        top_p: request.top_p.or(d.top_p),
        max_output_tokens: request.max_output_tokens.or(d.max_output_tokens),
        stop: request.stop.clone().or_else(|| d.stop.clone()),
        seed: request.seed.or(d.seed),
        reasoning: request.reasoning.clone().or_else(|| d.reasoning.clone()),
    }
}

fn image_url(mime_type: &str, data: Option<&String>, url: Option<&String>) -> String {
    match (url, data) {
        (Some(u), _) => u.clone(),
        (None, Some(d)) => format!("data:{mime_type};base64,{d}"),
        (None, None) => String::new(),
    }
}

// Longer than 80 lines: one arm per message role, each writing its own wire shape.
fn map_message(m: &Message, echo: Option<ReasoningField>, out: &mut Vec<Value>) {
    match m.role {
        Role::Tool => {
            for p in &m.parts {
                if let Part::ToolResult(r) = p {
                    out.push(json!({
                        "role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content
                    }));
                }
            }
        }
        Role::Assistant => {
            let texts: Vec<&str> = m
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let calls: Vec<Value> = m
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::ToolCall(c) => Some(json!({
                        "id": c.call_id, "type": "function",
                        "function": { "name": c.name, "arguments": c.raw }
                    })),
                    _ => None,
                })
                .collect();
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            let content = if texts.is_empty() {
                Value::Null
            } else {
                json!(texts.concat())
            };
            msg.insert("content".into(), content);
            let reasoning: String = m
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Reasoning { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            // The runtime keeps reasoning on the messages of the running tool loop. A server
            // that wants it back refuses a tool-calling message without the field, so it is sent
            // (empty if the message has none) on every message that called tools.
            if let Some(field) = echo
                && (!reasoning.is_empty() || !calls.is_empty())
            {
                msg.insert(field.as_str().into(), json!(reasoning));
            }
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(Value::Object(msg));
        }
        Role::User | Role::System => {
            let role = if m.role == Role::User {
                "user"
            } else {
                "system"
            };
            let content = match m.parts.as_slice() {
                [Part::Text { text }] => json!(text),
                parts => Value::Array(
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            Part::Text { text } => Some(json!({ "type": "text", "text": text })),
                            Part::Image {
                                mime_type,
                                data,
                                url,
                            } => Some(json!({ "type": "image_url", "image_url": {
                                "url": image_url(mime_type, data.as_ref(), url.as_ref()) } })),
                            _ => None,
                        })
                        .collect(),
                ),
            };
            out.push(json!({ "role": role, "content": content }));
        }
    }
}
