//! fast-agent (`fast-agent-mcp` 0.10.48 from PyPI) with its passthrough model: a real ACP agent
//! that needs no model.

use ahp_types::actions::StateAction;
use ahp_types::state::ToolCallState;
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn fast_agent_streams_a_turn_and_writes_a_file_through_a_tool_call() {
    let Some(program) = peer("fast-agent", "fast-agent-acp") else {
        return;
    };
    let place = Place::new();
    let record = json!({
        "preset": "fast-agent",
        "command": program.to_string_lossy(),
        "args": ["--model", "passthrough", "-x"],
    });
    let th = host(&place, vec![agent(&place, "fa", record)]).await;
    let mut w = Watch::create(&th, "fa", &fresh_id("fa"), &place.work).await;

    w.send("t1", "hello from the host").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(
        w.chat_actions()
            .iter()
            .any(|a| matches!(a, StateAction::ChatDelta(_))),
        "the text arrives as deltas"
    );
    assert_eq!(w.last_text(), "hello from the host");
    w.assert_mirror(&th).await;

    let file = place.work.join("out.txt");
    let prompt = format!(
        "***CALL_TOOL write_text_file {}",
        json!({"path": file.to_string_lossy(), "content": "written by fast-agent"})
    );
    w.send("t2", &prompt).await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let actions = w.chat_actions();
    let started = actions
        .iter()
        .any(|a| matches!(a, StateAction::ChatToolCallStart(s) if s.turn_id == "t2"));
    let completed = actions
        .iter()
        .any(|a| matches!(a, StateAction::ChatToolCallComplete(c) if c.turn_id == "t2" && c.result.success));
    assert!(
        started && completed,
        "the call starts and ends: {actions:?}"
    );
    match &w.last_calls()[0] {
        ToolCallState::Completed(c) => assert!(c.display_name.contains("write_text_file"), "{c:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(&file).expect("the file exists"),
        "written by fast-agent"
    );
    // The agent keeps its own state in the session's state folder, not in the work folder.
    assert!(!place.work.join(".fast-agent").exists());
    w.assert_mirror(&th).await;
}
