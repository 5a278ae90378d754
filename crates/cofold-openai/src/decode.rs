//! Turning the SSE events of a streamed answer into [`ModelStreamEvent`]s and, at the end, the
//! whole [`ModelReply`].

use std::collections::{BTreeMap, HashMap};

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{ModelReply, ModelStreamEvent};
use serde_json::Value;

use crate::dialect::ReasoningField;
use crate::reply::{arguments_text, assistant, finish_of, tool_call, usage_of};
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
    /// Calls by the index they are reported under: the server's, unless repair moved one.
    calls: BTreeMap<u32, CallParts>,
    /// Server indexes whose calls were moved to another index by repair.
    moved: HashMap<u64, u32>,
    /// The index of the last fragment, which an index-less, id-less fragment continues.
    last: Option<u32>,
    repair_index: bool,
    reasoning_field: Option<ReasoningField>,
    usage: Option<Value>,
    finish: Option<String>,
    /// How many chunks arrived.
    chunk_count: usize,
    /// Every chunk's data as it came, for the reply's `raw`; `None` when no one will read it.
    /// Kept as text: a parsed chunk weighs twenty times its text, and a long answer streams
    /// thousands of them (a 2,000-chunk answer keeps about 400 KB here until it ends).
    chunks: Option<Vec<Box<str>>>,
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
            moved: HashMap::new(),
            last: None,
            repair_index: true,
            reasoning_field: None,
            usage: None,
            finish: None,
            chunk_count: 0,
            chunks: Some(Vec::new()),
            done: false,
        }
    }

    /// The same decoder without tool-call index repair: fragments are grouped by their `index`
    /// alone, even when a new `id` arrives under an index already in use.
    pub fn without_index_repair(mut self) -> Self {
        self.repair_index = false;
        self
    }

    /// The same decoder keeping no chunk for the reply's `raw`, which is then `None`.
    pub fn without_raw(mut self) -> Self {
        self.chunks = None;
        self
    }

    /// The field reasoning arrived in, when it came in one of its own.
    pub fn reasoning_field(&self) -> Option<ReasoningField> {
        self.reasoning_field
    }

    /// Whether any chunk arrived at all.
    pub fn saw_chunks(&self) -> bool {
        self.chunk_count > 0 || self.done
    }

    /// Whether the reply is whole: a finish reason arrived (and `[DONE]`, when `require_done`).
    /// The error names what is missing; it is retryable, as a stream cut short usually is.
    pub fn check_whole(&self, require_done: bool) -> Result<(), AgentError> {
        let missing = if self.finish.is_none() {
            "no finish reason"
        } else if require_done && !self.done {
            "no [DONE]"
        } else {
            return Ok(());
        };
        let got = if self.chunk_count == 0 {
            "before any chunk".to_owned()
        } else {
            format!("after {} chunks", self.chunk_count)
        };
        Err(AgentError::new(
            ErrorCode::Network,
            format!(
                "the answer from {} ended {got} with {missing}: it was cut short",
                self.url
            ),
        )
        .with_retryable(true))
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
        if let Some(plain) = crate::plain_chunk::read(data) {
            if let Some(f) = plain.finish {
                self.finish = Some(f.into_owned());
            }
            let reasoning = plain.reasoning.as_ref().map(|(f, r)| (*f, r.as_ref()));
            self.fragments(reasoning, plain.content.as_deref(), out);
            self.keep_chunk(data);
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
        // OpenRouter reports a failure after tokens were sent as a chunk with `error` beside a
        // choice whose finish reason is `error`: the reply is broken, whatever came before.
        let finished_with_error = chunk
            .get("choices")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
            == Some("error");
        let err = chunk
            .get("error")
            .filter(|e| e.is_object() || e.is_string());
        if err.is_some() || finished_with_error {
            let message = err
                .and_then(|e| e.get("message").and_then(Value::as_str).or(e.as_str()))
                .unwrap_or("no message given");
            return Err(AgentError::new(
                ErrorCode::Server,
                format!(
                    "{} reported an error: {}",
                    self.url,
                    crate::failure::mask_keys(message)
                ),
            )
            .with_retryable(true)
            .with_detail(Value::String(crate::failure::mask_keys(&chunk.to_string()))));
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
        self.keep_chunk(data);
        Ok(())
    }

    /// Counts a decoded chunk, and keeps its text when the reply's `raw` is wanted.
    fn keep_chunk(&mut self, data: &str) {
        self.chunk_count += 1;
        if let Some(chunks) = &mut self.chunks {
            chunks.push(data.into());
        }
    }

    fn delta(&mut self, delta: &Value, out: &mut impl FnMut(ModelStreamEvent)) {
        let field = [ReasoningField::Reasoning, ReasoningField::ReasoningContent]
            .into_iter()
            .find_map(|f| non_empty_str(delta, f.as_str()).map(|r| (f, r)));
        self.fragments(field, non_empty_str(delta, "content"), out);
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (position, call) in calls.iter().enumerate() {
                self.call_fragment(position, call, out);
            }
        }
    }

    /// A delta's reasoning (and the field it came in) and text, both non-empty when given.
    fn fragments(
        &mut self,
        field: Option<(ReasoningField, &str)>,
        content: Option<&str>,
        out: &mut impl FnMut(ModelStreamEvent),
    ) {
        let (reasoning, text) = (&mut self.reasoning, &mut self.text);
        if let Some((f, r)) = field {
            self.reasoning_field = Some(f);
            if let Some(mut s) = self.splitter.take() {
                s.turn_off(&mut |p| push_piece(p, reasoning, text, out));
            }
            push_piece(Piece::Reasoning(r.to_owned()), reasoning, text, out);
        }
        if let Some(c) = content {
            match &mut self.splitter {
                Some(s) => s.push(c, &mut |p| push_piece(p, reasoning, text, out)),
                None => push_piece(Piece::Text(c.to_owned()), reasoning, text, out),
            }
        }
    }

    /// The index a fragment belongs to. With repair on, an `id` already seen goes to its own
    /// call and a new `id` starts a call whatever its `index` (Gemini repeats or omits indexes
    /// for parallel calls): it keeps the server's index when that is free, else takes the next
    /// free one, and later id-less fragments under the server's index follow it there. A fragment
    /// with neither `id` nor `index` continues the last call.
    fn slot(&mut self, position: usize, call: &Value, id: Option<&str>) -> u32 {
        let index = call.get("index").and_then(Value::as_u64);
        let as_key = |i: u64| u32::try_from(i).unwrap_or(u32::MAX);
        if self.repair_index {
            if let Some(id) = id {
                if let Some((&k, _)) = self.calls.iter().find(|(_, c)| c.id.as_deref() == Some(id))
                {
                    return k;
                }
                let wanted = index.map(|i| self.moved.get(&i).copied().unwrap_or(as_key(i)));
                let key = match wanted {
                    Some(k) if self.calls.get(&k).is_none_or(|c| c.id.is_none()) => k,
                    _ => self
                        .calls
                        .keys()
                        .next_back()
                        .map_or(0, |k| k.saturating_add(1)),
                };
                if let Some(i) = index {
                    self.moved.insert(i, key);
                }
                return key;
            }
            if index.is_none()
                && let Some(last) = self.last
            {
                return last;
            }
        }
        let i = index.unwrap_or(position as u64);
        self.moved.get(&i).copied().unwrap_or(as_key(i))
    }

    fn call_fragment(
        &mut self,
        position: usize,
        call: &Value,
        out: &mut impl FnMut(ModelStreamEvent),
    ) {
        let id = non_empty_str(call, "id").map(str::to_owned);
        let slot = self.slot(position, call, id.as_deref());
        self.last = Some(slot);
        let function = call.get("function");
        let name = function
            .and_then(|f| non_empty_str(f, "name"))
            .map(str::to_owned);
        let arguments = arguments_text(function.and_then(|f| f.get("arguments")));
        let acc = self.calls.entry(slot).or_default();
        if acc.id.is_none() {
            acc.id.clone_from(&id);
        }
        if acc.name.is_none() {
            acc.name.clone_from(&name);
        }
        acc.arguments.push_str(&arguments);
        out(ModelStreamEvent::ToolCallDelta {
            index: slot,
            call_id: id,
            name,
            arguments,
        });
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
            raw: self.chunks.map(|chunks| {
                Value::Array(
                    chunks
                        .into_iter()
                        .map(|c| Value::String(c.into()))
                        .collect(),
                )
            }),
        }
    }
}
