//! A past cofold session in a machine, read after a restart: the inner host started to read
//! its transcript leaves the conversation's unfinished run alone, so the session's own inner
//! host finds it as it was at its next turn.

use serde_json::json;
use testkit::{Endpoint, Reply, chunk};

use super::machines_fake_support::*;
use super::support::rt;

fn write_call(id: &str, path: &str) -> Reply {
    Reply::stream([
        chunk::tool_call(
            0,
            Some(id),
            Some("write_file"),
            &json!({ "path": path, "content": "v\n" }).to_string(),
        ),
        chunk::finish("tool_calls"),
    ])
}

#[test]
fn case_37_reading_a_past_session_leaves_its_paused_run_to_the_next_turn() {
    rt().block_on(async {
        let endpoint = Endpoint::builder()
            .reply(write_call("c1", "a.txt"))
            .fallback(Reply::stream([chunk::text("done"), chunk::finish("stop")]))
            .models(["m1"])
            .start()
            .unwrap();
        let rig = Rig::new();
        rig.write_copapo("{}\n");
        rig.configure_plugins(
            rig.options(json!({
                "needs": { "cofoldBaseUrl": endpoint.base_url(), "cofoldApiKey": "sk-37", "cofoldModel": "m1" }
            })),
            true,
        );
        let (daemon, client) = rig.start("c37p.log").await;
        make(&client, "box", json!({})).await.unwrap();
        let (uri, r) = create_session(
            &client,
            "cofold",
            json!({ "computer": "computer://box", "permissionMode": "default" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        let mut t = begin_turn(&client, &uri, "t1", "write a").await;
        t.until(Some("chat/toolCallReady")).await;
        // The machine stops under the waiting run: its inner host is killed, so the run stays
        // paused in the store inside, as after a crash.
        assert!(rig.engine.kill("box", false));
        t.until(None).await;
        daemon.stop();
        drop(client);

        let (daemon, client) = rig.start("c37q.log").await;
        write(&client, "computer://box/state", "running", false)
            .await
            .unwrap();
        let asked = endpoint.chat_requests().len();
        assert_eq!(asked, 1);
        let execs = rig.exec_bodies().len();
        // The transcript comes from an inner host started for it, which has ended by the
        // time the snapshot is answered.
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (snap, _) = client.subscribe(chat).await.unwrap();
        let text = serde_json::to_string(&snap).unwrap();
        assert!(text.contains("write a"), "{text}\n{}", daemon.log_text());
        assert_eq!(
            endpoint.chat_requests().len(),
            asked,
            "the read called the model"
        );
        // That host was told to leave unfinished runs alone.
        let read: Vec<String> = rig.exec_bodies()[execs..]
            .iter()
            .map(|b| b["Cmd"].to_string())
            .collect();
        assert_eq!(read.len(), 1, "{read:?}");
        assert!(read[0].contains("--leave-unfinished"), "{read:?}");
        let execs = rig.exec_bodies().len();

        // The next turn takes the paused run's place: its approval is declined as replaced
        // (had the read reattached the run, its end would have stopped the run instead), the
        // run answers the model once with that, then the turn runs.
        let seen = turn(&client, &uri, "t2", "never mind").await;
        assert_eq!(
            seen.last().unwrap()["type"],
            "chat/turnComplete",
            "{seen:#?}\n{}",
            daemon.log_text()
        );
        // The session's own inner host runs it, and takes up what was left.
        let own: Vec<String> = rig.exec_bodies()[execs..]
            .iter()
            .map(|b| b["Cmd"].to_string())
            .collect();
        assert!(
            own.iter().all(|c| !c.contains("--leave-unfinished")),
            "{own:?}"
        );
        let bodies = endpoint.chat_bodies();
        assert!(
            bodies
                .iter()
                .any(|b| b.to_string().contains(ahpd_agent_cofold::REPLACED)),
            "no model call carried the replaced approval: {bodies:#?}"
        );
        assert!(
            !bodies
                .iter()
                .any(|b| b.to_string().contains("The turn was stopped")),
            "the paused run was stopped: {bodies:#?}"
        );
    });
}
