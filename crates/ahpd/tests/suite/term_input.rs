//! Input and output as the peers take and give them: piped context, continuing the folder's
//! last session, images and `@file` mentions as attachments, Markdown drawn on a terminal and
//! left plain through a pipe, `-o`, the `--json` result line, history kept across chats.

use serde_json::Value;
use testkit::{Endpoint, Reply};

use super::support::*;
use super::term_support::*;

fn sent(ep: &Endpoint, n: usize) -> String {
    ep.chat_bodies()[n]["messages"].to_string()
}

#[test]
fn piped_input_is_context_for_the_prompt() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![Reply::text_stream("it is a log")]).unwrap();
    configure(&env, &ep);
    let path = work.display().to_string();
    let out = env.run_with_input(
        &["run", "--path", &path, "explain this"],
        "PIPED-CONTEXT-LINE-42\nsecond line\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let body = sent(&ep, 0);
    assert!(body.contains("explain this"), "{body}");
    assert!(
        body.contains("PIPED-CONTEXT-LINE-42") && body.contains("second line"),
        "{body}"
    );
}

#[test]
fn continue_picks_up_this_folders_last_session() {
    let env = Env::new();
    let work = work(&env);
    let other = env.root.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream("noted the apricot"),
        Reply::text_stream("a different folder"),
        Reply::text_stream("it was apricot"),
    ])
    .unwrap();
    configure(&env, &ep);
    let first = run(&env, &work, &["remember the word apricot"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let elsewhere = run(&env, &other, &["something else"]);
    assert_eq!(
        elsewhere.status.code(),
        Some(0),
        "{}",
        text(&elsewhere.stderr)
    );
    let again = run(&env, &work, &["-c", "which word?"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), "it was apricot\n");
    let body = sent(&ep, 2);
    assert!(
        body.contains("apricot") && !body.contains("something else"),
        "{body}"
    );
    // With no session to continue, one sentence and exit 2.
    let empty = env.root.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let none = run(&env, &empty, &["-c", "hello"]);
    assert_eq!(none.status.code(), Some(2), "{}", text(&none.stderr));
    assert!(
        text(&none.stderr).contains("no session of"),
        "{}",
        text(&none.stderr)
    );
}

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[test]
fn an_image_and_a_mentioned_file_are_sent_as_attachments() {
    let env = Env::new();
    let work = work(&env);
    std::fs::write(work.join("shot.png"), PNG).unwrap();
    std::fs::write(work.join("notes.txt"), "NOTE-CONTENT-7\n").unwrap();
    let ep = Endpoint::with_replies(vec![Reply::text_stream("seen both")]).unwrap();
    configure(&env, &ep);
    let out = run(
        &env,
        &work,
        &["-i", "shot.png", "what is in the picture? see @notes.txt."],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let body = sent(&ep, 0);
    assert!(body.contains("NOTE-CONTENT-7"), "the file's text: {body}");
    assert!(
        body.contains("data:image/png;base64,") || body.contains("shot.png"),
        "the image: {body}"
    );
    let bad = run(&env, &work, &["-i", "notes.txt", "look"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--image notes.txt: not an image"));
}

const MARKDOWN: &str = "# Plan\n\n- first **step**\n- second\n\n```sh\nmake test\n```\n";

#[test]
fn markdown_is_drawn_on_a_terminal_and_plain_through_a_pipe() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream(MARKDOWN),
        Reply::text_stream(MARKDOWN),
    ])
    .unwrap();
    configure(&env, &ep);
    let piped = run(&env, &work, &["plan it"]);
    assert_eq!(piped.status.code(), Some(0), "{}", text(&piped.stderr));
    assert_eq!(text(&piped.stdout), MARKDOWN);
    let mut cmd = env.cmd();
    cmd.arg("run").arg("--path").arg(&work).arg("plan it");
    let mut pty = Pty::spawn(cmd);
    pty.expect("╰─");
    assert_eq!(pty.wait(), Some(0));
    let screen = pty.screen();
    assert!(screen.contains("\x1b[1;4mPlan"), "{screen:?}");
    assert!(screen.contains("• first \x1b[1mstep\x1b[22m"), "{screen:?}");
    assert!(screen.contains("╭─ sh"), "{screen:?}");
    assert!(!screen.contains("```"), "{screen:?}");
}

#[test]
fn the_last_message_goes_to_the_output_file_and_json_ends_with_the_result() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        call("c1", "read_file", serde_json::json!({ "path": "a.txt" })),
        Reply::text_stream("the file says hello"),
    ])
    .unwrap();
    configure(&env, &ep);
    let file = env.root.path().join("last.txt");
    let out = run(
        &env,
        &work,
        &["--json", "-o", file.to_str().unwrap(), "read a.txt"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "the file says hello"
    );
    let stdout = text(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result");
    assert_eq!(last["status"], "complete");
    assert_eq!(last["exitCode"], 0);
    assert_eq!(last["text"], "the file says hello");
    assert!(last["session"].as_str().unwrap().starts_with("cofold:/"));
    assert!(last["durationMs"].is_u64());
    assert!(last["usage"]["inputTokens"].is_i64(), "{last}");
    // Every line before it is an envelope.
    for l in stdout.lines().rev().skip(1) {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!(v["action"]["type"].is_string(), "{l}");
    }
}

#[test]
fn a_second_chat_has_the_first_ones_history() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream("noted the plum"),
        Reply::text_stream("noted it again"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut first = in_pty(&env, "chat", &work, &[]);
    first.expect("you> ");
    first.send("remember the plum");
    first.expect("noted the plum");
    first.expect("you> ");
    first.send("/quit");
    assert_eq!(first.wait(), Some(0));
    let mut second = in_pty(&env, "chat", &work, &[]);
    second.expect("you> ");
    // The up arrow brings back the first chat's lines, the last (`/quit`) first.
    second.type_raw(b"\x1b[A");
    second.expect("/quit");
    second.type_raw(b"\x1b[A");
    second.expect("remember the plum");
    second.type_raw(b"\r");
    second.expect("noted it again");
    assert!(sent(&ep, 1).contains("remember the plum"));
    second.expect("you> ");
    second.send("/quit");
    assert_eq!(second.wait(), Some(0));
    assert_eq!(mode(&env.dir().join("chat_history")), 0o600);
}

#[test]
fn a_chat_that_sends_nothing_leaves_no_session() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(Vec::new()).unwrap();
    configure(&env, &ep);
    let path = work.display().to_string();
    let out = env.run_with_input(&["chat", "--path", &path], "/help\n/quit\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("/resume"),
        "{}",
        text(&out.stderr)
    );
    let list = env.run(&["sessions", "--json"]);
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows, serde_json::json!([]), "{rows}");
}
