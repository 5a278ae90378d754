//! Machines on `testkit::FakeEngine`: the picker, disposable machines, restarts and old builds
//! (cases 33 to 39 of `crates/ahpd-computer/ACCEPTANCE.md`). The daemon is a separate process,
//! so the disposable delay runs in real time: the cases wait for the removal itself.

use std::time::Duration;

use serde_json::{Value, json};
use testkit::FailOn;

use super::machines_fake_support::*;
use super::support::rt;

fn disposable(delay: u64, extra: Value) -> Value {
    let mut p = json!({ "disposable": true, "disposableDelay": delay });
    merge(&mut p, extra);
    p
}

/// The machine a session's `computer` names.
async fn machine_of(client: &ahp::client::Client, uri: &str) -> String {
    let state = session_state(client, uri).await;
    state["config"]["values"]["computer"]
        .as_str()
        .unwrap_or_else(|| panic!("no computer in {state}"))
        .trim_start_matches("computer://")
        .to_owned()
}

async fn dispose(client: &ahp::client::Client, uri: &str) {
    let _: Value = client
        .request("disposeSession", json!({ "channel": uri }))
        .await
        .unwrap();
}

/// Waits until `id` is gone after the engine was asked to remove it; the index of that request.
async fn removed(rig: &Rig, id: &str) -> usize {
    let path = format!("/containers/{id}");
    rig.engine
        .wait_for(|e| {
            e.container(id)
                .is_none()
                .then(|| {
                    e.requests()
                        .iter()
                        .position(|r| r.method == "DELETE" && r.path == path)
                })
                .flatten()
        })
        .await
}

#[test]
fn case_33_completions_list_this_host_machines_and_profiles() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": {
            "cofold": disposable(600000, json!({})),
            "alone": disposable(600000, json!({ "disposableAlone": true }))
        }}));
        let (daemon, client) = rig.start("c33.log").await;
        make(&client, "box", json!({})).await.unwrap();
        let (_, r) = create_session(&client, "echo", json!({ "computer": "disposable:alone" }), None).await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        let r: Value = client
            .request(
                "sessionConfigCompletions",
                json!({ "channel": ahp_types::ROOT_RESOURCE_URI, "provider": "echo", "property": "computer" }),
            )
            .await
            .unwrap();
        let values: Vec<&str> = r["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["value"].as_str())
            .collect();
        assert_eq!(
            values,
            vec!["", "computer://box", "disposable:alone", "disposable:cofold"],
            "{r}"
        );
    });
}

#[test]
fn case_34_a_disposable_session_names_its_new_machine() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": { "cofold": disposable(600000, json!({})) } }));
        let (daemon, client) = rig.start("c34.log").await;
        let mut events = client.events();
        let (uri, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        let machine = machine_of(&client, &uri).await;
        let hex = machine.strip_prefix("ahpd-computer-").expect("the prefix");
        assert_eq!(hex.len(), 8);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        let c = rig.engine.container(&machine).unwrap();
        assert_eq!(c.labels["ahpd.session"], uri);
        assert_eq!(c.labels["ahpd.disposable"], "cofold");
        // When the client saw both, the machine's URI came before the session was ready.
        let mut order = Vec::new();
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(1), events.recv()).await
        {
            if let ahp::SubscriptionEvent::Action(env) = ev.event {
                let v = serde_json::to_value(&env.action).unwrap();
                order.push(v["type"].as_str().unwrap_or("").to_owned());
            }
        }
        let changed = order.iter().position(|t| t == "session/configChanged");
        let ready = order.iter().position(|t| t == "session/ready");
        if let (Some(c), Some(r)) = (changed, ready) {
            assert!(c < r, "{order:?}");
        }
    });
}

#[test]
fn case_35_disposed_machines_go_after_their_delay_unless_named_again() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": { "cofold": disposable(1000, json!({})) } }));
        let (_daemon, client) = rig.start("c35.log").await;
        let (uri, _) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        let machine = machine_of(&client, &uri).await;
        dispose(&client, &uri).await;
        removed(&rig, &machine).await;
        assert!(rig.engine.container(&machine).is_none());

        // Named again within the delay: kept until that session goes too.
        let (uri, _) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        let machine = machine_of(&client, &uri).await;
        dispose(&client, &uri).await;
        let (again, r) = create_session(
            &client,
            "echo",
            json!({ "computer": format!("computer://{machine}") }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
        let seen = turn(&client, &again, "t1", "still here").await;
        assert_eq!(deltas(&seen), "still here");
        let before = rig.engine.requests().len();
        dispose(&client, &again).await;
        let at = removed(&rig, &machine).await;
        assert!(at >= before, "removed while a session was in it");
    });
}

