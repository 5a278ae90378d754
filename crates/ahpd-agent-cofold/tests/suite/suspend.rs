//! `Session::suspend`, the close of a daemon that stops and will start again: a run waiting on
//! a person is left in the store as a crash leaves it, so the next process asks it again, while
//! a run at work is cancelled as `close` cancels it.

use ahp_types::actions::StateAction;
use ahpd_sdk::Agent;
use ahpd_sdk::agent::ContextEvent;
use cofold_agents::event::{EventBody, OutcomeKind};
use cofold_agents::store::{RunRef, RunStatus, Store};
use serde_json::json;
use testkit::{Frame, Gate, Reply, chunk};

use super::cases_queue::turn;
use super::reopen::{
    approve, check_one_completed_run, next, options, runs_of, session_of, until_approval, until_end,
};
use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_session_leaves_its_paused_run_for_the_next_process_to_ask_again() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "new" }),
        ),
        text("written"),
    ]);
    let id = fresh_id("suspend");
    let first = agent(options(&store, &ep), place.embedder());
    let (mut session, mut probe) = session_of(&first, &place, &id, false).await;
    session.begin(turn("t1", "write a.txt"));
    let unanswered = loop {
        match next(&mut probe).await {
            ContextEvent::Emit(_) => {}
            ContextEvent::Approval(request, reply) => {
                assert_eq!(request.tool_call_id, "c1");
                break reply;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    // Returns once the run is let go: what the store holds now is what the next process reads.
    session.suspend().await;
    let runs = runs_of(&store);
    let run = runs.list_runs(&id, None).await.unwrap().remove(0);
    assert_eq!(run.status, RunStatus::Awaiting, "{run:?}");
    let pending = run.pending_request_id.clone().expect("a request is open");
    let at = RunRef {
        session_id: id.clone(),
        run_id: run.run_id.clone(),
    };
    let request = runs.get_request(&at, &pending).await.unwrap().unwrap();
    assert_eq!(request.resolution, None, "the request is not answered");
    let events = runs.list_events(&at, None).await.unwrap();
    assert!(
        matches!(
            events.last().map(|e| &e.body),
            Some(EventBody::RunFinished { outcome }) if outcome.status() == RunStatus::Awaiting
        ),
        "nothing after the pause: {events:?}"
    );
    // The process ends: the question it put to its host goes unanswered.
    drop(unanswered);
    drop(session);
    assert!(first.unfinished(&id).await);
    assert!(!place.work.join("a.txt").exists());

    let second = agent(options(&store, &ep), place.embedder());
    assert!(second.unfinished(&id).await);
    let (mut session, mut probe) = session_of(&second, &place, &id, true).await;
    session.watched();
    let mut seen = Vec::new();
    let request = until_approval(&mut probe, &mut seen, approve()).await;
    assert_eq!(
        (request.turn_id.as_str(), request.tool_call_id.as_str()),
        ("t1", "c1")
    );
    let end = until_end(&mut probe, &mut seen).await;
    assert!(matches!(end, StateAction::ChatTurnComplete(c) if c.turn_id == "t1"));
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "new"
    );
    check_one_completed_run(&store, &id).await;
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_session_cancels_a_run_at_work_as_close_does() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("partial")),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::text(" and more")),
        Frame::Chunk(chunk::finish("stop")),
    ])]);
    let id = fresh_id("suspend-work");
    let agent = agent(options(&store, &ep), place.embedder());
    let (mut session, _probe) = session_of(&agent, &place, &id, false).await;
    session.begin(turn("t1", "talk"));
    gate.reached().await;
    session.suspend().await;
    let runs = runs_of(&store);
    let run = runs.list_runs(&id, None).await.unwrap().remove(0);
    assert_eq!(run.status, RunStatus::Cancelled);
    let at = RunRef {
        session_id: id.clone(),
        run_id: run.run_id,
    };
    let reason = runs
        .list_events(&at, None)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.body {
            EventBody::RunFinished { outcome } => match outcome.kind {
                OutcomeKind::Cancelled { reason } => reason,
                _ => None,
            },
            _ => None,
        });
    assert_eq!(reason.as_deref(), Some("the session closed"));
    assert!(!agent.unfinished(&id).await, "nothing is left to take up");
    gate.open();
}
