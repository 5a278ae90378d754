//! Streams in the shapes real servers send, field for field, so the adapter is tested against
//! what it meets in the wild rather than against our own idea of a chunk.
//!
//! Each function returns the frames of one complete reply; wrap them with
//! [`crate::Reply::stream_exact`] (they already end with `[DONE]`). The contents are written for
//! these tests; the shapes (field names, nulls, where usage arrives, comments) follow each server.

use serde_json::{Value, json};

use crate::reply::Frame;

fn openai_chunk(delta: Value, finish: Option<&str>) -> Frame {
    Frame::Chunk(json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1_741_570_283,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }],
        "usage": null
    }))
}

/// OpenAI's own stream of a text answer then one tool call (`get_weather`, arguments split in
/// five fragments), with `stream_options.include_usage`: `usage: null` on every chunk and a last
/// chunk with `choices: []` and the usage (cached and reasoning details included).
///
/// Text: `Let me check.`; call id `call_DdmO9pD3xa9XTPNJ32zg2hcA`; arguments
/// `{"location":"Paris, France"}`; finish `tool_calls`; usage 21 in (5 cached), 18 out.
pub fn openai_text_and_tool_call() -> Vec<Frame> {
    let mut f = vec![
        openai_chunk(
            json!({ "role": "assistant", "content": "", "refusal": null }),
            None,
        ),
        openai_chunk(json!({ "content": "Let me" }), None),
        openai_chunk(json!({ "content": " check." }), None),
        openai_chunk(
            json!({ "tool_calls": [{ "index": 0, "id": "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "type": "function", "function": { "name": "get_weather", "arguments": "" } }] }),
            None,
        ),
    ];
    for piece in ["{\"", "location", "\":\"", "Paris, France", "\"}"] {
        f.push(openai_chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] }),
            None,
        ));
    }
    f.push(openai_chunk(json!({}), Some("tool_calls")));
    f.push(Frame::Chunk(json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1_741_570_283,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
        "choices": [],
        "usage": {
            "prompt_tokens": 21, "completion_tokens": 18, "total_tokens": 39,
            "prompt_tokens_details": { "cached_tokens": 5, "audio_tokens": 0 },
            "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0 }
        }
    })));
    f.push(Frame::Done);
    f
}

fn llama_chunk(delta: Value, finish: Option<&str>, extra: Option<(&str, Value)>) -> Frame {
    let mut c = json!({
        "choices": [{ "finish_reason": finish, "index": 0, "delta": delta }],
        "created": 1_732_000_000,
        "id": "chatcmpl-p2lVfQ2FK7Ir3yDiWqEy6lOt8UOpJZcC",
        "model": "gpt-3.5-turbo",
        "system_fingerprint": "b4273-dd8e7d4a",
        "object": "chat.completion.chunk"
    });
    if let Some((k, v)) = extra {
        c[k] = v;
    }
    Frame::Chunk(c)
}

/// llama.cpp's `llama-server` answering with a reasoning model and no reasoning format: the
/// thinking arrives inside `content` as a `<think>` block, the tags split across chunks; the last
/// chunk carries the finish reason, `usage` and `timings` together.
///
/// Reasoning: `The user greets me.`; text: `Hello there!`; finish `stop`; usage 12 in, 9 out.
pub fn llama_cpp_think_stream() -> Vec<Frame> {
    let mut f = vec![llama_chunk(
        json!({ "role": "assistant", "content": null }),
        None,
        None,
    )];
    for piece in [
        "<thi",
        "nk>",
        "The user",
        " greets me.",
        "</th",
        "ink>",
        "\n\n",
        "Hello",
        " there!",
    ] {
        f.push(llama_chunk(json!({ "content": piece }), None, None));
    }
    f.push(llama_chunk(
        json!({}),
        Some("stop"),
        Some((
            "usage",
            json!({ "completion_tokens": 9, "prompt_tokens": 12, "total_tokens": 21 }),
        )),
    ));
    if let Some(Frame::Chunk(last)) = f.last_mut() {
        last["timings"] = json!({
            "prompt_n": 12, "prompt_ms": 31.2, "prompt_per_token_ms": 2.6,
            "prompt_per_second": 384.6, "predicted_n": 9, "predicted_ms": 120.4,
            "predicted_per_token_ms": 13.4, "predicted_per_second": 74.7
        });
    }
    f.push(Frame::Done);
    f
}

