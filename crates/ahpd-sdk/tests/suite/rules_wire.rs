//! the host rules (docs/protocol.md) about what goes over the wire: 2, 4, 16, 17, 18, 22, 23, 24, 25, 27. Raw frames
//! where the official client would hide the mistake.

use ahp_types::actions::*;
use ahp_types::commands::CompletionsResult;
use ahp_types::state::*;
use ahpd_sdk::agent::*;
use ahpd_sdk::testing::{Mirror, ScriptedAgent};
use serde_json::{Value, json};

use super::puppet::*;
use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

/// Every `action` notification decodes as a known action; returns the envelope.
fn envelope(frame: &Value) -> ActionEnvelope {
    let env: ActionEnvelope =
        serde_json::from_value(frame["params"].clone()).expect("an action envelope");
    assert!(
        !matches!(env.action, StateAction::Unknown(_)),
        "decoded as Unknown: {frame}"
    );
    env
}

/// Read raw frames until one satisfies `stop`; every frame read is kept.
async fn frames_until(raw: &mut Raw, seen: &mut Vec<Value>, stop: impl Fn(&Value) -> bool) {
    loop {
        let f = raw.recv().await.expect("the connection stays open");
        let done = stop(&f);
        seen.push(f);
        if done {
            return;
        }
    }
}

