//! `ahpd run`: one turn against a daemon and in-process, approvals, JSON lines, a continued
//! session.

use serde_json::{Value, json};
use testkit::{Endpoint, Reply};

use super::support::*;
use super::term_support::*;

fn assert_coding_turn(out: &std::process::Output, work: &std::path::Path) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout).trim_end(), "a.txt now says goodbye");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "goodbye\n"
    );
    for tool in [
        "read_file a.txt: ok",
        "edit_file a.txt: ok",
        "shell_exec cat a.txt: ok",
    ] {
        assert!(stderr.contains(&format!("• {tool}")), "{tool} in {stderr}");
    }
    assert!(stderr.contains("tokens in"), "{stderr}");
}

#[test]
fn a_coding_turn_with_yes_edits_the_file_through_the_daemon() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(coding_turn("a.txt now says goodbye")).unwrap();
    configure(&env, &ep);
    let daemon = Started::new(&env);
    let out = run(&env, &work, &["--mode", "default", "--yes", "change hello"]);
    assert_coding_turn(&out, &work);
    assert!(
        text(&out.stderr).contains(&format!("on {}", daemon.address)),
        "{}",
        text(&out.stderr)
    );
    // The command's output reached the model.
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 4);
    assert!(bodies[3]["messages"].to_string().contains("goodbye"));
}

#[test]
fn a_coding_turn_runs_in_process_when_no_daemon_runs() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(coding_turn("a.txt now says goodbye")).unwrap();
    configure(&env, &ep);
    let out = run(&env, &work, &["--mode", "default", "--yes", "change hello"]);
    assert_coding_turn(&out, &work);
    assert!(
        text(&out.stderr).contains("on in-process"),
        "{}",
        text(&out.stderr)
    );
}

fn denied_without_a_terminal(daemon: bool) {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        Reply::text_stream("I could not edit it"),
    ])
    .unwrap();
    configure(&env, &ep);
    let _daemon = daemon.then(|| Started::new(&env));
    let out = run(&env, &work, &["--mode", "default", "change hello"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs an approval and standard input is not a terminal"),
        "{stderr}"
    );
    assert!(
        stderr.contains("• edit_file a.txt")
            && stderr.contains(": denied (edit_file needs an approval"),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout).trim_end(), "I could not edit it");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "hello\n"
    );
}

#[test]
fn without_yes_or_a_terminal_an_edit_is_denied_and_the_exit_code_says_so() {
    denied_without_a_terminal(true);
}

#[test]
fn in_process_an_edit_without_yes_or_a_terminal_is_denied_too() {
    denied_without_a_terminal(false);
}

fn json_lines(daemon: bool) {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(coding_turn("done")).unwrap();
    configure(&env, &ep);
    let _daemon = daemon.then(|| Started::new(&env));
    let out = run(&env, &work, &["--mode", "default", "--yes", "--json", "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    // The last line is the result; every one before it an envelope.
    let result = lines.pop().unwrap();
    assert_eq!(result["type"], "result", "{result}");
    assert_eq!(result["text"], "done");
    let types: Vec<&str> = lines
        .iter()
        .map(|l| l["action"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types.last(), Some(&"chat/turnComplete"), "{types:?}");
    assert!(types.contains(&"chat/turnStarted"), "{types:?}");
    assert!(types.contains(&"chat/toolCallComplete"), "{types:?}");
    let confirmed = types
        .iter()
        .filter(|t| **t == "chat/toolCallConfirmed")
        .count();
    assert_eq!(confirmed, 2, "the edit and the command: {types:?}");
    let reply: String = lines
        .iter()
        .filter(|l| l["action"]["type"] == "chat/delta")
        .map(|l| l["action"]["content"].as_str().unwrap())
        .collect();
    let parts: String = lines
        .iter()
        .filter(|l| {
            l["action"]["type"] == "chat/responsePart" && l["action"]["part"]["kind"] == "markdown"
        })
        .map(|l| l["action"]["part"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(format!("{parts}{reply}"), "done");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "goodbye\n"
    );
}

#[test]
fn json_output_is_one_action_per_line_ending_with_the_turn_end() {
    json_lines(true);
}

#[test]
fn json_output_in_process_is_the_same() {
    json_lines(false);
}

#[test]
fn a_session_another_client_created_is_continued() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream("first answer"),
        Reply::text_stream("second answer"),
    ])
    .unwrap();
    configure(&env, &ep);
    let daemon = Started::new(&env);
    let uri = rt().block_on(async {
        let url = format!("{}/?tkn={}", daemon.address, default_token(&env));
        let (client, _) = client(&url).await;
        let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({
                    "channel": uri, "provider": "cofold",
                    "workingDirectories": [ahpd_sdk::util::file_uri(&work)],
                }),
            )
            .await
            .unwrap();
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let mut sub = client.attach_subscription(&chat).await;
        let _: Value = client
            .request("subscribe", json!({ "channel": chat }))
            .await
            .unwrap();
        let started: ahp_types::actions::StateAction = serde_json::from_value(json!({
            "type": "chat/turnStarted", "turnId": "t1",
            "startedAt": ahpd_sdk::util::now_iso(),
            "message": { "text": "remember the word apricot", "origin": { "kind": "user" } },
        }))
        .unwrap();
        client.dispatch(chat.clone(), started).await.unwrap();
        loop {
            if let Some(ahp::client::SubscriptionEvent::Action(env)) = sub.recv().await
                && matches!(
                    env.action,
                    ahp_types::actions::StateAction::ChatTurnComplete(_)
                )
            {
                break;
            }
        }
        client.shutdown().await;
        uri
    });
    let out = run(&env, &work, &["--session", &uri, "which word?"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "second answer");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    let sent = bodies[1]["messages"].to_string();
    assert!(
        sent.contains("apricot") && sent.contains("first answer"),
        "{sent}"
    );
    assert!(sent.contains("which word?"), "{sent}");
}

#[test]
fn a_failed_turn_exits_1_with_the_reason_in_both_modes() {
    let env = Env::new();
    let work = work(&env);
    // No reply scripted: the endpoint answers every chat request with a server error.
    let ep = Endpoint::with_replies(vec![]).unwrap();
    configure(&env, &ep);
    for json in [false, true] {
        let mut args = vec!["hello"];
        if json {
            args.insert(0, "--json");
        }
        let out = run(&env, &work, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("ahpd: the turn failed: "), "{stderr}");
        if json {
            let stdout = text(&out.stdout);
            let mut lines = stdout.lines().rev();
            let result: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            assert_eq!(result["type"], "result");
            assert_eq!(result["status"], "failed");
            assert_eq!(result["exitCode"], 1);
            assert!(result["error"].is_string(), "{result}");
            let last: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            assert_eq!(last["action"]["type"], "chat/error");
        }
    }
}

#[test]
fn a_missing_prompt_is_a_usage_error() {
    let env = Env::new();
    let work = work(&env);
    let out = env
        .cmd()
        .args(["run", "--path"])
        .arg(&work)
        .arg("  ")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the prompt is empty"),
        "{}",
        text(&out.stderr)
    );
    let bad_mode = run(&env, &work, &["--mode", "sometimes", "hi"]);
    assert_eq!(bad_mode.status.code(), Some(2));
}

