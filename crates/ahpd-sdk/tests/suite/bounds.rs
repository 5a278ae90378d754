//! What a long-running host keeps stays bounded: clients gone longer than the remembered time
//! are forgotten.

use std::time::Duration;

use ahp_types::actions::StateAction;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_gone_past_the_remembered_time_are_forgotten() {
    let ttl = Duration::from_millis(300);
    let th = start_with(ScriptedAgent::new(), |b| {
        b.known_client_ttl(ttl).active_client_grace(Duration::ZERO)
    })
    .await;
    let session = "mock:/bounds";
    let watcher = client(&th.url).await;
    let mut w = open_session(&watcher, "watcher", session, &[session]).await;

    let leaving = client(&th.url).await;
    leaving
        .initialize("leaving".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let set: StateAction = serde_json::from_value(
        json!({"type": "session/activeClientSet", "activeClient": {"clientId": "leaving", "tools": []}}),
    )
    .unwrap();
    leaving.dispatch(session.into(), set).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;
    assert_eq!(th.host.handle().client_table_sizes().0, 2);
    leaving.shutdown().await;
    // Its removal from the session's active clients shows the host saw it go.
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientRemoved(_)))
        .await;
    // The remembered time is what is tested: let it pass.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let newcomer = client(&th.url).await;
    newcomer
        .initialize("newcomer".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    assert_eq!(
        th.host.handle().client_table_sizes().0,
        2,
        "the watcher and the newcomer are remembered, the client gone too long is not"
    );
}
