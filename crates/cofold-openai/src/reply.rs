//! Reading a whole `chat.completion` answer, and the pieces the stream decoder shares with it:
//! finish reasons, usage and assembled tool calls.

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::id::new_id;
use cofold_agents::message::{Message, MessageSource, Part, Role, ToolCall};
use cofold_agents::model::{FinishReason, ModelReply, Usage};
use serde_json::Value;

use crate::dialect::ReasoningField;
use crate::think::split_think;

/// A tool call's `arguments` as text: a string as sent, an object or list (some servers send
/// the parsed arguments) serialized, anything else empty.
pub(crate) fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        Some(Value::String(s)) => s.clone(),
        Some(v @ (Value::Object(_) | Value::Array(_))) => v.to_string(),
        _ => String::new(),
    }
}

/// `finish_reason` as the runtime names it; tool calls always win.
pub(crate) fn finish_of(reason: Option<&str>, has_calls: bool) -> FinishReason {
    if has_calls {
        return FinishReason::ToolCalls;
    }
    match reason {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some("tool_calls") => FinishReason::ToolCalls,
        _ => FinishReason::Other,
    }
}

/// Usage from an OpenAI `usage` object; zeros when absent.
///
/// Besides OpenAI's own names, the cache counters servers report under their own names are read:
/// OpenRouter's `prompt_tokens_details.cache_write_tokens`, DeepSeek's `prompt_cache_hit_tokens`
/// (with `prompt_cache_miss_tokens` making up the prompt when `prompt_tokens` is missing),
/// Anthropic's `cache_read_input_tokens` / `cache_creation_input_tokens` as proxies pass them on,
/// and Moonshot's top-level `cached_tokens`. An optional counter is present only when some field
/// reported it; when several do, the largest wins, so a zeroed detail object that a server fills
/// by habit cannot hide the count it reports elsewhere.
pub(crate) fn usage_of(usage: Option<&Value>) -> Usage {
    let Some(u) = usage.filter(|u| u.is_object()) else {
        return Usage::default();
    };
    let n = |v: Option<&Value>| v.and_then(Value::as_u64);
    // Plain `get`s: `Value::pointer` allocates per path token, and this runs once per reply.
    let prompt_details = u.get("prompt_tokens_details");
    let detail = |key: &str| n(prompt_details.and_then(|d| d.get(key)));
    let largest = |values: &[Option<u64>]| values.iter().flatten().copied().max();
    let hit = n(u.get("prompt_cache_hit_tokens"));
    let input = n(u.get("prompt_tokens")).or_else(|| {
        let miss = n(u.get("prompt_cache_miss_tokens"))?;
        Some(hit.unwrap_or(0) + miss)
    });
    Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: n(u.get("completion_tokens")).unwrap_or(0),
        cache_read_tokens: largest(&[
            detail("cached_tokens"),
            hit,
            n(u.get("cache_read_input_tokens")),
            n(u.get("cached_tokens")),
        ]),
        cache_write_tokens: largest(&[
            detail("cache_write_tokens"),
            n(u.get("cache_creation_input_tokens")),
        ]),
        reasoning_tokens: n(u
            .get("completion_tokens_details")
            .and_then(|d| d.get("reasoning_tokens"))),
    }
}

/// A tool call from what the provider sent: the empty argument string parses as `{}`, arguments
/// that are not JSON keep `raw` and have no `input`, and a missing id is minted.
pub(crate) fn tool_call(id: Option<&str>, name: &str, arguments: &str) -> ToolCall {
    let call_id = match id {
        Some(i) if !i.is_empty() => i.to_owned(),
        _ => new_id(),
    };
    let input = if arguments.trim().is_empty() {
        Some(Value::Object(serde_json::Map::new()))
    } else {
        serde_json::from_str(arguments).ok()
    };
    ToolCall {
        call_id,
        name: name.to_owned(),
        input,
        raw: arguments.to_owned(),
    }
}

/// The assistant message of a reply: parts in the order reasoning, text, tool calls.
pub(crate) fn assistant(reasoning: Option<String>, text: String, calls: Vec<ToolCall>) -> Message {
    let mut parts = Vec::with_capacity(2 + calls.len());
    if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
        parts.push(Part::reasoning(r));
    }
    if !text.is_empty() {
        parts.push(Part::text(text));
    }
    parts.extend(calls.into_iter().map(Part::ToolCall));
    Message::new(Role::Assistant, MessageSource::Model, parts)
}

fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect(),
        _ => String::new(),
    }
}

/// The error object a server answered with instead of a completion, as a retryable failure
/// (the server broke; the request may still be good), keys masked.
fn reported_error(json: &Value, url: &str) -> Option<AgentError> {
    let err = json
        .get("error")
        .filter(|e| e.is_object() || e.is_string())?;
    if json.get("choices").is_some() {
        return None;
    }
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .unwrap_or("no message given");
    Some(
        AgentError::new(
            ErrorCode::Server,
            format!(
                "{url} reported an error: {}",
                crate::failure::mask_keys(message)
            ),
        )
        .with_retryable(true)
        .with_detail(Value::String(crate::failure::mask_keys(&json.to_string()))),
    )
}

