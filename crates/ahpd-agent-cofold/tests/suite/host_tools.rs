//! The host's own tools (engine cases 19, 78, 84, 85, 86, 104's host rows and 107–109 of
//! docs/acceptance.md).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{ChatInputQuestion, ResponsePart, SessionInputRequest, ToolCallState};
use ahpd_agent_cofold::{CofoldAgent, Embedder, HostTool, HostToolError};
use ahpd_agent_cofold::{HostQuestion as Question, HostQuestionOption as QuestionOption};
use ahpd_sdk::Agent;
use serde_json::{Value, json};
use testkit::Reply;

use super::support::*;

fn plain(s: &StringOrMarkdown) -> String {
    match s {
        StringOrMarkdown::Plain(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// A host tool answering `found <q>`, counting its runs.
fn lookup(runs: Arc<AtomicUsize>) -> HostTool {
    HostTool::new("lookup", move |input: Value, _ctx| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(format!("found {}", input["q"].as_str().unwrap_or("")))
        }
    })
    .title("Look up")
    .description("Finds a word in the glossary.")
    .input_schema(json!({ "type": "object", "properties": { "q": { "type": "string" } } }))
}

/// An agent over `options` with the model at `ep`, in memory, with these host tools.
fn agent_with(
    place: &Place,
    ep: &testkit::Endpoint,
    options: Value,
    tools: Vec<HostTool>,
) -> CofoldAgent {
    let mut options = options;
    options["baseUrl"] = json!(ep.base_url());
    options["model"] = json!("m");
    if options.get("store").is_none() {
        options["memory"] = json!(true);
    }
    let embedder = tools
        .into_iter()
        .fold(place.embedder(), Embedder::host_tool);
    agent(options, embedder)
}

async fn session(agent: impl Agent + 'static, place: &Place, mode: &str) -> (Watch, TestHost) {
    let th = host(vec![Arc::new(agent)]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id("host"),
        Some(&place.work),
        json!({ "permissionMode": mode }),
    )
    .await;
    (w, th)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_078_a_host_tool_runs_in_order_and_its_result_reaches_the_model() {
    // Item 78.
    let place = Place::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let ep = endpoint(vec![call("c1", "lookup", json!({ "q": "x" })), text("ok")]);
    let (mut w, th) = session(
        agent_with(&place, &ep, json!({}), vec![lookup(runs.clone())]),
        &place,
        "default",
    )
    .await;
    w.send("t1", "look it up").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let order: Vec<&str> = w
        .chat_actions()
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatToolCallStart(s) => {
                assert!(!s.tool_call_id.is_empty());
                assert_eq!(s.tool_name, "lookup");
                assert_eq!(s.display_name, "Look up");
                Some("start")
            }
            StateAction::ChatToolCallReady(_) => Some("ready"),
            StateAction::ChatToolCallComplete(c) => {
                assert!(c.result.success);
                Some("complete")
            }
            _ => None,
        })
        .collect();
    assert_eq!(order, ["start", "ready", "complete"]);
    match w.last_calls().first() {
        Some(ToolCallState::Completed(c)) => {
            assert!(c.success);
            assert_eq!(plain(&c.invocation_message), "lookup");
            let content = serde_json::to_string(&c.content).unwrap();
            assert!(content.contains("found x"), "{content}");
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
    let bodies = ep.chat_bodies();
    assert!(request_text(&bodies[1]).contains("found x"));
    // The model reads the host's description, and nothing asked: the tool declares nothing.
    let tools = bodies[0]["tools"].as_array().unwrap();
    let offered = tools
        .iter()
        .find(|t| t["function"]["name"] == "lookup")
        .unwrap();
    assert_eq!(
        offered["function"]["description"],
        "Finds a word in the glossary."
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_panicking_host_tool_is_a_failed_call_and_the_turn_goes_on() {
    let place = Place::new();
    let failing = HostTool::new("fails", |_, _| async {
        Err::<String, _>(HostToolError::new("the glossary is closed"))
    });
    let panicking = HostTool::new("panics", |_, _| async {
        if std::hint::black_box(true) {
            panic!("the tool broke");
        }
        Ok(String::new())
    });
    let ep = endpoint(vec![
        call("c1", "fails", json!({})),
        call("c2", "panics", json!({})),
        text("ok"),
    ]);
    let (mut w, th) = session(
        agent_with(&place, &ep, json!({}), vec![failing, panicking]),
        &place,
        "auto",
    )
    .await;
    w.send("t1", "try").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert!(request_text(&bodies[1]).contains("the glossary is closed"));
    assert!(request_text(&bodies[2]).contains("The tool failed: the tool broke"));
    // No description, no title: the name describes it; no schema: an empty object schema.
    let fails = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "fails")
        .cloned()
        .unwrap();
    assert_eq!(fails["function"]["description"], "fails");
    assert_eq!(fails["function"]["parameters"]["type"], "object");
    for call in w.last_calls() {
        match call {
            ToolCallState::Completed(c) => assert!(!c.success),
            other => panic!("expected a completed call, got {other:?}"),
        }
    }
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_084_085_host_tools_take_their_names_and_are_titled_by_them() {
    // Items 84 and 85.
    let place = Place::new();
    let store = place.home.join("store");
    let names = [
        "shell_exec",
        "read_file",
        "write_file",
        "edit_file",
        "memory_write",
        "search_files",
        "list_files",
        "web_fetch",
        "web_search",
        "lookup",
    ];
    let tools: Vec<HostTool> = names
        .iter()
        .map(|name| {
            let name = (*name).to_owned();
            let name_for_description = name.clone();
            HostTool::new(name.clone(), move |_, _| {
                let name = name.clone();
                async move { Ok(format!("the host's {name}")) }
            })
            .description(format!("The host's own {}.", name_for_description))
        })
        .collect();
    // The model calls each, with inputs that would give cofold's own tools other titles.
    let mut replies: Vec<Reply> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            call(
                &format!("c{i}"),
                name,
                json!({ "path": "a.txt", "command": "echo hi", "url": "https://example.org/", "query": "q", "pattern": "*" }),
            )
        })
        .collect();
    replies.push(text("done"));
    let ep = endpoint(replies);
    let (mut w, th) = session(
        agent_with(
            &place,
            &ep,
            json!({ "store": store.display().to_string() }),
            tools,
        ),
        &place,
        "bypassPermissions",
    )
    .await;
    w.send("t1", "use them all").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;

    // One tool per name, each carrying the host's description; the rest of cofold's stay.
    let first = &ep.chat_bodies()[0];
    let offered_names = offered(first);
    for name in names {
        assert_eq!(
            offered_names.iter().filter(|n| *n == name).count(),
            1,
            "{name} offered once"
        );
        let tool = first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == name)
            .unwrap();
        assert_eq!(
            tool["function"]["description"],
            format!("The host's own {name}.")
        );
    }
    for kept in ["ask_user", "memory_read"] {
        assert!(offered_names.iter().any(|n| n == kept), "{kept} kept");
    }
    let bodies = ep.chat_bodies();
    assert!(request_text(&bodies[1]).contains("the host's shell_exec"));

    // Titled by name on ready, on completion, live and read back; no terminal drawing.
    for action in w.chat_actions() {
        match action {
            StateAction::ChatToolCallStart(s) => {
                assert!(s.meta.is_none() && s.intention.is_none(), "{s:?}")
            }
            StateAction::ChatToolCallReady(r) => {
                let name = names[r.tool_call_id[1..].parse::<usize>().unwrap()];
                assert_eq!(plain(&r.invocation_message), name);
            }
            StateAction::ChatToolCallComplete(c) => {
                let name = names[c.tool_call_id[1..].parse::<usize>().unwrap()];
                assert_eq!(plain(&c.result.past_tense_message), name);
            }
            _ => {}
        }
    }
    let titles = |calls: Vec<ToolCallState>| -> Vec<(String, String)> {
        calls
            .into_iter()
            .map(|c| match c {
                ToolCallState::Completed(c) => (c.tool_name.clone(), plain(&c.invocation_message)),
                other => panic!("expected a completed call, got {other:?}"),
            })
            .collect()
    };
    let live = titles(w.last_calls());
    assert_eq!(live.len(), names.len());
    for (name, title) in &live {
        assert_eq!(name, title);
    }
    let backend = w.session.split_once(":/").unwrap().1.to_owned();
    let reader = agent_with(
        &place,
        &ep,
        json!({ "store": store.display().to_string() }),
        names
            .iter()
            .map(|n| HostTool::new(*n, |_, _| async { Ok(String::new()) }))
            .collect(),
    );
    let turns = reader.transcript(&backend).await.expect("a transcript");
    let read: Vec<(String, String)> = turns[0]
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
            _ => None,
        })
        .map(|c| match c {
            ToolCallState::Completed(c) => (c.tool_name.clone(), plain(&c.invocation_message)),
            other => panic!("expected a completed call, got {other:?}"),
        })
        .collect();
    assert_eq!(read, live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_086_a_host_ask_user_replaces_cofolds_and_asks_nothing() {
    // Item 86.
    let place = Place::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let ask = HostTool::new("ask_user", move |_, _| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok("the host answered".to_owned())
        }
    })
    .description("The host's way of asking.");
    let ep = endpoint(vec![
        call(
            "c1",
            "ask_user",
            json!({ "questions": [{ "id": "a", "question": "Which?" }] }),
        ),
        text("ok"),
    ]);
    let (mut w, th) = session(
        agent_with(&place, &ep, json!({}), vec![ask]),
        &place,
        "default",
    )
    .await;
    w.send("t1", "ask").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(
        !w.chat_actions()
            .iter()
            .any(|a| matches!(a, StateAction::SessionInputNeededSet(_))),
        "no question asked"
    );
    assert!(
        !w.envelopes
            .iter()
            .any(|e| matches!(e.action, StateAction::SessionInputNeededSet(_))),
        "no question asked"
    );
    let bodies = ep.chat_bodies();
    let asks: Vec<&Value> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["function"]["name"] == "ask_user")
        .collect();
    assert_eq!(asks.len(), 1);
    assert_eq!(
        asks[0]["function"]["description"],
        "The host's way of asking."
    );
    assert!(request_text(&bodies[1]).contains("the host answered"));
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_019_a_record_with_host_tools_off_leaves_them_out() {
    // Item 19.
    let place = Place::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let ep = endpoint(vec![text("ok"), text("ok")]);
    let record = CofoldAgent::new(
        "no-host",
        "No host tools",
        "",
        &json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m", "hostTools": false }),
        place.embedder().host_tool(lookup(runs.clone())),
        Arc::default(),
    )
    .expect("the agent builds");
    let th = host(vec![Arc::new(record)]).await;
    let mut w = Watch::create(
        &th,
        "no-host",
        &fresh_id("off"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    let without = offered(&ep.chat_bodies()[0]);
    assert!(!without.iter().any(|n| n == "lookup"));
    for kept in ["ask_user", "read_file", "shell_exec", "web_fetch"] {
        assert!(without.iter().any(|n| n == kept), "{kept} kept");
    }
    // The same tool reaches an agent that leaves the option alone.
    let on = agent_with(&place, &ep, json!({}), vec![lookup(runs)]);
    let (mut w2, _th2) = session(on, &place, "auto").await;
    w2.send("t1", "hi").await;
    w2.end("t1").await;
    assert!(offered(&ep.chat_bodies()[1]).iter().any(|n| n == "lookup"));
}

fn completed_input(request_id: &str, answer: Option<&str>) -> StateAction {
    let v = match answer {
        Some(a) => json!({
            "type": "chat/inputCompleted", "requestId": request_id, "response": "accept",
            "answers": { "which": { "state": "submitted", "value": { "kind": "selected", "value": a } } }
        }),
        None => {
            json!({ "type": "chat/inputCompleted", "requestId": request_id, "response": "decline" })
        }
    };
    serde_json::from_value(v).unwrap()
}

/// Waits for the session's question and checks its shape; gives its request id.
async fn the_question(w: &mut Watch) -> String {
    let set = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    let StateAction::SessionInputNeededSet(set) = &set.action else {
        unreachable!()
    };
    let SessionInputRequest::ChatInput(request) = &set.request else {
        panic!("expected a question, got {:?}", set.request);
    };
    assert_eq!(
        request.request.message.as_deref(),
        Some("The agent has a question")
    );
    let questions = request.request.questions.clone().unwrap_or_default();
    assert_eq!(questions.len(), 1);
    match &questions[0] {
        ChatInputQuestion::SingleSelect(q) => {
            assert_eq!(q.id, "which");
            assert_eq!(q.message, "Which note?");
            let ids: Vec<&str> = q.options.iter().map(|o| o.id.as_str()).collect();
            assert_eq!(ids, ["monday", "tuesday"]);
        }
        other => panic!("expected a single-select question, got {other:?}"),
    }
    request.request.id.clone()
}

fn which_note() -> Vec<Question> {
    vec![Question {
        options: Some(
            ["monday", "tuesday"]
                .map(|label| QuestionOption {
                    label: label.to_owned(),
                    description: None,
                })
                .to_vec(),
        ),
        ..Question::new("which", "Which note?")
    }]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_107_108_a_host_tool_asks_a_question_and_reads_the_answer() {
    // Items 107 and 108 for a host tool.
    let place = Place::new();
    let heard: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = heard.clone();
    let notes = HostTool::new("notes", move |_, ctx| {
        let sink = sink.clone();
        async move {
            let answers = ctx.ask(which_note()).await?;
            let day = answers["which"].as_str().unwrap_or("").to_owned();
            sink.lock().unwrap().push(day.clone());
            Ok(format!("the note of {day}"))
        }
    });
    let ep = endpoint(vec![
        call("c1", "notes", json!({})),
        text("read it"),
        call("c2", "notes", json!({})),
        text("fine"),
    ]);
    let (mut w, th) = session(
        agent_with(&place, &ep, json!({}), vec![notes]),
        &place,
        "auto",
    )
    .await;
    w.send("t1", "which note").await;
    let request = the_question(&mut w).await;
    w.assert_mirror(&th).await;
    assert!(
        !w.chat_actions().iter().any(|a| matches!(
            a,
            StateAction::ChatTurnComplete(_) | StateAction::ChatError(_)
        )),
        "no ending while it waits"
    );
    let asks = w
        .envelopes
        .iter()
        .filter(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .count();
    assert_eq!(asks, 1);
    w.client
        .dispatch(w.chat.clone(), completed_input(&request, Some("monday")))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(*heard.lock().unwrap(), ["monday"]);
    assert!(request_text(&ep.chat_bodies()[1]).contains("the note of monday"));
    w.assert_mirror(&th).await;

    // Declined: a failed call mentioning it, and the model reads it.
    w.send("t2", "again").await;
    let request = the_question(&mut w).await;
    w.client
        .dispatch(w.chat.clone(), completed_input(&request, None))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let failed = w.chat_actions().into_iter().find_map(|a| match a {
        StateAction::ChatToolCallComplete(c) if c.tool_call_id == "c2" => Some(c.result.clone()),
        _ => None,
    });
    let failed = failed.expect("the call completes");
    assert!(!failed.success);
    assert!(serde_json::to_string(&failed).unwrap().contains("declined"));
    assert!(request_text(&ep.chat_bodies()[3]).contains("declined"));
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_108_109_cofolds_ask_user_is_answered_or_declined_through_the_host() {
    // Items 108 and 109 for cofold's own `ask_user`.
    let place = Place::new();
    let ask = json!({ "questions": [{ "id": "which", "question": "Which note?", "options": [{ "label": "monday" }, { "label": "tuesday" }] }] });
    let ep = endpoint(vec![
        call("c1", "ask_user", ask.clone()),
        text("noted"),
        call("c2", "ask_user", ask),
        text("fine"),
    ]);
    let (mut w, th) = session(
        agent_with(&place, &ep, json!({}), vec![]),
        &place,
        "default",
    )
    .await;
    w.send("t1", "ask me").await;
    let request = the_question(&mut w).await;
    w.client
        .dispatch(w.chat.clone(), completed_input(&request, Some("monday")))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(matches!(
        w.chat_actions().last(),
        Some(StateAction::ChatTurnComplete(_))
    ));
    assert!(request_text(&ep.chat_bodies()[1]).contains("monday"));
    w.send("t2", "again").await;
    let request = the_question(&mut w).await;
    w.client
        .dispatch(w.chat.clone(), completed_input(&request, None))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(request_text(&ep.chat_bodies()[3]).contains("declined"));
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_104_each_mode_decides_host_tools_by_their_effects() {
    // The host-tool rows of engine case 104.
    let place = Place::new();
    let inside = place.work.join("in.txt");
    let outside = place.home.join("out.txt");
    let tool = |effects: &str| {
        let base = HostTool::new("act", |_, _| async { Ok("acted".to_owned()) });
        match effects {
            "destructive" => base.destructive(),
            "writes-in" => {
                let path = inside.clone();
                base.writes(move |_| Some(path.clone()))
            }
            "writes-out" => {
                let path: PathBuf = outside.clone();
                base.writes(move |_| Some(path.clone()))
            }
            "network" => base.network(),
            _ => base,
        }
    };
    let rows: [(&str, [&str; 6]); 5] = [
        ("destructive", ["ask", "ask", "deny", "ask", "run", "deny"]),
        // A write asks in auto, destructive or not (issue 28).
        ("writes-in", ["ask", "run", "deny", "ask", "run", "deny"]),
        ("writes-out", ["ask", "ask", "deny", "ask", "run", "deny"]),
        ("network", ["ask", "ask", "ask", "run", "run", "deny"]),
        ("nothing", ["run", "run", "run", "run", "run", "run"]),
    ];
    let modes = [
        "default",
        "acceptEdits",
        "plan",
        "auto",
        "bypassPermissions",
        "dontAsk",
    ];
    for (effects, outcomes) in rows {
        for (mode, expected) in modes.iter().zip(outcomes) {
            let ep = endpoint(vec![call("c1", "act", json!({})), text("ok")]);
            let (mut w, _th) = session(
                agent_with(&place, &ep, json!({}), vec![tool(effects)]),
                &place,
                mode,
            )
            .await;
            w.send("t1", "act").await;
            let seen = loop {
                match &w.next().await.action {
                    StateAction::SessionInputNeededSet(_) => break "ask",
                    StateAction::ChatTurnComplete(_) => {
                        let text = request_text(&ep.chat_bodies()[1]);
                        break if text.contains(&format!("the mode is {mode}")) {
                            "deny"
                        } else {
                            assert!(text.contains("acted"), "{text}");
                            "run"
                        };
                    }
                    _ => {}
                }
            };
            assert_eq!(
                seen, expected,
                "a host tool declaring {effects} under {mode}"
            );
        }
    }
}
