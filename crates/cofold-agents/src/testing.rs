//! Test fixtures (feature `testing`): [`FakeModel`], a model adapter that answers from a script.

use crate::error::{AgentError, ErrorCode};
use crate::id::new_id;
use crate::message::{Message, MessageSource, Part, Role, ToolCall};
use crate::model::{
    FinishReason, ModelAdapter, ModelFeatures, ModelPricing, ModelReply, ModelRequest,
    ModelStreamEvent, Usage,
};
use crate::tool::AbortSignal;
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// One call of a scripted tool-call step.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCall {
    /// The tool name.
    pub name: String,
    /// The arguments; `raw` is their serialization.
    pub input: Value,
    /// The call id; minted when absent.
    pub call_id: Option<String>,
}

impl FakeCall {
    /// A call with a minted id.
    pub fn new(name: impl Into<String>, input: Value) -> FakeCall {
        FakeCall {
            name: name.into(),
            input,
            call_id: None,
        }
    }

    /// The same call with a fixed id.
    pub fn with_id(mut self, call_id: impl Into<String>) -> FakeCall {
        self.call_id = Some(call_id.into());
        self
    }
}

/// What a scripted step answers.
#[derive(Debug, Clone, PartialEq)]
pub enum FakeStepKind {
    /// A text reply.
    Text {
        /// The reply text.
        text: String,
        /// Reasoning before it.
        reasoning: Option<String>,
        /// Usage (default 1 in, 1 out).
        usage: Option<Usage>,
        /// Streamed text fragments (default: one per word, trailing spaces kept).
        chunks: Option<Vec<String>>,
        /// When streaming, end the stream before `Done`.
        interrupt: bool,
    },
    /// A reply calling tools.
    ToolCalls {
        /// The calls.
        calls: Vec<FakeCall>,
        /// Text before the calls.
        text: Option<String>,
        /// Reasoning before the text.
        reasoning: Option<String>,
        /// Usage (default 1 in, 1 out).
        usage: Option<Usage>,
    },
    /// One call whose argument string may not be JSON.
    RawToolCall {
        /// The tool name.
        name: String,
        /// The exact argument string.
        raw: String,
        /// The call id; minted when absent.
        call_id: Option<String>,
    },
    /// A model error.
    Error {
        /// The error code.
        code: ErrorCode,
        /// The message (default `fake model error`).
        message: Option<String>,
        /// Whether it is retryable.
        retryable: bool,
    },
    /// Never answers; fails `aborted` once the request's signal fires.
    Block,
}

/// A scripted step, optionally held in flight by a gate the test opens.
#[derive(Debug, Clone)]
pub struct FakeStep {
    /// What it answers.
    pub kind: FakeStepKind,
    /// Held until notified (`notify_one` before or during the request both work).
    pub gate: Option<Arc<Notify>>,
}

impl FakeStep {
    /// A step of any kind.
    pub fn new(kind: FakeStepKind) -> FakeStep {
        FakeStep { kind, gate: None }
    }

    /// A text reply.
    pub fn text(text: impl Into<String>) -> FakeStep {
        FakeStep::new(FakeStepKind::Text {
            text: text.into(),
            reasoning: None,
            usage: None,
            chunks: None,
            interrupt: false,
        })
    }

    /// A reply with one tool call (minted id).
    pub fn tool_call(name: impl Into<String>, input: Value) -> FakeStep {
        FakeStep::tool_calls(vec![FakeCall::new(name, input)])
    }

    /// A reply with several tool calls.
    pub fn tool_calls(calls: Vec<FakeCall>) -> FakeStep {
        FakeStep::new(FakeStepKind::ToolCalls {
            calls,
            text: None,
            reasoning: None,
            usage: None,
        })
    }

    /// A reply with one call whose arguments are `raw` as written.
    pub fn raw_tool_call(name: impl Into<String>, raw: impl Into<String>) -> FakeStep {
        FakeStep::new(FakeStepKind::RawToolCall {
            name: name.into(),
            raw: raw.into(),
            call_id: None,
        })
    }

