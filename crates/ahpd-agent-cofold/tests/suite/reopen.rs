//! A run waiting on a person when the daemon stops, reopened or replaced after the restart.
//!
//! The first "daemon" runs on a runtime of its own, shut down once the run is paused: its tasks
//! are dropped mid-wait as a stopped process leaves them, and the paused run stays in the file
//! store. The second one opens the same store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahp_types::actions::StateAction;
use ahpd_agent_cofold::{CofoldAgent, REPLACED};
use ahpd_sdk::agent::{ApprovalOutcome, ContextEvent, ContextProbe, SessionStart};
use ahpd_sdk::{Agent, Session, SessionContext};
use cofold_agents::store::{RunStatus, Store};
use cofold_store_file::{FileStore, FileStoreOptions};
use serde_json::{Value, json};

use super::support::*;

pub(super) fn options(store: &Path, ep: &testkit::Endpoint) -> Value {
    json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" })
}

/// Runs turn `t1` in a daemon of its own until it waits for an approval, then stops that daemon.
async fn pause_then_stop(place: &Place, options: Value, id: &str) {
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let embedder = place.embedder();
    let work = place.work.clone();
    let id = id.to_owned();
    runtime.spawn(async move {
        let th = host(vec![Arc::new(agent(options, embedder))]).await;
        let mut w = Watch::create(
            &th,
            "cofold",
            &id,
            Some(&work),
            json!({ "permissionMode": "default" }),
        )
        .await;
        w.send("t1", "write a.txt").await;
        w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
            .await;
        let _ = paused_tx.send(());
        // Everything stays as it is until the runtime is shut down under it.
        let _kept = (th, w);
        std::future::pending::<()>().await;
    });
    paused_rx.await.expect("the first daemon paused its run");
    // Waits for the file writes in flight to land, as the end of a process would.
    tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(30)))
        .await
        .expect("the first daemon stops");
}

/// A first daemon stopped while its turn `t1` ("write a.txt") waits for approval of a
/// `write_file` of `a.txt` with `content`; the endpoint answers `then` after that first call.
pub(super) struct Paused {
    pub(super) place: Place,
    pub(super) store: PathBuf,
    pub(super) ep: testkit::Endpoint,
    pub(super) id: String,
}

pub(super) async fn paused(prefix: &str, content: &str, then: Vec<testkit::Reply>) -> Paused {
    let first = call(
        "c1",
        "write_file",
        json!({ "path": "a.txt", "content": content }),
    );
    paused_at(prefix, first, then).await
}

/// Like [`paused`], with `first` as the model's first answer to `t1` (which must wait on a
/// person).
pub(super) async fn paused_at(
    prefix: &str,
    first: testkit::Reply,
    then: Vec<testkit::Reply>,
) -> Paused {
    let place = Place::new();
    let store = place.home.join("store");
    let mut replies = vec![first];
    replies.extend(then);
    let ep = endpoint(replies);
    let id = fresh_id(prefix);
    pause_then_stop(&place, options(&store, &ep), &id).await;
    Paused {
        place,
        store,
        ep,
        id,
    }
}

impl Paused {
    fn options(&self) -> Value {
        options(&self.store, &self.ep)
    }

    /// A second host over the same store, and a client watching the paused session.
    pub(super) async fn second_host(&self) -> (TestHost, Watch) {
        let second = Arc::new(agent(self.options(), self.place.embedder()));
        self.second_host_with(second).await
    }

    /// [`Paused::second_host`], whose host does not open the backend for the subscribe, so the
    /// paused run waits for the host's first call (as with an agent that does not say its
    /// conversations hold unfinished work).
    async fn second_host_unwatched(&self) -> (TestHost, Watch) {
        let second = Arc::new(Unwatched(agent(self.options(), self.place.embedder())));
        self.second_host_with(second).await
    }

    async fn second_host_with(&self, second: Arc<dyn Agent>) -> (TestHost, Watch) {
        let th = host(vec![second]).await;
        let client = client(&th.url, "later").await;
        let w = Watch::subscribe(client, &format!("cofold:/{}", self.id)).await;
        (th, w)
    }
}

/// The cofold agent, but for [`Agent::unfinished`], which keeps its default.
struct Unwatched(CofoldAgent);

