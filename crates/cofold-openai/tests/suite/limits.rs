//! Time limits on a paused clock: connect, first byte and idle gap each expire as a retryable
//! network error naming the limit, on whole and streamed requests alike. The endpoint never
//! answers in these tests, so the paused clock reaches each limit without racing anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{ModelAdapter, ModelSpec};
use cofold_openai::{ApiKey, OpenAiAdapter, OpenAiProvider, ProviderOptions, TimeLimits};
use testkit::{Endpoint, Frame, Gate, Reply, chunk};

use super::support::{ask, deltas, options, stream_all, stream_error};

fn limited(base_url: String, limits: TimeLimits, attempts: u32) -> OpenAiAdapter {
    OpenAiProvider::new(ProviderOptions {
        limits,
        retries: Some(attempts - 1),
        ..ProviderOptions::new(base_url)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"))
}

fn only(f: impl FnOnce(&mut TimeLimits)) -> TimeLimits {
    let mut l = TimeLimits::NONE;
    f(&mut l);
    l
}

fn assert_limit(e: &AgentError, words: &str) {
    assert_eq!((e.code, e.retryable), (ErrorCode::Network, true), "{e:?}");
    assert!(e.message.contains(words), "{}", e.message);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_never_stands_meets_the_connect_limit() {
    // A listener with a backlog of 0 queues one connection; once that one waits unaccepted, the
    // kernel drops every later SYN, so the adapter's connect neither succeeds nor fails.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let _queued = tokio::net::TcpStream::connect(addr).await.unwrap();
    let a = limited(
        format!("http://{addr}/v1"),
        only(|l| l.connect = Some(Duration::from_secs(10))),
        1,
    );
    let e = a.complete(ask("x")).await.unwrap_err();
    assert_limit(&e, "no connection within the connect limit of 10 s");
    assert!(
        e.message
            .starts_with(&format!("cannot reach http://{addr}/v1/chat/completions"))
    );
    drop(listener);
}

#[tokio::test(start_paused = true)]
async fn an_answer_that_never_starts_meets_the_first_byte_limit_on_every_attempt() {
    let gate = Gate::new();
    let held = gate.clone();
    let ep = Endpoint::builder()
        .respond_with(move |_| Reply::text_stream("late").held(&held))
        .start()
        .unwrap();
    // Attempts are counted where the key is asked for: the endpoint's own record of a request
    // can come after the paused clock has already expired the attempt.
    let attempts = Arc::new(AtomicUsize::new(0));
    let count = attempts.clone();
    let mut opts = ProviderOptions {
        limits: only(|l| l.first_byte = Some(Duration::from_secs(120))),
        retries: Some(2),
        ..ProviderOptions::new(ep.base_url())
    };
    opts.api_key = Some(ApiKey::Dynamic(Arc::new(move || {
        count.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(None) })
    })));
    let a = OpenAiProvider::new(opts)
        .unwrap()
        .adapter(ModelSpec::new("m"));
    let events = stream_all(&a, ask("x")).await;
    assert!(deltas(&events).is_empty());
    let e = stream_error(&events);
    assert_limit(&e, "sent nothing within the first-byte limit of 120 s");
    assert_eq!(attempts.load(Ordering::SeqCst), 3, "each expiry is retried");
    gate.open();
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_has_its_own_longer_limit() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::completion_text("late").held(&gate)]).unwrap();
    let a = limited(
        ep.base_url(),
        only(|l| {
            l.first_byte = Some(Duration::from_secs(120));
            l.whole = Some(Duration::from_secs(600));
        }),
        1,
    );
    let e = a.complete(ask("x")).await.unwrap_err();
    assert_limit(
        &e,
        "sent nothing within the limit for a whole answer of 600 s",
    );
    gate.open();
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_meets_the_idle_limit() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::stream([
        Frame::from(chunk::text("a")),
        Frame::Gate(gate.clone()),
        Frame::from(chunk::finish("stop")),
    ])])
    .unwrap();
    let a = limited(
        ep.base_url(),
        only(|l| l.idle = Some(Duration::from_secs(90))),
        1,
    );
    let events = stream_all(&a, ask("x")).await;
    assert_eq!(deltas(&events), ["t:a"]);
    assert_limit(
        &stream_error(&events),
        "stalled: nothing arrived for 90 s (the idle limit)",
    );
    gate.open();
}

#[tokio::test]
async fn the_defaults_are_documented_values() {
    let d = TimeLimits::default();
    assert_eq!(
        (d.connect, d.first_byte, d.idle, d.whole),
        (
            Some(Duration::from_secs(10)),
            Some(Duration::from_secs(120)),
            Some(Duration::from_secs(90)),
            Some(Duration::from_secs(600))
        )
    );
    // A healthy endpoint answers well within them.
    let ep = Endpoint::with_replies([Reply::text_stream("fine")]).unwrap();
    let a = OpenAiProvider::new(ProviderOptions {
        limits: TimeLimits::default(),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    assert_eq!(
        super::support::done(&stream_all(&a, ask("x")).await)
            .message
            .parts
            .len(),
        1
    );
}