/// llama.cpp streaming a tool call the way its OpenAI-compatible server does: the id, type and
/// name with empty arguments first, then argument fragments; finish `tool_calls`.
///
/// Call id `call_llama_0`, name `read_file`, arguments `{"path":"src/main.rs"}`.
pub fn llama_cpp_tool_call_stream() -> Vec<Frame> {
    let mut f = vec![llama_chunk(
        json!({ "role": "assistant", "content": null }),
        None,
        None,
    )];
    f.push(llama_chunk(
        json!({ "tool_calls": [{ "index": 0, "id": "call_llama_0", "type": "function",
            "function": { "name": "read_file", "arguments": "" } }] }),
        None,
        None,
    ));
    for piece in ["{\"path\":", "\"src/", "main.rs\"}"] {
        f.push(llama_chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] }),
            None,
            None,
        ));
    }
    f.push(llama_chunk(
        json!({}),
        Some("tool_calls"),
        Some((
            "usage",
            json!({ "completion_tokens": 14, "prompt_tokens": 40, "total_tokens": 54 }),
        )),
    ));
    f.push(Frame::Done);
    f
}

fn deepseek_chunk(delta: Value, finish: Option<&str>, usage: Option<Value>) -> Frame {
    let mut c = json!({
        "id": "1f6b9b36-5fa4-4c7b-9a3a-3c5b2d7d4b0e",
        "object": "chat.completion.chunk",
        "created": 1_738_000_000,
        "model": "deepseek-reasoner",
        "system_fingerprint": "fp_7e73fd9a08_prod0225",
        "choices": [{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]
    });
    if let Some(u) = usage {
        c["usage"] = u;
    }
    Frame::Chunk(c)
}

/// DeepSeek's reasoner: a keep-alive comment, `reasoning_content` deltas with `content: null`,
/// then `content` deltas with `reasoning_content: null`, and the usage (with DeepSeek's cache
/// counters and `reasoning_tokens`) inside the chunk that finishes.
///
/// Reasoning: `9.11 vs 9.9: compare tenths.`; text: `9.9 is larger.`; finish `stop`; usage 16 in
/// (0 cached), 30 out of which 21 reasoning.
pub fn deepseek_reasoning_stream() -> Vec<Frame> {
    let mut f = vec![
        Frame::raw(": keep-alive\n\n"),
        deepseek_chunk(
            json!({ "role": "assistant", "content": null, "reasoning_content": "" }),
            None,
            None,
        ),
    ];
    for piece in ["9.11 vs 9.9", ": compare", " tenths."] {
        f.push(deepseek_chunk(
            json!({ "content": null, "reasoning_content": piece }),
            None,
            None,
        ));
    }
    for piece in ["9.9 is", " larger."] {
        f.push(deepseek_chunk(
            json!({ "content": piece, "reasoning_content": null }),
            None,
            None,
        ));
    }
    f.push(deepseek_chunk(
        json!({ "content": "", "reasoning_content": null }),
        Some("stop"),
        Some(json!({
            "prompt_tokens": 16, "completion_tokens": 30, "total_tokens": 46,
            "prompt_tokens_details": { "cached_tokens": 0 },
            "completion_tokens_details": { "reasoning_tokens": 21 },
            "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 16
        })),
    ));
    f.push(Frame::Done);
    f
}

/// An OpenAI-shaped stream that breaks in the middle of a tool call's arguments: the call's
/// first fragments arrive, then the connection is cut before the arguments close.
pub fn cut_mid_tool_call() -> Vec<Frame> {
    vec![
        openai_chunk(json!({ "role": "assistant", "content": null }), None),
        openai_chunk(
            json!({ "tool_calls": [{ "index": 0, "id": "call_cut", "type": "function",
                "function": { "name": "write_file", "arguments": "" } }] }),
            None,
        ),
        openai_chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{\"path\":\"a.txt\",\"con" } }] }),
            None,
        ),
        Frame::Cut,
    ]
}
