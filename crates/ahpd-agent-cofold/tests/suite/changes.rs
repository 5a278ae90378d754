//! Every change recorded and published as changesets; undo that never overwrites someone
//! else's work, through the official client's `invokeChangesetOperation`.

use std::path::Path;
use std::sync::Arc;

use ahp_types::commands::SubscribeResult;
use ahp_types::state::{ChangesetState, SnapshotState};
use serde_json::{Value, json};

use super::support::*;

async fn changeset(w: &Watch, uri: &str) -> ChangesetState {
    let (res, _sub): (SubscribeResult, _) = w
        .client
        .subscribe(uri.to_owned())
        .await
        .expect("subscribes");
    match res.snapshot.expect("a snapshot").state {
        SnapshotState::Changeset(c) => *c,
        other => panic!("not a changeset: {other:?}"),
    }
}

async fn invoke(w: &Watch, channel: &str, op: &str, file: Option<&Path>) -> Result<String, String> {
    let mut params = json!({ "channel": channel, "operationId": op });
    if let Some(f) = file {
        params["target"] = json!({ "kind": "resource", "resource": ahpd_sdk::util::file_uri(f) });
    }
    let answer: Result<Value, _> = w.client.request("invokeChangesetOperation", params).await;
    match answer {
        Ok(v) => Ok(v["message"].as_str().unwrap_or_default().to_owned()),
        Err(ahp::ClientError::Rpc(e)) => Err(e.message),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_changeset_lists_its_files_and_undo_leaves_others_work_alone() {
    let place = Place::new();
    let work = &place.work;
    let original = b"first line\r\nsecond line\r\n";
    std::fs::write(work.join("a.txt"), original).expect("w");
    std::fs::write(work.join("c.txt"), "c as it was\n").expect("w");
    let ep = endpoint(vec![
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "first", "new": "A's first" }),
        ),
        call(
            "c2",
            "shell_exec",
            json!({ "command": "sh -c 'echo x > b.txt'" }),
        ),
        text("A is done"),
        call(
            "d1",
            "write_file",
            json!({ "path": "c.txt", "content": "B wrote this\n" }),
        ),
        text("B is done"),
    ]);
    let options = json!({
        "memory": true, "baseUrl": ep.base_url(), "model": "m",
        "tools": { "files": { "requireRead": false } }
    });
    let th = host(vec![Arc::new(agent(options, place.embedder()))]).await;
    let config = json!({ "permissionMode": "bypassPermissions" });
    let mut a = Watch::create(&th, "cofold", &fresh_id("a"), Some(work), config.clone()).await;
    a.send("t1", "edit a and make b").await;
    a.end("t1").await;
    let mut b = Watch::create(&th, "cofold", &fresh_id("b"), Some(work), config).await;
    b.send("u1", "edit c").await;
    b.end("u1").await;
    let after_a = std::fs::read(work.join("a.txt")).expect("r");
    assert!(after_a.starts_with(b"A's first line\r\n"), "{after_a:?}");
    assert_eq!(
        std::fs::read_to_string(work.join("b.txt")).expect("r"),
        "x\n"
    );

    // The catalogue names both changesets; the turn's lists its two files with their edits.
    a.sync().await;
    let catalogue = a.chat_state().changesets.clone().expect("a catalogue");
    let turn_template = catalogue
        .iter()
        .find(|c| c.change_kind == "turn")
        .expect("a turn changeset")
        .uri_template
        .clone();
    assert!(catalogue.iter().any(|c| c.change_kind == "session"));
    let turn_uri = turn_template.replace("{turnId}", "t1");
    let state = changeset(&a, &turn_uri).await;
    let ids: Vec<String> = state.files.iter().map(|f| f.id.clone()).collect();
    assert_eq!(
        ids,
        [
            ahpd_sdk::util::file_uri(&work.join("a.txt")),
            ahpd_sdk::util::file_uri(&work.join("b.txt"))
        ]
    );
    let a_edit = &state.files[0].edit;
    assert!(a_edit.before.is_some() && a_edit.after.is_some());
    assert_eq!(a_edit.diff.as_ref().and_then(|d| d.added), Some(1));
    assert!(state.files[1].edit.before.is_none(), "b.txt did not exist");
    let ops: Vec<&str> = state
        .operations
        .iter()
        .flatten()
        .map(|o| o.id.as_str())
        .collect();
    assert_eq!(ops, ["undo", "undo-file", "redo", "redo-file"]);
    assert!(
        state
            .operations
            .iter()
            .flatten()
            .all(|o| o.confirmation.is_some())
    );

    // The person edits a.txt by hand: undo refuses it, removes b.txt, leaves c.txt.
    std::fs::write(work.join("a.txt"), "the person's own words\n").expect("w");
    let said = invoke(&a, &turn_uri, "undo", None)
        .await
        .expect("partly done");
    assert!(said.contains("a.txt changed since"), "{said}");
    assert!(said.contains("b.txt removed"), "{said}");
    assert!(!work.join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).expect("r"),
        "the person's own words\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).expect("r"),
        "B wrote this\n"
    );

    // Once the hand edit is reverted, a.txt comes back byte for byte; redo brings the turn back.
    std::fs::write(work.join("a.txt"), &after_a).expect("w");
    let said = invoke(&a, &turn_uri, "undo-file", Some(&work.join("a.txt")))
        .await
        .expect("done");
    assert!(said.contains("restored"), "{said}");
    assert_eq!(std::fs::read(work.join("a.txt")).expect("r"), original);
    let refused = invoke(&a, &turn_uri, "undo", None)
        .await
        .expect_err("nothing left");
    assert!(refused.contains("no change left to undo"), "{refused}");
    invoke(&a, &turn_uri, "redo", None).await.expect("redone");
    assert_eq!(std::fs::read(work.join("a.txt")).expect("r"), after_a);
    assert_eq!(
        std::fs::read_to_string(work.join("b.txt")).expect("r"),
        "x\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).expect("r"),
        "B wrote this\n"
    );

    // B's session changeset holds c.txt alone.
    b.sync().await;
    let b_session = b
        .chat_state()
        .changesets
        .clone()
        .expect("a catalogue")
        .into_iter()
        .find(|c| c.change_kind == "session")
        .expect("a session changeset")
        .uri_template;
    let state = changeset(&b, &b_session).await;
    assert_eq!(state.files.len(), 1);
    assert!(state.files[0].id.ends_with("c.txt"));
    a.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_the_changeset_does_not_offer_is_refused() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "a").expect("w");
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "b" }),
        ),
        text("done"),
    ]);
    let options = json!({
        "memory": true, "baseUrl": ep.base_url(), "model": "m",
        "tools": { "files": { "requireRead": false } }
    });
    let th = host(vec![Arc::new(agent(options, place.embedder()))]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("op"),
        Some(&place.work),
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    w.send("t1", "write").await;
    w.end("t1").await;
    let uri = format!("{}/changes/turn/t1", w.chat);
    let refused = invoke(&w, &uri, "explode", None)
        .await
        .expect_err("refused");
    assert!(refused.contains("no operation explode"), "{refused}");
    let refused = invoke(&w, &uri, "undo-file", None)
        .await
        .expect_err("refused");
    assert!(refused.contains("does not take that target"), "{refused}");
    // A live subscriber sees the undo in its changeset.
    let (_res, _sub): (SubscribeResult, _) = w.client.subscribe(uri.clone()).await.expect("sub");
    invoke(&w, &uri, "undo", None).await.expect("undone");
    let env = w
        .until(|a| {
            matches!(
                a,
                ahp_types::actions::StateAction::ChangesetContentChanged(_)
            )
        })
        .await;
    assert_eq!(env.channel, uri);
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).expect("r"),
        "a"
    );
}
