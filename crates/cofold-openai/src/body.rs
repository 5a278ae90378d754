//! Reading an answer's body within the first-byte and idle limits, racing the request's signal.

use std::time::Duration;

use bytes::Bytes;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::tool::AbortSignal;
use futures::stream::{BoxStream, StreamExt};
use tokio::time::Instant;

use crate::failure::{abort_error, error_chain, shown};

/// Where an answer's body stands against the first-byte and idle limits.
pub(crate) struct BodyClock {
    /// When the request was sent, the limit until the first byte, and that limit's name.
    first_byte: Option<(Instant, Duration, &'static str)>,
    idle: Option<Duration>,
    got_bytes: bool,
}

impl BodyClock {
    /// A clock for a request sent at `first.0` whose body must start within `first.1` (a limit
    /// named `first.2`) and then never pause longer than `idle`.
    pub fn new(first: Option<(Instant, Duration, &'static str)>, idle: Option<Duration>) -> Self {
        BodyClock {
            first_byte: first,
            idle,
            got_bytes: false,
        }
    }

    /// The deadline of the next read.
    pub fn deadline(&self) -> Option<Instant> {
        if self.got_bytes {
            self.idle.map(|d| Instant::now() + d)
        } else {
            self.first_byte.map(|(start, d, _)| start + d)
        }
    }

    pub fn got_bytes(&mut self) {
        self.got_bytes = true;
    }

    /// The error of an expired read.
    pub fn expired(&self, url: &str) -> AgentError {
        let message = match (self.got_bytes, self.first_byte, self.idle) {
            (false, Some((_, d, name)), _) => {
                format!("{url} sent nothing within the {name} of {}", shown(d))
            }
            (_, _, Some(d)) => format!(
                "the answer from {url} stalled: nothing arrived for {} (the idle limit)",
                shown(d)
            ),
            _ => format!("the answer from {url} stalled"),
        };
        AgentError::new(ErrorCode::Network, message).with_retryable(true)
    }
}

/// Reads the next piece of a body within the clock's deadline, racing the signal.
pub(crate) async fn next_piece(
    body: &mut BoxStream<'static, reqwest::Result<Bytes>>,
    clock: &mut BodyClock,
    url: &str,
    signal: &AbortSignal,
) -> Result<Option<Bytes>, AgentError> {
    let deadline = clock.deadline();
    let expiry = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => futures::future::pending().await,
        }
    };
    let next = tokio::select! {
        n = body.next() => n,
        _ = expiry => return Err(clock.expired(url)),
        _ = signal.cancelled() => return Err(abort_error(signal, url)),
    };
    match next {
        None => Ok(None),
        Some(Ok(bytes)) => {
            if !bytes.is_empty() {
                clock.got_bytes();
            }
            Ok(Some(bytes))
        }
        Some(Err(_)) if signal.is_aborted() => Err(abort_error(signal, url)),
        Some(Err(e)) => Err(AgentError::new(
            ErrorCode::Network,
            format!("the answer from {url} broke off: {}", error_chain(&e)),
        )
        .with_retryable(true)),
    }
}

/// Reads a whole body as text within the limits.
pub(crate) async fn read_whole(
    resp: reqwest::Response,
    mut clock: BodyClock,
    url: &str,
    signal: &AbortSignal,
) -> Result<String, AgentError> {
    let mut body = resp.bytes_stream().boxed();
    let mut all = Vec::new();
    while let Some(piece) = next_piece(&mut body, &mut clock, url, signal).await? {
        all.extend_from_slice(&piece);
    }
    Ok(String::from_utf8_lossy(&all).into_owned())
}
