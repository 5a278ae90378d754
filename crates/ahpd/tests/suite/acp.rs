//! `ahpd acp` against real ACP clients from PyPI, installed by `.ci/run` into virtual
//! environments under `target/`: `acpc` 0.1.0 (with the Python SDK 0.8.1 it needs), a driver on
//! the Python SDK 0.12.1 (`tests/acp/driver.py`) and `acplint` 0.1.0. The model is the scripted
//! endpoint. A peer that is missing fails the test, unless `AHPD_OFFLINE=1` says the registry
//! could not be reached.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Reply, chunk};

use super::support::*;

/// A virtual environment's program, or `None` (after saying so) when the test may skip.
fn peer(venv: &str, program: &str) -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let path = target.join(venv).join("bin").join(program);
    if path.exists() {
        return Some(path);
    }
    if std::env::var("AHPD_OFFLINE").as_deref() == Ok("1") {
        eprintln!(
            "skipped: {} is not installed and AHPD_OFFLINE=1",
            path.display()
        );
        return None;
    }
    panic!(
        "{} is not installed: .ci/run installs it (the ACP peers block); set AHPD_OFFLINE=1 only when PyPI cannot be reached",
        path.display()
    );
}

/// The cofold engine on the endpoint, with a catalogue of two models, and a port nothing
/// listens on, so only a daemon the test starts can answer.
fn configure(env: &Env, ep: &Endpoint) {
    let config = json!({
        "port": 1,
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    env.write_base(&config.to_string());
}

/// The endpoint with `replies`, and a catalogue of two models whose context windows it states.
fn endpoint(replies: Vec<Reply>) -> Endpoint {
    let entry = |id: &str, window: u64| {
        let mut e = chunk::model_entry(id);
        e["context_length"] = json!(window);
        e
    };
    Endpoint::builder()
        .models_body(
            json!({ "object": "list", "data": [entry("m", 128_000), entry("m2", 64_000)] }),
        )
        .replies(replies)
        .start()
        .unwrap()
}

/// A work folder holding `a.txt`.
fn work(env: &Env) -> PathBuf {
    let dir = env.root.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
    dir.canonicalize().unwrap()
}

/// A streamed reply calling one tool.
fn call(id: &str, name: &str, input: Value) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::tool_call(
            0,
            Some(id),
            Some(name),
            &input.to_string(),
        )),
        Frame::Chunk(chunk::finish("tool_calls")),
        Frame::Chunk(chunk::usage(10, 5)),
    ])
}

/// A program run in the test's home, with only its environment.
fn peer_cmd(env: &Env, program: &Path, dir: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(dir)
        .stdin(Stdio::null());
    c
}

fn driver(env: &Env, python: &Path, scenario: &str, work: &Path, extra: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/driver.py");
    let out = peer_cmd(env, python, work)
        .arg(script)
        .arg(scenario)
        .arg(BIN)
        .arg(work)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the driver's {scenario} failed:\n{}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    serde_json::from_str(text(&out.stdout).lines().last().unwrap_or("")).unwrap()
}

/// A detached daemon (`ahpd start`), stopped when dropped.
struct Detached<'a>(&'a Env);

impl<'a> Detached<'a> {
    fn start(env: &'a Env) -> Detached<'a> {
        let out = env.run(&["start", "--port", "0"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        Detached(env)
    }
}

impl Drop for Detached<'_> {
    fn drop(&mut self) {
        let _ = self.0.run(&["stop"]);
    }
}

fn sessions_json(env: &Env) -> Value {
    let out = env.run(&["sessions", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn acp_a_permission_allowed_once_then_one_rejected() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        call(
            "c2",
            "write_file",
            json!({ "path": "b.txt", "content": "new\n" }),
        ),
        Reply::text_stream("one edit made, one refused"),
    ]);
    configure(&env, &ep);
    driver(&env, &python, "permissions", &work, &[]);
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "goodbye\n"
    );
    assert!(!work.join("b.txt").exists(), "the rejected write ran");
    // The model read the refusal, with the words the editor sent.
    let bodies = ep.chat_bodies();
    assert!(
        bodies[3]["messages"]
            .to_string()
            .contains("Denied by the person"),
        "{}",
        bodies[3]["messages"]
    );
}

#[test]
fn acp_cancel_during_an_approval_answers_cancelled() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(vec![call(
        "c1",
        "shell_exec",
        json!({ "command": "echo ran > ran.txt" }),
    )]);
    configure(&env, &ep);
    driver(&env, &python, "cancel", &work, &[]);
    assert!(!work.join("ran.txt").exists(), "the cancelled command ran");
}

