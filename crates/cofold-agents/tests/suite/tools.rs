//! The tool contract (runtime cases A1, A2, J167 and the bad-input sentences, docs/acceptance.md).

use cofold_agents::error::ErrorCode;
use cofold_agents::schema::issues_text;
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{
    AbortController, AbortReason, KvScopes, Resources, Tool, ToolContext, ToolDef, ToolEffects,
    ToolError, ToolOutput, handler_fn,
};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

fn echo_def(name: &str) -> ToolDef {
    ToolDef::new(
        name,
        "Echo the text back.",
        json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] }),
        handler_fn(|input: Value, _ctx| async move {
            let text = input["text"].as_str().unwrap_or_default().to_owned();
            Ok(ToolOutput::from(format!("echo:{text}")))
        }),
    )
}

fn context(signal_from: &AbortController) -> ToolContext {
    let store = Arc::new(MemoryStore::new());
    ToolContext {
        agent_id: "agent".into(),
        session_id: "s1".into(),
        run_id: "r1".into(),
        call_id: "c1".into(),
        invocation_id: "i1".into(),
        workspace: Some("/work".into()),
        signal: signal_from.signal(),
        kv: KvScopes::new(store, "agent", "default", Some("/work")),
        resources: Resources::new(),
    }
}

#[test]
fn a_plain_definition_has_no_effects_and_a_three_key_model_definition() {
    let tool = Tool::new(echo_def("echo")).expect("valid tool");
    assert_eq!(tool.effects(), ToolEffects::default());
    assert!(
        !tool.effects().reads
            && !tool.effects().writes
            && !tool.effects().network
            && !tool.effects().destructive
    );
    assert_eq!(tool.source(), "agent");
    let text = serde_json::to_string(&tool.model_definition()).expect("json");
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&text)
        .expect("object")
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["name", "description", "input"]);
    assert!(
        text.starts_with("{\"name\":\"echo\",\"description\":\"Echo the text back.\",\"input\":{"),
        "{text}"
    );
}

#[test]
fn declared_effects_subject_and_writes_are_kept() {
    let effects = ToolEffects {
        reads: false,
        writes: true,
        network: false,
        destructive: true,
    };
    let def = echo_def("write_note")
        .effects(effects)
        .subject(|input| input["text"].as_str().map(str::to_owned))
        .writes(|input| input["text"].as_str().map(|t| PathBuf::from("/w").join(t)));
    let tool = Tool::new(def).expect("valid tool");
    assert_eq!(tool.effects(), effects);
    assert!(tool.has_subject() && tool.has_writes());
    assert_eq!(
        tool.subject(&json!({ "text": "a.txt" })),
        Some("a.txt".to_owned())
    );
    assert_eq!(tool.subject(&json!({})), None);
    assert_eq!(
        tool.writes(&json!({ "text": "a.txt" })),
        Some(PathBuf::from("/w/a.txt"))
    );
    let plain = Tool::new(echo_def("echo")).expect("valid tool");
    assert_eq!(plain.subject(&json!({ "text": "x" })), None);
    assert_eq!(plain.writes(&json!({ "text": "x" })), None);
}

#[test]
fn bad_definitions_are_refused_with_one_sentence() {
    let cases = [
        (
            echo_def("has space"),
            "tool name \"has space\" must be 1 to 64 letters, digits, underscores or hyphens",
        ),
        (
            echo_def(""),
            "tool name \"\" must be 1 to 64 letters, digits, underscores or hyphens",
        ),
        (
            ToolDef {
                description: "   ".into(),
                ..echo_def("echo")
            },
            "tool \"echo\" needs a description",
        ),
        (
            ToolDef {
                input: json!({ "type": "string" }),
                ..echo_def("echo")
            },
            "tool \"echo\": its input schema must have \"type\": \"object\" at the top",
        ),
        (
            ToolDef {
                input: json!({ "properties": {} }),
                ..echo_def("echo")
            },
            "tool \"echo\": its input schema must have \"type\": \"object\" at the top",
        ),
        (
            ToolDef {
                input: json!({ "type": "object", "properties": { "a": { "type": "string", "pattern": "(?=x)" } } }),
                ..echo_def("echo")
            },
            "$.a: pattern does not compile: look-around is not supported",
        ),
    ];
    for (def, message) in cases {
        let error = Tool::new(def).expect_err("refused");
        assert_eq!(error.code, ErrorCode::InvalidOptions);
        assert_eq!(error.message, message);
    }
    let error = Tool::new(ToolDef {
        input: json!({ "type": "object", "properties": { "a": { "$ref": "#" } } }),
        ..echo_def("echo")
    })
    .expect_err("refused");
    assert_eq!(error.message, "$.a uses $ref");
    assert_eq!(
        error.detail,
        Some(json!({ "tool": "echo" })),
        "the detail names the tool"
    );
}

