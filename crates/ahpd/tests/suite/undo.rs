//! `ahpd undo`: two sessions in one folder, a hand edit, a command's file; undo refuses what
//! someone else changed, removes what the command made, and never touches the other session's
//! file; redo brings the turn back.

use serde_json::json;
use testkit::{Endpoint, Reply};

use super::support::*;
use super::term_support::*;

fn two_sessions_then_undo(daemon: bool) {
    let env = Env::new();
    let work = work(&env);
    std::fs::write(work.join("c.txt"), "c as it was\n").unwrap();
    let ep = Endpoint::with_replies(vec![
        call("c1", "read_file", json!({ "path": "a.txt" })),
        call(
            "c2",
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "A was here" }),
        ),
        call(
            "c3",
            "shell_exec",
            json!({ "command": "sh -c 'echo x > b.txt'" }),
        ),
        Reply::text_stream("A is done"),
        call("d1", "read_file", json!({ "path": "c.txt" })),
        call(
            "d2",
            "edit_file",
            json!({ "path": "c.txt", "old": "as it was", "new": "B's" }),
        ),
        Reply::text_stream("B is done"),
    ])
    .unwrap();
    configure(&env, &ep);
    let _daemon = daemon.then(|| Started::new(&env));
    let out = run(
        &env,
        &work,
        &["--mode", "bypassPermissions", "edit a, make b"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let session_a = session_of(&text(&out.stderr));
    let out = run(&env, &work, &["--mode", "bypassPermissions", "edit c"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let after_a = std::fs::read(work.join("a.txt")).unwrap();
    assert_eq!(after_a, b"A was here\n");
    assert_eq!(std::fs::read_to_string(work.join("b.txt")).unwrap(), "x\n");

    std::fs::write(work.join("a.txt"), "the person's edit\n").unwrap();
    let undo = env
        .cmd()
        .current_dir(&work)
        .args(["undo", &session_a])
        .output()
        .unwrap();
    let said = text(&undo.stdout);
    assert_eq!(undo.status.code(), Some(1), "{said}{}", text(&undo.stderr));
    assert!(said.contains("a.txt changed since"), "{said}");
    assert!(said.contains("b.txt removed"), "{said}");
    assert!(!work.join("b.txt").exists());
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "the person's edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).unwrap(),
        "c B's\n"
    );

    std::fs::write(work.join("a.txt"), &after_a).unwrap();
    let undo = env
        .cmd()
        .current_dir(&work)
        .args(["undo", &session_a, "--file", "a.txt"])
        .output()
        .unwrap();
    assert_eq!(
        undo.status.code(),
        Some(0),
        "{}{}",
        text(&undo.stdout),
        text(&undo.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(work.join("a.txt")).unwrap(),
        "hello\n"
    );

    let redo = env
        .cmd()
        .current_dir(&work)
        .args(["undo", &session_a, "--redo", "--turn", "1"])
        .output()
        .unwrap();
    assert_eq!(
        redo.status.code(),
        Some(0),
        "{}{}",
        text(&redo.stdout),
        text(&redo.stderr)
    );
    assert_eq!(std::fs::read(work.join("a.txt")).unwrap(), after_a);
    assert_eq!(std::fs::read_to_string(work.join("b.txt")).unwrap(), "x\n");
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).unwrap(),
        "c B's\n"
    );

    // Without a URI: the newest session in this folder, B's.
    let undo_b = env
        .cmd()
        .current_dir(&work)
        .args(["undo"])
        .output()
        .unwrap();
    assert_eq!(
        undo_b.status.code(),
        Some(0),
        "{}{}",
        text(&undo_b.stdout),
        text(&undo_b.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(work.join("c.txt")).unwrap(),
        "c as it was\n"
    );
    assert_eq!(std::fs::read(work.join("a.txt")).unwrap(), after_a);
}

#[test]
fn undo_through_the_daemon_leaves_others_work_alone() {
    two_sessions_then_undo(true);
}

#[test]
fn undo_in_process_reads_the_stored_record() {
    two_sessions_then_undo(false);
}
