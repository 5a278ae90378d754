//! How a failed request reads: the failure of one attempt, the sentences for a cancel and for no
//! answer in time, durations as people write them, keys masked out of servers' text, and an error
//! with its causes. Below the request modules, which all use them.

use std::time::Duration;

use cofold_agents::abort::{AbortReason, AbortSignal};
use cofold_agents::error::{AgentError, ErrorCode};

/// A failed attempt and the wait the server asked for before the next one.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: AgentError,
    pub wait: Option<Duration>,
}

impl From<AgentError> for Failure {
    fn from(error: AgentError) -> Self {
        Failure { error, wait: None }
    }
}

fn aborted() -> AgentError {
    AgentError::new(ErrorCode::Aborted, "the model request was cancelled")
}

/// What a fired signal means: a run timeout reads as no answer in time, a cancel as aborted.
pub(crate) fn abort_error(signal: &AbortSignal, url: &str) -> AgentError {
    match signal.reason() {
        Some(AbortReason::Timeout) => no_answer(url),
        _ => aborted(),
    }
}

pub(crate) fn no_answer(url: &str) -> AgentError {
    AgentError::new(
        ErrorCode::Network,
        format!("cannot reach {url}: no answer in time"),
    )
    .with_retryable(true)
}

/// A duration as people write it: `10 s`, `1.5 s`, `250 ms`.
pub(crate) fn shown(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Masks anything shaped like an API key (`sk-…`, `key-…` of 12 characters or more), whoever's
/// it is: servers quote keys back in their refusals.
pub(crate) fn mask_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["sk-", "key-"].iter().filter_map(|p| rest.find(p)).min() {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let len = from
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(from.len());
        let starts_word = !before
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        if len >= 12 && starts_word {
            out.push_str("[redacted]");
        } else {
            out.push_str(&from[..len.max(1)]);
        }
        rest = &from[len.max(1)..];
    }
    out.push_str(rest);
    out
}

/// A reqwest error with its causes, which hold the useful part (`connection refused`).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
