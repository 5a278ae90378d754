//! The streamed reply: a pull-driven stream that sends the request on first poll, then reads
//! the body read by read, so dropping the stream drops the body and releases the connection.
//!
//! An attempt that fails (no connection, a limit expired, an error status, a body cut short or
//! without a finish reason) is tried again within the retry policy. What the consumer was already
//! given is never given twice: a retried attempt's deltas are compared with what was passed on,
//! the part already passed on is held back, and only what goes beyond it is passed on. When the
//! retry answers differently from what was already shown, the stream ends with an error instead,
//! so what a client saw and what is stored can never disagree.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::message::Part;
use cofold_agents::model::{ModelReply, ModelStreamEvent};
use cofold_agents::tool::AbortSignal;
use futures::stream::{BoxStream, StreamExt};

use crate::body::{BodyClock, next_piece, read_whole};
use crate::decode::StreamDecoder;
use crate::failure::Failure;
use crate::http::Endpoint;
use crate::reply::parse_completion;
use crate::retry::Tries;
use crate::sse::{SseEvent, SseParser};

type Item = Result<ModelStreamEvent, AgentError>;

/// The two forms of one request: streamed, and whole for servers that cannot stream it. Both
/// are kept as the bytes sent, for retries: as JSON trees they weighed several times as much,
/// for as long as the answer streamed.
pub(crate) struct Bodies {
    pub streamed: Bytes,
    pub whole: Bytes,
    pub offers_tools: bool,
}

enum Phase {
    Start,
    Reading {
        body: BoxStream<'static, reqwest::Result<Bytes>>,
        clock: BodyClock,
        parser: SseParser,
        decoder: Box<StreamDecoder>,
    },
    Finished,
}

/// Text passed on so far under one key (the reply text, the reasoning, or one call's
/// arguments), and how far the current attempt has come along it.
#[derive(Default)]
struct Track {
    shown: String,
    this_attempt: usize,
}

impl Track {
    /// Adds an attempt's fragment; returns the part of it not passed on yet, or `Err` when the
    /// attempt contradicts what was passed on. Only the bytes that overlap what was shown are
    /// compared, so a first attempt costs nothing beyond the copy.
    fn pass(&mut self, fragment: &str) -> Result<Option<String>, ()> {
        let before = self.this_attempt;
        self.this_attempt += fragment.len();
        if before >= self.shown.len() {
            self.shown.push_str(fragment);
            return Ok((!fragment.is_empty()).then(|| fragment.to_owned()));
        }
        let overlap_end = self.shown.len().min(self.this_attempt);
        let k = overlap_end - before;
        if self.shown.as_bytes()[before..overlap_end] != fragment.as_bytes()[..k] {
            return Err(());
        }
        if self.this_attempt <= self.shown.len() {
            return Ok(None);
        }
        // Equal bytes up to `k` end on the same character boundary as what was shown.
        let tail = fragment.get(k..).ok_or(())?.to_owned();
        self.shown.push_str(&tail);
        Ok(Some(tail))
    }

    /// Whether the attempt ended short of what was passed on.
    fn fell_short(&self) -> bool {
        self.this_attempt < self.shown.len()
    }
}

/// What was passed on, per key.
#[derive(Default)]
struct Shown {
    text: Track,
    reasoning: Track,
    calls: Vec<(Track, bool)>,
}

impl Shown {
    fn new_attempt(&mut self) {
        self.text.this_attempt = 0;
        self.reasoning.this_attempt = 0;
        for (c, _) in &mut self.calls {
            c.this_attempt = 0;
        }
    }

    /// The event to pass on for an attempt's event, if any.
    fn filter(&mut self, event: ModelStreamEvent) -> Result<Option<ModelStreamEvent>, ()> {
        Ok(match event {
            ModelStreamEvent::TextDelta { text } => self
                .text
                .pass(&text)?
                .map(|text| ModelStreamEvent::TextDelta { text }),
            ModelStreamEvent::ReasoningDelta { text } => self
                .reasoning
                .pass(&text)?
                .map(|text| ModelStreamEvent::ReasoningDelta { text }),
            ModelStreamEvent::ToolCallDelta {
                index,
                call_id,
                name,
                arguments,
            } => {
                let i = index as usize;
                while self.calls.len() <= i {
                    self.calls.push((Track::default(), false));
                }
                let (track, introduced) = &mut self.calls[i];
                let tail = track.pass(&arguments)?;
                let introduce = !*introduced && (call_id.is_some() || name.is_some());
                if tail.is_none() && !introduce {
                    None
                } else {
                    *introduced |= introduce;
                    Some(ModelStreamEvent::ToolCallDelta {
                        index,
                        call_id: call_id.filter(|_| introduce),
                        name: name.filter(|_| introduce),
                        arguments: tail.unwrap_or_default(),
                    })
                }
            }
            done @ ModelStreamEvent::Done { .. } => {
                let short = self.text.fell_short()
                    || self.reasoning.fell_short()
                    || self.calls.iter().any(|(c, _)| c.fell_short());
                if short {
                    return Err(());
                }
                Some(done)
            }
        })
    }
}

