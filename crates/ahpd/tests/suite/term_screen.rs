//! What a person and an attacker meet first, read back through a real pseudo-terminal: the
//! agent's questions, Ctrl-C in `chat`, approvals that show exactly what runs, "always" scoped
//! to a command's leading words, and a hostile reply that cannot touch the terminal.

use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Gate, Reply, chunk};

use super::support::*;
use super::term_support::*;

fn colours() -> Value {
    json!([{
        "id": "db", "question": "Which database?", "header": "Storage",
        "options": [{ "label": "Postgres" }, { "label": "SQLite", "description": "one file" }]
    }, {
        "id": "name", "question": "What should the table be called?"
    }])
}

/// Everything the model was sent in its last request, as text.
fn last_request(ep: &Endpoint) -> String {
    ep.chat_bodies().last().unwrap()["messages"].to_string()
}

#[test]
fn run_asks_the_agents_questions_and_the_answers_reach_the_model() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        ask_user("q1", colours()),
        Reply::text_stream("using SQLite"),
    ])
    .unwrap();
    configure(&env, &ep);
    // `--yes` approves calls; a question is still the person's to answer.
    let mut pty = in_pty(&env, "run", &work, &["--yes", "set up storage"]);
    pty.expect("question from the agent");
    pty.expect("(1/2) [Storage] Which database?");
    pty.expect("1. Postgres");
    pty.expect("2. SQLite — one file");
    // ask_user does not mark a question with options as required.
    pty.expect("number or your own answer, Enter skips > ");
    pty.send("7");
    pty.expect("type a number from 1 to 2");
    pty.send("2");
    pty.expect("(2/2) What should the table be called?");
    pty.expect("answer > ");
    pty.send("entries");
    pty.expect("using SQLite");
    assert_eq!(pty.wait(), Some(0));
    let sent = last_request(&ep);
    assert!(
        sent.contains("SQLite") && sent.contains("entries"),
        "{sent}"
    );
}

fn unanswered(json_out: bool) {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        ask_user("q1", colours()),
        Reply::text_stream("I will pick SQLite myself"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut args = vec!["--yes", "set up storage"];
    if json_out {
        args.insert(0, "--json");
    }
    // Standard input is nothing at all: nobody can answer, and the turn must not wait.
    let out = run(&env, &work, &args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the agent asked a question and standard input is not a terminal"),
        "{stderr}"
    );
    let sent = last_request(&ep);
    assert!(
        sent.contains("No one is at the terminal to answer"),
        "{sent}"
    );
    if json_out {
        let stdout = text(&out.stdout);
        let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(last["type"], "result", "{last}");
        assert_eq!(last["exitCode"], 3);
        assert_eq!(last["questionUnanswered"], true);
        assert_eq!(last["text"], "I will pick SQLite myself");
    } else {
        assert_eq!(text(&out.stdout), "I will pick SQLite myself\n");
    }
}

#[test]
fn without_a_terminal_a_question_is_answered_for_nobody_and_the_exit_code_is_3() {
    unanswered(false);
}

#[test]
fn without_a_terminal_the_json_result_says_the_question_went_unanswered() {
    unanswered(true);
}

#[test]
fn chat_asks_the_agents_questions() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        ask_user(
            "q1",
            json!([{ "id": "colour", "question": "Which colour?" }]),
        ),
        Reply::text_stream("blue it is"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "chat", &work, &[]);
    pty.expect("you> ");
    pty.send("paint it");
    pty.expect("Which colour?");
    pty.expect("answer > ");
    pty.send("blue");
    pty.expect("blue it is");
    assert!(last_request(&ep).contains("blue"));
    pty.expect("you> ");
    pty.send("/quit");
    assert_eq!(pty.wait(), Some(0));
}

#[test]
fn ctrl_c_in_chat_stops_the_streaming_turn_and_clears_the_line_at_the_prompt() {
    let env = Env::new();
    let work = work(&env);
    let gate = Gate::new();
    let ep = Endpoint::with_replies(vec![
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::text("partial words")),
            Frame::Gate(gate.clone()),
            Frame::Chunk(chunk::text(" never shown")),
            Frame::Chunk(chunk::finish("stop")),
        ]),
        Reply::text_stream("second reply"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "chat", &work, &[]);
    pty.expect("you> ");
    pty.send("talk");
    pty.expect("partial words");
    // The line editor is not reading now: Ctrl-C is the terminal's SIGINT.
    pty.type_raw(b"\x03");
    pty.expect("stopping the turn");
    pty.expect("(stopped)");
    gate.open();
    pty.expect("you> ");
    // At the prompt, Ctrl-C throws away what was typed.
    pty.type_raw(b"typed by mistake");
    pty.type_raw(b"\x03");
    pty.expect("you> ");
    pty.send("again");
    pty.expect("second reply");
    let bodies = ep.chat_bodies();
    let last = bodies.last().unwrap()["messages"].to_string();
    assert!(
        last.contains("again") && !last.contains("typed by mistake"),
        "{last}"
    );
    pty.send("/quit");
    assert_eq!(pty.wait(), Some(0));
}

