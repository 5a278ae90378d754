//! Streamed replies (runtime cases 245–251, docs/acceptance.md).

use cofold_agents::error::ErrorCode;
use cofold_agents::message::{Part, ToolCall};
use cofold_agents::model::{
    FinishReason, ModelAdapter, ModelFeatures, ModelRequest, ModelSpec, ModelStreamEvent, Usage,
};
use cofold_openai::{DEFAULT_FEATURES, OpenAiProvider, ProviderOptions};
use futures::StreamExt;
use serde_json::json;
use testkit::{Endpoint, Frame, Gate, Reply, chunk};

use super::support::{adapter, ask, deltas, done, options, stream_all, stream_error};

#[tokio::test]
async fn item_245_request_and_events() {
    let ep = Endpoint::with_replies([Reply::stream([
        chunk::role(),
        chunk::text("Hel"),
        chunk::text("lo"),
        chunk::finish("stop"),
        chunk::usage(12, 2),
    ])])
    .unwrap();
    let a = adapter(&ep);
    let tools = vec![cofold_agents::model::ModelToolDefinition {
        name: "t".into(),
        description: "d".into(),
        input: json!({ "type": "object" }),
    }];
    let events = stream_all(
        &a,
        ModelRequest {
            cache_key: Some("s1".into()),
            tools,
            ..ask("hi")
        },
    )
    .await;
    assert_eq!(deltas(&events), ["t:Hel", "t:lo"]);
    assert_eq!(events.len(), 3);
    let reply = done(&events);
    assert_eq!(reply.message.parts, vec![Part::text("Hello")]);
    assert_eq!(reply.finish, FinishReason::Stop);
    assert_eq!(reply.usage, Usage::new(12, 2));
    let body = &ep.chat_bodies()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({ "include_usage": true }));
    assert_eq!(body["prompt_cache_key"], "s1");
    assert_eq!(body["tool_choice"], "auto");
}

#[tokio::test]
async fn item_245_gates_and_no_stream_without_the_feature() {
    let ep = Endpoint::builder().start().unwrap();
    let p = OpenAiProvider::new(options(&ep)).unwrap();
    let no_tools = p.adapter(ModelSpec {
        features: Some(ModelFeatures {
            tools: false,
            ..DEFAULT_FEATURES
        }),
        ..ModelSpec::new("m")
    });
    let tools = vec![cofold_agents::model::ModelToolDefinition {
        name: "t".into(),
        description: "d".into(),
        input: json!({ "type": "object" }),
    }];
    let events = stream_all(&no_tools, ModelRequest { tools, ..ask("x") }).await;
    assert_eq!(stream_error(&events).code, ErrorCode::UnsupportedFeature);
    assert_eq!(events.len(), 1);
    assert_eq!(ep.request_count(), 0);
    let no_stream = p.adapter(ModelSpec {
        features: Some(ModelFeatures {
            streaming: false,
            ..DEFAULT_FEATURES
        }),
        ..ModelSpec::new("m")
    });
    assert!(no_stream.stream(ask("x")).is_none());
}

#[tokio::test(start_paused = true)]
async fn item_245_429_before_the_body_is_retried() {
    let ep =
        Endpoint::with_replies([Reply::status(429, "wait"), Reply::text_stream("fine")]).unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    assert_eq!(done(&events).message.parts, vec![Part::text("fine")]);
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn item_245_a_body_broken_mid_read_is_retried_without_passing_anything_twice() {
    let ep = Endpoint::with_replies([
        Reply::stream_exact([Frame::from(chunk::text("partial")), Frame::Cut]),
        Reply::stream([
            chunk::text("part"),
            chunk::text("ial and"),
            chunk::text(" more"),
            chunk::finish("stop"),
        ]),
    ])
    .unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    assert_eq!(deltas(&events), ["t:partial", "t: and", "t: more"]);
    assert_eq!(
        done(&events).message.parts,
        vec![Part::text("partial and more")]
    );
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn item_245_a_retry_that_contradicts_what_was_shown_ends_the_stream() {
    let ep = Endpoint::with_replies([
        Reply::stream_exact([Frame::from(chunk::text("partial")), Frame::Cut]),
        Reply::text_stream("something else"),
    ])
    .unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    assert_eq!(deltas(&events), ["t:partial"]);
    let e = stream_error(&events);
    assert_eq!((e.code, e.retryable), (ErrorCode::Network, false));
    assert!(
        e.message.contains("broke off") && e.message.contains("the retry answered differently"),
        "{}",
        e.message
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Ok(ModelStreamEvent::Done { .. })))
    );
}

