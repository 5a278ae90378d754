//! Sending one request with the provider's key and headers: one attempt within the first-byte
//! limit, and HTTP failures mapped to the runtime's error codes with the provider's own sentence
//! (keys masked).

use std::sync::Arc;

use bytes::Bytes;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::tool::AbortSignal;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;

use crate::body::{BodyClock, read_whole};
use crate::dialect::{Dialect, Learned};
use crate::failure::{Failure, abort_error, error_chain, mask_keys, shown};
use crate::retry::Tries;
use crate::retry::{asked_wait, status_is_retryable};
use crate::settings::{RetryPolicy, TimeLimits};

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
    pub retry: RetryPolicy,
    pub limits: TimeLimits,
    pub dialect: Dialect,
    pub learned: Learned,
    /// Whether a streamed reply keeps its chunks for `raw`.
    pub keep_stream_raw: bool,
}

/// Cuts `text` to at most `n` characters (never inside one).
fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// The provider's own sentence from an error body: `error.message`, `message`, `detail` or a
/// string `error`; else the body itself.
pub(crate) fn provider_message(text: &str) -> String {
    let from_json = serde_json::from_str::<Value>(text).ok().and_then(|v| {
        let pick = |v: &Value| v.as_str().map(str::to_owned);
        v.pointer("/error/message")
            .and_then(pick)
            .or_else(|| v.get("message").and_then(pick))
            .or_else(|| v.get("detail").and_then(pick))
            .or_else(|| v.get("error").and_then(pick))
            .or_else(|| {
                // FastAPI's validation answers (vLLM, llama-cpp-python): a list of problems.
                v.get("detail")
                    .filter(|d| d.is_array())
                    .map(Value::to_string)
            })
    });
    from_json.unwrap_or_else(|| text.trim().to_owned())
}

impl Endpoint {
    /// Keeps what a whole reply tells about the server: the field its reasoning came in.
    pub fn learn_from(&self, field: Option<crate::dialect::ReasoningField>) {
        if let Some(f) = field {
            self.learned.saw_reasoning_field(f);
        }
    }

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

    /// Replaces the key wherever an endpoint echoed it back, and anything shaped like a key, so
    /// no error carries one.
    pub fn redact(&self, text: &str, key: Option<&str>) -> String {
        let text = match key {
            Some(k) if k.len() >= 4 && text.contains(k) => text.replace(k, "[redacted]"),
            _ => text.to_owned(),
        };
        mask_keys(&text)
    }

    /// Sends `body` (POST) or nothing (GET) to `url`, retrying failures that happen before a body
    /// is read. Returns a 2xx response whose body has not been read yet, with its clock.
    pub async fn send(
        &self,
        url: &str,
        body: Option<&Bytes>,
        signal: &AbortSignal,
    ) -> Result<(reqwest::Response, BodyClock), AgentError> {
        let mut tries = Tries::new(self.retry);
        loop {
            match self.attempt(url, body, false, signal).await {
                Ok(sent) => return Ok(sent),
                Err(f) => tries.again(f, url, signal).await?,
            }
        }
    }

    /// The request of an attempt, with the configured headers and the key.
    fn request(
        &self,
        url: &str,
        body: Option<&Bytes>,
        key: Option<&str>,
    ) -> reqwest::RequestBuilder {
        // The body comes serialized (not through `.json`) so `content-type` is set exactly once.
        let mut req = match body {
            Some(b) => self.client.post(url).body(b.clone()),
            None => self.client.get(url),
        };
        req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(k) = key.filter(|k| !k.is_empty()) {
            req = req.bearer_auth(k);
        }
        req
    }

    /// The limits an attempt's answer runs under, started now: the first byte's (or the whole
    /// answer's when `whole`) and the idle gap's.
    fn clock(&self, whole: bool) -> BodyClock {
        let start = Instant::now();
        let first = if whole {
            self.limits
                .whole
                .map(|d| (start, d, "limit for a whole answer"))
        } else {
            self.limits
                .first_byte
                .map(|d| (start, d, "first-byte limit"))
        };
        BodyClock::new(first, self.limits.idle)
    }

    /// One attempt: the request sent and its answer's head read within the first-byte limit, or
    /// the whole-answer limit when `whole` (a chat request asked without streaming).
    pub async fn attempt(
        &self,
        url: &str,
        body: Option<&Bytes>,
        whole: bool,
        signal: &AbortSignal,
    ) -> Result<(reqwest::Response, BodyClock), Failure> {
        if signal.is_aborted() {
            return Err(abort_error(signal, url).into());
        }
        let key = self.key().await?;
        let key = key.as_deref();
        let req = self.request(url, body, key);
        let clock = self.clock(whole);
        let head_deadline = clock.deadline();
        let expiry = async {
            match head_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => futures::future::pending().await,
            }
        };
        let sent = tokio::select! {
            r = req.send() => r,
            _ = expiry => return Err(clock.expired(url).into()),
            _ = signal.cancelled() => return Err(abort_error(signal, url).into()),
        };
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                // Only the configured limit is named; the system's own connect timeout (or
                // one with no limit set) is told as the system tells it.
                let cause = match self.limits.connect {
                    Some(limit) if e.is_connect() && e.is_timeout() => {
                        format!("no connection within the connect limit of {}", shown(limit))
                    }
                    _ => self.redact(&error_chain(&e), key),
                };
                return Err(AgentError::new(
                    ErrorCode::Network,
                    format!("cannot reach {url}: {cause}"),
                )
                .with_retryable(true)
                .into());
            }
        };
        let status = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok((resp, clock));
        }
        let wait = asked_wait(resp.headers());
        let text = match read_whole(resp, clock, url, signal).await {
            Ok(t) => t,
            Err(e) if e.code == ErrorCode::Aborted => return Err(e.into()),
            Err(_) => String::new(),
        };
        let text = self.redact(&text, key);
        let said = provider_message(&text);
        let message = format!("{status} from {url}: {}", first_chars(&said, 500));
        let code = match status {
            429 => ErrorCode::RateLimit,
            401 | 403 => ErrorCode::Auth,
            408 => ErrorCode::Network,
            s if status_is_retryable(s) => ErrorCode::Server,
            _ => ErrorCode::InvalidResponse,
        };
        let error = AgentError::new(code, message)
            .with_retryable(status_is_retryable(status))
            .with_detail(Value::String(text))
            .with_status(status);
        Err(Failure { error, wait })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    #[test]
    fn key_shaped_words_are_masked() {
        assert_eq!(
            mask_keys("Incorrect API key provided: sk-abcdef123456789. Try again"),
            "Incorrect API key provided: [redacted]. Try again"
        );
        assert_eq!(
            mask_keys("task-list sk-1 risk-free"),
            "task-list sk-1 risk-free"
        );
    }

    #[test]
    fn provider_messages_are_found() {
        assert_eq!(
            provider_message(r#"{"error":{"message":"Missing reasoning_content","type":"x"}}"#),
            "Missing reasoning_content"
        );
        assert_eq!(
            provider_message(r#"{"object":"error","message":"Extra inputs are not permitted"}"#),
            "Extra inputs are not permitted"
        );
        assert_eq!(provider_message("plain words\n"), "plain words");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(shown(Duration::from_secs(10)), "10 s");
        assert_eq!(shown(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(shown(Duration::from_millis(250)), "250 ms");
    }
}
