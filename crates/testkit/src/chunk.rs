//! Builders for OpenAI-shaped JSON: stream chunks (`chat.completion.chunk`), a whole
//! `chat.completion`, and `/models` entries.
//!
//! Every stream chunk carries `id: "chatcmpl-testkit"`, `object: "chat.completion.chunk"`,
//! `created: 1700000000` and `model: "testkit-model"`, with one choice at index 0 unless said
//! otherwise. Use [`with_choice`] or plain `serde_json::json!` for other shapes.

use serde_json::{Value, json};

/// The `id` every chunk and completion built here carries.
pub const CHUNK_ID: &str = "chatcmpl-testkit";
/// The `model` every chunk and completion built here carries.
pub const MODEL: &str = "testkit-model";

/// A chunk whose single choice has this `delta` and `finish_reason`.
pub fn with_choice(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }]
    })
}

/// The first chunk most servers send: `delta: { role: "assistant", content: "" }`.
pub fn role() -> Value {
    with_choice(json!({ "role": "assistant", "content": "" }), None)
}

/// A text delta (`delta.content`).
pub fn text(text: &str) -> Value {
    with_choice(json!({ "content": text }), None)
}

/// A reasoning delta in DeepSeek's, vLLM's and LM Studio's field, `delta.reasoning_content`.
pub fn reasoning_content(text: &str) -> Value {
    with_choice(json!({ "reasoning_content": text }), None)
}

/// A reasoning delta in OpenRouter's field, `delta.reasoning`.
pub fn reasoning(text: &str) -> Value {
    with_choice(json!({ "reasoning": text }), None)
}

/// One tool-call fragment at `index`; `id` and `name` are usually sent on the first fragment
/// only, `arguments` is a piece of the JSON argument string.
pub fn tool_call(index: u32, id: Option<&str>, name: Option<&str>, arguments: &str) -> Value {
    let mut call = json!({ "index": index });
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    let mut function = json!({ "arguments": arguments });
    if let Some(name) = name {
        function["name"] = json!(name);
    }
    call["function"] = function;
    with_choice(json!({ "tool_calls": [call] }), None)
}

/// A tool call streamed in fragments: the first carries the id and name, each argument piece
/// follows in its own chunk. Returns one chunk per piece (at least one).
pub fn tool_call_split(index: u32, id: &str, name: &str, argument_pieces: &[&str]) -> Vec<Value> {
    let mut out = Vec::with_capacity(argument_pieces.len().max(1));
    let first = argument_pieces.first().copied().unwrap_or("");
    out.push(tool_call(index, Some(id), Some(name), first));
    for piece in argument_pieces.iter().skip(1) {
        out.push(tool_call(index, None, None, piece));
    }
    out
}

/// The chunk that ends a choice: empty delta and this `finish_reason`.
pub fn finish(reason: &str) -> Value {
    with_choice(json!({}), Some(reason))
}

/// The usage chunk sent with `stream_options.include_usage`: no choices, just `usage`.
pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    usage_value(json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens
    }))
}

/// A usage chunk carrying an arbitrary `usage` object (cached or reasoning token details).
pub fn usage_value(usage: Value) -> Value {
    json!({
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [],
        "usage": usage
    })
}

/// A mid-stream error chunk as OpenRouter sends one: a top-level `error` and no `choices`.
pub fn error(message: &str) -> Value {
    json!({ "id": CHUNK_ID, "error": { "message": message, "code": 502 } })
}

/// A whole non-streaming `chat.completion` with this `message` and `finish_reason`, usage 10 + 1.
pub fn completion(message: Value, finish_reason: &str) -> Value {
    json!({
        "id": CHUNK_ID,
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish_reason }],
        "usage": { "prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11 }
    })
}

/// A `/models` entry with just an id, as most local servers list models.
pub fn model_entry(id: &str) -> Value {
    json!({ "id": id, "object": "model", "created": 1_700_000_000, "owned_by": "testkit" })
}

/// Cuts `text` into pieces of at most `size` characters (never splitting a character).
pub fn pieces(text: &str, size: usize) -> Vec<String> {
    let size = size.max(1);
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_tool_call_puts_id_and_name_on_the_first_fragment_only() {
        let chunks = tool_call_split(1, "call_1", "echo", &["{\"a\"", ":1}"]);
        assert_eq!(chunks.len(), 2);
        let first = &chunks[0]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(first["id"], "call_1");
        assert_eq!(first["function"]["name"], "echo");
        let second = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
        assert!(second.get("id").is_none());
        assert!(second["function"].get("name").is_none());
        assert_eq!(second["function"]["arguments"], ":1}");
    }

    #[test]
    fn pieces_keep_characters_whole() {
        assert_eq!(pieces("héllo", 2), vec!["hé", "ll", "o"]);
        assert!(pieces("", 3).is_empty());
    }
}