/// The tool calls of a completion's message.
fn calls_of(message: &Value) -> Vec<ToolCall> {
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    tool_call(
                        c.get("id").and_then(Value::as_str),
                        c.pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                        &arguments_text(c.pointer("/function/arguments")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the body of a non-streaming answer from `url`, with the field its reasoning came in.
/// A body that is not JSON, an error object, or a completion without `choices[0].message` is a
/// retryable failure: the server broke, the request may still be good.
pub(crate) fn parse_completion(
    body: &str,
    url: &str,
) -> Result<(ModelReply, Option<ReasoningField>), AgentError> {
    let json: Value = serde_json::from_str(body).map_err(|_| {
        let excerpt: String = body.trim().chars().take(200).collect();
        AgentError::new(
            ErrorCode::InvalidResponse,
            format!("the answer from {url} is not JSON: {excerpt}"),
        )
        .with_retryable(true)
    })?;
    if let Some(err) = reported_error(&json, url) {
        return Err(err);
    }
    let Some(message) = json.pointer("/choices/0/message").filter(|m| m.is_object()) else {
        return Err(AgentError::new(
            ErrorCode::InvalidResponse,
            format!("the answer from {url} has no choices[0].message"),
        )
        .with_retryable(true)
        .with_detail(json));
    };
    let content = content_text(message.get("content"));
    let field = [ReasoningField::Reasoning, ReasoningField::ReasoningContent]
        .into_iter()
        .find_map(|f| {
            message
                .get(f.as_str())
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|r| (f, r))
        });
    let (reasoning, text) = match field {
        Some((_, r)) => (Some(r.to_owned()), content),
        None => split_think(&content),
    };
    let field = field.map(|(f, _)| f);
    let calls = calls_of(message);
    let finish = finish_of(
        json.pointer("/choices/0/finish_reason")
            .and_then(Value::as_str),
        !calls.is_empty(),
    );
    let usage = usage_of(json.get("usage"));
    let message = assistant(reasoning, text, calls);
    let reply = ModelReply {
        message,
        usage,
        finish,
        raw: Some(json),
    };
    Ok((reply, field))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn empty_arguments_parse_as_an_empty_object() {
        let c = tool_call(Some("c1"), "noop", "");
        assert_eq!(c.input, Some(json!({})));
        assert_eq!(c.raw, "");
        let bad = tool_call(None, "x", "{not json");
        assert_eq!(bad.input, None);
        assert_eq!(bad.call_id.len(), 36);
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(finish_of(Some("stop"), true), FinishReason::ToolCalls);
        assert_eq!(finish_of(Some("length"), false), FinishReason::Length);
        assert_eq!(
            finish_of(Some("content_filter"), false),
            FinishReason::ContentFilter
        );
        assert_eq!(finish_of(Some("eos"), false), FinishReason::Other);
        assert_eq!(finish_of(None, false), FinishReason::Other);
    }

    #[test]
    fn usage_optional_counters_only_when_reported() {
        let u = usage_of(Some(&json!({ "prompt_tokens": 5, "completion_tokens": 2,
            "prompt_tokens_details": { "cached_tokens": 3 } })));
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.reasoning_tokens
            ),
            (5, 2, Some(3), None)
        );
        assert_eq!(usage_of(None), Usage::default());
    }

    #[test]
    fn usage_reads_each_servers_cache_counters() {
        let openrouter = usage_of(Some(&json!({ "prompt_tokens": 194, "completion_tokens": 2,
            "prompt_tokens_details": { "cached_tokens": 0, "cache_write_tokens": 100 } })));
        assert_eq!(
            (openrouter.cache_read_tokens, openrouter.cache_write_tokens),
            (Some(0), Some(100))
        );
        let deepseek = usage_of(Some(&json!({ "prompt_tokens": 40, "completion_tokens": 5,
            "prompt_cache_hit_tokens": 32, "prompt_cache_miss_tokens": 8 })));
        assert_eq!(
            (
                deepseek.input_tokens,
                deepseek.cache_read_tokens,
                deepseek.cache_write_tokens
            ),
            (40, Some(32), None)
        );
        let deepseek_zeroed = usage_of(Some(&json!({ "prompt_tokens": 40,
            "prompt_tokens_details": { "cached_tokens": 0 }, "prompt_cache_hit_tokens": 32 })));
        assert_eq!(deepseek_zeroed.cache_read_tokens, Some(32));
        let no_prompt = usage_of(Some(&json!({ "completion_tokens": 1,
            "prompt_cache_hit_tokens": 3, "prompt_cache_miss_tokens": 4 })));
        assert_eq!(no_prompt.input_tokens, 7);
        let anthropic = usage_of(Some(&json!({ "prompt_tokens": 90, "completion_tokens": 1,
            "cache_read_input_tokens": 50, "cache_creation_input_tokens": 30 })));
        assert_eq!(
            (anthropic.cache_read_tokens, anthropic.cache_write_tokens),
            (Some(50), Some(30))
        );
        let moonshot = usage_of(Some(&json!({ "prompt_tokens": 9, "cached_tokens": 6 })));
        assert_eq!(moonshot.cache_read_tokens, Some(6));
    }
}