#[test]
fn acp_load_replays_a_stored_session_listed_by_its_folder() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(vec![
        Reply::text_stream("hello there"),
        Reply::text_stream("and again"),
    ]);
    configure(&env, &ep);
    // Two processes, each with its own host in process: the store carries the conversation.
    let first = driver(&env, &python, "first_turn", &work, &[]);
    let session = first["session"].as_str().unwrap();
    let loaded = driver(&env, &python, "load", &work, &[session]);
    assert_eq!(loaded["session"], session);
    // The second turn went to the model with the first one before it.
    let bodies = ep.chat_bodies();
    let messages = bodies[1]["messages"].to_string();
    assert!(messages.contains("hello there"), "{messages}");
    let listed = sessions_json(&env);
    assert!(
        listed.to_string().contains(session),
        "{session} not in {listed}"
    );
}

#[test]
fn acp_config_options_change_the_mode_and_the_model() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(vec![Reply::text_stream("hi back")]);
    configure(&env, &ep);
    let out = driver(&env, &python, "config", &work, &[]);
    let model = out["model"].as_str().unwrap();
    // The turn ran on the model the editor chose.
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 1);
    assert!(
        model.ends_with(bodies[0]["model"].as_str().unwrap()),
        "chose {model}, the request named {}",
        bodies[0]["model"]
    );
}

/// The agent asks a text question and a choice, then answers.
fn asking() -> Vec<Reply> {
    vec![
        call(
            "q1",
            "ask_user",
            json!({ "questions": [
                { "id": "colour", "question": "Which colour?" },
                { "id": "size", "question": "Which size?", "options": [{ "label": "small" }, { "label": "large" }] }
            ] }),
        ),
        Reply::text_stream("noted"),
    ]
}

#[test]
fn acp_a_question_becomes_a_form_the_editor_answers() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(asking());
    configure(&env, &ep);
    driver(&env, &python, "question_form", &work, &[]);
    let answered = ep.chat_bodies()[1]["messages"].to_string();
    assert!(
        answered.contains("A: blue") && answered.contains("A: small"),
        "{answered}"
    );
}

#[test]
fn acp_a_question_an_editor_cannot_show_is_answered_with_a_sentence() {
    let Some(python) = peer("acp-venv", "python") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(asking());
    configure(&env, &ep);
    driver(&env, &python, "question_unasked", &work, &[]);
    let answered = ep.chat_bodies()[1]["messages"].to_string();
    assert!(answered.contains("No one could be asked"), "{answered}");
}

fn acpc_agent(env: &Env) {
    let dir = env.root.path().join("xdg/acpc/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("ahpd.toml"),
        format!(
            "identity = \"ahpd\"\nname = \"ahpd\"\nauthor = \"test\"\nrun_command = \"{BIN} acp\"\ninstall_command = \"true\"\n"
        ),
    )
    .unwrap();
}

fn acpc(env: &Env, acpc: &Path, work: &Path, args: &[&str]) -> Output {
    peer_cmd(env, acpc, work)
        .args(["prompt", "ahpd"])
        .args(args)
        .args(["--json", "--permissions", "all"])
        .output()
        .unwrap()
}

