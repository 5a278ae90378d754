//! The file store under the real run loop (runtime cases 218-219, docs/acceptance.md): a session folder copied to
//! another root resumes there, and a rewind is where the next run starts.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cofold_agents::agent::Agent;
use cofold_agents::event::{Command, EventBody, RunStatus};
use cofold_agents::message::text_of;
use cofold_agents::run::{ResumeOptions, RunOptions, resume, run};
use cofold_agents::store::Store;
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};
use cofold_store_file::{FileStore, FileStoreOptions};
use futures::StreamExt;
use serde_json::{Value, json};

use super::support::snapshot;

/// A destructive `rm { path }` tool (so the default policy asks) that counts its executions.
fn rm_tool(calls: Arc<Mutex<u32>>) -> Tool {
    let def = ToolDef::new(
        "rm",
        "Removes a path.",
        json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"] }),
        handler_fn(move |_input: Value, _ctx| {
            let calls = calls.clone();
            async move {
                *calls.lock().expect("calls") += 1;
                Ok::<_, ToolError>(ToolOutput::from("removed"))
            }
        }),
    )
    .effects(ToolEffects { writes: true, destructive: true, ..ToolEffects::default() });
    Tool::new(def).expect("the rm tool")
}

fn agent(model: &FakeModel, store: Arc<dyn Store>, calls: Arc<Mutex<u32>>) -> Agent {
    Agent::builder("a", "be brief", model.adapter())
        .store(store)
        .tool(rm_tool(calls))
        .build()
        .expect("agent")
}

fn open(root: &Path) -> Arc<FileStore> {
    Arc::new(FileStore::open(root, FileStoreOptions::default()).expect("open the store"))
}

fn copy_folder(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create");
    for entry in fs::read_dir(from).expect("list") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_folder(&path, &target);
        } else {
            fs::copy(&path, &target).expect("copy");
        }
    }
}

#[tokio::test]
async fn a_session_folder_copied_to_another_root_resumes_there_and_the_original_stays() {
    let first_root = tempfile::tempdir().expect("a temporary folder");
    let second_root = tempfile::tempdir().expect("a temporary folder");
    let calls = Arc::new(Mutex::new(0));
    let model = FakeModel::new(vec![FakeStep::tool_call("rm", json!({ "path": "/tmp/x" }))]);
    let first = open(first_root.path());
    let handle = run(
        &agent(&model, first.clone(), calls.clone()),
        RunOptions::new("s", "clean up"),
    );
    let mut events = Box::pin(handle.events());
    let request_id = loop {
        let event = events.next().await.expect("the run pauses");
        if let EventBody::RunPaused { request_id, .. } = event.body {
            break request_id;
        }
    };
    assert!(handle.detach(), "the paused handle lets go without writing");
    assert_eq!(handle.outcome().await.status(), RunStatus::Awaiting);
    let folder = first
        .session_dir("s")
        .await
        .expect("look up")
        .expect("the session");
    let before = snapshot(first_root.path());

    let relative = folder
        .strip_prefix(first_root.path())
        .expect("inside the root");
    copy_folder(&folder, &second_root.path().join(relative));
    let second = open(second_root.path());
    let model = FakeModel::new(vec![FakeStep::text("gone")]);
    let resumed = resume(
        &agent(&model, second.clone(), calls.clone()),
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: None,
        },
    );
    resumed
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve from the copy");
    let outcome = resumed.outcome().await;
    assert_eq!(outcome.status(), RunStatus::Completed, "{outcome:?}");
    assert_eq!(
        *calls.lock().expect("calls"),
        1,
        "the approved tool ran once"
    );
    let transcript = second
        .list_messages("s", None)
        .await
        .expect("the copy's transcript");
    assert_eq!(text_of(transcript.last().expect("a last message")), "gone");
    assert_eq!(
        snapshot(first_root.path()),
        before,
        "the original root is untouched"
    );
}

#[tokio::test]
async fn a_run_after_a_rewind_continues_from_the_cut() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let store = open(root.path());
    let model = FakeModel::new(vec![
        FakeStep::text("one"),
        FakeStep::text("two"),
        FakeStep::text("three"),
    ]);
    let agent = agent(&model, store.clone(), Arc::default());
    let turn = |input: &str| run(&agent, RunOptions::new("s", input.to_owned()));
    let first = turn("first");
    assert_eq!(first.outcome().await.status(), RunStatus::Completed);
    assert_eq!(
        turn("second").outcome().await.status(),
        RunStatus::Completed
    );
    let record = store
        .get_run(&cofold_agents::store::RunRef::new("s", first.run_id()))
        .await
        .expect("get")
        .expect("the first run");
    let through = record
        .last_message_id
        .expect("the first run's last message");
    let cut = store.truncate("s", &through).await.expect("rewind");
    assert_eq!(
        (
            cut.remaining_messages,
            cut.removed_messages,
            cut.removed_runs
        ),
        (2, 2, 1)
    );
    assert_eq!(turn("third").outcome().await.status(), RunStatus::Completed);
    let last_request = model.requests().pop().expect("the third request");
    let sent: Vec<String> = last_request.messages.iter().map(text_of).collect();
    assert_eq!(
        sent,
        ["first", "one", "third"],
        "the model sees the cut transcript, then the new input"
    );
    let stored: Vec<String> = store
        .list_messages("s", None)
        .await
        .expect("list")
        .iter()
        .map(text_of)
        .collect();
    assert_eq!(stored, ["first", "one", "third", "three"]);
}
