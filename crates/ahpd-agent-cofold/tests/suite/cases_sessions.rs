//! Engine cases of "Sessions, store, transcript" (see `docs/acceptance.md`): rows, memory and
//! scratch folders, deleting, titles and the cut points of a session read back.

use std::path::Path;
use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahpd_sdk::Agent;
use ahpd_sdk::agent::ContextEvent;
use serde_json::{Value, json};
use testkit::{Frame, Gate, Reply, chunk};

use super::cases_queue::{detached_session, turn};
use super::support::*;

fn store_options(store: &Path, ep: &testkit::Endpoint) -> Value {
    json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" })
}

/// Runs one turn of a new session `id` in `dir` through a host and waits for its end.
async fn one_turn_in(
    agent: Arc<dyn Agent>,
    id: &str,
    dir: &Path,
    text: &str,
    config: Value,
) -> Watch {
    let th = host(vec![agent]).await;
    let mut w = Watch::create(&th, "cofold", id, Some(dir), config).await;
    w.send("t1", text).await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    w
}

async fn ending(probe: &mut ahpd_sdk::agent::ContextProbe) -> StateAction {
    loop {
        let event = tokio::time::timeout(PATIENCE, probe.next())
            .await
            .expect("the engine acts")
            .expect("alive");
        if let ContextEvent::Emit(a) = event
            && matches!(
                a,
                StateAction::ChatTurnComplete(_) | StateAction::ChatError(_)
            )
        {
            return a;
        }
    }
}