#[test]
fn ctrl_c_stops_the_turn_with_exit_code_130() {
    use std::io::Read;
    let env = Env::new();
    let work = work(&env);
    let gate = testkit::Gate::new();
    let ep = Endpoint::with_replies(vec![Reply::stream(vec![
        testkit::Frame::Chunk(testkit::chunk::role()),
        testkit::Frame::Chunk(testkit::chunk::text("partial")),
        testkit::Frame::Gate(gate.clone()),
        testkit::Frame::Chunk(testkit::chunk::text(" never")),
    ])])
    .unwrap();
    configure(&env, &ep);
    let mut child = env
        .cmd()
        .arg("run")
        .arg("--path")
        .arg(&work)
        .arg("talk")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("partial") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the reply never began");
        seen.extend_from_slice(&buf[..n]);
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    gate.open();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("the turn was stopped"), "{stderr}");
}

#[test]
fn the_token_file_in_the_configuration_folder_is_presented() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![Reply::text_stream("with a token")]).unwrap();
    configure(&env, &ep);
    let token_file = env.dir().join("token");
    let out = env
        .cmd()
        .args(["start", "--port", "0", "--connection-token-file"])
        .arg(&token_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    struct Stop<'a>(&'a Env);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            let _ = self.0.run(&["stop"]);
        }
    }
    let _stop = Stop(&env);
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.trim().len(), 64);
    let out = run(&env, &work, &["hello"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "with a token");
    assert!(
        text(&out.stderr).contains("on ws://"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stderr).contains(token.trim()));
}

#[test]
fn reasoning_shows_only_when_asked() {
    let env = Env::new();
    let work = work(&env);
    let thinking = || {
        Reply::stream(vec![
            testkit::Frame::Chunk(testkit::chunk::role()),
            testkit::Frame::Chunk(testkit::chunk::reasoning_content("weighing the words")),
            testkit::Frame::Chunk(testkit::chunk::text("the answer")),
            testkit::Frame::Chunk(testkit::chunk::finish("stop")),
        ])
    };
    let ep = Endpoint::with_replies(vec![thinking(), thinking()]).unwrap();
    configure(&env, &ep);
    let hidden = run(&env, &work, &["think"]);
    assert_eq!(hidden.status.code(), Some(0), "{}", text(&hidden.stderr));
    assert_eq!(text(&hidden.stdout).trim_end(), "the answer");
    assert!(!text(&hidden.stderr).contains("weighing"));
    let shown = run(&env, &work, &["--show-reasoning", "think"]);
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    assert_eq!(text(&shown.stdout).trim_end(), "the answer");
    assert!(
        text(&shown.stderr).contains("weighing the words"),
        "{}",
        text(&shown.stderr)
    );
}
