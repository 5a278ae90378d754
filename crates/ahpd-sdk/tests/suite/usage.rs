//! A backend's `chat/usage` reports always reach clients, even one equal to the last: a turn's
//! final report often repeats the last streamed one.

use ahp_types::actions::StateAction;
use ahpd_sdk::agent::*;
use serde_json::json;

use super::puppet::*;
use super::support::*;

fn usage(turn: &str, input: i64, output: i64) -> StateAction {
    serde_json::from_value(json!({"type": "chat/usage", "turnId": turn,
        "usage": {"inputTokens": input, "outputTokens": output, "model": "m"}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_usage_report_of_a_backend_is_published_even_a_repeat() {
    let p = Puppet::new(|turn: TurnRequest, ctx: SessionContext| async move {
        let t = turn.turn_id;
        ctx.emit(usage(&t, 10, 1));
        ctx.emit(usage(&t, 10, 5));
        // The final report, equal to the one before it.
        ctx.emit(usage(&t, 10, 5));
        ctx.emit(complete(&t));
        // After the turn ended there is no turn to report on: not published.
        ctx.emit(usage(&t, 99, 99));
    });
    let (th, a, mut w, session, chat) = pup_host(p).await;
    a.dispatch(chat.clone(), turn_started("u", "go"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let reports: Vec<(i64, i64)> = w
        .envelopes
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatUsage(u) => Some((
                u.usage.input_tokens.unwrap_or(0),
                u.usage.output_tokens.unwrap_or(0),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(reports, [(10, 1), (10, 5), (10, 5)]);
    let turn = &w.mirror.chats[&chat].turns[0];
    assert_eq!(turn.usage.as_ref().and_then(|u| u.output_tokens), Some(5));
}
