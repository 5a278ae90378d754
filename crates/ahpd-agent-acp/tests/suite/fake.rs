//! The faults, through the fake ACP agent (`testkit::fake_acp`), a host and the official client.

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, ToolCallState, ToolResultContent};
use serde_json::json;

use super::support::*;

fn fake_record() -> serde_json::Value {
    json!({"command": FAKE})
}

async fn session(place: &Place, prefix: &str) -> (TestHost, Watch) {
    let th = host(place, vec![agent(place, "fake", fake_record())]).await;
    let w = Watch::create(&th, "fake", &fresh_id(prefix), &place.work).await;
    (th, w)
}

#[tokio::test]
async fn a_turn_streams_as_deltas_and_completes() {
    let place = Place::new();
    let (th, mut w) = session(&place, "echo").await;
    w.send("t1", "echo hello there").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let deltas = w
        .chat_actions()
        .iter()
        .filter(|a| matches!(a, StateAction::ChatDelta(_)))
        .count();
    assert_eq!(deltas, 2, "each chunk is a delta");
    assert_eq!(w.last_text(), "hello there");
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn thoughts_plans_and_usage_are_shown() {
    let place = Place::new();
    let (th, mut w) = session(&place, "kinds").await;
    w.send("t1", "think answer").await;
    w.end("t1").await;
    let parts = &w.last_turn().response_parts;
    assert!(matches!(&parts[0], ResponsePart::Reasoning(r) if r.content == "pondering"));
    assert!(matches!(&parts[1], ResponsePart::Markdown(m) if m.content == "answer"));
    w.send("t2", "plan").await;
    w.end("t2").await;
    let calls = w.last_calls();
    match &calls[0] {
        ToolCallState::Completed(c) => {
            assert_eq!(c.tool_name, "plan");
            let text = format!("{:?}", c.content);
            assert!(
                text.contains("- [x] read") && text.contains("- [ ] write (in progress)"),
                "{text}"
            );
        }
        other => panic!("the plan is a completed call: {other:?}"),
    }
    w.send("t3", "usage").await;
    w.end("t3").await;
    let usage = w.last_turn().usage.clone().expect("usage");
    assert_eq!(
        usage.meta.as_ref().and_then(|m| m.get("contextWindow")),
        Some(&json!(128000))
    );
    w.send("t4", "refuse").await;
    match w.end("t4").await {
        StateAction::ChatError(e) => assert!(e.part.error.message.contains("refused"), "{e:?}"),
        other => panic!("a refusal is a turn error: {other:?}"),
    }
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn a_child_that_exits_mid_turn_ends_it_naming_the_status_and_its_last_stderr() {
    let place = Place::new();
    let (th, mut w) = session(&place, "die").await;
    w.send("t1", "die 7").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => {
            let m = &e.part.error.message;
            assert!(m.contains("exited with status 7"), "{m}");
            assert!(
                m.contains("the disk is on fire") && m.contains("fatal: exiting with 7"),
                "{m}"
            );
        }
        other => panic!("a death is a turn error: {other:?}"),
    }
    w.assert_mirror(&th).await;
    // The next turn starts a new child; this agent cannot load sessions, and says so.
    w.send("t2", "echo back again").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let text = w.last_text();
    assert!(text.contains("starts a new agent conversation"), "{text}");
    assert!(text.ends_with("back again"), "{text}");
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn malformed_updates_are_dropped_and_the_turn_goes_on() {
    let place = Place::new();
    let (th, mut w) = session(&place, "malformed").await;
    w.send("t1", "malformed").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(w.last_text(), "still here");
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn the_agents_options_are_offered_by_name_and_any_client_answers() {
    let place = Place::new();
    let (th, mut w) = session(&place, "ask").await;
    let mut second = Watch::join(&th, &w.session, "second").await;
    w.send("t1", "ask").await;
    let (call, options) = w.question().await;
    let labels: Vec<&str> = options.iter().map(|o| o.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "Allow once",
            "Allow for this session",
            "Always allow",
            "Reject"
        ]
    );
    let (call2, options2) = second.question().await;
    assert_eq!((call2.as_str(), options2.len()), (call.as_str(), 4));
    // The second client picks the session-wide "always" option by its id.
    second.answer("t1", &call, "allow_session", true).await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(w.last_text(), "outcome: allow_session");
    w.assert_mirror(&th).await;
    second.assert_mirror(&th).await;

    w.send("t2", "ask").await;
    let (call, _) = w.question().await;
    w.answer("t2", &call, "reject_once", false).await;
    w.end("t2").await;
    assert_eq!(w.last_text(), "outcome: reject_once");
    let calls = w.last_calls();
    assert!(
        matches!(&calls[0], ToolCallState::Cancelled(_))
            || matches!(&calls[0], ToolCallState::Completed(c) if !c.success),
        "a rejected call ends unsuccessful: {calls:?}"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn a_permission_request_with_id_0_is_answered() {
    let place = Place::new();
    let (th, mut w) = session(&place, "ask0").await;
    w.send("t1", "ask0").await;
    let (call, _) = w.question().await;
    w.answer("t1", &call, "allow_once", true).await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(w.last_text(), "outcome: allow_once");
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn a_question_nobody_answers_is_cancelled_with_its_turn() {
    let place = Place::new();
    let (th, mut w) = session(&place, "unanswered").await;
    w.send("t1", "ask").await;
    w.question().await;
    w.cancel("t1").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnCancelled(_)
    ));
    // The agent heard `cancelled` and answered its prompt, so the next turn runs.
    w.send("t2", "echo after").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(w.last_text(), "after");
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn a_tool_call_id_reused_across_sessions_and_turns_stays_apart() {
    let place = Place::new();
    let th = host(&place, vec![agent(&place, "fake", fake_record())]).await;
    let mut a = Watch::create(&th, "fake", &fresh_id("reuse-a"), &place.work).await;
    let mut b = Watch::create(&th, "fake", &fresh_id("reuse-b"), &place.work).await;
    let mut ids = Vec::new();
    for (which, turn) in [(0, "t1"), (1, "t1"), (0, "t2")] {
        let w = if which == 0 { &mut a } else { &mut b };
        w.send(turn, "tool").await;
        assert!(matches!(
            w.end(turn).await,
            StateAction::ChatTurnComplete(_)
        ));
        match &w.last_calls()[0] {
            ToolCallState::Completed(c) => {
                assert!(c.success);
                let edit = c
                    .content
                    .iter()
                    .flatten()
                    .any(|x| matches!(x, ToolResultContent::FileEdit(_)));
                assert!(edit, "the diff is a file edit: {c:?}");
                ids.push(c.tool_call_id.clone());
            }
            other => panic!("{other:?}"),
        }
        w.assert_mirror(&th).await;
    }
    assert_ne!(ids[0], ids[2], "one session's turns keep their calls apart");
}

#[tokio::test]
async fn a_folder_outside_the_served_ones_is_refused() {
    let place = Place::new();
    let th = host(&place, vec![agent(&place, "fake", fake_record())]).await;
    let c = client(&th.url, "c").await;
    let outside = place.base.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("folder");
    let refused = c
        .request::<_, serde_json::Value>(
            "createSession",
            json!({"channel": "fake:/outside-1", "workingDirectories": [ahpd_sdk::util::file_uri(&outside)]}),
        )
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("outside the folders this host serves"),
        "{refused}"
    );
}

#[tokio::test]
async fn stored_sessions_list_and_read_back_after_a_restart() {
    let place = Place::new();
    let id = fresh_id("restart");
    let th = host(&place, vec![agent(&place, "fake", fake_record())]).await;
    let mut w = Watch::create(&th, "fake", &id, &place.work).await;
    w.send("t1", "echo kept across").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    drop(w);
    th.stop().await;

    let th = host(&place, vec![agent(&place, "fake", fake_record())]).await;
    let c = client(&th.url, "after").await;
    let listed: serde_json::Value = c.request("listSessions", json!({})).await.expect("list");
    assert!(listed.to_string().contains(&id), "{listed}");
    let mut w = Watch::subscribe(c, &format!("fake:/{id}")).await;
    assert_eq!(w.last_text(), "kept across");
    w.send("t2", "echo again").await;
    w.end("t2").await;
    assert!(w.last_text().contains("starts a new agent conversation"));
    w.assert_mirror(&th).await;
}

#[tokio::test]
async fn the_agents_options_become_settings_and_a_model_it_cannot_set_fails_the_turn() {
    let place = Place::new();
    let acp_agent = agent(&place, "fake", fake_record());
    let th = host(&place, vec![acp_agent.clone()]).await;
    // The agent says what it offers once it runs.
    let mut w = Watch::create(&th, "fake", &fresh_id("learn"), &place.work).await;
    w.send("t1", "config").await;
    w.end("t1").await;
    assert_eq!(w.last_text(), "model=fast verbose=false");
    let schema = acp_agent.config_schema(None);
    let model = &schema.properties["model"];
    assert_eq!(model.r#enum, Some(vec![json!("fast"), json!("slow")]));
    assert_eq!(schema.properties["acp.verbose"].r#type, "boolean");

    // A new session sets them before its first prompt.
    let c = client(&th.url, "set").await;
    let session = format!("fake:/{}", fresh_id("set"));
    let _: serde_json::Value = c
        .request(
            "createSession",
            json!({
                "channel": session,
                "workingDirectories": [ahpd_sdk::util::file_uri(&place.work)],
                "config": {"model": "slow", "acp.verbose": true}
            }),
        )
        .await
        .expect("createSession");
    let mut w = Watch::subscribe(c, &session).await;
    w.send("t1", "config").await;
    w.end("t1").await;
    assert_eq!(w.last_text(), "model=slow verbose=true");

    // A turn that names a model the agent refuses fails rather than running on another.
    let mut m = message("config");
    m.model = Some(ahp_types::state::ModelSelection {
        id: "warp".into(),
        config: None,
    });
    w.client
        .dispatch(
            w.chat.clone(),
            StateAction::ChatTurnStarted(ahp_types::actions::ChatTurnStartedAction {
                turn_id: "t2".into(),
                started_at: ahpd_sdk::util::now_iso(),
                message: m,
                queued_message_id: None,
                meta: None,
            }),
        )
        .await
        .expect("dispatch");
    match w.end("t2").await {
        StateAction::ChatError(e) => {
            assert!(
                e.part
                    .error
                    .message
                    .contains("could not set model to \"warp\""),
                "{e:?}"
            )
        }
        other => panic!("{other:?}"),
    }
    w.assert_mirror(&th).await;
}
