//! Requests on one connection run concurrently: a request hung in the agent neither blocks the
//! connection's `ping` nor another session's turn, and it is answered with its time-limit
//! error.

use std::time::Duration;

use ahp_types::actions::StateAction;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

#[tokio::test]
async fn a_hung_create_session_leaves_ping_turns_and_cancels_going_and_times_out() {
    let agent = ScriptedAgent::new().hanging_create_for(&["mock:/stuck"]);
    // Long enough that the rest of the test runs while the create hangs.
    let th = start_with(agent, |b| b.request_timeout(Duration::from_secs(10))).await;
    let c = client(&th.url).await;
    let live = "mock:/live";
    let chat = ahpd_sdk::util::default_chat_uri(live);
    let mut w = open_session(&c, "conc", live, &[live, &chat]).await;

    let stuck = c.request::<Value, Value>("createSession", json!({"channel": "mock:/stuck"}));
    tokio::pin!(stuck);
    // The first poll sends the request; the agent never answers it.
    assert!(futures::poll!(&mut stuck).is_pending());

    let pong = tokio::time::timeout(PATIENCE, c.ping()).await;
    assert!(
        matches!(pong, Ok(Ok(_))),
        "ping answered while createSession hangs"
    );

    c.dispatch(chat.clone(), turn_started("t1", "hello"))
        .await
        .expect("dispatch");
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(a) if a.turn_id == "t1"))
        .await;
    // A cancel goes through too.
    c.dispatch(chat.clone(), turn_started("t2", "hang"))
        .await
        .expect("dispatch");
    w.until(|e| matches!(&e.action, StateAction::ChatTurnStarted(a) if a.turn_id == "t2"))
        .await;
    let cancel: StateAction =
        serde_json::from_value(json!({"type": "chat/turnCancelled", "turnId": "t2"}))
            .expect("a cancel");
    c.dispatch(chat.clone(), cancel).await.expect("dispatch");
    let env = w
        .until(|e| matches!(&e.action, StateAction::ChatTurnCancelled(a) if a.turn_id == "t2"))
        .await;
    assert!(env.rejection_reason.is_none(), "{env:?}");
    assert!(
        futures::poll!(&mut stuck).is_pending(),
        "the hung createSession is still waiting after the other session's turn ended"
    );

    let err = tokio::time::timeout(PATIENCE, stuck)
        .await
        .expect("the hung request is answered")
        .expect_err("a hung createSession is an error");
    let text = format!("{err:?}");
    assert!(
        text.contains("within 10 s"),
        "the error names the time limit: {text}"
    );
    // The session that could not open is marked failed, not left opening.
    let snap = th
        .host
        .snapshot("mock:/stuck")
        .await
        .expect("the session still exists");
    let state = serde_json::to_value(&snap.state).expect("encodes");
    assert_eq!(state["lifecycle"], "failed", "{state}");
}
