//! What a turn takes from the model's cached catalogue entry: its price, its window and its
//! image support.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{Message, MessageKind, MessageOrigin, ResponsePart};
use ahpd_sdk::Agent;
use serde_json::{Value, json};
use testkit::{Frame, Reply, chunk};

use super::support::*;

/// An endpoint whose catalogue lists `m` with this entry's extra fields, answering `replies`.
fn listed(entry: Value, replies: Vec<Reply>) -> testkit::Endpoint {
    let mut model = json!({ "id": "m", "name": "M" });
    if let (Some(model), Some(extra)) = (model.as_object_mut(), entry.as_object()) {
        for (k, v) in extra {
            model.insert(k.clone(), v.clone());
        }
    }
    testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [model] }))
        .replies(replies)
        .start()
        .expect("endpoint starts")
}

fn usages(w: &Watch) -> Vec<ahp_types::state::UsageInfo> {
    w.chat_actions()
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatUsage(u) => Some(u.usage.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_128_130_a_catalogue_price_gives_the_turn_its_cost() {
    // Items 128 (running totals, cost last) and 130.
    let place = Place::new();
    let step = |prompt: u64, completion: u64, with_call: bool| {
        let mut frames = vec![Frame::Chunk(chunk::role())];
        if with_call {
            frames.push(Frame::Chunk(chunk::tool_call(
                0,
                Some("c1"),
                Some("list_files"),
                "{\"pattern\":\"*\"}",
            )));
            frames.push(Frame::Chunk(chunk::finish("tool_calls")));
        } else {
            frames.push(Frame::Chunk(chunk::text("priced")));
            frames.push(Frame::Chunk(chunk::finish("stop")));
        }
        frames.push(Frame::Chunk(chunk::usage(prompt, completion)));
        Reply::stream(frames)
    };
    let ep = listed(
        json!({ "pricing": { "prompt": "0.000003", "completion": "0.000015" } }),
        vec![
            step(100, 20, false),
            step(100, 20, true),
            step(50, 10, false),
        ],
    );
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    // The probe reads the catalogue; turns read the price from its cache.
    agent.probe().await;
    let th = host(vec![agent.clone()]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("cost"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "what does it cost").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let paths: Vec<String> = ep
        .requests()
        .iter()
        .map(|r| r.path.rsplit('/').next().unwrap_or("").to_owned())
        .collect();
    assert_eq!(paths, ["models", "completions"]);
    let seen = usages(&w);
    let last = seen.last().expect("a usage");
    assert_eq!(
        (last.input_tokens, last.output_tokens),
        (Some(100), Some(20))
    );
    let meta = serde_json::to_value(&last.meta).unwrap();
    assert_eq!(
        meta,
        json!({ "ahpd.cost": { "amount": 0.0006, "currency": "USD" } })
    );
    for earlier in &seen[..seen.len() - 1] {
        assert!(earlier.meta.is_none(), "cost on the last usage only");
    }
    w.assert_mirror(&th).await;

    // Two steps: running totals, then the run's total with its cost; the catalogue is not asked
    // again, the same transport serves the turn.
    w.send("t2", "and two steps").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let seen: Vec<_> = usages(&w).into_iter().skip(seen.len()).collect();
    let totals: Vec<(Option<i64>, Option<i64>)> = seen
        .iter()
        .map(|u| (u.input_tokens, u.output_tokens))
        .collect();
    assert_eq!(totals[..2], [(Some(100), Some(20)), (Some(150), Some(30))]);
    assert!(seen[..2].iter().all(|u| u.meta.is_none()));
    let last = seen.last().unwrap();
    assert_eq!(
        (last.input_tokens, last.output_tokens),
        (Some(150), Some(30))
    );
    assert_eq!(
        serde_json::to_value(&last.meta).unwrap(),
        json!({ "ahpd.cost": { "amount": 0.0009, "currency": "USD" } })
    );
    assert_eq!(ep.requests().iter().filter(|r| r.is_models()).count(), 1);
    let actions = w.chat_actions();
    let complete = actions
        .iter()
        .rposition(|a| matches!(a, StateAction::ChatTurnComplete(_)))
        .unwrap();
    let last_usage = actions
        .iter()
        .rposition(|a| matches!(a, StateAction::ChatUsage(_)))
        .unwrap();
    assert!(last_usage < complete);
    w.assert_mirror(&th).await;
}

fn notices(parts: &[ResponsePart]) -> Vec<String> {
    parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::SystemNotification(n) => Some(match &n.content {
                StringOrMarkdown::Plain(s) => s.clone(),
                other => format!("{other:?}"),
            }),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_059_131_132_a_long_history_is_compacted_with_one_notice() {
    // Item 132 (and 131's 10000-window point).
    let place = Place::new();
    let store = place.home.join("store");
    let ep = listed(
        json!({ "context_length": 10000 }),
        vec![
            text("first answer"),
            // The summary step asks for a whole reply.
            Reply::completion_text("SUMMARY-OF-IT-ALL"),
            text("second answer"),
        ],
    );
    let agent = Arc::new(agent(
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    agent.probe().await;
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("compact");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", &"a".repeat(20000)).await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        ep.chat_bodies().len(),
        1,
        "a short history is not compacted"
    );
    w.send("t2", &"b".repeat(32004)).await;
    let end = w.end("t2").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    w.assert_mirror(&th).await;

    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3, "the summary request, then the turn's");
    assert!(request_text(&bodies[2]).contains("SUMMARY-OF-IT-ALL"));
    // The summary is never streamed or shown.
    for action in w.chat_actions() {
        let text = serde_json::to_string(action).unwrap();
        assert!(!text.contains("SUMMARY-OF-IT-ALL"), "{text}");
    }
    let chat = w.chat_state();
    let last = chat.turns.last().expect("t2 in the history");
    let live = notices(&last.response_parts);
    assert_eq!(live.len(), 1, "{live:?}");
    assert!(
        live[0].starts_with("Context compacted automatically: ") && live[0].ends_with('.'),
        "{live:?}"
    );
    assert!(
        live[0].contains(" tokens to "),
        "the event's numbers: {live:?}"
    );
    let answered = last
        .response_parts
        .iter()
        .any(|p| matches!(p, ResponsePart::Markdown(m) if m.content == "second answer"));
    assert!(answered);

    // One summary stored, the same notice read back.
    let stored = cofold_store_file::FileStore::open(
        store.clone(),
        cofold_store_file::FileStoreOptions::default(),
    )
    .unwrap();
    use cofold_agents::store::Store;
    let summaries = stored
        .list_messages(&id, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.source == cofold_agents::message::MessageSource::Summary)
        .count();
    assert_eq!(summaries, 1);
    let turns = agent.transcript(&id).await.unwrap();
    let read: Vec<String> = turns
        .iter()
        .flat_map(|t| notices(&t.response_parts))
        .collect();
    assert_eq!(read, live);
    let read_text = serde_json::to_string(&turns).unwrap();
    assert!(!read_text.contains("SUMMARY-OF-IT-ALL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_133_135_a_pasted_image_is_an_image_part_for_a_model_that_takes_images() {
    // Item 133, the image-capable half, and 135's steering message with an image.
    let place = Place::new();
    let gate = testkit::Gate::new();
    let ep = listed(
        // cofold-openai reads the modalities of entries that list their parameters, as OpenRouter's do.
        json!({ "supported_parameters": ["tools"], "architecture": { "input_modalities": ["text", "image"] } }),
        vec![
            text("a picture"),
            call("c1", "list_files", json!({ "pattern": "*" })).held(&gate),
            text("seen it"),
        ],
    );
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    agent.probe().await;
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("image");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    let message = Message {
        text: "look".into(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: Some(
            serde_json::from_value(json!([
                { "type": "embeddedResource", "label": "shot.png", "contentType": "image/png", "data": "iVBO" }
            ]))
            .unwrap(),
        ),
        model: None,
        agent: None,
        meta: None,
    };
    w.send_message("t1", message).await;
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    let body = &ep.chat_bodies()[0];
    let user = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap();
    let parts = user["content"].as_array().expect("content parts");
    assert_eq!(parts[0]["type"], "text");
    assert_eq!(parts[0]["text"], "look");
    let image = parts
        .iter()
        .find(|p| p["type"] == "image_url")
        .unwrap_or_else(|| panic!("an image part in {user}"));
    assert_eq!(image["image_url"]["url"], "data:image/png;base64,iVBO");
    assert!(
        !place
            .home
            .join(".copilot/chats")
            .join(&id)
            .join("attachments")
            .exists(),
        "nothing written for a model that takes images"
    );
    w.assert_mirror(&th).await;

    // A steering message's image reaches the step after it is written, as an image part.
    w.send("t2", "list them").await;
    gate.reached().await;
    let steer: StateAction = serde_json::from_value(json!({
        "type": "chat/pendingMessageSet", "kind": "steering", "id": "s1",
        "message": { "text": "and this one", "origin": { "kind": "user" }, "attachments": [
            { "type": "embeddedResource", "label": "two.png", "contentType": "image/png", "data": "iVBP" }
        ] }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), steer).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    gate.open();
    let end = w.end("t2").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(!request_text(&bodies[1]).contains("iVBP"));
    let steered = bodies[2]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user" && m.to_string().contains("and this one"))
        .cloned()
        .unwrap_or_else(|| panic!("the steer in {}", bodies[2]));
    assert!(
        steered["content"].as_array().is_some_and(|parts| parts
            .iter()
            .any(|p| p["image_url"]["url"] == "data:image/png;base64,iVBP")),
        "{steered}"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_128_running_totals_carry_cache_tokens_and_the_cost_comes_last() {
    // Item 128, on an embedder's adapter that reports cache-write tokens (the OpenAI-compatible
    // adapter reads none from the wire).
    use cofold_agents::model::{ModelPricing, Usage};
    use cofold_agents::testing::{FakeModel, FakeOptions, FakeStep};
    let place = Place::new();
    let usage = |input, output, read, write| Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: read,
        cache_write_tokens: write,
        reasoning_tokens: None,
    };
    let model = FakeModel::with_options(FakeOptions {
        script: vec![
            FakeStep::tool_call("list_files", json!({ "pattern": "*" }))
                .with_usage(usage(100, 20, None, None)),
            FakeStep::text("done").with_usage(usage(50, 10, Some(5), Some(7))),
        ],
        stream: true,
        pricing: Some(ModelPricing {
            input_per_million: 3.0,
            output_per_million: 15.0,
            cache_read_per_million: None,
            cache_write_per_million: None,
            currency: "USD".into(),
        }),
        ..FakeOptions::default()
    });
    let mut embedder = place.embedder();
    embedder.adapter = Some(model.adapter());
    let agent = Arc::new(agent(json!({ "memory": true, "model": "m" }), embedder));
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("cache"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "count").await;
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    let seen = usages(&w);
    let tallies: Vec<(Option<i64>, Option<i64>, Option<i64>)> = seen
        .iter()
        .map(|u| (u.input_tokens, u.output_tokens, u.cache_read_tokens))
        .collect();
    assert_eq!(
        tallies[..2],
        [(Some(100), Some(20), None), (Some(150), Some(30), Some(5))]
    );
    assert!(seen[0].meta.is_none());
    assert_eq!(
        serde_json::to_value(&seen[1].meta).unwrap(),
        json!({ "ahpd.cacheWriteTokens": 7 })
    );
    let last = seen.last().unwrap();
    assert_eq!(
        (
            last.input_tokens,
            last.output_tokens,
            last.cache_read_tokens
        ),
        (Some(150), Some(30), Some(5))
    );
    assert_eq!(
        serde_json::to_value(&last.meta).unwrap(),
        json!({ "ahpd.cacheWriteTokens": 7, "ahpd.cost": { "amount": 0.0009, "currency": "USD" } })
    );
    w.assert_mirror(&th).await;
}