#[test]
fn input_failing_the_schema_is_one_sentence_per_issue() {
    let tool = Tool::new(echo_def("echo")).expect("valid tool");
    let issues = tool.validate(&json!({ "text": 3 })).expect_err("refused");
    assert_eq!(issues_text(&issues), "$.text expected string, got number");
    let issues = tool.validate(&json!({})).expect_err("refused");
    assert_eq!(issues_text(&issues), "$.text required");
}

#[tokio::test]
async fn execution_gets_the_context_and_errors_become_sentences() {
    let controller = AbortController::new();
    let tool = Tool::new(echo_def("echo")).expect("valid tool");
    let input = tool.validate(&json!({ "text": "hi" })).expect("valid");
    let output = tool
        .execute(input, context(&controller))
        .await
        .expect("runs");
    assert_eq!(
        output,
        ToolOutput {
            content: "echo:hi".into(),
            detail: None
        }
    );

    let seen = handler_fn(|_input, ctx: ToolContext| async move {
        ctx.kv
            .agent
            .set("note", json!(ctx.call_id))
            .await
            .map_err(ToolError::failed)?;
        let workspace = ctx.kv.workspace.as_ref().expect("a workspace scope");
        workspace
            .set("seen", json!(true))
            .await
            .map_err(ToolError::failed)?;
        Ok(ToolOutput::with_detail(
            format!("{}/{}/{}", ctx.session_id, ctx.run_id, ctx.invocation_id),
            json!({ "ws": ctx.workspace }),
        ))
    });
    let probe = Tool::new(ToolDef::new(
        "probe",
        "Look at the context.",
        json!({ "type": "object" }),
        seen,
    ))
    .expect("valid tool");
    let ctx = context(&controller);
    let output = probe.execute(json!({}), ctx.clone()).await.expect("runs");
    assert_eq!(output.content, "s1/r1/i1");
    assert_eq!(output.detail, Some(json!({ "ws": "/work" })));
    assert_eq!(
        ctx.kv.agent.get("note").await.expect("kv"),
        Some(json!("c1"))
    );

    let failing = handler_fn(|_input, _ctx| async move {
        let _ = std::fs::read("/definitely/not/here")?;
        Ok(ToolOutput::from("unreachable"))
    });
    let tool = Tool::new(ToolDef::new(
        "reader",
        "Read a file.",
        json!({ "type": "object" }),
        failing,
    ))
    .expect("valid tool");
    match tool.execute(json!({}), context(&controller)).await {
        Err(ToolError::Failed { message, name }) => {
            assert!(message.contains("No such file"), "{message}");
            assert_eq!(name, None);
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_tool_can_wait_on_the_cancellation_token() {
    let controller = AbortController::new();
    let waits = handler_fn(|_input, ctx: ToolContext| async move {
        ctx.signal.token().cancelled().await;
        Err(ToolError::failed(format!(
            "stopped: {:?}",
            ctx.signal.reason()
        )))
    });
    let tool = Tool::new(ToolDef::new(
        "waits",
        "Wait for a cancel.",
        json!({ "type": "object" }),
        waits,
    ))
    .expect("valid tool");
    let running = tokio::spawn({
        let ctx = context(&controller);
        let tool = tool.clone();
        async move { tool.execute(json!({}), ctx).await }
    });
    assert!(controller.abort(AbortReason::Cancel {
        reason: Some("user".into())
    }));
    let result = running.await.expect("joins");
    assert_eq!(
        result,
        Err(ToolError::failed(
            "stopped: Some(Cancel { reason: Some(\"user\") })"
        ))
    );
}

#[test]
fn a_source_can_be_set_without_changing_the_tool() {
    let tool = Tool::new(echo_def("echo")).expect("valid tool");
    let from_capability = tool.with_source("files");
    assert_eq!(from_capability.source(), "files");
    assert_eq!(tool.source(), "agent");
    assert_eq!(from_capability.name(), "echo");
}
