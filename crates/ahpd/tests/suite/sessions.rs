//! Sessions of the echo engine through the daemon, and `restart` while a turn runs.

use ahp::client::{Client, SubscriptionEvent};
use serde_json::{Value, json};

use super::support::*;

async fn open_session(client: &Client) -> (String, String) {
    let uri = format!("echo:/{}", uuid::Uuid::new_v4());
    let _: Value = client
        .request("createSession", json!({"channel": uri, "provider": "echo"}))
        .await
        .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri(&uri);
    let _: Value = client
        .request("subscribe", json!({"channel": chat}))
        .await
        .unwrap();
    (uri, chat)
}

async fn start_turn(client: &Client, chat: &str, turn: &str, text: &str) {
    client
        .notify(
            "dispatchAction",
            json!({
                "channel": chat,
                "clientSeq": 1,
                "action": {
                    "type": "chat/turnStarted",
                    "turnId": turn,
                    "startedAt": ahpd_sdk::util::now_iso(),
                    "message": {"text": text, "origin": {"kind": "user"}},
                },
            }),
        )
        .await
        .unwrap();
}

async fn run_turn(client: &Client, chat: &str, turn: &str, prompt: &str) -> String {
    let mut sub = client.attach_subscription(chat).await;
    start_turn(client, chat, turn, prompt).await;
    let mut text = String::new();
    loop {
        let Some(SubscriptionEvent::Action(env)) = sub.recv().await else {
            continue;
        };
        let action = serde_json::to_value(&env.action).unwrap();
        match action["type"].as_str().unwrap() {
            "chat/delta" => text.push_str(action["content"].as_str().unwrap()),
            "chat/turnComplete" => return text,
            _ => {}
        }
    }
}

#[test]
fn a_conversation_is_listed_and_opened_after_a_restart() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "restart.log");
    let uri = rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let (uri, chat) = open_session(&client).await;
        assert_eq!(
            run_turn(&client, &chat, "t1", "first words").await,
            "first words"
        );
        uri
    });
    assert_eq!(daemon.stop(), 0);
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "restart.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        assert_eq!(listed_row(&client, &uri).await["title"], "first words");
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let _: Value = client
            .request("subscribe", json!({"channel": uri}))
            .await
            .unwrap();
        let reply: Value = client
            .request("subscribe", json!({"channel": chat}))
            .await
            .unwrap();
        let turns = reply["snapshot"]["state"]["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 1, "{reply}");
        assert_eq!(turns[0]["message"]["text"], "first words");
        assert_eq!(run_turn(&client, &chat, "t2", "second").await, "second");
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn an_echo_turn_answers_with_the_prompt() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "turn.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let (_uri, chat) = open_session(&client).await;
        let text = run_turn(&client, &chat, "t1", "hello from the suite").await;
        assert_eq!(text, "hello from the suite");
    });
    assert_eq!(daemon.stop(), 0);
    // The graceful stop closed the session's backend.
    let log = std::fs::read_to_string(env.root.path().join("turn.log")).unwrap();
    assert!(log.contains("sessions closed sessions=1"), "{log}");
    let store = env.dir().join("echo-store");
    assert_eq!(std::fs::read_dir(store).unwrap().count(), 1);
}

