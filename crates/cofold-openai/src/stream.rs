//! The streamed reply: a pull-driven stream that sends the request on first poll, then reads
//! the body read by read, so dropping the stream drops the body and releases the connection.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::ModelStreamEvent;
use cofold_agents::tool::AbortSignal;
use futures::stream::{BoxStream, StreamExt};
use serde_json::Value;

use crate::decode::StreamDecoder;
use crate::http::{Endpoint, abort_error, error_chain};
use crate::sse::{SseEvent, SseParser};

type Item = Result<ModelStreamEvent, AgentError>;

enum Phase {
    Start {
        endpoint: Arc<Endpoint>,
        body: Value,
    },
    Reading {
        body: BoxStream<'static, reqwest::Result<Bytes>>,
        parser: SseParser,
        decoder: Box<StreamDecoder>,
    },
    Finished,
}

struct Run {
    url: String,
    signal: AbortSignal,
    queue: VecDeque<Item>,
    phase: Phase,
}

/// A stream that first yields `gate` as an error when set, else sends `body` and decodes.
pub(crate) fn start(
    endpoint: Arc<Endpoint>,
    body: Result<Value, AgentError>,
    signal: AbortSignal,
) -> BoxStream<'static, Item> {
    let url = endpoint.url("/chat/completions");
    let (queue, phase) = match body {
        Ok(body) => (VecDeque::new(), Phase::Start { endpoint, body }),
        Err(e) => (VecDeque::from([Err(e)]), Phase::Finished),
    };
    let run = Run {
        url,
        signal,
        queue,
        phase,
    };
    futures::stream::unfold(run, |mut run| async move {
        loop {
            if let Some(item) = run.queue.pop_front() {
                return Some((item, run));
            }
            match std::mem::replace(&mut run.phase, Phase::Finished) {
                Phase::Finished => return None,
                Phase::Start { endpoint, body } => {
                    match endpoint.send(&run.url, Some(&body), &run.signal).await {
                        Ok(resp) => {
                            run.phase = Phase::Reading {
                                body: resp.bytes_stream().boxed(),
                                parser: SseParser::new(),
                                decoder: Box::new(StreamDecoder::new(&run.url)),
                            };
                        }
                        Err(e) => run.queue.push_back(Err(e)),
                    }
                }
                Phase::Reading {
                    mut body,
                    mut parser,
                    mut decoder,
                } => {
                    let next = tokio::select! {
                        n = body.next() => n,
                        _ = run.signal.cancelled() => {
                            run.queue.push_back(Err(abort_error(&run.signal, &run.url)));
                            continue;
                        }
                    };
                    let mut events: Vec<SseEvent> = Vec::new();
                    match next {
                        Some(Ok(bytes)) => {
                            parser.push(&bytes, &mut |e| events.push(e));
                            if decode_all(&mut run, &mut decoder, &events) {
                                run.phase = Phase::Reading {
                                    body,
                                    parser,
                                    decoder,
                                };
                            }
                        }
                        Some(Err(e)) => {
                            let err = if run.signal.is_aborted() {
                                abort_error(&run.signal, &run.url)
                            } else {
                                AgentError::new(
                                    ErrorCode::Network,
                                    format!(
                                        "the answer from {} broke off: {}",
                                        run.url,
                                        error_chain(&e)
                                    ),
                                )
                            };
                            run.queue.push_back(Err(err));
                        }
                        None => {
                            parser.finish(&mut |e| events.push(e));
                            if decode_all(&mut run, &mut decoder, &events) {
                                finish(&mut run, *decoder);
                            }
                        }
                    }
                }
            }
        }
    })
    .boxed()
}

/// Decodes events into the queue. Returns whether reading should go on: false after an error
/// (queued) or after `[DONE]` (the reply is then queued too and the body is dropped).
fn decode_all(run: &mut Run, decoder: &mut StreamDecoder, events: &[SseEvent]) -> bool {
    for e in events {
        let queue = &mut run.queue;
        if let Err(err) = decoder.event(e, &mut |m| queue.push_back(Ok(m))) {
            run.queue.push_back(Err(err));
            return false;
        }
        if decoder.is_done() {
            let d = std::mem::replace(decoder, StreamDecoder::new(&run.url));
            finish(run, d);
            return false;
        }
    }
    true
}

fn finish(run: &mut Run, decoder: StreamDecoder) {
    let queue = &mut run.queue;
    let reply = decoder.finish(&mut |m| queue.push_back(Ok(m)));
    run.queue.push_back(Ok(ModelStreamEvent::Done { reply }));
}