#[test]
fn case_36_refused_makes_and_machines_alone() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "max": 1, "profiles": {
            "cofold": disposable(600000, json!({})),
            "alone": disposable(600000, json!({ "disposableAlone": true }))
        }}));
        rig.engine
            .fail(FailOn::Create, 500, "the engine is out of disk");
        let (_daemon, client) = rig.start("c36.log").await;
        let (_, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        let msg = rpc(&r).1;
        assert!(msg.contains("the engine is out of disk"), "{msg}");
        assert!(rig.engine.containers().is_empty());
        // The limit of one is still free.
        let (uri, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:alone" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
        let machine = machine_of(&client, &uri).await;
        let (_, r) = create_session(
            &client,
            "echo",
            json!({ "computer": format!("computer://{machine}") }),
            None,
        )
        .await;
        assert_eq!(
            rpc(&r).1,
            format!("computer://{machine} was made for another session")
        );
    });
}

/// The sessions `listSessions` shows.
async fn listed(client: &ahp::client::Client) -> Value {
    client
        .request(
            "listSessions",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI }),
        )
        .await
        .unwrap()
}

/// Whether the engine was asked to run anything in a container since request `from`.
fn execs_since(rig: &Rig, from: usize) -> bool {
    rig.engine.requests()[from..]
        .iter()
        .any(|r| r.path.contains("/exec"))
}

#[test]
fn case_37_a_kept_session_adopts_its_disposable_machine() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": { "cofold": disposable(1000, json!({})) } }));
        let (daemon, client) = rig.start("c37.log").await;
        let (uri, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
        let machine = machine_of(&client, &uri).await;
        let first = turn(&client, &uri, "t1", "before the restart").await;
        assert_eq!(deltas(&first), "before the restart");
        daemon.stop();
        drop(client);
        let kept: Value = serde_json::from_str(
            &std::fs::read_to_string(rig.env.dir().join("sessions.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(kept["sessions"][0]["nested"]["machine"], machine, "{kept}");

        let (daemon, client) = rig.start("c37b.log").await;
        // Listed from its record: nothing runs in the machine for the catalogue.
        let from = rig.engine.requests().len();
        let sessions = listed(&client).await;
        assert!(sessions.to_string().contains(&uri), "{sessions}");
        assert!(!execs_since(&rig, from), "the catalogue asked the machine");

        // Its transcript comes from the host inside: the host here never held it.
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (snap, _) = client.subscribe(chat).await.unwrap();
        assert!(
            serde_json::to_string(&snap)
                .unwrap()
                .contains("before the restart"),
            "{}",
            daemon.log_text()
        );
        let seen = turn(&client, &uri, "t2", "after the restart").await;
        assert_eq!(
            deltas(&seen),
            "after the restart",
            "{seen:#?}\n{}",
            daemon.log_text()
        );
        // Adopted with no timer: the machine outlived the delay's start and is removed only
        // after the session goes.
        assert!(
            rig.engine.container(&machine).is_some(),
            "adopted with no timer"
        );
        let log = daemon.log_text();
        assert!(
            log.contains(&format!(
                "computer://{machine} is held for its kept session"
            )) && !log.contains("has no kept session"),
            "{log}"
        );
        let before = rig.engine.requests().len();
        dispose(&client, &uri).await;
        assert!(removed(&rig, &machine).await >= before);
        let sessions = listed(&client).await;
        assert!(!sessions.to_string().contains(&uri), "{sessions}");
    });
}

/// A session on machine `box` with one turn, kept by a daemon that then stopped.
async fn kept_on_box(rig: &Rig, log: &str) -> String {
    let (daemon, client) = rig.start(log).await;
    make(&client, "box", json!({})).await.unwrap();
    let (uri, r) = create_session(
        &client,
        "echo",
        json!({ "computer": "computer://box" }),
        None,
    )
    .await;
    assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
    let first = turn(&client, &uri, "t1", "before the restart").await;
    assert_eq!(deltas(&first), "before the restart");
    daemon.stop();
    uri
}

#[test]
fn case_37_a_past_session_on_a_stopped_machine_opens_empty_and_its_turn_starts_it() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let uri = kept_on_box(&rig, "c37c.log").await;
        assert!(rig.engine.kill("box", false));

        let (daemon, client) = rig.start("c37d.log").await;
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let from = rig.engine.requests().len();
        let (snap, _) = client.subscribe(chat).await.unwrap();
        let text = serde_json::to_string(&snap).unwrap();
        assert!(!text.contains("before the restart"), "{text}");
        assert!(!execs_since(&rig, from), "the stopped machine was asked");
        assert!(
            daemon.log_text().contains("computer://box is not running"),
            "{}",
            daemon.log_text()
        );
        let seen = turn(&client, &uri, "t2", "wake up").await;
        assert_eq!(deltas(&seen), "wake up", "{seen:#?}\n{}", daemon.log_text());
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "running"
        );
    });
}

