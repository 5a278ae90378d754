//! Tools judge what they touch, not how it is spelled: a scripted model in `default` mode,
//! every approval denied, reaching beside the workspace every way it can; and the environment
//! commands see.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahpd_agent_cofold::Embedder;
use serde_json::{Value, json};

use super::support::*;

const SECRET_NAME: &str = "outside-secret.txt";
const SECRET_TEXT: &str = "OUTSIDE-CONTENT-93";

fn deny(turn: &str, call: &str) -> StateAction {
    serde_json::from_value(json!({
        "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call, "approved": false
    }))
    .expect("a confirmation")
}

fn ends(action: &StateAction, turn: &str) -> bool {
    match action {
        StateAction::ChatTurnComplete(a) => a.turn_id == turn,
        StateAction::ChatError(a) => a.turn_id == turn,
        StateAction::ChatTurnCancelled(a) => a.turn_id == turn,
        _ => false,
    }
}

/// The content of every tool result a request body carries, by call id.
fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (m["tool_call_id"].as_str().unwrap_or("").to_owned(), content)
        })
        .collect()
}

/// One case: the call the model makes, whether a person is asked, and what its result says.
struct Case {
    tool: &'static str,
    input: Value,
    asks: bool,
    says: &'static str,
}

/// Beside the workspace: `x/outside-secret.txt`, a `link -> ../x` and a FIFO in the workspace.
fn place_with_outside() -> Place {
    let place = Place::new();
    let beside = place.work.parent().expect("a parent").join("x");
    std::fs::create_dir_all(&beside).expect("folder");
    std::fs::write(beside.join(SECRET_NAME), SECRET_TEXT).expect("write");
    std::fs::write(place.work.join("inside.txt"), "inside\n").expect("write");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("../x", place.work.join("link")).expect("link");
        let status = std::process::Command::new("mkfifo")
            .arg(place.work.join("pipe"))
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }
    place
}

/// Runs every case in its own turn of one session in `mode`, denying whatever is asked.
async fn run_cases(place: &Place, mode: &str, cases: &[Case]) -> Vec<Value> {
    let mut replies = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        replies.push(call(&format!("c{i}"), case.tool, case.input.clone()));
        replies.push(text("ok"));
    }
    let ep = endpoint(replies);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("outside"),
        Some(&place.work),
        json!({ "permissionMode": mode }),
    )
    .await;
    for (i, case) in cases.iter().enumerate() {
        let turn = format!("t{i}");
        w.send(&turn, "go").await;
        let seen = w
            .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)) || ends(a, &turn))
            .await;
        let asked = matches!(seen.action, StateAction::SessionInputNeededSet(_));
        assert_eq!(asked, case.asks, "{} {}", case.tool, case.input);
        if asked {
            w.client
                .dispatch(w.chat.clone(), deny(&turn, &format!("c{i}")))
                .await
                .expect("dispatch");
            assert!(matches!(
                w.end(&turn).await,
                StateAction::ChatTurnComplete(_)
            ));
        }
    }
    w.assert_mirror(&th).await;
    // The approval prompt names the resolved target (the person sees where a read through a
    // link really goes), but no result clients see holds the outside file's content.
    let visible = format!("{:?}", w.chat_state());
    assert!(!visible.contains(SECRET_TEXT), "{visible}");
    ep.chat_bodies()
}

