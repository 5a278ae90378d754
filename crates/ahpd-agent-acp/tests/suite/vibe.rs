//! Mistral Vibe (`mistral-vibe` 3.0.2 from PyPI) on the scripted endpoint: a real coding agent
//! that asks permission, reports usage, and lists and loads its sessions.

use std::path::Path;

use ahp_types::actions::StateAction;
use ahp_types::state::ToolCallState;
use serde_json::json;
use testkit::{Endpoint, Frame, Reply, chunk};

use super::support::*;

fn bash(id: &str, command: &str) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::tool_call(
            0,
            Some(id),
            Some("bash"),
            &json!({"command": command}).to_string(),
        )),
        Frame::Chunk(chunk::finish("tool_calls")),
        Frame::Chunk(chunk::usage(100, 20)),
    ])
}

fn said(text: &str) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text(text)),
        Frame::Chunk(chunk::finish("stop")),
        Frame::Chunk(chunk::usage(150, 10)),
    ])
}

fn vibe_home(dir: &Path, endpoint: &Endpoint) {
    std::fs::create_dir_all(dir).expect("folder");
    let config = format!(
        r#"active_model = "scripted"
enable_update_checks = false
enable_auto_update = false

[[providers]]
name = "scripted"
api_base = "{}"
api_key_env_var = "SCRIPTED_API_KEY"
api_style = "openai"
backend = "generic"

[[models]]
name = "scripted-model"
provider = "scripted"
alias = "scripted"
"#,
        endpoint.base_url()
    );
    std::fs::write(dir.join("config.toml"), config).expect("config");
}

fn record(program: &Path, home: &Path) -> serde_json::Value {
    json!({
        "preset": "vibe",
        "command": program.to_string_lossy(),
        "env": {
            "VIBE_HOME": home.to_string_lossy(),
            "VIBE_TEST_DISABLE_AUTO_TITLE": "1",
            "SCRIPTED_API_KEY": {"$secret": "host:scripted"}
        }
    })
}

fn vault() -> Vault {
    Vault(vec![("host:scripted".into(), "sk-scripted".into())])
}

#[tokio::test]
async fn vibe_asks_two_clients_by_its_own_option_names_and_continues_after_a_restart() {
    let Some(program) = peer("vibe", "vibe-acp") else {
        return;
    };
    let place = Place::new();
    let endpoint = Endpoint::builder()
        .replies([
            bash("call_1", "echo approved > approved.txt"),
            said("Wrote the file."),
            bash("call_2", "echo rejected > rejected.txt"),
            said("I will not write it."),
            said("Still here after the restart."),
        ])
        .fallback(said("(extra request)"))
        .start()
        .expect("endpoint");
    let home = place.base.join("vibe-home");
    vibe_home(&home, &endpoint);
    let id = fresh_id("vibe");
    let th = host(
        &place,
        vec![agent_with(&place, "vibe", record(&program, &home), vault())],
    )
    .await;
    let mut first = Watch::create(&th, "vibe", &id, &place.work).await;
    let mut second = Watch::join(&th, &first.session, "second").await;

    first.send("t1", "write approved.txt").await;
    let (call, options) = first.question().await;
    let ids: Vec<&str> = options.iter().map(|o| o.id.as_str()).collect();
    assert!(
        ids.contains(&"allow_once") && ids.contains(&"reject_once"),
        "{options:?}"
    );
    assert!(
        options.iter().any(|o| o.label == "Allow once"),
        "{options:?}"
    );
    let (call2, options2) = second.question().await;
    assert_eq!((&call2, &options2), (&call, &options));
    second.answer("t1", &call, "allow_once", true).await;
    assert!(matches!(
        first.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        std::fs::read_to_string(place.work.join("approved.txt"))
            .expect("written")
            .trim(),
        "approved"
    );
    assert!(
        first.last_text().contains("Wrote the file."),
        "{}",
        first.last_text()
    );
    let usage = first.last_turn().usage.clone().expect("the turn has usage");
    assert!(usage.input_tokens.is_some_and(|t| t > 0), "{usage:?}");
    first.assert_mirror(&th).await;
    second.assert_mirror(&th).await;

    first.send("t2", "write rejected.txt").await;
    let (call, _) = first.question().await;
    first.answer("t2", &call, "reject_once", false).await;
    first.end("t2").await;
    assert!(!place.work.join("rejected.txt").exists());
    let calls = first.last_calls();
    assert!(
        matches!(&calls[0], ToolCallState::Cancelled(_))
            || matches!(&calls[0], ToolCallState::Completed(c) if !c.success),
        "{calls:?}"
    );
    first.assert_mirror(&th).await;
    drop((first, second));
    th.stop().await;

    // A new host over the same store: the session is listed, reads back, and its next turn
    // continues Vibe's own conversation through `session/load`.
    let th = host(
        &place,
        vec![agent_with(&place, "vibe", record(&program, &home), vault())],
    )
    .await;
    let c = client(&th.url, "after").await;
    let listed: serde_json::Value = c.request("listSessions", json!({})).await.expect("list");
    assert!(listed.to_string().contains(&id), "{listed}");
    let mut w = Watch::subscribe(c, &format!("vibe:/{id}")).await;
    assert_eq!(w.chat_state().turns.len(), 2);
    assert!(
        w.chat_state().turns[0]
            .response_parts
            .iter()
            .any(|p| format!("{p:?}").contains("Wrote the file."))
    );
    endpoint.forget_requests();
    w.send("t3", "are you still there?").await;
    assert!(matches!(
        w.end("t3").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(w.last_text().contains("Still here after the restart."));
    assert!(
        !w.last_text().contains("new agent conversation"),
        "{}",
        w.last_text()
    );
    let bodies = endpoint.chat_bodies();
    let last = bodies.last().expect("a model request").to_string();
    assert!(
        last.contains("write approved.txt") && last.contains("Wrote the file."),
        "the loaded session carries the earlier turns to the model: {last}"
    );
    w.assert_mirror(&th).await;
}