struct Run {
    endpoint: Arc<Endpoint>,
    url: String,
    signal: AbortSignal,
    bodies: Bodies,
    tries: Tries,
    queue: VecDeque<Item>,
    phase: Phase,
    shown: Shown,
    /// Why the last attempt failed, for the sentence when a retry contradicts it.
    last_failure: Option<String>,
}

/// A stream that first yields `bodies` as an error when it is one, else asks and decodes.
pub(crate) fn start(
    endpoint: Arc<Endpoint>,
    bodies: Result<Bodies, AgentError>,
    signal: AbortSignal,
) -> BoxStream<'static, Item> {
    let url = endpoint.url("/chat/completions");
    let tries = Tries::new(endpoint.retry);
    let (queue, phase, bodies) = match bodies {
        Ok(b) => (VecDeque::new(), Phase::Start, b),
        Err(e) => (
            VecDeque::from([Err(e)]),
            Phase::Finished,
            Bodies {
                streamed: Bytes::new(),
                whole: Bytes::new(),
                offers_tools: false,
            },
        ),
    };
    let run = Run {
        endpoint,
        url,
        signal,
        bodies,
        tries,
        queue,
        phase,
        shown: Shown::default(),
        last_failure: None,
    };
    futures::stream::unfold(run, |mut run| async move {
        loop {
            if let Some(item) = run.queue.pop_front() {
                return Some((item, run));
            }
            if !run.step().await {
                return None;
            }
        }
    })
    .boxed()
}

impl Run {
    /// One step of the stream: an attempt started, or one piece of its answer read and decoded,
    /// what it yields queued. `false` once it is finished.
    async fn step(&mut self) -> bool {
        match std::mem::replace(&mut self.phase, Phase::Finished) {
            Phase::Finished => return false,
            Phase::Start => {
                self.shown.new_attempt();
                let result = if self.asks_whole() {
                    self.whole_attempt().await
                } else {
                    self.open_stream().await
                };
                if let Err(f) = result {
                    self.failed(f).await;
                }
            }
            Phase::Reading {
                mut body,
                mut clock,
                mut parser,
                mut decoder,
            } => {
                let piece = next_piece(&mut body, &mut clock, &self.url, &self.signal).await;
                let mut events: Vec<SseEvent> = Vec::new();
                match piece {
                    Ok(Some(bytes)) => {
                        parser.push(&bytes, &mut |e| events.push(e));
                        match self.decode_all(&mut decoder, &events) {
                            Err(e) => self.failed(e.into()).await,
                            Ok(true) => {
                                self.phase = Phase::Reading {
                                    body,
                                    clock,
                                    parser,
                                    decoder,
                                };
                            }
                            Ok(false) => self.finish(*decoder).await,
                        }
                    }
                    Ok(None) => {
                        parser.finish(&mut |e| events.push(e));
                        match self.decode_all(&mut decoder, &events) {
                            Err(e) => self.failed(e.into()).await,
                            Ok(_) => self.finish(*decoder).await,
                        }
                    }
                    Err(e) => self.failed(e.into()).await,
                }
            }
        }
        true
    }
}

impl Run {
    /// Whether this attempt asks without streaming: the dialect, or what the endpoint showed,
    /// says a request offering tools cannot stream.
    fn asks_whole(&self) -> bool {
        self.bodies.offers_tools
            && (!self.endpoint.dialect.stream_tools
                || self.endpoint.learned.tools_refuse_streaming())
    }

