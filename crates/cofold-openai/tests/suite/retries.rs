//! Retries like a good client: the server's `Retry-After` and `x-ratelimit-reset-*` waits are
//! honoured up to the cap (on a paused clock, measured between the attempts' key requests), and
//! refusals are not retried and carry the provider's own sentence.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cofold_agents::error::ErrorCode;
use cofold_agents::model::{ModelAdapter, ModelSpec};
use cofold_openai::{ApiKey, OpenAiProvider, ProviderOptions, RetryPolicy};
use testkit::{Endpoint, Reply};

use super::support::{ask, options};

/// An adapter whose key is asked once per attempt; the paused clock's time of each ask is kept.
fn timed(
    ep: &Endpoint,
    retry: RetryPolicy,
) -> (
    cofold_openai::OpenAiAdapter,
    Arc<Mutex<Vec<tokio::time::Instant>>>,
) {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    let mut opts = ProviderOptions {
        retry,
        ..options(ep)
    };
    opts.api_key = Some(ApiKey::Dynamic(Arc::new(move || {
        record.lock().unwrap().push(tokio::time::Instant::now());
        Box::pin(async { Ok(Some("sk-test".to_owned())) })
    })));
    let a = OpenAiProvider::new(opts)
        .unwrap()
        .adapter(ModelSpec::new("m"));
    (a, asked)
}

fn gaps(asked: &Mutex<Vec<tokio::time::Instant>>) -> Vec<Duration> {
    let at = asked.lock().unwrap();
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(start_paused = true)]
async fn retry_after_seven_waits_seven_seconds() {
    let ep = Endpoint::with_replies([
        Reply::status(429, "slow down").header("retry-after", "7"),
        Reply::completion_text("ok"),
    ])
    .unwrap();
    let (a, asked) = timed(&ep, RetryPolicy::default());
    a.complete(ask("x")).await.unwrap();
    assert_eq!(gaps(&asked), [Duration::from_secs(7)]);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_reset_headers_are_honoured() {
    let ep = Endpoint::with_replies([
        Reply::status(429, "tokens")
            .header("x-ratelimit-reset-requests", "1s")
            .header("x-ratelimit-reset-tokens", "2.5s"),
        Reply::text_stream("ok"),
    ])
    .unwrap();
    let (a, asked) = timed(&ep, RetryPolicy::default());
    super::support::done(&super::support::stream_all(&a, ask("x")).await);
    assert_eq!(gaps(&asked), [Duration::from_millis(2500)]);
}

#[tokio::test(start_paused = true)]
async fn without_a_server_wait_the_backoff_grows_with_jitter() {
    let ep = Endpoint::with_replies([
        Reply::status(503, "busy"),
        Reply::status(503, "busy"),
        Reply::completion_text("ok"),
    ])
    .unwrap();
    let (a, asked) = timed(&ep, RetryPolicy::default());
    a.complete(ask("x")).await.unwrap();
    let g = gaps(&asked);
    assert_eq!(g.len(), 2);
    assert!(
        g[0] >= Duration::from_millis(250) && g[0] <= Duration::from_millis(500),
        "{g:?}"
    );
    // The second gap also holds the wait for the second answer, during which the paused clock
    // may jump to the connection pool's idle timer, so only its lower bound is exact.
    assert!(g[1] >= Duration::from_millis(500), "{g:?}");
}

#[tokio::test(start_paused = true)]
async fn a_wait_beyond_the_cap_ends_the_retries_with_a_sentence() {
    let ep = Endpoint::with_replies([
        Reply::status(429, "daily quota").header("retry-after", "3600"),
        Reply::completion_text("never asked"),
    ])
    .unwrap();
    let (a, _) = timed(
        &ep,
        RetryPolicy {
            max_attempts: 3,
            max_wait: Duration::from_secs(60),
        },
    );
    let e = a.complete(ask("x")).await.unwrap_err();
    assert_eq!((e.code, e.status), (ErrorCode::RateLimit, Some(429)));
    assert!(
        e.message.contains("daily quota")
            && e.message.contains("asks to wait 3600 s")
            && e.message.contains("longer than the 60 s"),
        "{}",
        e.message
    );
    assert_eq!(ep.chat_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn attempts_are_configurable() {
    let ep = Endpoint::builder()
        .fallback(Reply::status(502, "bad gateway"))
        .start()
        .unwrap();
    let (a, _) = timed(
        &ep,
        RetryPolicy {
            max_attempts: 5,
            ..RetryPolicy::default()
        },
    );
    let e = a.complete(ask("x")).await.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::Server, true));
    assert_eq!(ep.chat_requests().len(), 5);
}

#[tokio::test(start_paused = true)]
async fn refusals_are_not_retried_and_carry_the_providers_sentence() {
    for (status, code) in [
        (400, ErrorCode::InvalidResponse),
        (401, ErrorCode::Auth),
        (403, ErrorCode::Auth),
        (404, ErrorCode::InvalidResponse),
        (422, ErrorCode::InvalidResponse),
    ] {
        let ep = Endpoint::with_replies([Reply::api_error(
            status,
            "Extra inputs are not permitted; key sk-abcdefghijklmnop0123 was used",
        )])
        .unwrap();
        let (a, _) = timed(&ep, RetryPolicy::default());
        let e = a.complete(ask("x")).await.unwrap_err();
        assert_eq!((e.code, e.retryable, e.status), (code, false, Some(status)));
        assert_eq!(
            e.message,
            format!(
                "{status} from {}: Extra inputs are not permitted; key [redacted] was used",
                ep.chat_url()
            )
        );
        assert_eq!(ep.chat_requests().len(), 1, "{status} is not retried");
    }
}
