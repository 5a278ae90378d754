//! After a restart, subscribing to a stored chat alone (no message, no config change) opens its
//! engine backend: a run waiting on a person is asked again, and a run its dead process left
//! `running` is settled and shown ended.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, TurnState};
use cofold_agents::store::{RunStatus, Store};
use serde_json::{Value, json};

use super::reopen::{check_one_completed_run, find_file, options, paused, paused_at, runs_of};
use super::support::*;

/// Reads what arrives until `done` holds of the client's mirror (checked first: the snapshot
/// may already hold it).
async fn until_state(w: &mut Watch, done: impl Fn(&Watch) -> bool) {
    while !done(w) {
        w.next().await;
    }
}

fn asks(w: &Watch) -> usize {
    w.mirror.sessions[&w.session]
        .input_needed
        .as_ref()
        .map_or(0, Vec::len)
}

/// Sends `reply` to the paused request of turn `t1`, which then completes, the mirror agreeing.
async fn answer_to_completion(w: &mut Watch, th: &TestHost, reply: StateAction) {
    w.client
        .dispatch(w.chat.clone(), reply)
        .await
        .expect("dispatch");
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_alone_asks_a_paused_approval_again_and_its_answer_completes_the_run() {
    let p = paused("watched", "new", vec![text("written")]).await;
    let (th, mut w) = p.second_host().await;
    // Nothing is sent: the subscribe is what brings the request back.
    until_state(&mut w, |w| asks(w) == 1).await;
    let active = w
        .chat_state()
        .active_turn
        .clone()
        .expect("the turn is shown");
    assert_eq!(active.id, "t1");
    assert_eq!(active.message.text, "write a.txt");
    let calls = w.last_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let confirm: StateAction = serde_json::from_value(json!({
        "type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "c1",
        "approved": true, "selectedOptionId": "allow-once"
    }))
    .unwrap();
    answer_to_completion(&mut w, &th, confirm).await;
    assert_eq!(asks(&w), 0, "the request is gone once answered");
    assert_eq!(
        std::fs::read_to_string(p.place.work.join("a.txt")).unwrap(),
        "new",
        "the write ran once, after the approval"
    );
    assert_eq!(p.ep.chat_bodies().len(), 2);
    check_one_completed_run(&p.store, &p.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_alone_asks_a_paused_question_again_and_its_answer_completes_the_run() {
    let question = call(
        "q1",
        "ask_user",
        json!({ "questions": [{ "id": "colour", "question": "Which colour?" }] }),
    );
    let p = paused_at("watched-question", question, vec![text("blue it is")]).await;
    let (th, mut w) = p.second_host().await;
    until_state(&mut w, |w| asks(w) == 1).await;
    assert_eq!(
        w.chat_state().active_turn.as_ref().map(|t| t.id.as_str()),
        Some("t1")
    );
    let asked = serde_json::to_value(&w.mirror.sessions[&w.session].input_needed).unwrap();
    let request_id = asked[0]["request"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a question: {asked}"))
        .to_owned();
    assert!(asked.to_string().contains("Which colour?"), "{asked}");
    let answer: StateAction = serde_json::from_value(json!({
        "type": "chat/inputCompleted", "requestId": request_id, "response": "accept",
        "answers": { "colour": {
            "state": "submitted", "value": { "kind": "text", "value": "blue" },
        } },
    }))
    .unwrap();
    answer_to_completion(&mut w, &th, answer).await;
    let bodies = p.ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(
        request_text(&bodies[1]).contains("blue"),
        "the model reads the answer"
    );
    let runs = runs_of(&p.store).list_runs(&p.id, None).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_after_the_request_is_shown_again_declines_it_with_a_notice() {
    let p = paused("watched-replace", "new", vec![text("left"), text("second")]).await;
    let (th, mut w) = p.second_host().await;
    until_state(&mut w, |w| asks(w) == 1).await;
    w.send("t2", "something else").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;
    assert_eq!(asks(&w), 0, "the declined request is withdrawn");
    let notice = w.envelopes.iter().any(|env| {
        let text = serde_json::to_string(&env.action).unwrap();
        text.contains("\"t2\"")
            && text.contains("left waiting when the daemon stopped was declined")
    });
    assert!(notice, "no notice on t2");
    assert!(
        !p.place.work.join("a.txt").exists(),
        "the declined write never ran"
    );
    let bodies = p.ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(request_text(&bodies[1]).contains(ahpd_agent_cofold::REPLACED));
    assert!(request_text(&bodies[2]).contains("something else"));
    let runs = runs_of(&p.store).list_runs(&p.id, None).await.unwrap();
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Completed),
        "{runs:?}"
    );
}

/// Runs turn `t1` in a daemon of its own until its model request is held at `gate`, stops that
/// daemon, and makes its writer claim name a process that has ended, as a killed daemon leaves
/// it (the first daemon shares this test's process, which is alive).
async fn run_then_die(place: &Place, options: Value, id: &str, gate: testkit::Gate) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let embedder = place.embedder();
    let work = place.work.clone();
    let owned = id.to_owned();
    runtime.spawn(async move {
        let th = host(vec![Arc::new(agent(options, embedder))]).await;
        let mut w = Watch::create(&th, "cofold", &owned, Some(&work), json!({})).await;
        w.send("t1", "think long").await;
        let _kept = (th, w);
        std::future::pending::<()>().await;
    });
    gate.reached().await;
    tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(30)))
        .await
        .expect("the first daemon stops");
}