#[async_trait::async_trait]
impl Agent for Unwatched {
    fn descriptor(&self) -> ahpd_sdk::agent::AgentDescriptor {
        self.0.descriptor()
    }
    fn config_schema(&self, dir: Option<&Path>) -> ahp_types::state::SessionConfigSchema {
        self.0.config_schema(dir)
    }
    fn config_defaults(&self, dir: Option<&Path>) -> ahp_types::common::JsonObject {
        self.0.config_defaults(dir)
    }
    fn validate_config(
        &self,
        values: &ahp_types::common::JsonObject,
    ) -> Result<(), ahpd_sdk::agent::Refusal> {
        self.0.validate_config(values)
    }
    async fn create(
        &self,
        start: SessionStart,
    ) -> Result<Box<dyn Session>, ahpd_sdk::agent::AgentError> {
        self.0.create(start).await
    }
    async fn probe(&self) -> ahpd_sdk::agent::Probe {
        self.0.probe().await
    }
    async fn list(&self) -> Vec<ahpd_sdk::agent::PastSession> {
        self.0.list().await
    }
    async fn find(&self, id: &str) -> Option<ahpd_sdk::agent::PastSession> {
        self.0.find(id).await
    }
    async fn transcript(&self, id: &str) -> Option<Vec<ahp_types::state::Turn>> {
        self.0.transcript(id).await
    }
}

pub(super) fn runs_of(store: &Path) -> FileStore {
    FileStore::open(store.to_path_buf(), FileStoreOptions::default()).expect("store opens")
}

/// The second daemon's session over `id`, opened as the host opens one read back from the store.
async fn reopened_session(
    agent: &CofoldAgent,
    place: &Place,
    id: &str,
) -> (Box<dyn Session>, ContextProbe) {
    session_of(agent, place, id, true).await
}

/// A session of `agent` over the conversation `id` under permission mode `default`, on a
/// context with no host; `resume` when the conversation is read back from the store.
pub(super) async fn session_of(
    agent: &CofoldAgent,
    place: &Place,
    id: &str,
    resume: bool,
) -> (Box<dyn Session>, ContextProbe) {
    let session_uri = format!("cofold:/{id}");
    let chat_uri = ahpd_sdk::util::default_chat_uri(&session_uri);
    let (ctx, probe) = SessionContext::detached(&session_uri, &chat_uri);
    let mut settings = serde_json::Map::new();
    settings.insert("permissionMode".into(), json!("default"));
    let start = SessionStart {
        session_uri,
        chat_uri,
        backend_id: id.to_owned(),
        resume: resume.then(|| id.to_owned()),
        fork: None,
        working_directory: Some(place.work.clone()),
        additional_directories: Vec::new(),
        settings,
        ctx,
    };
    let session = agent.create(start).await.expect("the session opens");
    (session, probe)
}

/// The next thing the engine does, answering nothing.
pub(super) async fn next(probe: &mut ContextProbe) -> ContextEvent {
    tokio::time::timeout(PATIENCE, probe.next())
        .await
        .expect("the engine acts")
        .expect("the context is alive")
}

pub(super) fn approve() -> ApprovalOutcome {
    ApprovalOutcome::Approved {
        edited_input: None,
        option_id: Some("allow-once".into()),
        confirmed: ahp_types::state::ToolCallConfirmationReason::UserAction,
    }
}