fn is_action(f: &Value, kind: &str) -> bool {
    f["method"] == "action" && f["params"]["action"]["type"] == kind
}

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn dispatch(seq: i64, channel: &str, action: Value) -> String {
    json!({"jsonrpc": "2.0", "method": "dispatchAction",
           "params": {"channel": channel, "clientSeq": seq, "action": action}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_02_every_notification_names_its_channel() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("r2").await;
    let session = "mock:/r2";
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let mut seen = Vec::new();
    raw.send(&request(2, "subscribe", json!({"channel": "ahp-root://"})))
        .await;
    frames_until(&mut raw, &mut seen, |f| f["id"] == 2).await;
    raw.send(&request(3, "createSession", json!({"channel": session})))
        .await;
    frames_until(&mut raw, &mut seen, |f| f["id"] == 3).await;
    for (id, ch) in [(4, session.to_owned()), (5, chat.clone())] {
        raw.send(&request(id, "subscribe", json!({"channel": ch})))
            .await;
        frames_until(&mut raw, &mut seen, |f| f["id"] == id).await;
    }
    raw.send(&dispatch(
        1,
        &chat,
        json!({"type": "chat/turnStarted", "turnId": "t", "message": {"text": "tool"}}),
    ))
    .await;
    frames_until(&mut raw, &mut seen, |f| is_action(f, "chat/turnComplete")).await;
    raw.send(&dispatch(
        2,
        session,
        json!({"type": "session/titleChanged", "title": "Renamed"}),
    ))
    .await;
    frames_until(&mut raw, &mut seen, |f| {
        is_action(f, "session/titleChanged")
    })
    .await;
    let mut kinds = std::collections::BTreeSet::new();
    for f in seen.iter().filter(|f| f.get("method").is_some()) {
        let method = f["method"].as_str().unwrap();
        let channel = f["params"]["channel"].as_str().unwrap_or("<none>");
        let expected = if method == "action" {
            let env = envelope(f);
            let kind = f["params"]["action"]["type"].as_str().unwrap().to_owned();
            let expected = match kind.split('/').next() {
                Some("root") => "ahp-root://".to_owned(),
                Some("session") => session.to_owned(),
                Some("chat") => chat.clone(),
                _ => panic!("{kind}"),
            };
            assert_eq!(env.channel, expected);
            kinds.insert(kind);
            expected
        } else {
            assert!(method.starts_with("root/"), "{f}");
            "ahp-root://".to_owned()
        };
        assert_eq!(channel, expected, "{f}");
    }
    // The run went through every kind of channel.
    for k in [
        "root/activeSessionsChanged",
        "session/chatUpdated",
        "session/titleChanged",
        "chat/turnStarted",
        "chat/toolCallReady",
        "chat/turnComplete",
    ] {
        assert!(kinds.contains(k), "{k} not seen: {kinds:?}");
    }
    for m in ["root/sessionAdded", "root/sessionSummaryChanged"] {
        assert!(seen.iter().any(|f| f["method"] == m), "{m} not seen");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_04_payloads_are_complete_both_ways() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("r4").await;
    let session = "mock:/r4";
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let mut seen = Vec::new();
    raw.send(&request(2, "createSession", json!({"channel": session})))
        .await;
    frames_until(&mut raw, &mut seen, |f| f["id"] == 2).await;
    for (id, ch) in [(3, session.to_owned()), (4, chat.clone())] {
        raw.send(&request(id, "subscribe", json!({"channel": ch})))
            .await;
        frames_until(&mut raw, &mut seen, |f| f["id"] == id).await;
    }
    // Incomplete inbound payloads, as clients in the wild send them: no startedAt, no origin,
    // no turnId or confirmed on a confirmation, no origin on a queued message.
    raw.send(&dispatch(
        1,
        &chat,
        json!({"type": "chat/turnStarted", "turnId": "a1", "message": {"text": "ask"}}),
    ))
    .await;
    frames_until(&mut raw, &mut seen, |f| {
        is_action(f, "session/inputNeededSet")
    })
    .await;
    raw.send(&dispatch(
        2,
        &chat,
        json!({"type": "chat/pendingMessageSet", "kind": "queued", "id": "q1",
               "message": {"text": "later"}}),
    ))
    .await;
    frames_until(&mut raw, &mut seen, |f| {
        is_action(f, "chat/pendingMessageSet")
    })
    .await;
    raw.send(&dispatch(
        3,
        &chat,
        json!({"type": "chat/toolCallConfirmed", "toolCallId": "call-a1", "approved": true}),
    ))
    .await;
    // The queued message then runs as its own turn.
    frames_until(&mut raw, &mut seen, |f| {
        is_action(f, "chat/turnComplete") && f["params"]["action"]["turnId"] != "a1"
    })
    .await;
    let echo = |seq: i64| {
        seen.iter()
            .find(|f| f["method"] == "action" && f["params"]["origin"]["clientSeq"] == seq)
            .map(envelope)
            .unwrap_or_else(|| panic!("no echo of {seq}"))
    };
    match echo(1).action {
        StateAction::ChatTurnStarted(s) => {
            assert!(ahpd_sdk::util::is_rfc3339(&s.started_at));
            assert_eq!(s.message.origin.kind, MessageKind::User);
        }
        other => panic!("{other:?}"),
    }
    match echo(2).action {
        StateAction::ChatPendingMessageSet(p) => {
            assert_eq!(p.message.origin.kind, MessageKind::User)
        }
        other => panic!("{other:?}"),
    }
    match echo(3).action {
        StateAction::ChatToolCallConfirmed(c) => {
            assert_eq!(c.turn_id, "a1");
            assert_eq!(c.confirmed, Some(ToolCallConfirmationReason::UserAction));
        }
        other => panic!("{other:?}"),
    }
    // Outbound: every action the host wrote decodes whole (`envelope` checks Unknown).
    let actions = seen.iter().filter(|f| f["method"] == "action").count();
    for f in seen.iter().filter(|f| f["method"] == "action") {
        envelope(f);
    }
    assert!(actions > 10, "{actions}");
    let snap = th.host.snapshot(&chat).await.unwrap();
    let SnapshotState::Chat(state) = snap.state else {
        panic!()
    };
    assert_eq!(state.turns.len(), 2);
    assert!(state.turns.iter().all(|t| t.state == TurnState::Complete));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_16_config_is_always_present_so_config_changes_reduce() {
    // The puppet has an empty schema and no defaults: its session still carries `config`.
    let (th, a, mut w, session, _chat) =
        pup_host(Puppet::new(|_t: TurnRequest, _c: SessionContext| async {})).await;
    let snap = th.host.snapshot(&session).await.unwrap();
    let SnapshotState::Session(s) = snap.state else {
        panic!()
    };
    let config = s.config.expect("session config present");
    assert!(config.schema.properties.is_empty());
    let (r, _) = a.subscribe("ahp-root://".into()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    assert!(
        w.mirror.root.as_ref().unwrap().config.is_some(),
        "root config present"
    );
    a.dispatch(
        "ahp-root://".into(),
        action(json!({"type": "root/configChanged", "config": {"theme": "dark"}})),
    )
    .await
    .unwrap();
    let echo = w
        .until(|e| matches!(e.action, StateAction::RootConfigChanged(_)))
        .await;
    assert!(echo.rejection_reason.is_none());
    assert_eq!(
        w.mirror
            .root
            .as_ref()
            .unwrap()
            .config
            .as_ref()
            .unwrap()
            .values["theme"],
        json!("dark"),
        "the change reduced"
    );
    assert_mirror(&th, &mut w, &["ahp-root://", &session]).await;
    // A session whose agent has a schema: the client's change reduces there too.
    let _: Value = a
        .request("createSession", json!({"channel": "mock:/r16"}))
        .await
        .unwrap();
    let (r, _) = a.subscribe("mock:/r16".into()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    a.dispatch(
        "mock:/r16".into(),
        action(json!({"type": "session/configChanged", "config": {"permissionMode": "plan"}})),
    )
    .await
    .unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionConfigChanged(_)))
        .await;
    assert_eq!(
        w.mirror.sessions["mock:/r16"]
            .config
            .as_ref()
            .unwrap()
            .values["permissionMode"],
        json!("plan")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_17_required_schema_and_summary_fields_are_present() {
    let th = start_with(ScriptedAgent::new().with_history("past", 1), |b| {
        b.agent(std::sync::Arc::new(Puppet::new(
            |_t: TurnRequest, _c: SessionContext| async {},
        )))
    })
    .await;
    let mut raw = Raw::connect(&th.url).await;
    let init = raw
        .call(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "r17",
                "initialSubscriptions": ["ahp-root://"]}})
            .to_string(),
        )
        .await;
    let root = &init["result"]["snapshots"][0]["state"];
    let agents = root["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    for agent in agents {
        assert!(agent["description"].is_string(), "description: {agent}");
    }
    assert_eq!(agents[1]["description"], "", "empty, never absent");
    serde_json::from_value::<RootState>(root.clone()).expect("the root decodes");
    let mut seen = Vec::new();
    raw.send(&request(
        2,
        "createSession",
        json!({"channel": "mock:/r17"}),
    ))
    .await;
    frames_until(&mut raw, &mut seen, |f| f["id"] == 2).await;
    let added = seen
        .iter()
        .find(|f| f["method"] == "root/sessionAdded")
        .unwrap();
    assert!(added["params"]["summary"]["createdAt"].is_string());
    let sub = raw
        .call(&request(3, "subscribe", json!({"channel": "mock:/r17"})))
        .await;
    let state = &sub["result"]["snapshot"]["state"];
    for (key, prop) in state["config"]["schema"]["properties"].as_object().unwrap() {
        assert!(prop["type"].is_string(), "{key}: type");
        assert!(prop["title"].is_string(), "{key}: title");
    }
    for c in state["chats"].as_array().unwrap() {
        assert!(c["modifiedAt"].is_string(), "chat modifiedAt: {c}");
    }
    serde_json::from_value::<SessionState>(state.clone()).expect("the session decodes");
    let listed = raw.call(&request(4, "listSessions", json!({}))).await;
    let items = listed["result"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "live and past");
    for row in items {
        assert!(row["createdAt"].is_string(), "createdAt: {row}");
        assert!(row["modifiedAt"].is_string(), "modifiedAt: {row}");
        serde_json::from_value::<SessionSummary>(row.clone()).expect("a row decodes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_18_replay_replies_carry_missing_even_when_empty() {
    let th = start().await;
    let mut first = Raw::connect(&th.url).await;
    let init = first.init("r18").await;
    let seen_seq = init["result"]["serverSeq"].as_u64().unwrap();
    first
        .call(&request(
            2,
            "createSession",
            json!({"channel": "mock:/r18"}),
        ))
        .await;
    drop(first);
    let mut again = Raw::connect(&th.url).await;
    let r = again
        .call(&request(
            1,
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": "r18",
                   "lastSeenServerSeq": seen_seq, "subscriptions": ["ahp-root://", "mock:/r18"]}),
        ))
        .await;
    assert_eq!(r["result"]["type"], "replay", "{r}");
    assert_eq!(r["result"]["missing"], json!([]), "present and empty: {r}");
    assert!(r["result"]["actions"].is_array());
    serde_json::from_value::<ahp_types::commands::ReconnectResult>(r["result"].clone())
        .expect("the official client decodes it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_22_envelopes_increase_and_follow_their_snapshot() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("r22").await;
    let (one, two) = ("mock:/r22a", "mock:/r22b");
    let (c1, c2) = (
        ahpd_sdk::util::default_chat_uri(one),
        ahpd_sdk::util::default_chat_uri(two),
    );
    for (id, s) in [(2, one), (3, two)] {
        raw.call(&request(id, "createSession", json!({"channel": s})))
            .await;
    }
    raw.call(&request(4, "subscribe", json!({"channel": c1})))
        .await;
    // Both chats stream; the connection subscribes to the second while both run.
    for (seq, c) in [(1, &c1), (2, &c2)] {
        raw.send(&dispatch(
            seq,
            c,
            json!({"type": "chat/turnStarted", "turnId": format!("t{seq}"),
                   "message": {"text": "deltas:300"}}),
        ))
        .await;
    }
    raw.send(&request(5, "subscribe", json!({"channel": c2})))
        .await;
    // Check every frame as it arrives: serverSeq strictly increases across channels; no
    // envelope of the second chat comes before its snapshot, and each exceeds `fromSeq`.
    let mut last = 0;
    let mut from = None;
    let mut mirror = Mirror::default();
    let mut first_done = false;
    loop {
        let f = raw.recv().await.expect("open");
        if f["id"] == 5 {
            let snap: Snapshot = serde_json::from_value(f["result"]["snapshot"].clone()).unwrap();
            from = Some(snap.from_seq as u64);
            mirror.apply_snapshot(&snap);
        } else if f["method"] == "action" {
            let env = envelope(&f);
            assert!(env.server_seq > last, "{} after {last}", env.server_seq);
            last = env.server_seq;
            if env.channel == c2 {
                let from = from.expect("no envelope of a channel before its snapshot");
                assert!(env.server_seq > from);
                mirror.apply(&env);
            } else if is_action(&f, "chat/turnComplete") {
                first_done = true;
            }
        }
        let second_done = mirror
            .chats
            .get(&c2)
            .is_some_and(|c| c.active_turn.is_none() && !c.turns.is_empty());
        if first_done && second_done {
            break;
        }
    }
    let snap = th.host.snapshot(&c2).await.unwrap();
    let SnapshotState::Chat(host) = snap.state else {
        panic!()
    };
    assert_eq!(
        mirror.chats[&c2], *host,
        "snapshot plus envelopes equal the host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_23_turns_loaded_arrives_before_the_fetch_turns_reply() {
    let th = start_with(ScriptedAgent::new().with_history("long", 120), |b| {
        b.turns_page(50)
    })
    .await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("r23").await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/long");
    let sub = raw
        .call(&request(2, "subscribe", json!({"channel": chat})))
        .await;
    let cursor = sub["result"]["snapshot"]["state"]["turnsNextCursor"].clone();
    assert!(cursor.is_string());
    for (id, params) in [
        (3, json!({"channel": chat, "cursor": cursor})),
        (4, json!({"channel": chat})),
    ] {
        raw.send(&request(id, "fetchTurns", params)).await;
        let first = raw.recv().await.unwrap();
        assert!(
            is_action(&first, "chat/turnsLoaded"),
            "the action comes first: {first}"
        );
        let reply = raw.recv().await.unwrap();
        assert_eq!(reply["id"], id);
        assert_eq!(reply["result"], json!({}));
    }
    // Nothing left: the reply alone.
    let reply = raw
        .call(&request(5, "fetchTurns", json!({"channel": chat})))
        .await;
    assert_eq!(reply["result"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_24_completion_items_carry_a_command_or_a_uri() {
    let mut p = Puppet::new(|_t: TurnRequest, _c: SessionContext| async {});
    p.completions = serde_json::from_value(json!([
        {"insertText": "/compact", "attachment": {"type": "simple", "label": "compact",
            "_meta": {"command": "compact"}}},
        {"insertText": "#review", "attachment": {"type": "simple", "label": "review",
            "_meta": {"uri": "file:///skills/review/SKILL.md"}}}
    ]))
    .unwrap();
    let (th, a, _w, _session, chat) = pup_host(p).await;
    let init: Value = {
        let mut raw = Raw::connect(&th.url).await;
        raw.init("r24").await
    };
    assert_eq!(
        init["result"]["completionTriggerCharacters"],
        json!(["/"]),
        "an agent with completions advertises the trigger"
    );
    let r: Value = a
        .request(
            "completions",
            json!({"channel": chat, "kind": "userMessage", "text": "/co", "offset": 3}),
        )
        .await
        .unwrap();
    let items = r["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["attachment"]["_meta"]["command"], "compact");
    assert_eq!(
        items[1]["attachment"]["_meta"]["uri"],
        "file:///skills/review/SKILL.md"
    );
    serde_json::from_value::<CompletionsResult>(r).expect("decodes as completions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_25_no_1_0_only_actions_reach_a_0_9_connection_live_or_replayed() {
    let th = start().await;
    let session = "mock:/r25";
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let newer = client(&th.url).await;
    let mut wn = open_session(&newer, "new", session, &[&chat]).await;
    let mut old = Raw::connect(&th.url).await;
    let init = old
        .call(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "channel": "ahp-root://", "protocolVersions": ["0.9.0"], "clientId": "old",
                "initialSubscriptions": [chat]}})
            .to_string(),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "0.9.0");
    let seq = init["result"]["serverSeq"].as_u64().unwrap();
    for a_ in [
        json!({"type": "chat/isReadChanged", "isRead": true}),
        json!({"type": "chat/isArchivedChanged", "isArchived": true}),
        json!({"type": "chat/draftChanged",
            "draft": {"text": "hi", "origin": {"kind": "user"}}}),
    ] {
        newer.dispatch(chat.clone(), action(a_)).await.unwrap();
    }
    wn.until(|e| matches!(e.action, StateAction::ChatDraftChanged(_)))
        .await;
    // Live: the 0.9.0 connection gets the draft but neither flag.
    let mut live = Vec::new();
    frames_until(&mut old, &mut live, |f| is_action(f, "chat/draftChanged")).await;
    let types: Vec<&str> = live
        .iter()
        .filter(|f| f["method"] == "action")
        .map(|f| f["params"]["action"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["chat/draftChanged"]);
    assert_eq!(
        wn.envelopes
            .iter()
            .filter(|e| matches!(
                e.action,
                StateAction::ChatIsReadChanged(_) | StateAction::ChatIsArchivedChanged(_)
            ))
            .count(),
        2,
        "the 1.0 client got both"
    );
    // Replayed: a reconnect of the 0.9.0 client leaves them out too.
    drop(old);
    let mut back = Raw::connect(&th.url).await;
    let r = back
        .call(&request(
            1,
            "reconnect",
            json!({"channel": "ahp-root://", "clientId": "old",
                   "lastSeenServerSeq": seq, "subscriptions": [chat]}),
        ))
        .await;
    assert_eq!(r["result"]["type"], "replay", "{r}");
    let types: Vec<&str> = r["result"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["chat/draftChanged"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_27_mirrors_skip_rejections() {
    let th = start().await;
    let session = "mock:/r27".to_owned();
    let a = client(&th.url).await;
    let mut w = open_session(&a, "r27", &session, &[&session]).await;
    let before = w.mirror.clone();
    // Refused (an empty title), yet it would change the state if a mirror applied it.
    a.dispatch(
        session.clone(),
        action(json!({"type": "session/titleChanged", "title": ""})),
    )
    .await
    .unwrap();
    let rej = w.until(|e| e.rejection_reason.is_some()).await;
    assert_eq!(w.mirror, before, "the mirror skipped it");
    assert_mirror(&th, &mut w, &[&session]).await;
    let mut naive = before.sessions[&session].clone();
    ahp::reducers::apply_action_to_session(&mut naive, &rej.action);
    assert_ne!(
        naive, before.sessions[&session],
        "applying the rejection would have left this mirror wrong"
    );
}
