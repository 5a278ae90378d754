//! `ahpd chat` in a pseudo-terminal: a message, an approval answered `y`, the reply, a steered
//! turn and a stopped one; `ahpd run`'s approvals in one.

use serde_json::json;
use testkit::{Endpoint, Frame, Gate, Reply, chunk};

use super::support::*;
use super::term_support::*;

#[test]
fn chat_asks_an_approval_steers_and_stops_in_a_terminal() {
    let env = Env::new();
    let work = work(&env);
    let steer_gate = Gate::new();
    let stop_gate = Gate::new();
    let ep = Endpoint::with_replies(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        Reply::text_stream("edited it"),
        call("c2", "read_file", json!({ "path": "a.txt" })).held(&steer_gate),
        Reply::text_stream("steered answer"),
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::text("partial words")),
            Frame::Gate(stop_gate.clone()),
            Frame::Chunk(chunk::text(" never shown")),
            Frame::Chunk(chunk::finish("stop")),
        ]),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "chat", &work, &["--mode", "default"]);

    pty.expect("you> ");
    pty.send("change hello to goodbye");
    pty.expect("approve? edit_file");
    pty.expect("what: a.txt");
    // The host's preview of the edit, as a diff.
    pty.expect("-hello");
    pty.expect("+goodbye");
    pty.expect("[y] yes once");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "hello\n",
        "nothing written before the answer"
    );
    pty.send("y");
    pty.expect("• edit_file a.txt: ok");
    pty.expect("edited it");
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "goodbye\n"
    );

    // A line typed while a turn runs steers it.
    pty.expect("you> ");
    pty.send("read it back");
    rt().block_on(steer_gate.reached());
    pty.send("only the first line");
    pty.expect("(steering: only the first line)");
    steer_gate.open();
    pty.expect("steered answer");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 5);
    assert!(
        bodies[4]["messages"]
            .to_string()
            .contains("only the first line"),
        "the steering message reached the next step"
    );

    // /stop ends a running turn.
    pty.expect("you> ");
    pty.send("talk");
    pty.expect("partial words");
    pty.send("/stop");
    pty.expect("(stopped)");
    stop_gate.open();
    pty.expect("you> ");
    pty.send("/model");
    pty.expect("model m");
    pty.send("/sessions");
    pty.expect("* ");
    pty.expect("cofold:/");
    pty.send("/mode sometimes");
    pty.expect("sometimes is not a mode");
    pty.send("/quit");
    let status = pty.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn run_in_a_terminal_shows_the_diff_and_takes_no_for_an_answer() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        ),
        call(
            "c2",
            "write_file",
            json!({ "path": "b.txt", "content": "new file\n" }),
        ),
        Reply::text_stream("kept hello, wrote b"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(
        &env,
        "run",
        &work,
        &["--mode", "default", "change hello, add b"],
    );
    pty.expect("approve? edit_file");
    pty.expect("-hello");
    pty.expect("+goodbye");
    pty.expect("[n] no > ");
    pty.send("n");
    pty.expect("why?");
    pty.send("keep the greeting");
    pty.expect("• edit_file a.txt: denied (keep the greeting)");
    pty.expect("approve? write_file");
    pty.expect("b.txt: new file");
    pty.expect("+new file");
    // "Always" for a file tool names the folder it will allow.
    pty.expect(&format!(
        "[a] allow write_file in {}/ for this session",
        work.display()
    ));
    pty.expect("[n] no > ");
    pty.send("a");
    pty.expect("• write_file b.txt: ok");
    pty.expect("kept hello, wrote b");
    let status = pty.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("b.txt")).unwrap(),
        "new file\n"
    );
}

#[test]
fn chat_starts_a_new_session_and_resumes_the_first() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream("noted the plum"),
        Reply::text_stream("fresh start"),
        Reply::text_stream("it was a plum"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "chat", &work, &[]);
    pty.expect("you> ");
    let first = pty.word_starting("cofold:/");
    pty.send("remember the plum");
    pty.expect("noted the plum");
    pty.expect("you> ");
    pty.send("/new");
    pty.expect(" · new · ");
    pty.expect("you> ");
    pty.send("hello again");
    pty.expect("fresh start");
    pty.expect("you> ");
    pty.send(&format!("/resume {first}"));
    pty.expect("last: remember the plum");
    pty.expect("you> ");
    pty.send("what was it?");
    pty.expect("it was a plum");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(!bodies[1]["messages"].to_string().contains("plum"));
    let resumed = bodies[2]["messages"].to_string();
    assert!(
        resumed.contains("remember the plum") && !resumed.contains("hello again"),
        "{resumed}"
    );
    pty.send("/quit");
    assert_eq!(pty.child.wait().unwrap().code(), Some(0));
}

#[test]
fn chat_from_a_pipe_runs_each_message_to_its_end_before_the_next() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::text_stream("noted the plum"),
        Reply::text_stream("it was a plum"),
    ])
    .unwrap();
    configure(&env, &ep);
    let path = work.display().to_string();
    let out = env.run_with_input(
        &["chat", "--path", &path],
        "remember the plum\nwhat was it?\n/quit\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "noted the plum\nit was a plum\n");
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(bodies[1]["messages"].to_string().contains("noted the plum"));
}

/// Two calls of one model step that both ask: each question is shown in turn and each answer
/// reaches its own call. The cofold engine asks them one after the other; the chat also queues
/// questions that arrive together (from other engines), which this test does not reach.
#[test]
fn chat_asks_two_approvals_of_one_step_one_after_the_other() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::tool_call(
                0,
                Some("k1"),
                Some("shell_exec"),
                &json!({ "command": "echo one > one.txt" }).to_string(),
            )),
            Frame::Chunk(chunk::tool_call(
                1,
                Some("k2"),
                Some("shell_exec"),
                &json!({ "command": "echo two > two.txt" }).to_string(),
            )),
            Frame::Chunk(chunk::finish("tool_calls")),
        ]),
        Reply::text_stream("both ran"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "chat", &work, &["--mode", "default"]);

    pty.expect("you> ");
    pty.send("write two files");
    pty.expect("echo one > one.txt");
    pty.expect("[y] yes once");
    pty.send("y");
    pty.expect("echo two > two.txt");
    pty.expect("[y] yes once");
    pty.send("y");
    pty.expect("both ran");
    assert!(work.join("one.txt").exists() && work.join("two.txt").exists());
    pty.send("/quit");
}