    /// Passes an attempt's event on, filtered against what was already shown.
    fn pass(&mut self, event: ModelStreamEvent) -> Result<(), AgentError> {
        match self.shown.filter(event) {
            Ok(Some(e)) => {
                self.queue.push_back(Ok(e));
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(()) => {
                let cause = self
                    .last_failure
                    .clone()
                    .unwrap_or_else(|| "it failed".to_owned());
                Err(AgentError::new(
                    ErrorCode::Network,
                    format!(
                        "the answer from {} was cut short after part of it was shown ({cause}), \
                         and the retry answered differently",
                        self.url
                    ),
                ))
            }
        }
    }

    async fn open_stream(&mut self) -> Result<(), Failure> {
        let (resp, clock) = self
            .endpoint
            .attempt(&self.url, Some(&self.bodies.streamed), false, &self.signal)
            .await?;
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.is_empty() || content_type.starts_with("text/event-stream") {
            let decoder = StreamDecoder::new(&self.url);
            let decoder = if self.endpoint.dialect.repair_tool_index {
                decoder
            } else {
                decoder.without_index_repair()
            };
            let decoder = if self.endpoint.keep_stream_raw {
                decoder
            } else {
                decoder.without_raw()
            };
            self.phase = Phase::Reading {
                body: resp.bytes_stream().boxed(),
                clock,
                parser: SseParser::new(),
                decoder: Box::new(decoder),
            };
            return Ok(());
        }
        // Some servers answer a streamed request whole; a whole completion is still the answer.
        let text = read_whole(resp, clock, &self.url, &self.signal).await?;
        match parse_completion(&text, &self.url) {
            Ok((reply, field)) => self.deliver_whole(reply, field).map_err(Failure::from),
            Err(e) => Err(AgentError {
                message: format!(
                    "{} answered a streamed request with {content_type}, not an event stream: {}",
                    self.url, e.message
                ),
                ..e
            }
            .into()),
        }
    }

    async fn whole_attempt(&mut self) -> Result<(), Failure> {
        let (resp, clock) = self
            .endpoint
            .attempt(&self.url, Some(&self.bodies.whole), true, &self.signal)
            .await?;
        let text = read_whole(resp, clock, &self.url, &self.signal).await?;
        let (reply, field) = parse_completion(&text, &self.url)?;
        self.deliver_whole(reply, field).map_err(Failure::from)
    }

    /// A whole reply passed on as one delta per part, then `Done`.
    fn deliver_whole(
        &mut self,
        reply: ModelReply,
        field: Option<crate::dialect::ReasoningField>,
    ) -> Result<(), AgentError> {
        self.endpoint.learn_from(field);
        let mut call_index = 0u32;
        for part in &reply.message.parts {
            let event = match part {
                Part::Reasoning { text } => ModelStreamEvent::ReasoningDelta { text: text.clone() },
                Part::Text { text } => ModelStreamEvent::TextDelta { text: text.clone() },
                Part::ToolCall(c) => {
                    call_index += 1;
                    ModelStreamEvent::ToolCallDelta {
                        index: call_index - 1,
                        call_id: Some(c.call_id.clone()),
                        name: Some(c.name.clone()),
                        arguments: c.raw.clone(),
                    }
                }
                _ => continue,
            };
            self.pass(event)?;
        }
        self.pass(ModelStreamEvent::Done { reply })
    }

    /// Decodes events. `Ok(false)` after `[DONE]`: the body is not read further.
    fn decode_all(
        &mut self,
        decoder: &mut StreamDecoder,
        events: &[SseEvent],
    ) -> Result<bool, AgentError> {
        for e in events {
            let mut out = Vec::new();
            decoder.event(e, &mut |m| out.push(m))?;
            for m in out {
                self.pass(m)?;
            }
            if decoder.is_done() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The body ended (or `[DONE]` came): a whole reply is passed on, a cut one is a failure.
    async fn finish(&mut self, decoder: StreamDecoder) {
        if let Err(e) = decoder.check_whole(self.endpoint.dialect.require_done) {
            if !decoder.saw_chunks()
                && self.bodies.offers_tools
                && self.endpoint.dialect.name == "generic"
            {
                // llama-cpp-python answers a streamed request offering tools with an empty
                // stream; asking whole works, so every such request is asked whole from now on.
                // Only an unknown (generic) server is judged so: a known one that sends an
                // empty stream once had a passing fault, which must not change it for good.
                self.endpoint.learned.refuse_streaming_tools();
            }
            self.failed(e.into()).await;
            return;
        }
        let field = decoder.reasoning_field();
        let mut out = Vec::new();
        let reply = decoder.finish(&mut |m| out.push(m));
        self.endpoint.learn_from(field);
        let passed = out
            .into_iter()
            .chain([ModelStreamEvent::Done { reply }])
            .try_for_each(|m| self.pass(m));
        if let Err(e) = passed {
            self.queue.push_back(Err(e));
        }
    }

    /// After a failed attempt: another one (after its wait), or the error to end with.
    async fn failed(&mut self, failure: Failure) {
        self.last_failure = Some(failure.error.message.clone());
        match self.tries.again(failure, &self.url, &self.signal).await {
            Ok(()) => self.phase = Phase::Start,
            Err(e) => self.queue.push_back(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_attempt_passes_on_only_what_goes_beyond_what_was_shown() {
        let mut t = Track::default();
        assert_eq!(t.pass("hé"), Ok(Some("hé".into())));
        assert_eq!(t.pass("llo"), Ok(Some("llo".into())));
        t.this_attempt = 0;
        assert_eq!(t.pass("h"), Ok(None));
        assert!(t.fell_short());
        assert_eq!(t.pass("éllo wör"), Ok(Some(" wör".into())));
        assert_eq!(t.pass("ld"), Ok(Some("ld".into())));
        assert_eq!(t.shown, "héllo wörld");
        assert!(!t.fell_short());
        t.this_attempt = 0;
        assert_eq!(t.pass("hä"), Err(()));
    }
}