fn events(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn acpc_prompts_a_daemon_session_and_continues_it() {
    let Some(acpc_bin) = peer("acpc-venv", "acpc") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = endpoint(vec![
        Reply::text_stream("first answer"),
        Reply::text_stream("second answer"),
    ]);
    configure(&env, &ep);
    acpc_agent(&env);
    let _daemon = Detached::start(&env);
    let out = acpc(&env, &acpc_bin, &work, &["say something"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let first = events(&out);
    let chunks = first
        .iter()
        .filter(|e| e.to_string().contains("agent_message_chunk"))
        .count();
    assert!(chunks > 0, "{first:?}");
    let last = first.last().unwrap().to_string();
    assert!(last.contains("end_turn"), "{last}");
    let session = first
        .iter()
        .find_map(|e| {
            (e["acpc"] == "session_started")
                .then(|| e["session_id"].as_str())
                .flatten()
        })
        .unwrap()
        .to_owned();
    let out = acpc(&env, &acpc_bin, &work, &["-s", &session, "and more"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let second = events(&out);
    assert!(second.last().unwrap().to_string().contains("end_turn"));
    let said: String = second
        .iter()
        .filter(|e| e["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e["content"]["text"].as_str())
        .collect();
    // The replayed first answer, then the second.
    assert_eq!(said, "first answersecond answer", "{}", text(&out.stdout));
    // One conversation: the second turn was sent with the first, and the daemon lists it.
    let bodies = ep.chat_bodies();
    assert!(bodies[1]["messages"].to_string().contains("first answer"));
    let listed = sessions_json(&env);
    assert!(
        listed.to_string().contains(&session),
        "{session} not in {listed}"
    );
}

/// Checks acplint 0.1.0 fails on its own account, by name, with the reason. It reads answers by
/// an ACP draft older than version 1 (its requests' older shapes are rewritten by
/// `tests/acp/acplint_shim.py`, which says which and why).
const ACPLINT_FALSE_FAILURES: &[(&str, &str)] = &[
    (
        "initialize_v1",
        "expects protocolVersion as the string \"1\"; version 1 has the integer 1",
    ),
    (
        "protocol_version_returned",
        "compares protocolVersion with the string \"1\"; version 1 has the integer 1",
    ),
    (
        "schema_initialize",
        "validates initialize against a schema whose protocolVersion is the string \"1\"",
    ),
    (
        "new_session",
        "validates config options against a schema that calls their name `label`; version 1 says `name`",
    ),
    (
        "schema_session_new",
        "the same schema: a config option's `label`, where version 1 has `name`",
    ),
    (
        "agent_message_chunk_received",
        "counts updates named `agentMessageChunk`; version 1 names them `agent_message_chunk` (it receives and validates ours: session_update_schema_valid)",
    ),
];

#[test]
fn acplint_finds_nothing_but_its_own_false_failures() {
    let Some(acplint) = peer("acp-venv", "acplint") else {
        return;
    };
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::builder()
        .models(["m"])
        .fallback(Reply::text_stream("hello"))
        .start()
        .unwrap();
    configure(&env, &ep);
    let report = env.root.path().join("acplint.json");
    let python = acplint.with_file_name("python");
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/acplint_shim.py");
    let out = peer_cmd(&env, &acplint, &work)
        .arg("--agent")
        .arg(&python)
        .arg("--agent-args")
        .arg(format!("{} {BIN} acp", shim.display()))
        .arg("--cwd")
        .arg(&work)
        .args(["--output", "json", "--output-file"])
        .arg(&report)
        .args(["--timeout", "20"])
        .output()
        .unwrap();
    let text_report = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "acplint wrote no report ({e}):\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    let report: Value = serde_json::from_str(&text_report).unwrap();
    let failed: Vec<(String, String)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] != "PASS" && r["status"] != "SKIP")
        .map(|r| {
            (
                r["name"].as_str().unwrap_or("").to_owned(),
                r["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let unexplained: Vec<&(String, String)> = failed
        .iter()
        .filter(|(name, _)| !ACPLINT_FALSE_FAILURES.iter().any(|(n, _)| n == name))
        .collect();
    assert!(
        unexplained.is_empty(),
        "acplint failures that are not its own: {unexplained:#?}"
    );
    // Its prompts reached the agent and were streamed and answered.
    let status = |name: &str| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["status"].as_str().unwrap_or("").to_owned())
    };
    for check in [
        "session_update_received",
        "session_update_schema_valid",
        "prompt_stop_reason",
        "cancel_graceful_handling",
        "stress_concurrent_sessions",
    ] {
        assert_eq!(status(check).as_deref(), Some("PASS"), "{check}");
    }
}
