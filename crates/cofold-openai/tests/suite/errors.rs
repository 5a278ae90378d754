//! Errors, retries, dynamic keys and cancels (runtime cases 241–243, docs/acceptance.md) and the secrecy rule.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{ModelAdapter, ModelRequest, ModelSpec};
use cofold_agents::tool::{AbortController, AbortReason};
use cofold_openai::{ApiKey, OpenAiProvider, ProviderOptions, TimeLimits};
use testkit::{Endpoint, Gate, Reply};

use super::support::{adapter, ask, options};

async fn fail(ep: &Endpoint, retries: Option<u32>) -> AgentError {
    let mut opts = options(ep);
    opts.retries = retries;
    let a = OpenAiProvider::new(opts)
        .unwrap()
        .adapter(ModelSpec::new("m"));
    a.complete(ask("x")).await.unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn item_241_429_then_success_is_retried() {
    let ep = Endpoint::with_replies([
        Reply::status(429, "slow down"),
        Reply::completion_text("ok"),
    ])
    .unwrap();
    adapter(&ep).complete(ask("x")).await.unwrap();
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn item_241_401_is_auth_after_one_request() {
    let ep = Endpoint::with_replies([Reply::status(401, "nope")]).unwrap();
    let e = fail(&ep, None).await;
    assert_eq!(e.code, ErrorCode::Auth);
    assert_eq!(e.message, format!("401 from {}: nope", ep.chat_url()));
    assert_eq!((e.status, e.retryable), (Some(401), false));
    assert_eq!(ep.chat_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn item_241_403_is_auth_and_400_is_invalid_response() {
    let ep = Endpoint::with_replies([
        Reply::status(403, "forbidden"),
        Reply::api_error(400, "bad model"),
    ])
    .unwrap();
    assert_eq!(fail(&ep, None).await.code, ErrorCode::Auth);
    let e = fail(&ep, None).await;
    assert_eq!(
        (e.code, e.status, e.retryable),
        (ErrorCode::InvalidResponse, Some(400), false)
    );
    assert!(
        e.message.contains("bad model"),
        "the endpoint's message is kept: {}",
        e.message
    );
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn item_241_5xx_is_server_after_three_requests() {
    for status in [500u16, 502, 503] {
        let ep = Endpoint::with_replies([
            Reply::status(status, "first"),
            Reply::status(status, "second"),
            Reply::status(status, "last body"),
        ])
        .unwrap();
        let e = fail(&ep, None).await;
        assert_eq!(
            (e.code, e.status, e.retryable),
            (ErrorCode::Server, Some(status), true)
        );
        assert_eq!(e.detail, Some(serde_json::json!("last body")));
        assert_eq!(
            e.message,
            format!("{status} from {}: last body", ep.chat_url())
        );
        assert_eq!(ep.chat_requests().len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn item_241_no_retries_means_one_request() {
    let ep = Endpoint::with_replies([Reply::status(429, "slow")]).unwrap();
    let e = fail(&ep, Some(0)).await;
    assert_eq!(
        (e.code, e.retryable, e.status),
        (ErrorCode::RateLimit, true, Some(429))
    );
    assert_eq!(ep.chat_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn item_241_long_bodies_are_cut_to_500_characters() {
    let body = "é".repeat(800);
    let ep = Endpoint::with_replies([Reply::status(400, &body)]).unwrap();
    let e = fail(&ep, None).await;
    let excerpt = e.message.rsplit(": ").next().unwrap();
    assert_eq!(excerpt.chars().count(), 500);
}

#[tokio::test(start_paused = true)]
async fn item_241_dropped_connections_are_retried() {
    let ep = Endpoint::with_replies([Reply::HangUp, Reply::HangUp, Reply::completion_text("ok")])
        .unwrap();
    adapter(&ep).complete(ask("x")).await.unwrap();
    assert_eq!(ep.chat_requests().len(), 3);

    let ep = Endpoint::with_replies([Reply::HangUp, Reply::HangUp, Reply::HangUp]).unwrap();
    let e = fail(&ep, None).await;
    assert_eq!((e.code, e.retryable), (ErrorCode::Network, true));
    assert!(
        e.message
            .starts_with(&format!("cannot reach {}: ", ep.chat_url())),
        "{}",
        e.message
    );
    assert_eq!(ep.chat_requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn item_241_refused_connection_is_network() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = OpenAiProvider::new(ProviderOptions::new(format!("http://127.0.0.1:{port}/v1")))
        .unwrap()
        .adapter(ModelSpec::new("m"));
    let e = a.complete(ask("x")).await.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::Network, true));
    assert!(e.message.starts_with(&format!(
        "cannot reach http://127.0.0.1:{port}/v1/chat/completions: "
    )));
}

fn counting_key(counter: Arc<AtomicUsize>) -> ApiKey {
    ApiKey::Dynamic(Arc::new(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(Some(format!("key-{n}"))) })
    }))
}

#[tokio::test(start_paused = true)]
async fn item_242_dynamic_key_is_asked_once_per_attempt() {
    let ep = Endpoint::with_replies([Reply::status(401, "no")]).unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let mut opts = ProviderOptions::new(ep.base_url());
    opts.limits = TimeLimits::NONE;
    opts.api_key = Some(counting_key(asked.clone()));
    let p = OpenAiProvider::new(opts).unwrap();
    p.adapter(ModelSpec::new("m"))
        .complete(ask("x"))
        .await
        .unwrap_err();
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    ep.push_reply(Reply::status(500, "boom"));
    ep.push_reply(Reply::completion_text("ok"));
    p.adapter(ModelSpec::new("m"))
        .complete(ask("x"))
        .await
        .unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    let auth: Vec<String> = ep
        .chat_requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_owned())
        .collect();
    assert_eq!(auth, ["Bearer key-0", "Bearer key-1", "Bearer key-2"]);
}

#[tokio::test]
async fn item_242_dynamic_key_error_is_returned_as_is() {
    let ep = Endpoint::builder().start().unwrap();
    let mut opts = ProviderOptions::new(ep.base_url());
    opts.api_key = Some(ApiKey::Dynamic(Arc::new(|| {
        Box::pin(async { Err(AgentError::new(ErrorCode::Auth, "the vault is locked")) })
    })));
    let e = OpenAiProvider::new(opts)
        .unwrap()
        .adapter(ModelSpec::new("m"))
        .complete(ask("x"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::Auth, "the vault is locked")
    );
    assert_eq!(ep.request_count(), 0);
}

#[tokio::test]
async fn item_243_cancel_during_the_request() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::completion_text("late").held(&gate)]).unwrap();
    let a = Arc::new(adapter(&ep));
    let abort = AbortController::new();
    let request = ModelRequest {
        signal: abort.signal(),
        ..ask("x")
    };
    let task = tokio::spawn({
        let a = a.clone();
        async move { a.complete(request).await }
    });
    gate.reached().await;
    abort.abort(AbortReason::Cancel { reason: None });
    let e = task.await.unwrap().unwrap_err();
    assert_eq!(e.code, ErrorCode::Aborted);
    assert_eq!(ep.chat_requests().len(), 1);
    gate.open();
}

#[tokio::test]
async fn item_243_timeout_reason_is_network_no_answer_in_time() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::completion_text("late").held(&gate)]).unwrap();
    let a = Arc::new(adapter(&ep));
    let abort = AbortController::new();
    let request = ModelRequest {
        signal: abort.signal(),
        ..ask("x")
    };
    let task = tokio::spawn({
        let a = a.clone();
        async move { a.complete(request).await }
    });
    gate.reached().await;
    abort.abort(AbortReason::Timeout);
    let e = task.await.unwrap().unwrap_err();
    assert_eq!(
        (e.code, e.message.clone()),
        (
            ErrorCode::Network,
            format!("cannot reach {}: no answer in time", ep.chat_url())
        )
    );
    gate.open();
}

