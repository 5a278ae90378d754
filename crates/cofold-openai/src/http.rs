//! Sending one request with the provider's key and headers: retries before a body is read, with
//! backoff on tokio's clock, and HTTP failures mapped to the runtime's error codes.

use std::sync::Arc;
use std::time::Duration;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::tool::{AbortReason, AbortSignal};
use futures::future::BoxFuture;
use serde_json::Value;

/// The API key: fixed, or asked for on every HTTP attempt (never cached).
#[derive(Clone)]
pub enum ApiKey {
    /// The same key every time.
    Fixed(String),
    /// Asked once per attempt; `Ok(None)` sends no key, an error is returned as is.
    Dynamic(Arc<dyn Fn() -> BoxFuture<'static, Result<Option<String>, AgentError>> + Send + Sync>),
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself is never printed.
        match self {
            ApiKey::Fixed(_) => f.write_str("ApiKey::Fixed(<redacted>)"),
            ApiKey::Dynamic(_) => f.write_str("ApiKey::Dynamic"),
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        ApiKey::Fixed(key)
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> Self {
        ApiKey::Fixed(key.to_owned())
    }
}

/// The endpoint shared by a provider and every adapter it builds.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    pub headers: Vec<(String, String)>,
    pub client: reqwest::Client,
    pub retries: u32,
}

/// Backoff before retry `k` (1-based): 500 ms × 2^(k-1).
pub(crate) fn backoff(k: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1u64 << (k - 1).min(16)))
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

/// Cuts `text` to at most `n` characters (never inside one).
fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

impl Endpoint {
    /// `<base><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    async fn key(&self) -> Result<Option<String>, AgentError> {
        match &self.api_key {
            None => Ok(None),
            Some(ApiKey::Fixed(k)) => Ok(Some(k.clone())),
            Some(ApiKey::Dynamic(f)) => f().await,
        }
    }

    /// Replaces the key wherever an endpoint echoed it back, so no error carries it.
    pub fn redact(&self, text: &str, key: Option<&str>) -> String {
        match key {
            Some(k) if k.len() >= 4 && text.contains(k) => text.replace(k, "[redacted]"),
            _ => text.to_owned(),
        }
    }

    /// Sends `body` (POST) or nothing (GET) to `url`, retrying failures that happen before a body
    /// is read. Returns a 2xx response whose body has not been read yet.
    pub async fn send(
        &self,
        url: &str,
        body: Option<&Value>,
        signal: &AbortSignal,
    ) -> Result<reqwest::Response, AgentError> {
        let mut attempt = 0u32;
        loop {
            if attempt > 0 {
                tokio::select! {
                    _ = tokio::time::sleep(backoff(attempt)) => {}
                    _ = signal.cancelled() => return Err(abort_error(signal, url)),
                }
            }
            if signal.is_aborted() {
                return Err(abort_error(signal, url));
            }
            let key = self.key().await?;
            let last = attempt >= self.retries;
            attempt += 1;
            match self.attempt(url, body, key.as_deref(), signal).await {
                Ok(resp) => return Ok(resp),
                Err(e) if e.retryable && !last && e.code != ErrorCode::Aborted => {
                    tracing::debug!(url, code = %e.code, attempt, "retrying a model request");
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn attempt(
        &self,
        url: &str,
        body: Option<&Value>,
        key: Option<&str>,
        signal: &AbortSignal,
    ) -> Result<reqwest::Response, AgentError> {
        // The body is serialized here (not with `.json`) so `content-type` is set exactly once.
        let mut req = match body {
            Some(b) => self.client.post(url).body(b.to_string()),
            None => self.client.get(url),
        };
        req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(k) = key.filter(|k| !k.is_empty()) {
            req = req.bearer_auth(k);
        }
        let sent = tokio::select! {
            r = req.send() => r,
            _ = signal.cancelled() => return Err(abort_error(signal, url)),
        };
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                let cause = self.redact(&error_chain(&e), key);
                return Err(AgentError::new(
                    ErrorCode::Network,
                    format!("cannot reach {url}: {cause}"),
                )
                .with_retryable(true));
            }
        };
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(resp);
        }
        let text = tokio::select! {
            t = resp.text() => t.unwrap_or_default(),
            _ = signal.cancelled() => return Err(abort_error(signal, url)),
        };
        let text = self.redact(&text, key);
        let message = format!("{status} from {url}: {}", first_chars(&text, 500));
        let err = match status {
            429 => AgentError::new(ErrorCode::RateLimit, message)
                .with_retryable(true)
                .with_detail(Value::String(text)),
            500..=599 => AgentError::new(ErrorCode::Server, message)
                .with_retryable(true)
                .with_detail(Value::String(text)),
            401 | 403 => AgentError::new(ErrorCode::Auth, message),
            _ => AgentError::new(ErrorCode::InvalidResponse, message),
        };
        Err(err.with_status(status))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_millis(1000));
        assert_eq!(backoff(3), Duration::from_millis(2000));
    }

    #[test]
    fn excerpts_never_split_a_character() {
        assert_eq!(first_chars("héllo", 2), "hé");
        assert_eq!(first_chars("hi", 500), "hi");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = ApiKey::from("sk-secret-value");
        assert!(!format!("{k:?}").contains("secret"));
    }
}