    /// A model error.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> FakeStep {
        FakeStep::new(FakeStepKind::Error {
            code,
            message: Some(message.into()),
            retryable: false,
        })
    }

    /// A step that never answers.
    pub fn block() -> FakeStep {
        FakeStep::new(FakeStepKind::Block)
    }

    /// The same step held until `gate` is notified.
    pub fn gated(mut self, gate: Arc<Notify>) -> FakeStep {
        self.gate = Some(gate);
        self
    }

    /// The same step reporting this usage (text and tool-call steps).
    pub fn with_usage(mut self, value: Usage) -> FakeStep {
        match &mut self.kind {
            FakeStepKind::Text { usage, .. } | FakeStepKind::ToolCalls { usage, .. } => {
                *usage = Some(value)
            }
            _ => {}
        }
        self
    }

    /// The same step with reasoning (text and tool-call steps).
    pub fn with_reasoning(mut self, value: impl Into<String>) -> FakeStep {
        match &mut self.kind {
            FakeStepKind::Text { reasoning, .. } | FakeStepKind::ToolCalls { reasoning, .. } => {
                *reasoning = Some(value.into())
            }
            _ => {}
        }
        self
    }

    /// The same step with text (tool-call steps; replaces a text step's text).
    pub fn with_text(mut self, value: impl Into<String>) -> FakeStep {
        match &mut self.kind {
            FakeStepKind::Text { text, .. } => *text = value.into(),
            FakeStepKind::ToolCalls { text, .. } => *text = Some(value.into()),
            _ => {}
        }
        self
    }

    /// The same text step streamed in these fragments.
    pub fn with_chunks(mut self, value: Vec<String>) -> FakeStep {
        if let FakeStepKind::Text { chunks, .. } = &mut self.kind {
            *chunks = Some(value);
        }
        self
    }

    /// The same text step with its stream ending before `Done`.
    pub fn interrupted(mut self) -> FakeStep {
        if let FakeStepKind::Text { interrupt, .. } = &mut self.kind {
            *interrupt = true;
        }
        self
    }

    /// The same error step marked retryable.
    pub fn retryable(mut self) -> FakeStep {
        if let FakeStepKind::Error { retryable, .. } = &mut self.kind {
            *retryable = true;
        }
        self
    }
}

/// Options of a [`FakeModel`].
#[derive(Debug, Clone, Default)]
pub struct FakeOptions {
    /// The steps, answered in order.
    pub script: Vec<FakeStep>,
    /// Whether `stream` returns a stream (and `features().streaming` is on).
    pub stream: bool,
    /// Features (default: tools, images and reasoning on; streaming as `stream`).
    pub features: Option<ModelFeatures>,
    /// Prices (default none).
    pub pricing: Option<ModelPricing>,
    /// The model id (default `fake-model`).
    pub model_id: Option<String>,
}

struct Inner {
    id: String,
    model_id: String,
    features: ModelFeatures,
    pricing: Option<ModelPricing>,
    stream: bool,
    script: Mutex<VecDeque<FakeStep>>,
    requests: Mutex<Vec<ModelRequest>>,
}

/// A model adapter answering from a script; clones share the script and the recorded requests.
#[derive(Clone)]
pub struct FakeModel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeModel")
            .field("model_id", &self.inner.model_id)
            .field("remaining", &self.remaining())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide the script from the others.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn aborted() -> AgentError {
    AgentError::new(ErrorCode::Aborted, "the model request was aborted")
}

impl FakeModel {
    /// A non-streaming fake model answering `script`.
    pub fn new(script: Vec<FakeStep>) -> FakeModel {
        FakeModel::with_options(FakeOptions {
            script,
            ..FakeOptions::default()
        })
    }

    /// A streaming fake model answering `script`.
    pub fn streaming(script: Vec<FakeStep>) -> FakeModel {
        FakeModel::with_options(FakeOptions {
            script,
            stream: true,
            ..FakeOptions::default()
        })
    }

    /// A fake model with every option.
    pub fn with_options(options: FakeOptions) -> FakeModel {
        let model_id = options.model_id.unwrap_or_else(|| "fake-model".to_owned());
        let features = options.features.unwrap_or(ModelFeatures {
            tools: true,
            streaming: options.stream,
            images: true,
            structured_output: false,
            reasoning: true,
        });
        FakeModel {
            inner: Arc::new(Inner {
                id: format!("fake:{model_id}"),
                model_id,
                features,
                pricing: options.pricing,
                stream: options.stream,
                script: Mutex::new(options.script.into()),
                requests: Mutex::new(Vec::new()),
            }),
        }
    }

    /// This model as the adapter an agent takes.
    pub fn adapter(&self) -> Arc<dyn ModelAdapter> {
        Arc::new(self.clone())
    }

    /// Adds steps at the end of the script.
    pub fn push(&self, steps: impl IntoIterator<Item = FakeStep>) {
        lock(&self.inner.script).extend(steps);
    }

    /// How many scripted steps are left.
    pub fn remaining(&self) -> usize {
        lock(&self.inner.script).len()
    }

    /// Every request received so far (without their signals), in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.inner.requests).clone()
    }

    /// Records the request and takes the next step (or says why there is none).
    fn begin(&self, request: &ModelRequest) -> Result<FakeStep, AgentError> {
        let mut recorded = request.clone();
        recorded.signal = AbortSignal::never();
        lock(&self.inner.requests).push(recorded);
        if request.signal.is_aborted() {
            return Err(aborted());
        }
        lock(&self.inner.script).pop_front().ok_or_else(|| {
            AgentError::new(ErrorCode::InvalidResponse, "fake model script exhausted")
        })
    }
}