fn rfc3339(s: &str) -> bool {
    cofold_agents::id::Timestamp::parse(s).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_044_045_a_finished_session_is_listed_and_found() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("noted"), text("again")]);
    let agent = Arc::new(agent(store_options(&store, &ep), place.embedder()));
    one_turn_in(
        agent.clone(),
        "one",
        &place.work,
        "remember the number 41",
        json!({}),
    )
    .await;
    let rows = agent.list().await;
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.id, "one");
    assert_eq!(row.title, "remember the number 41");
    assert_eq!(
        row.working_directories,
        [ahpd_sdk::util::file_uri(&place.work)]
    );
    assert!(
        rfc3339(&row.created_at) && rfc3339(&row.modified_at),
        "{row:?}"
    );
    assert_eq!(agent.find("one").await.as_ref(), Some(row));
    // Case 45: a conversation written after the last listing is found; an unknown id is not.
    let other = Arc::new(super::support::agent(
        store_options(&store, &ep),
        place.embedder(),
    ));
    one_turn_in(other, "later", &place.work, "written later", json!({})).await;
    assert_eq!(
        agent.find("later").await.map(|r| r.title).as_deref(),
        Some("written later")
    );
    assert!(agent.find("never-made").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_046_a_folder_with_hash_and_spaces_round_trips_through_its_uri() {
    let place = Place::new();
    let dir = place.work.join("C# a b");
    std::fs::create_dir_all(&dir).unwrap();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("ok")]);
    let agent = Arc::new(agent(store_options(&store, &ep), place.embedder()));
    one_turn_in(agent.clone(), "hash", &dir, "hi", json!({})).await;
    let row = agent.find("hash").await.expect("a row");
    let uri = &row.working_directories[0];
    assert!(!uri.contains(' ') && !uri.contains('#'), "{uri}");
    let back = url::Url::parse(uri).unwrap().to_file_path().unwrap();
    assert_eq!(back, dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_048_memory_write_lands_in_the_workspaces_memory_folder() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        call(
            "c1",
            "memory_write",
            json!({ "path": "MEMORY.md", "content": "- a fact" }),
        ),
        text("kept"),
    ]);
    let mut embedder = place.embedder();
    let notices = notices_into(&mut embedder);
    let agent = Arc::new(super::support::agent(store_options(&store, &ep), embedder));
    one_turn_in(
        agent,
        &fresh_id("mem"),
        &place.work,
        "remember",
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    let folders: Vec<_> = std::fs::read_dir(store.join("memory"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(folders.len(), 1);
    assert_eq!(
        folders[0].file_name().to_string_lossy(),
        cofold_store_file::workspace_slug(&place.work.to_string_lossy())
    );
    assert_eq!(
        std::fs::read_to_string(folders[0].path().join("MEMORY.md")).unwrap(),
        "- a fact"
    );
    assert!(
        notices.lock().unwrap().is_empty(),
        "no edit notice for memory"
    );
}

#[test]
fn case_049_workspace_slugs_replace_other_characters() {
    use cofold_store_file::workspace_slug;
    assert_eq!(workspace_slug("/srv/x/my proj"), "-srv-x-my-proj");
    #[cfg(windows)]
    assert_eq!(workspace_slug("C:\\Work"), "c--Work");
    assert_eq!(workspace_slug("/a/é"), "-a--");
    assert_eq!(workspace_slug("/a/😀"), "-a---");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_050_memory_of_a_workspace_reaches_its_next_sessions_instructions() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        call(
            "c1",
            "memory_write",
            json!({ "path": "MEMORY.md", "content": "- the number is 41" }),
        ),
        text("kept"),
        text("second"),
        text("elsewhere"),
    ]);
    let agent = Arc::new(agent(store_options(&store, &ep), place.embedder()));
    let bypass = json!({ "permissionMode": "bypassPermissions" });
    one_turn_in(
        agent.clone(),
        &fresh_id("m1"),
        &place.work,
        "remember",
        bypass.clone(),
    )
    .await;
    one_turn_in(
        agent.clone(),
        &fresh_id("m2"),
        &place.work,
        "what number",
        bypass.clone(),
    )
    .await;
    let other = place.work.join("other");
    std::fs::create_dir_all(&other).unwrap();
    one_turn_in(agent, &fresh_id("m3"), &other, "what number", bypass).await;
    let bodies = ep.chat_bodies();
    let system = |b: &Value| b["messages"][0]["content"].to_string();
    assert!(system(&bodies[2]).contains("the number is 41"));
    assert!(!system(&bodies[3]).contains("the number is 41"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_051_052_agents_on_one_store_list_newest_first_and_delete() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("a"), text("b")]);
    let first = Arc::new(agent(store_options(&store, &ep), place.embedder()));
    let second = Arc::new(super::support::agent(
        store_options(&store, &ep),
        place.embedder(),
    ));
    one_turn_in(first.clone(), "one", &place.work, "first", json!({})).await;
    one_turn_in(second.clone(), "two", &place.work, "second", json!({})).await;
    let ids = |rows: Vec<ahpd_sdk::agent::PastSession>| {
        rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(first.list().await), ["two", "one"]);
    assert_eq!(ids(second.list().await), ["two", "one"]);
    first.delete("one").await.expect("deleted");
    assert_eq!(ids(second.list().await), ["two"]);
    assert!(first.transcript("one").await.is_none());
    first
        .delete("never-made")
        .await
        .expect("an unknown id is fine");
    first.delete("never-made").await.expect("twice too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_053_a_running_conversation_is_not_deleted() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("busy")),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::finish("stop")),
    ])]);
    let agent = agent(store_options(&store, &ep), place.embedder());
    let id = fresh_id("busy");
    let (mut session, mut probe) = detached_session(&agent, &place, &id).await;
    session.begin(turn("t1", "hold on"));
    gate.reached().await;
    assert!(agent.delete(&id).await.is_err(), "the run holds the writer");
    assert!(agent.find(&id).await.is_some());
    gate.open();
    assert!(matches!(
        ending(&mut probe).await,
        StateAction::ChatTurnComplete(_)
    ));
    session.close().await;
    agent.delete(&id).await.expect("deleted once the run ended");
    assert!(agent.find(&id).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_058_the_model_of_a_turn_is_read_back() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("ok")]);
    place.copapo(json!({ "providers": [{ "id": "open_router", "baseUrl": ep.base_url() }] }));
    let options = json!({ "store": store.display().to_string(), "model": "open_router/y" });
    let agent = Arc::new(agent(options.clone(), place.embedder()));
    let th = host(vec![agent]).await;
    let id = fresh_id("model");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    let mut chosen = message("hi");
    chosen.model = Some(ahp_types::state::ModelSelection {
        id: "open_router/x".into(),
        config: None,
    });
    w.send_message("t1", chosen).await;
    w.end("t1").await;
    th.host.shutdown();
    let again = super::support::agent(options, place.embedder());
    let turns = again.transcript(&id).await.unwrap();
    assert_eq!(
        turns[0].message.model.as_ref().map(|m| m.id.as_str()),
        Some("open_router/x")
    );
    assert_eq!(
        turns[0].usage.as_ref().and_then(|u| u.model.as_deref()),
        Some("open_router/x")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_061_each_chat_is_its_own_conversation() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("one"), text("two")]);
    let agent = Arc::new(agent(store_options(&store, &ep), place.embedder()));
    let th = host(vec![agent.clone()]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("chats"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "FIRST-CHAT").await;
    w.end("t1").await;
    let chat = w.new_chat().await;
    w.client
        .dispatch(
            chat.clone(),
            turn_started_with("t1", message("SECOND-CHAT")),
        )
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::ChatTurnComplete(_)))
        .await;
    let rows = agent.list().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in rows {
        let texts: Vec<String> = agent
            .transcript(&row.id)
            .await
            .unwrap()
            .iter()
            .map(|t| t.message.text.clone())
            .collect();
        assert_eq!(texts.len(), 1, "{texts:?}");
        assert!(texts[0] == "FIRST-CHAT" || texts[0] == "SECOND-CHAT");
    }
    let _ = chat;
    // A conversation is stored under the id the host gives the chat's backend.
    for id in ["chat-one", "chat-two"] {
        let (session, _probe) = super::cases_queue::detached_session(&agent, &place, id).await;
        assert_eq!(session.backend_id(), id);
        assert!(agent.find(id).await.is_some(), "{id} is listed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_063_the_first_line_of_the_first_message_titles_the_session_once() {
    let place = Place::new();
    let long70 = "x".repeat(70);
    let words: String = (0..30).map(|i| format!("word{i:02} ")).collect::<String>();
    let long150 = words.trim_end().to_owned();
    let ep = endpoint(vec![text("a"), text("b"), text("c"), text("d")]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let titles = |w: &Watch| -> Vec<String> {
        w.envelopes
            .iter()
            .filter_map(|e| match &e.action {
                StateAction::SessionTitleChanged(t) => Some(t.title.clone()),
                _ => None,
            })
            .collect()
    };
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("title"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "Fix the build\nand the tests").await;
    w.end("t1").await;
    w.send("t2", "Another line").await;
    w.end("t2").await;
    w.sync().await;
    assert_eq!(titles(&w), ["Fix the build"]);
    let id = w.session.trim_start_matches("cofold:/").to_owned();
    assert_eq!(agent.find(&id).await.unwrap().title, "Fix the build");
    for (text, expected) in [
        (long70.clone(), long70.clone()),
        (long150.clone(), {
            let cut: String = long150.chars().take(70).collect();
            format!("{}…", &cut[..cut.rfind(' ').unwrap()])
        }),
    ] {
        let mut w = Watch::create(
            &th,
            "cofold",
            &fresh_id("title"),
            Some(&place.work),
            json!({}),
        )
        .await;
        w.send("t1", &text).await;
        w.end("t1").await;
        w.sync().await;
        assert_eq!(titles(&w), [expected]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_066_a_session_read_back_has_no_cut_points() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![text("one")]);
    let options = store_options(&store, &ep);
    let first = agent(options.clone(), place.embedder());
    let id = fresh_id("cuts");
    let (mut session, mut probe) = detached_session(&first, &place, &id).await;
    session.begin(turn("t1", "first"));
    ending(&mut probe).await;
    assert!(
        session.fork_point("t1").is_some(),
        "this process watched t1 end"
    );
    session.close().await;

    let again = super::support::agent(options, place.embedder());
    let uri = format!("cofold:/{id}");
    let chat = ahpd_sdk::util::default_chat_uri(&uri);
    let (ctx, mut probe) = ahpd_sdk::SessionContext::detached(&uri, &chat);
    let mut session = again
        .create(ahpd_sdk::SessionStart {
            session_uri: uri,
            chat_uri: chat,
            backend_id: id.clone(),
            resume: Some(id.clone()),
            fork: None,
            working_directory: Some(place.work.clone()),
            additional_directories: Vec::new(),
            settings: Default::default(),
            ctx,
        })
        .await
        .unwrap();
    assert!(session.fork_point("t1").is_none());
    assert!(session.fork_point("unknown").is_none());
    assert_eq!(
        session.rewind(Some("t1")).err().map(|r| r.0).as_deref(),
        Some("cofold: turn t1 has no cut point in this process")
    );
    ep.push_reply(Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("busy")),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::finish("stop")),
    ]));
    session.begin(turn("t2", "second"));
    gate.reached().await;
    assert_eq!(
        session.rewind(None).err().map(|r| r.0).as_deref(),
        Some("cofold: a turn is running; stop it before cutting the conversation")
    );
    gate.open();
    ending(&mut probe).await;
    session.close().await;
}