fn claim_for_dead_process(store: &Path) {
    let lock = find_file(store, "writer.lock").expect("the run holds the writer claim");
    let mut child = std::process::Command::new("true").spawn().expect("a child");
    let pid = child.id();
    child.wait().expect("it ends");
    let mut claim: Value = serde_json::from_slice(&std::fs::read(&lock).unwrap()).unwrap();
    claim["pid"] = json!(pid);
    std::fs::write(&lock, claim.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_alone_settles_a_dead_run_and_shows_its_turn_ended() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = testkit::Gate::new();
    let ep = endpoint(vec![
        testkit::Reply::Held(gate.clone(), Box::new(text("never heard"))),
        text("pong"),
    ]);
    let id = fresh_id("dead");
    run_then_die(&place, options(&store, &ep), &id, gate).await;
    claim_for_dead_process(&store);
    let before = runs_of(&store).list_runs(&id, None).await.unwrap();
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].status, RunStatus::Running);

    let th = host(vec![Arc::new(agent(
        options(&store, &ep),
        place.embedder(),
    ))])
    .await;
    let client = client(&th.url, "later").await;
    let mut w = Watch::subscribe(client, &format!("cofold:/{id}")).await;
    // Nothing is sent: the subscribe is what settles the run and says how its turn ended.
    until_state(&mut w, |w| {
        w.chat_state().active_turn.is_none() && w.chat_state().turns.iter().any(|t| t.id == "t1")
    })
    .await;
    let turn = w
        .chat_state()
        .turns
        .iter()
        .find(|t| t.id == "t1")
        .unwrap()
        .clone();
    assert_eq!(turn.state, TurnState::Error, "{turn:?}");
    assert_eq!(turn.message.text, "think long");
    let sentence = turn
        .response_parts
        .iter()
        .find_map(|part| match part {
            ResponsePart::Error(e) => Some(e.error.message.clone()),
            _ => None,
        })
        .expect("the turn says why it ended");
    assert!(sentence.contains("the daemon stopped"), "{sentence}");
    let after = runs_of(&store).list_runs(&id, None).await.unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].status, RunStatus::Failed, "{after:?}");
    w.assert_mirror(&th).await;

    // The conversation takes a new turn at once.
    w.send("t2", "ping").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
}