#[tokio::test]
async fn item_246_deltas_arrive_as_they_are_sent() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::stream([
        Frame::from(chunk::text("first")),
        Frame::Gate(gate.clone()),
        Frame::from(chunk::text(" second")),
        Frame::from(chunk::finish("stop")),
    ])])
    .unwrap();
    let a = adapter(&ep);
    let mut s = a.stream(ask("x")).unwrap();
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(
        first,
        ModelStreamEvent::TextDelta {
            text: "first".into()
        }
    );
    assert!(
        !gate.is_open(),
        "the first delta came before the rest was sent"
    );
    gate.open();
    let rest: Vec<_> = s.collect().await;
    assert_eq!(rest.len(), 2);
    let reply = done(&rest);
    assert_eq!(reply.message.parts, vec![Part::text("first second")]);
    let raw = reply.raw.unwrap();
    assert_eq!(raw.as_array().unwrap().len(), 3, "raw keeps every chunk");
}

#[tokio::test]
async fn a_provider_told_to_skip_raw_keeps_no_chunk_and_still_counts_them() {
    let ep = Endpoint::with_replies([
        Reply::text_stream("a whole answer"),
        Reply::stream(vec![
            Frame::from(chunk::role()),
            Frame::from(chunk::text("cut")),
        ]),
    ])
    .unwrap();
    let a = OpenAiProvider::new(ProviderOptions {
        skip_stream_raw: true,
        retries: Some(0),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    let events = stream_all(&a, ask("x")).await;
    let reply = done(&events);
    assert_eq!(reply.message.parts, vec![Part::text("a whole answer")]);
    assert_eq!(reply.raw, None, "no chunk was kept for raw");
    // A cut stream still says how many chunks came before it broke off.
    let events = stream_all(&a, ask("x")).await;
    let Some(Err(e)) = events.last() else {
        panic!("a cut stream fails: {events:?}");
    };
    assert!(e.message.contains("after 2 chunks"), "{}", e.message);
}

#[tokio::test]
async fn item_246_tool_call_over_four_chunks_and_interleaved_calls() {
    let mut frames: Vec<Frame> =
        chunk::tool_call_split(0, "call_a", "echo", &["{\"te", "xt\":", "\"hi", "\"}"])
            .into_iter()
            .map(Frame::from)
            .collect();
    frames.push(Frame::from(chunk::tool_call(
        2,
        Some("call_c"),
        Some("late"),
        "{}",
    )));
    frames.push(Frame::from(chunk::tool_call(
        1,
        Some("call_b"),
        Some("other"),
        "[1,",
    )));
    frames.push(Frame::from(chunk::tool_call(1, None, None, "2]")));
    frames.push(Frame::from(chunk::finish("stop")));
    let ep = Endpoint::with_replies([Reply::stream(frames)]).unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    assert_eq!(
        deltas(&events),
        [
            "c0:call_a:echo:{\"te",
            "c0:::xt\":",
            "c0:::\"hi",
            "c0:::\"}",
            "c2:call_c:late:{}",
            "c1:call_b:other:[1,",
            "c1:::2]"
        ]
    );
    let reply = done(&events);
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(
        reply.message.parts,
        vec![
            Part::ToolCall(ToolCall::from_input(
                "call_a",
                "echo",
                json!({ "text": "hi" })
            )),
            Part::ToolCall(ToolCall::from_input("call_b", "other", json!([1, 2]))),
            Part::ToolCall(ToolCall::from_input("call_c", "late", json!({}))),
        ]
    );
}

#[tokio::test]
async fn item_246_non_json_arguments_keep_raw_and_get_a_minted_id() {
    let ep = Endpoint::with_replies([Reply::stream([
        chunk::tool_call(0, None, Some("echo"), "oops{"),
        chunk::finish("tool_calls"),
    ])])
    .unwrap();
    let reply = done(&stream_all(&adapter(&ep), ask("x")).await);
    let Part::ToolCall(c) = &reply.message.parts[0] else {
        panic!("a call")
    };
    assert_eq!(
        (c.raw.as_str(), c.input.is_none(), c.call_id.len()),
        ("oops{", true, 36)
    );
    assert_eq!(reply.usage, Usage::default());
}

#[tokio::test]
async fn item_247_reasoning_fields_turn_the_splitter_off() {
    for field in ["reasoning_content", "reasoning"] {
        let r = |t: &str| chunk::with_choice(json!({ field: t }), None);
        let ep = Endpoint::with_replies([Reply::stream([
            r("think"),
            r(" more"),
            chunk::text("<think>not reasoning</think>"),
            chunk::finish("stop"),
        ])])
        .unwrap();
        let events = stream_all(&adapter(&ep), ask("x")).await;
        assert_eq!(
            deltas(&events),
            ["r:think", "r: more", "t:<think>not reasoning</think>"],
            "{field}"
        );
        assert_eq!(
            done(&events).message.parts,
            vec![
                Part::reasoning("think more"),
                Part::text("<think>not reasoning</think>")
            ]
        );
    }
}

async fn split_stream(pieces: &[&str]) -> Vec<String> {
    let mut frames: Vec<Frame> = pieces.iter().map(|p| Frame::from(chunk::text(p))).collect();
    frames.push(Frame::from(chunk::finish("stop")));
    let ep = Endpoint::with_replies([Reply::stream(frames)]).unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    let reply = done(&events);
    let mut d = deltas(&events);
    d.push(format!("parts={:?}", reply.message.parts));
    d
}

#[tokio::test]
async fn item_248_think_block_split_across_chunks_equals_complete() {
    let got = split_stream(&["<thi", "nk>plan", "</thi", "nk>", "\n\nanswer"]).await;
    assert_eq!(got[..2], ["r:plan".to_owned(), "t:answer".to_owned()]);
    // The same content whole, through `complete`.
    let ep =
        Endpoint::with_replies([Reply::completion_text("<think>plan</think>\n\nanswer")]).unwrap();
    let whole = adapter(&ep).complete(ask("x")).await.unwrap();
    assert_eq!(got[2], format!("parts={:?}", whole.message.parts));

    let one = split_stream(&["<think>a</think>b"]).await;
    assert_eq!(one[..2], ["r:a".to_owned(), "t:b".to_owned()]);
    let thead = split_stream(&["  <th", "ead>x"]).await;
    assert_eq!(thead[0], "t:  <thead>x");
    let undecided = split_stream(&[" ", "<thin"]).await;
    assert_eq!(undecided[0], "t: <thin");
    let unclosed = split_stream(&["<think>never", " closed"]).await;
    assert_eq!(
        unclosed[..2],
        ["r:never".to_owned(), "r: closed".to_owned()]
    );
}

#[tokio::test]
async fn item_249_no_finish_reason_and_length() {
    let ep = Endpoint::with_replies([
        Reply::stream([chunk::text("x"), chunk::finish("eos")]),
        Reply::stream([
            chunk::text("y"),
            chunk::finish("length"),
            chunk::usage_value(json!({ "prompt_tokens": 3, "completion_tokens": 4, "completion_tokens_details": { "reasoning_tokens": 2 } })),
        ]),
    ])
    .unwrap();
    let a = adapter(&ep);
    let r = done(&stream_all(&a, ask("1")).await);
    assert_eq!((r.finish, r.usage), (FinishReason::Other, Usage::default()));
    let r = done(&stream_all(&a, ask("2")).await);
    assert_eq!(r.finish, FinishReason::Length);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 3,
            output_tokens: 4,
            reasoning_tokens: Some(2),
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn item_250_done_non_json_and_error_chunks() {
    let ep = Endpoint::with_replies([
        Reply::stream_exact([
            Frame::from(chunk::text("a")),
            Frame::from(chunk::finish("stop")),
            Frame::Done,
            Frame::from(chunk::text("ignored")),
            Frame::raw("data: {broken\n\n"),
        ]),
        Reply::stream_exact([
            Frame::from(chunk::text("a")),
            Frame::raw("data: {broken\n\n"),
            Frame::from(chunk::text("b")),
        ]),
        Reply::stream([
            Frame::from(chunk::text("a")),
            Frame::from(chunk::error("Provider returned error")),
        ]),
    ])
    .unwrap();
    let a = adapter(&ep);
    let events = stream_all(&a, ask("1")).await;
    assert_eq!(done(&events).message.parts, vec![Part::text("a")]);

    let events = stream_all(&a, ask("2")).await;
    assert_eq!(deltas(&events), ["t:a"]);
    let e = stream_error(&events);
    assert_eq!(e.code, ErrorCode::InvalidResponse);
    assert!(
        e.message.contains("not JSON") && e.message.contains("{broken"),
        "{}",
        e.message
    );

    // An error chunk is retryable; one attempt shows the error itself.
    let once = OpenAiProvider::new(ProviderOptions {
        retries: Some(0),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    let events = stream_all(&once, ask("3")).await;
    let e = stream_error(&events);
    assert!(e.retryable);
    assert_eq!(
        (e.code, e.message.clone()),
        (
            ErrorCode::Server,
            format!(
                "{} reported an error: Provider returned error",
                ep.chat_url()
            )
        )
    );
}

#[tokio::test]
async fn item_251_sse_over_http_with_crlf_comments_and_split_characters() {
    let euro = "€".as_bytes();
    let c1 = chunk::text("pri").to_string();
    let (h1, h2) = c1.split_at(10);
    let mut second = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ce: 5".to_vec();
    second.extend_from_slice(&euro[..2]);
    let ep = Endpoint::with_replies([Reply::stream_exact([
        Frame::raw("\u{feff}: hello\r\n"),
        Frame::raw("event: message\r\nid: 1\r\nretry: 5\r"),
        Frame::raw(format!("\ndata: {h1}")),
        Frame::raw(format!("{h2}\r\n\r\n")),
        Frame::bytes(second),
        Frame::bytes([&euro[2..], b"\"}}]}\n\n" as &[u8]].concat()),
        Frame::from(chunk::finish("stop")),
        Frame::raw("data: [DONE]"),
    ])])
    .unwrap();
    let events = stream_all(&adapter(&ep), ask("x")).await;
    assert_eq!(deltas(&events), ["t:pri", "t:ce: 5€"]);
    done(&events);
}

#[tokio::test]
async fn item_251_dropping_the_stream_releases_the_body() {
    let gate = Gate::new();
    let ep = Endpoint::with_replies([Reply::stream([
        Frame::from(chunk::text("one")),
        Frame::Gate(gate.clone()),
        Frame::from(chunk::text("two")),
    ])])
    .unwrap();
    let a = adapter(&ep);
    let mut s = a.stream(ask("x")).unwrap();
    assert!(matches!(
        s.next().await,
        Some(Ok(ModelStreamEvent::TextDelta { .. }))
    ));
    drop(s);
    ep.wait_for_closed_connections(1).await;
    assert_eq!(ep.closed_connections(), 1);
}

#[tokio::test]
async fn item_251_read_error_comes_after_the_events_already_read() {
    let ep = Endpoint::with_replies([Reply::stream_exact([
        Frame::raw(format!(
            "data: {}\n\ndata: {}\n\n",
            chunk::text("a"),
            chunk::text("b")
        )),
        Frame::Cut,
    ])])
    .unwrap();
    let once = OpenAiProvider::new(ProviderOptions {
        retries: Some(0),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    let events = stream_all(&once, ask("x")).await;
    assert_eq!(deltas(&events), ["t:a", "t:b"]);
    let e = stream_error(&events);
    assert_eq!((e.code, e.retryable), (ErrorCode::Network, true));
}

#[tokio::test]
async fn a_stream_that_ends_without_done_still_finishes() {
    let ep = Endpoint::with_replies([Reply::stream_exact([
        chunk::text("a"),
        chunk::finish("stop"),
    ])])
    .unwrap();
    let reply = done(&stream_all(&adapter(&ep), ask("x")).await);
    assert_eq!(
        (reply.message.parts, reply.finish),
        (vec![Part::text("a")], FinishReason::Stop)
    );
}
