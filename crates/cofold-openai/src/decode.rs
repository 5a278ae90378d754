//! Turning the SSE events of a streamed answer into [`ModelStreamEvent`]s and, at the end, the
//! whole [`ModelReply`].

use std::collections::BTreeMap;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{ModelReply, ModelStreamEvent};
use serde_json::Value;

use crate::reply::{assistant, finish_of, tool_call, usage_of};
use crate::sse::SseEvent;
use crate::think::{Piece, ThinkSplitter};

#[derive(Debug, Default)]
struct CallParts {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// The state of one streamed reply.
#[derive(Debug)]
pub struct StreamDecoder {
    url: String,
    splitter: Option<ThinkSplitter>,
    reasoning: String,
    text: String,
    calls: BTreeMap<u32, CallParts>,
    usage: Option<Value>,
    finish: Option<String>,
    chunks: Vec<Value>,
    done: bool,
}

fn push_piece(
    piece: Piece,
    reasoning: &mut String,
    text: &mut String,
    out: &mut impl FnMut(ModelStreamEvent),
) {
    match piece {
        Piece::Reasoning(t) => {
            reasoning.push_str(&t);
            out(ModelStreamEvent::ReasoningDelta { text: t });
        }
        Piece::Text(t) => {
            text.push_str(&t);
            out(ModelStreamEvent::TextDelta { text: t });
        }
    }
}

fn non_empty_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

impl StreamDecoder {
    /// A decoder for an answer from `url` (named in errors).
    pub fn new(url: &str) -> Self {
        StreamDecoder {
            url: url.to_owned(),
            splitter: Some(ThinkSplitter::new()),
            reasoning: String::new(),
            text: String::new(),
            calls: BTreeMap::new(),
            usage: None,
            finish: None,
            chunks: Vec::new(),
            done: false,
        }
    }

    /// Whether `[DONE]` arrived (later events are ignored).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one event, calling `out` for every delta it carries.
    pub fn event(
        &mut self,
        event: &SseEvent,
        out: &mut impl FnMut(ModelStreamEvent),
    ) -> Result<(), AgentError> {
        if self.done {
            return Ok(());
        }
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            let excerpt: String = data.chars().take(200).collect();
            AgentError::new(
                ErrorCode::InvalidResponse,
                format!(
                    "the stream from {} sent data that is not JSON ({e}): {excerpt}",
                    self.url
                ),
            )
        })?;
        if let Some(err) = chunk.get("error").filter(|e| e.is_object())
            && chunk.get("choices").is_none()
        {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message given");
            return Err(AgentError::new(
                ErrorCode::Server,
                format!("{} reported an error: {message}", self.url),
            )
            .with_detail(chunk.clone()));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        // Plain `get`s: `Value::pointer` allocates a string for every path token.
        if let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
        {
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(f.to_owned());
            }
            // Moonshot puts the last chunk's usage inside the choice; a top-level one wins.
            if chunk.get("usage").is_none_or(|u| !u.is_object())
                && let Some(u) = choice.get("usage").filter(|u| u.is_object())
            {
                self.usage = Some(u.clone());
            }
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, out);
            }
        }
        self.chunks.push(chunk);
        Ok(())
    }

    fn delta(&mut self, delta: &Value, out: &mut impl FnMut(ModelStreamEvent)) {
        let (reasoning, text) = (&mut self.reasoning, &mut self.text);
        if let Some(r) =
            non_empty_str(delta, "reasoning").or_else(|| non_empty_str(delta, "reasoning_content"))
        {
            if let Some(mut s) = self.splitter.take() {
                s.turn_off(&mut |p| push_piece(p, reasoning, text, out));
            }
            push_piece(Piece::Reasoning(r.to_owned()), reasoning, text, out);
        }
        if let Some(c) = non_empty_str(delta, "content") {
            match &mut self.splitter {
                Some(s) => s.push(c, &mut |p| push_piece(p, reasoning, text, out)),
                None => push_piece(Piece::Text(c.to_owned()), reasoning, text, out),
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(position as u32);
                let id = non_empty_str(call, "id").map(str::to_owned);
                let function = call.get("function");
                let name = function
                    .and_then(|f| non_empty_str(f, "name"))
                    .map(str::to_owned);
                let arguments = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let acc = self.calls.entry(index).or_default();
                if acc.id.is_none() {
                    acc.id.clone_from(&id);
                }
                if acc.name.is_none() {
                    acc.name.clone_from(&name);
                }
                acc.arguments.push_str(&arguments);
                out(ModelStreamEvent::ToolCallDelta {
                    index,
                    call_id: id,
                    name,
                    arguments,
                });
            }
        }
    }

    /// Ends the reply: flushes what the think splitter holds and assembles the whole reply.
    pub fn finish(mut self, out: &mut impl FnMut(ModelStreamEvent)) -> ModelReply {
        if let Some(s) = self.splitter.take() {
            let (reasoning, text) = (&mut self.reasoning, &mut self.text);
            s.finish(&mut |p| push_piece(p, reasoning, text, out));
        }
        let calls: Vec<_> = self
            .calls
            .values()
            .map(|c| {
                tool_call(
                    c.id.as_deref(),
                    c.name.as_deref().unwrap_or(""),
                    &c.arguments,
                )
            })
            .collect();
        let finish = finish_of(self.finish.as_deref(), !calls.is_empty());
        let usage = usage_of(self.usage.as_ref());
        ModelReply {
            message: assistant(Some(self.reasoning), self.text, calls),
            usage,
            finish,
            raw: Some(Value::Array(self.chunks)),
        }
    }
}