/// Waits for the step's gate, then plays it; fails `aborted` when the signal fires first.
async fn play(step: FakeStep, signal: AbortSignal) -> Result<ModelReply, AgentError> {
    if let Some(gate) = &step.gate {
        tokio::select! {
            _ = gate.notified() => {}
            _ = signal.cancelled() => return Err(aborted()),
        }
    }
    let one_one = Usage::new(1, 1);
    let reply = |parts: Vec<Part>, usage: Option<Usage>, finish| ModelReply {
        message: Message::new(Role::Assistant, MessageSource::Model, parts),
        usage: usage.unwrap_or(one_one),
        finish,
        raw: None,
    };
    match step.kind {
        FakeStepKind::Text {
            text,
            reasoning,
            usage,
            ..
        } => {
            let mut parts: Vec<Part> = reasoning.into_iter().map(Part::reasoning).collect();
            parts.push(Part::text(text));
            Ok(reply(parts, usage, FinishReason::Stop))
        }
        FakeStepKind::ToolCalls {
            calls,
            text,
            reasoning,
            usage,
        } => {
            let mut parts: Vec<Part> = reasoning.into_iter().map(Part::reasoning).collect();
            parts.extend(text.map(Part::text));
            for call in calls {
                let id = call.call_id.unwrap_or_else(new_id);
                parts.push(Part::ToolCall(ToolCall::from_input(
                    id, call.name, call.input,
                )));
            }
            Ok(reply(parts, usage, FinishReason::ToolCalls))
        }
        FakeStepKind::RawToolCall { name, raw, call_id } => {
            let call = ToolCall::from_raw(call_id.unwrap_or_else(new_id), name, raw);
            Ok(reply(
                vec![Part::ToolCall(call)],
                None,
                FinishReason::ToolCalls,
            ))
        }
        FakeStepKind::Error {
            code,
            message,
            retryable,
        } => Err(AgentError::new(
            code,
            message.unwrap_or_else(|| "fake model error".to_owned()),
        )
        .with_retryable(retryable)),
        FakeStepKind::Block => {
            signal.cancelled().await;
            Err(aborted())
        }
    }
}

/// Splits text into words, each keeping the spaces after it.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.chars() {
        if c == ' ' {
            in_space = true;
        } else if in_space {
            out.push(std::mem::take(&mut current));
            in_space = false;
        }
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[async_trait]
impl ModelAdapter for FakeModel {
    fn id(&self) -> &str {
        &self.inner.id
    }

    fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    fn features(&self) -> ModelFeatures {
        self.inner.features
    }

    fn pricing(&self) -> Option<ModelPricing> {
        self.inner.pricing.clone()
    }

    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, AgentError> {
        let step = self.begin(&request)?;
        play(step, request.signal).await
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Option<BoxStream<'static, Result<ModelStreamEvent, AgentError>>> {
        if !self.inner.stream {
            return None;
        }
        let step = self.begin(&request);
        let signal = request.signal;
        let events = async move {
            let step = match step {
                Ok(step) => step,
                Err(error) => return vec![Err(error)],
            };
            let (deltas, interrupt) = match &step.kind {
                FakeStepKind::Text {
                    text,
                    reasoning,
                    chunks,
                    interrupt,
                    ..
                } => {
                    let mut deltas: Vec<ModelStreamEvent> = reasoning
                        .iter()
                        .map(|r| ModelStreamEvent::ReasoningDelta { text: r.clone() })
                        .collect();
                    let pieces = chunks.clone().unwrap_or_else(|| words(text));
                    deltas.extend(
                        pieces
                            .into_iter()
                            .map(|text| ModelStreamEvent::TextDelta { text }),
                    );
                    (deltas, *interrupt)
                }
                _ => (Vec::new(), false),
            };
            match play(step, signal).await {
                Err(error) => vec![Err(error)],
                Ok(reply) => {
                    let mut out: Vec<_> = deltas.into_iter().map(Ok).collect();
                    if !interrupt {
                        out.push(Ok(ModelStreamEvent::Done { reply }));
                    }
                    out
                }
            }
        };
        Some(
            futures::stream::once(events)
                .flat_map(futures::stream::iter)
                .boxed(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn words_keep_their_trailing_spaces() {
        assert_eq!(words("hello big  world"), ["hello ", "big  ", "world"]);
        assert_eq!(words("one"), ["one"]);
        assert_eq!(words("end "), ["end "]);
        assert!(words("").is_empty());
    }
}