#[test]
fn case_37_a_past_session_whose_machine_is_gone_is_deleted_anyway() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let uri = kept_on_box(&rig, "c37e.log").await;

        let (daemon, client) = rig.start("c37f.log").await;
        delete(&client, "computer://box").await.unwrap();
        assert!(listed(&client).await.to_string().contains(&uri));
        // Its next turn fails naming the machine; it never runs on this host.
        let seen = turn(&client, &uri, "t2", "anyone there").await;
        let error = seen
            .iter()
            .find(|a| a["type"] == "chat/error")
            .unwrap_or_else(|| panic!("{seen:#?}"));
        assert!(
            error.to_string().contains("computer://box"),
            "{error}\n{}",
            daemon.log_text()
        );
        assert_eq!(deltas(&seen), "");
        dispose(&client, &uri).await;
        let sessions = listed(&client).await;
        assert!(!sessions.to_string().contains(&uri), "{sessions}");
        assert!(
            daemon
                .log_text()
                .contains("the conversation inside computer://box was not disposed"),
            "{}",
            daemon.log_text()
        );
    });
}

#[test]
fn case_37_a_long_past_session_reads_every_page_inside() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let (daemon, client) = rig.start("c37g.log").await;
        make(&client, "box", json!({})).await.unwrap();
        let (uri, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "computer://box" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        // More turns than one page of the host inside (50), so it hands the oldest over
        // through fetchTurns.
        for i in 0..55 {
            let seen = turn(&client, &uri, &format!("t{i}"), &format!("turn {i}")).await;
            assert_eq!(deltas(&seen), format!("turn {i}"));
        }
        daemon.stop();
        drop(client);

        let (daemon, client) = rig.start("c37h.log").await;
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (snap, _) = client.subscribe(chat).await.unwrap();
        let snap = serde_json::to_value(&snap).unwrap();
        let state = &snap["snapshot"]["state"];
        let turns = state["turns"].as_array().unwrap();
        // The host here shows its own page of the 55 and keeps the 5 older ones behind a cursor.
        assert_eq!(turns.len(), 50, "{}", daemon.log_text());
        assert!(turns[0].to_string().contains("turn 5"), "{}", turns[0]);
        assert!(turns[49].to_string().contains("turn 54"), "{}", turns[49]);
        assert!(
            state["turnsNextCursor"].is_string(),
            "no older page behind the {} turns shown",
            turns.len()
        );
    });
}

#[test]
fn case_38_orphans_go_others_stay_and_stopped_machines_start() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": { "cofold": disposable(1000, json!({})) } }));
        std::fs::create_dir_all(rig.env.dir()).unwrap();
        std::fs::write(rig.env.dir().join("host-id"), "00000000000000aa").unwrap();
        let ours = [
            ("ahpd.computer", "1"),
            ("ahpd.host", "00000000000000aa"),
            ("ahpd.disposable", "cofold"),
            ("ahpd.session", "echo:/gone"),
        ];
        rig.engine
            .insert_container("ahpd-computer-0000beef", IMAGE, &ours);
        let theirs = [
            ("ahpd.computer", "1"),
            ("ahpd.host", "00000000000000bb"),
            ("ahpd.disposable", "cofold"),
        ];
        rig.engine
            .insert_container("ahpd-computer-0000f00d", IMAGE, &theirs);
        let (daemon, client) = rig.start("c38.log").await;
        removed(&rig, "ahpd-computer-0000beef").await;
        assert!(rig.engine.container("ahpd-computer-0000f00d").is_some());

        make(&client, "box", json!({})).await.unwrap();
        let uri = {
            let (uri, r) = create_session(
                &client,
                "echo",
                json!({ "computer": "computer://box" }),
                None,
            )
            .await;
            assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
            uri
        };
        write(&client, "computer://box/state", "stopped", false)
            .await
            .unwrap();
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "stopped"
        );
        // The turn may reach the session before it noticed its inner host ended with the
        // machine: either way the turn runs in a new one.
        let seen = turn(&client, &uri, "t1", "wake up").await;
        assert_eq!(deltas(&seen), "wake up", "{seen:#?}\n{}", daemon.log_text());
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "running"
        );
    });
}

#[test]
fn case_39_old_builds_are_pruned_at_start() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let bin = rig.env.dir().join("computer").join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(rig.env.dir().join("host-id"), "00000000000000aa").unwrap();
        std::fs::write(bin.join("ahpd-0.0.1-deadbeef"), "old").unwrap();
        std::fs::write(bin.join("ahpd-0.0.1-cafef00d"), "named").unwrap();
        rig.engine.insert_container(
            "box",
            IMAGE,
            &[
                ("ahpd.computer", "1"),
                ("ahpd.host", "00000000000000aa"),
                ("ahpd.init", "ahpd-0.0.1-cafef00d"),
            ],
        );
        rig.engine.kill("box", false);
        let (_daemon, _client) = rig.start("c39.log").await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while bin.join("ahpd-0.0.1-deadbeef").exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the old build is still there"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(bin.join("ahpd-0.0.1-cafef00d").exists());
        let current: Vec<String> = std::fs::read_dir(&bin)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("ahpd-{}-", env!("CARGO_PKG_VERSION"))))
            .collect();
        assert_eq!(current.len(), 1, "{current:?}");
    });
}