fn shell(id: &str, command: &str) -> Reply {
    call(id, "shell_exec", json!({ "command": command }))
}

#[test]
fn an_approval_shows_the_whole_command_with_its_controls_visible() {
    let env = Env::new();
    let work = work(&env);
    let long = format!("ls{}; touch PWNED1", " ".repeat(290));
    let disguised = "ls -la\r\x1b[2K\x1b]0;title\x07; touch PWNED3";
    let ep = Endpoint::with_replies(vec![
        shell("c1", &long),
        shell("c2", "ls\ntouch PWNED2"),
        shell("c3", disguised),
        Reply::text_stream("refused them all"),
    ])
    .unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "run", &work, &["--mode", "default", "look around"]);
    pty.expect("command (1 line, 306 characters):");
    pty.expect("; touch PWNED1");
    pty.expect("[n] no > ");
    pty.send("n");
    pty.expect("why?");
    pty.send("");
    pty.expect("command (2 lines");
    pty.expect("│ ls\r\n│ touch PWNED2");
    pty.expect("[n] no > ");
    pty.send("n");
    pty.send("");
    pty.expect("│ ls -la^M^[[2K^[]0;title^G; touch PWNED3");
    pty.expect("[n] no > ");
    pty.send("n");
    pty.send("not that");
    pty.expect("refused them all");
    assert_eq!(pty.wait(), Some(0));
    for f in ["PWNED1", "PWNED2", "PWNED3"] {
        assert!(!work.join(f).exists(), "{f} ran");
    }
    // Nothing the model sent reached the terminal as a control: the client's only escape
    // codes are its colours, and NO_COLOR is set.
    let screen = pty.screen();
    assert!(
        !screen.contains('\x1b') && !screen.contains('\x07'),
        "{screen:?}"
    );
    let sent = last_request(&ep);
    assert!(
        sent.contains("not that"),
        "the reason reaches the model: {sent}"
    );
}

#[test]
fn always_on_git_status_allows_git_status_and_asks_again_for_rm() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![
        shell("c1", "git status"),
        shell("c2", "git status --short"),
        shell("c3", "rm -f a.txt"),
        Reply::text_stream("done"),
    ])
    .unwrap();
    configure(&env, &ep);
    let daemon = Started::new(&env);
    let mut pty = in_pty(&env, "run", &work, &["--mode", "default", "check"]);
    pty.expect("[a] allow shell_exec commands starting with \"git status\" for this session");
    pty.expect("[n] no > ");
    pty.send("a");
    pty.expect("• shell_exec git status --short: ");
    pty.expect("│ rm -f a.txt");
    pty.expect("[n] no > ");
    let session = pty.word_starting("cofold:/");
    // The rule is the session's, where any client reads it.
    let allow = rt().block_on(async {
        let url = format!("{}/?tkn={}", daemon.address, default_token(&env));
        let (client, _) = client(&url).await;
        let got: Value = client
            .request("subscribe", json!({ "channel": session }))
            .await
            .unwrap();
        client.shutdown().await;
        got["snapshot"]["state"]["config"]["values"]["permissions"]["allow"].clone()
    });
    assert_eq!(allow, json!(["shell_exec(git status:*)"]));
    pty.send("n");
    pty.send("");
    pty.expect("done");
    assert_eq!(pty.wait(), Some(0));
    assert!(work.join("a.txt").exists());
    assert_eq!(
        pty.screen().matches("approve? shell_exec").count(),
        2,
        "git status --short ran without a question"
    );
}

#[test]
fn a_hostile_reply_cannot_retitle_write_the_clipboard_clear_or_overwrite() {
    let env = Env::new();
    let work = work(&env);
    let hostile = "first line\n\x1b]0;PWNED-TITLE\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x1b[H\rOVERWRITE\u{9b}31m done\n";
    let ep = Endpoint::with_replies(vec![Reply::text_stream(hostile)]).unwrap();
    configure(&env, &ep);
    let mut pty = in_pty(&env, "run", &work, &["say hello"]);
    pty.expect("done");
    assert_eq!(pty.wait(), Some(0));
    let screen = pty.screen();
    assert!(
        !screen.contains('\x1b'),
        "an escape reached the terminal: {screen:?}"
    );
    assert!(
        !screen.contains('\x07') && !screen.contains('\u{9b}'),
        "{screen:?}"
    );
    assert!(
        screen.contains("first line\r\n^[]0;PWNED-TITLE^G^[]52;c;cm0gLXJmIH4=^G^[[2J^[[H^MOVERWRITE<U+009B>31m done"),
        "{screen:?}"
    );
}