#[test]
fn restart_is_refused_while_a_turn_runs() {
    let env = Env::new();
    let out = env.run(&["start", "--plugin", ECHO, "--port", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(env.dir().join("daemon.json")).unwrap())
            .unwrap();
    let address = record["address"].as_str().unwrap().to_owned();
    assert!(
        !address.contains("tkn"),
        "daemon.json never holds the token"
    );
    let address = format!("{address}/?tkn={}", default_token(&env));
    let rt = rt();
    let (client, uri) = rt.block_on(async {
        let (client, _) = client(&address).await;
        let (uri, chat) = open_session(&client).await;
        let mut root = client
            .attach_subscription(ahp_types::ROOT_RESOURCE_URI)
            .await;
        start_turn(&client, &chat, "t1", "/hang").await;
        // Wait until the catalogue says the session is busy.
        loop {
            if let Some(SubscriptionEvent::SessionSummaryChanged(p)) = root.recv().await {
                let v = serde_json::to_value(&p).unwrap();
                if v["changes"]["status"].as_u64().is_some_and(|s| s & 8 != 0) {
                    break;
                }
            }
        }
        (client, uri)
    });
    let out = env.run(&["restart"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains(&uri), "{}", text(&out.stderr));
    rt.block_on(client.shutdown());
    let out = env.run(&["restart", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(env.dir().join("daemon.json")).unwrap())
            .unwrap();
    assert_ne!(again["pid"], record["pid"]);
    assert_eq!(env.run(&["stop"]).status.code(), Some(0));
}

/// Dispatches a client action on `channel` and waits for its echo, which must not be rejected.
async fn dispatch_accepted(client: &Client, channel: &str, action: Value) {
    let mut sub = client.attach_subscription(channel).await;
    let action: ahp_types::actions::StateAction = serde_json::from_value(action).unwrap();
    let seq = client
        .dispatch(channel.to_owned(), action)
        .await
        .unwrap()
        .client_seq;
    loop {
        if let Some(SubscriptionEvent::Action(env)) = sub.recv().await
            && env.origin.as_ref().is_some_and(|o| o.client_seq == seq)
        {
            assert!(env.rejection_reason.is_none(), "{env:?}");
            return;
        }
    }
}

#[test]
fn titles_and_flags_survive_a_restart_in_sessions_json() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "kept.log");
    let (uri, client_id, last_seq) = rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        let (uri, chat) = open_session(&client).await;
        let _: Value = client
            .request("subscribe", json!({"channel": uri}))
            .await
            .unwrap();
        assert_eq!(run_turn(&client, &chat, "t1", "one").await, "one");
        assert_eq!(run_turn(&client, &chat, "t2", "two").await, "two");
        for action in [
            json!({"type": "session/titleChanged", "title": "Renamed by hand"}),
            json!({"type": "session/isReadChanged", "isRead": true}),
            json!({"type": "session/isArchivedChanged", "isArchived": true}),
        ] {
            dispatch_accepted(&client, &uri, action).await;
        }
        (uri, "suite".to_owned(), init.server_seq)
    });
    assert_eq!(daemon.stop(), 0);
    let store = env.dir().join("sessions.json");
    assert_eq!(mode(&store), 0o600);
    let saved = std::fs::read_to_string(&store).unwrap();
    assert!(saved.contains("Renamed by hand"), "{saved}");

    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "kept.log");
    // A client coming back with its old id: this process never saw it, so it
    // gets snapshots. (Done first: the clients below use the same id.)
    rt().block_on(async {
        let transport = ahp_ws::WebSocketTransport::connect(&daemon.address)
            .await
            .unwrap();
        let again = Client::connect(transport, ahp::client::ClientConfig::default())
            .await
            .unwrap();
        let result = again
            .reconnect(client_id, last_seq, vec![uri.clone()])
            .await
            .unwrap();
        assert!(
            matches!(result, ahp_types::commands::ReconnectResult::Snapshot(_)),
            "{result:?}"
        );
    });
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let row = listed_row(&client, &uri).await;
        assert_eq!(row["title"], "Renamed by hand");
        let status = row["status"].as_u64().unwrap();
        assert_eq!(status & 64, 64, "archived: {row}");
        assert_eq!(status & 32, 32, "read: {row}");
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let _: Value = client
            .request("subscribe", json!({"channel": uri}))
            .await
            .unwrap();
        let reply: Value = client
            .request("subscribe", json!({"channel": chat}))
            .await
            .unwrap();
        let turns = reply["snapshot"]["state"]["turns"].as_array().unwrap();
        let prompts: Vec<&str> = turns
            .iter()
            .map(|t| t["message"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(prompts, ["one", "two"], "{reply}");
        assert_eq!(run_turn(&client, &chat, "t3", "three").await, "three");
    });
    assert_eq!(daemon.stop(), 0);
}

/// Sets a client-chosen title and waits for the host to say it back.
async fn rename(client: &Client, uri: &str, title: &str) {
    let _: Value = client
        .request("subscribe", json!({"channel": uri}))
        .await
        .unwrap();
    let mut sub = client.attach_subscription(uri).await;
    client
        .notify(
            "dispatchAction",
            json!({
                "channel": uri,
                "clientSeq": 2,
                "action": {"type": "session/titleChanged", "title": title},
            }),
        )
        .await
        .unwrap();
    loop {
        if let Some(SubscriptionEvent::Action(env)) = sub.recv().await
            && serde_json::to_value(&env.action).unwrap()["type"] == "session/titleChanged"
        {
            return;
        }
    }
}

#[test]
fn two_daemons_on_one_folder_keep_each_others_titles() {
    let env = Env::new();
    let args = ["--plugin", ECHO, "--port", "0"];
    let first = env.daemon(&args, "first.log");
    let second = env.daemon(&args, "second.log");
    let rt = rt();
    let mut named = Vec::new();
    for (daemon, title) in [
        (&first, "kept by the first"),
        (&second, "kept by the second"),
    ] {
        let uri = rt.block_on(async {
            let (client, _) = client(&daemon.address).await;
            let (uri, chat) = open_session(&client).await;
            run_turn(&client, &chat, "t1", "the agent's own title").await;
            rename(&client, &uri, title).await;
            uri
        });
        named.push((uri, title));
    }
    // Each stop writes sessions.json; the second must not drop what the first wrote.
    assert_eq!(first.stop(), 0);
    assert_eq!(second.stop(), 0);
    let third = env.daemon(&args, "third.log");
    rt.block_on(async {
        let (client, _) = client(&third.address).await;
        for (uri, title) in &named {
            assert_eq!(listed_row(&client, uri).await["title"], *title);
        }
    });
    assert_eq!(third.stop(), 0);
}