fn check(bodies: &[Value], cases: &[Case]) {
    let results: Vec<(String, String)> = bodies.iter().flat_map(tool_results).collect();
    for (id, content) in &results {
        assert!(
            !content.contains(SECRET_NAME) && !content.contains(SECRET_TEXT),
            "the result of {id} holds the outside file: {content}"
        );
    }
    for (i, case) in cases.iter().enumerate() {
        let id = format!("c{i}");
        let (_, content) = results
            .iter()
            .find(|(call, _)| *call == id)
            .unwrap_or_else(|| panic!("no result for {} {}", case.tool, case.input));
        assert!(
            content.contains(case.says),
            "{} {}: {content}",
            case.tool,
            case.input
        );
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_default_mode_nothing_beside_the_workspace_is_read_without_a_yes() {
    let place = place_with_outside();
    let cases = [
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE", "glob": "../x/**" }),
            asks: false,
            says: "climbs out with ..",
        },
        Case {
            tool: "list_files",
            input: json!({ "pattern": "../x/*" }),
            asks: false,
            says: "climbs out with ..",
        },
        Case {
            tool: "list_files",
            input: json!({ "pattern": "/etc/*" }),
            asks: false,
            says: "is absolute",
        },
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE", "path": "../x" }),
            asks: true,
            says: "The person declined this action",
        },
        Case {
            tool: "list_files",
            input: json!({ "pattern": "*", "cwd": "../x" }),
            asks: true,
            says: "The person declined this action",
        },
        Case {
            tool: "read_file",
            input: json!({ "path": "link/outside-secret.txt" }),
            asks: true,
            says: "The person declined this action",
        },
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE", "path": "link" }),
            asks: true,
            says: "The person declined this action",
        },
        Case {
            tool: "list_files",
            input: json!({ "pattern": "link/*" }),
            asks: false,
            says: "leads through a link out of the folder",
        },
        // A walk of the workspace lists the link but never follows it.
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE|inside" }),
            asks: false,
            says: "inside.txt:1:inside",
        },
        Case {
            tool: "search_files",
            input: json!({ "pattern": "x", "path": "pipe" }),
            asks: false,
            says: "pipe is not a regular file or a folder",
        },
        Case {
            tool: "read_file",
            input: json!({ "path": "pipe" }),
            asks: false,
            says: "pipe is not a regular file",
        },
    ];
    let bodies = run_cases(&place, "default", &cases).await;
    check(&bodies, &cases);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_dont_ask_mode_an_outside_read_is_refused() {
    let place = place_with_outside();
    let cases = [
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE", "path": "../x" }),
            asks: false,
            says: "would need approval and the mode is dontAsk",
        },
        Case {
            tool: "read_file",
            input: json!({ "path": "link/outside-secret.txt" }),
            asks: false,
            says: "would need approval and the mode is dontAsk",
        },
        Case {
            tool: "search_files",
            input: json!({ "pattern": "OUTSIDE", "glob": "../x/**" }),
            asks: false,
            says: "climbs out with ..",
        },
    ];
    let bodies = run_cases(&place, "dontAsk", &cases).await;
    check(&bodies, &cases);
}

/// The result of one `env` through an agent with these options, its process environment
/// holding secrets.
async fn env_through_agent(tools: Value) -> String {
    let place = Place::new();
    let ep = endpoint(vec![
        call("c1", "shell_exec", json!({ "command": "env" })),
        text("ok"),
    ]);
    let embedder = Embedder {
        env: Some(place.env_with(&[
            ("COPAPO_API_KEY", "sk-copapo-secret"),
            ("OPENAI_API_KEY", "sk-openai-secret"),
            ("AHPD_TOKEN", "ahpd-secret"),
            ("NPM_TOKEN", "npm-wanted"),
            ("PLAIN_SETTING", "visible-1"),
        ])),
        ..Embedder::default()
    };
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m", "tools": tools }),
        embedder,
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("env"),
        Some(&place.work),
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    w.send("t1", "go").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    tool_results(&bodies[1])
        .into_iter()
        .map(|(_, content)| content)
        .collect()
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_never_see_the_daemons_secrets_unless_configured() {
    let plain = env_through_agent(json!({})).await;
    assert!(plain.contains("PLAIN_SETTING=visible-1"), "{plain}");
    assert!(
        !plain.contains("secret") && !plain.contains("npm-wanted"),
        "{plain}"
    );
    let configured = env_through_agent(json!({
        "shell": { "env": { "inherit": ["NPM_*"], "exclude": ["PLAIN_*"], "set": { "ADDED": "added-1" } } }
    }))
    .await;
    let lines: Vec<&str> = configured.lines().collect();
    assert!(lines.contains(&"NPM_TOKEN=npm-wanted"), "{configured}");
    assert!(lines.contains(&"ADDED=added-1"), "{configured}");
    assert!(!configured.contains("PLAIN_SETTING"), "{configured}");
    assert!(!configured.contains("secret"), "{configured}");
}