/// Everything emitted until the next approval, which is answered with `outcome`; panics at an
/// ending action.
pub(super) async fn until_approval(
    probe: &mut ContextProbe,
    seen: &mut Vec<StateAction>,
    outcome: ApprovalOutcome,
) -> ahpd_sdk::agent::ApprovalRequest {
    loop {
        match next(probe).await {
            ContextEvent::Emit(action) => {
                assert!(
                    !matches!(
                        action,
                        StateAction::ChatTurnComplete(_) | StateAction::ChatError(_)
                    ),
                    "no ending before the approval: {action:?}"
                );
                seen.push(action);
            }
            ContextEvent::Approval(request, reply) => {
                let _ = reply.send(outcome);
                return request;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Everything emitted until the turn's ending action, which is returned; no more asks.
pub(super) async fn until_end(
    probe: &mut ContextProbe,
    seen: &mut Vec<StateAction>,
) -> StateAction {
    loop {
        match next(probe).await {
            ContextEvent::Emit(action) => {
                let end = matches!(
                    action,
                    StateAction::ChatTurnComplete(_) | StateAction::ChatError(_)
                );
                seen.push(action.clone());
                if end {
                    return action;
                }
            }
            other => panic!("nothing more is asked: {other:?}"),
        }
    }
}

pub(super) async fn check_one_completed_run(store: &Path, id: &str) {
    let store = runs_of(store);
    let runs = store.list_runs(id, None).await.unwrap();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert_eq!(runs[0].status, RunStatus::Completed);
    let prompts = store
        .list_messages(id, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|m| cofold_agents::message::text_of(m) == "write a.txt")
        .count();
    assert_eq!(prompts, 1, "the input stored once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_060_068_069_a_paused_run_is_reopened_asked_again_and_completed() {
    // Items 60, 68 and 69.
    let p = paused("reopen", "new", vec![text("written")]).await;
    let Paused {
        place,
        store,
        ep,
        id,
    } = &p;
    assert!(!place.work.join("a.txt").exists());

    let second = agent(p.options(), place.embedder());
    // Read back, the paused turn is not history yet.
    assert_eq!(second.transcript(id).await.map(|t| t.len()), Some(0));
    let (mut session, mut probe) = reopened_session(&second, place, id).await;
    // A config change is what opens it.
    let mut change = serde_json::Map::new();
    change.insert("permissionMode".into(), json!("default"));
    session.configure(&change).expect("accepted");
    let mut seen = Vec::new();
    let request = until_approval(&mut probe, &mut seen, approve()).await;
    assert_eq!(request.turn_id, "t1");
    assert_eq!(request.tool_call_id, "c1");
    // Said once, with its parts, before the question.
    let started: Vec<&StateAction> = seen
        .iter()
        .filter(|a| matches!(a, StateAction::ChatTurnStarted(_)))
        .collect();
    assert_eq!(started.len(), 1);
    match started[0] {
        StateAction::ChatTurnStarted(s) => {
            assert_eq!(s.turn_id, "t1");
            assert_eq!(s.message.text, "write a.txt");
        }
        _ => unreachable!(),
    }
    assert!(matches!(seen[0], StateAction::ChatTurnStarted(_)));
    assert!(
        seen.iter()
            .any(|a| matches!(a, StateAction::ChatToolCallStart(s) if s.tool_call_id == "c1"))
    );
    assert!(seen.iter().any(|a| matches!(
        a,
        StateAction::ChatActivityChanged(c) if c.activity.as_deref() == Some("Waiting on you")
    )));
    let end = until_end(&mut probe, &mut seen).await;
    assert!(matches!(end, StateAction::ChatTurnComplete(c) if c.turn_id == "t1"));
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "new",
        "the tool ran once the reopened run was approved"
    );
    assert_eq!(ep.chat_bodies().len(), 2);
    check_one_completed_run(store, id).await;
    session.close().await;
    assert_eq!(second.transcript(id).await.map(|t| t.len()), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_070_a_reopened_run_asks_about_its_next_call_through_the_same_handle() {
    // Item 70.
    let p = paused(
        "reopen-two",
        "one",
        vec![
            call(
                "c2",
                "write_file",
                json!({ "path": "b.txt", "content": "two" }),
            ),
            text("both written"),
        ],
    )
    .await;
    let Paused {
        place, store, id, ..
    } = &p;
    let second = agent(p.options(), place.embedder());
    let (mut session, mut probe) = reopened_session(&second, place, id).await;
    session
        .configure(&serde_json::Map::new())
        .expect("accepted");
    let mut seen = Vec::new();
    let first = until_approval(&mut probe, &mut seen, approve()).await;
    assert_eq!(first.tool_call_id, "c1");
    let second_ask = until_approval(&mut probe, &mut seen, approve()).await;
    assert_eq!(second_ask.tool_call_id, "c2");
    let end = until_end(&mut probe, &mut seen).await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)));
    assert_eq!(
        std::fs::read_to_string(place.work.join("b.txt")).unwrap(),
        "two"
    );
    check_one_completed_run(store, id).await;
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_071_a_new_turn_takes_the_place_of_a_paused_run_after_a_restart() {
    // Item 71, through the host and the official client.
    let p = paused(
        "replace",
        "new",
        vec![text("left alone"), text("second answer")],
    )
    .await;
    let Paused {
        place,
        store,
        ep,
        id,
    } = &p;

    let (th, mut w) = p.second_host_unwatched().await;
    assert!(w.chat_state().turns.is_empty());
    assert!(w.chat_state().active_turn.is_none());
    w.send("t2", "something else").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;
    // The declined request is not silent: the new turn carries a notice saying so.
    let notice = w.envelopes.iter().any(|env| {
        let text = serde_json::to_string(&env.action).unwrap();
        text.contains("\"t2\"")
            && text.contains("left waiting when the daemon stopped was declined")
    });
    assert!(notice, "no notice on t2");
    // The reopened turn is never shown.
    for env in &w.envelopes {
        let text = serde_json::to_string(&env.action).unwrap();
        assert!(!text.contains("\"t1\""), "t1 shown: {text}");
    }
    assert!(
        !place.work.join("a.txt").exists(),
        "the paused write never ran"
    );
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(request_text(&bodies[1]).contains(REPLACED));
    assert!(!request_text(&bodies[1]).contains("something else"));
    assert!(request_text(&bodies[2]).contains("something else"));
    let runs = runs_of(store).list_runs(id, None).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_068_a_config_change_from_a_client_reopens_the_paused_run_through_the_host() {
    // Item 68 end to end: the second host opens the stored session when a client changes its
    // config, the engine reopens the paused run, and the client's approval completes it.
    let p = paused("reopen-host", "new", vec![text("written")]).await;
    let Paused {
        place,
        store,
        ep,
        id,
    } = &p;

    let (th, mut w) = p.second_host_unwatched().await;
    assert!(w.chat_state().active_turn.is_none());
    let change: StateAction = serde_json::from_value(
        json!({ "type": "session/configChanged", "config": { "permissionMode": "default" } }),
    )
    .unwrap();
    w.client
        .dispatch(w.session.clone(), change)
        .await
        .expect("dispatch");
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    let active = w
        .chat_state()
        .active_turn
        .clone()
        .expect("the turn is shown");
    assert_eq!(active.id, "t1");
    let calls = w.last_calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let confirm: StateAction = serde_json::from_value(json!({
        "type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "c1",
        "approved": true, "selectedOptionId": "allow-once"
    }))
    .unwrap();
    w.client
        .dispatch(w.chat.clone(), confirm)
        .await
        .expect("dispatch");
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;
    let count = |pred: &dyn Fn(&StateAction) -> bool| {
        w.envelopes.iter().filter(|e| pred(&e.action)).count()
    };
    assert_eq!(
        count(&|a| matches!(a, StateAction::ChatTurnStarted(s) if s.turn_id == "t1")),
        1,
        "the reopened turn is said once"
    );
    assert_eq!(
        count(&|a| matches!(a, StateAction::SessionInputNeededSet(_))),
        1,
        "one question raised"
    );
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "new",
        "the tool ran once, after the approval"
    );
    assert_eq!(ep.chat_bodies().len(), 2);
    check_one_completed_run(store, id).await;
}

/// The first file named `name` under `dir`.
pub(super) fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_recorded_but_never_announced_is_still_declined_by_a_new_turn() {
    // A daemon killed after recording a pause (the run `awaiting`, its request stored) but before
    // announcing it (`approval.requested`) leaves a run waiting on a request no event names; a
    // new turn must still take its place rather than wait behind it.
    let p = paused(
        "unannounced",
        "new",
        vec![text("left alone"), text("second answer")],
    )
    .await;
    let events = find_file(&p.store, "events.jsonl").expect("the run's events");
    let logged = std::fs::read_to_string(&events).unwrap();
    let kept: String = logged
        .lines()
        .take_while(|line| !line.contains("\"approval.requested\""))
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(kept.len() < logged.len(), "no announcement to remove");
    std::fs::write(&events, kept).unwrap();

    let (_th, mut w) = p.second_host().await;
    w.send("t2", "something else").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = p.ep.chat_bodies();
    assert!(request_text(&bodies[1]).contains(REPLACED));
    let runs = runs_of(&p.store).list_runs(&p.id, None).await.unwrap();
    assert!(runs.iter().all(|r| r.status.is_terminal()), "{runs:?}");
}