#[tokio::test(start_paused = true)]
async fn item_243_cancel_around_the_backoff_is_aborted_after_one_request() {
    let abort = AbortController::new();
    let fire = abort.clone();
    // The endpoint fires the cancel as it answers 500, so the adapter meets it at the backoff.
    let ep = Endpoint::builder()
        .respond_with(move |_| {
            fire.abort(AbortReason::Cancel { reason: None });
            Reply::status(500, "boom")
        })
        .start()
        .unwrap();
    let e = adapter(&ep)
        .complete(ModelRequest {
            signal: abort.signal(),
            ..ask("x")
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Aborted);
    // The endpoint records a request after answering it, so wait for that record rather than
    // racing it; a retry after the cancel would show as a second request.
    ep.wait_for_requests(1).await;
    assert_eq!(ep.chat_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_key_never_appears_in_an_error() {
    let key = "sk-live-0123456789abcdef";
    let ep = Endpoint::with_replies([
        Reply::status(401, &format!("Incorrect API key provided: {key}")),
        Reply::status(500, &format!("upstream rejected {key}")),
        Reply::status(500, &format!("upstream rejected {key}")),
        Reply::status(500, &format!("upstream rejected {key}")),
    ])
    .unwrap();
    let a = OpenAiProvider::new(ProviderOptions {
        limits: TimeLimits::NONE,
        ..ProviderOptions::new(ep.base_url()).with_key(key)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    for _ in 0..2 {
        let e = a.complete(ask("x")).await.unwrap_err();
        let shown = format!("{e} {e:?} {}", serde_json::to_string(&e).unwrap());
        assert!(!shown.contains(key), "the key leaked: {shown}");
        assert!(shown.contains("[redacted]"));
    }
    assert!(
        !format!(
            "{:?}",
            OpenAiProvider::new(ProviderOptions {
                limits: TimeLimits::NONE,
                ..ProviderOptions::new(ep.base_url()).with_key(key)
            })
            .unwrap()
        )
        .contains(key)
    );
}
