//! The record and the undo rule, on real files in a temporary folder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use cofold_changes::{Bounds, Image, Journal, Outcome};

fn edit(journal: &mut Journal, turn: &str, path: &Path, content: &str) {
    let before = journal.capture(path).expect("captured");
    std::fs::write(path, content).expect("written");
    journal
        .record_write(turn, path, before, "edit_file")
        .expect("recorded");
}

#[test]
fn two_sessions_hand_edits_and_commands() {
    let dir = tempfile::tempdir().expect("temp");
    let root = dir.path().canonicalize().expect("real");
    let (a, b, c) = (root.join("a.txt"), root.join("b.txt"), root.join("c.txt"));
    let original = b"one\r\ntwo\n\x00binary tail";
    std::fs::write(&a, original).expect("w");
    std::fs::write(&c, "c before").expect("w");

    let mut session_a = Journal::open(&root.join(".store/a"), Bounds::default()).expect("opens");
    let mut session_b = Journal::in_memory(Bounds::default());
    edit(&mut session_a, "t1", &a, "A's edit");
    let index = session_a.index_before(&root);
    std::fs::write(&b, "x\n").expect("the command writes");
    assert_eq!(
        session_a
            .record_command("t1", index, "command")
            .expect("compared"),
        1
    );
    edit(&mut session_b, "u1", &c, "B's edit");
    std::fs::write(&a, "the person's edit").expect("hand edit");

    let changes = session_a.turn("t1");
    let paths: Vec<_> = changes.files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(paths, [a.clone(), b.clone()]);
    assert_eq!(changes.files[1].before, Image::Absent);

    let outcomes = session_a.undo("t1", None).expect("undo runs");
    assert!(
        matches!(&outcomes[0], Outcome::Refused(p, why) if *p == a && why.contains("changed since")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], Outcome::Removed(b.clone()));
    assert!(!b.exists());
    assert_eq!(std::fs::read_to_string(&a).expect("r"), "the person's edit");
    assert_eq!(std::fs::read_to_string(&c).expect("r"), "B's edit");

    std::fs::write(&a, "A's edit").expect("the person reverts");
    // Reopened from disk: the record outlives the process.
    let mut session_a = Journal::open(&root.join(".store/a"), Bounds::default()).expect("reopens");
    let outcomes = session_a.undo("t1", Some(&a)).expect("undo runs");
    assert_eq!(outcomes, [Outcome::Restored(a.clone())]);
    assert_eq!(std::fs::read(&a).expect("r"), original);
    assert!(session_a.undo("t1", Some(&a)).expect("runs")[0].refused());

    let redone = session_a.redo("t1", None).expect("redo runs");
    assert_eq!(
        redone,
        [Outcome::Restored(a.clone()), Outcome::Restored(b.clone())]
    );
    assert_eq!(std::fs::read_to_string(&a).expect("r"), "A's edit");
    assert_eq!(std::fs::read_to_string(&b).expect("r"), "x\n");
    assert_eq!(std::fs::read_to_string(&c).expect("r"), "B's edit");
}

#[test]
fn a_later_turn_of_the_same_session_is_named() {
    let dir = tempfile::tempdir().expect("temp");
    let a = dir.path().join("a.txt");
    std::fs::write(&a, "0").expect("w");
    let mut j = Journal::in_memory(Bounds::default());
    edit(&mut j, "t1", &a, "1");
    edit(&mut j, "t2", &a, "2");
    let refused = j.undo("t1", None).expect("runs");
    assert!(
        matches!(&refused[0], Outcome::Refused(_, why) if why.contains("turn t2 of this session")),
        "{refused:?}"
    );
    j.undo("t2", None).expect("runs");
    j.undo("t1", None).expect("runs");
    assert_eq!(std::fs::read_to_string(&a).expect("r"), "0");
}

#[test]
fn the_oldest_turns_contents_go_first_past_the_storage_bound() {
    let dir = tempfile::tempdir().expect("temp");
    let mut j = Journal::in_memory(Bounds {
        storage: 3000,
        ..Bounds::default()
    });
    for (turn, name) in [("t1", "one"), ("t2", "two"), ("t3", "three")] {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("{name} before ").repeat(100)).expect("w");
        edit(&mut j, turn, &path, &format!("{name} after ").repeat(100));
    }
    assert_eq!(j.dropped_turns(), ["t1", "t2"]);
    assert!(j.turn("t1").dropped && !j.turn("t1").files[0].before_kept);
    let refused = j.undo("t1", None).expect("runs");
    assert!(
        matches!(&refused[0], Outcome::Refused(_, why) if why.contains("no longer kept")),
        "{refused:?}"
    );
    assert!(!j.undo("t3", None).expect("runs")[0].refused());
}

#[test]
fn a_folder_over_the_file_bound_is_said_in_the_record() {
    let dir = tempfile::tempdir().expect("temp");
    for i in 0..4 {
        std::fs::write(dir.path().join(format!("f{i}")), "a").expect("w");
    }
    let mut j = Journal::in_memory(Bounds {
        files: 2,
        ..Bounds::default()
    });
    let index = j.index_before(dir.path());
    std::fs::write(dir.path().join("new"), "b").expect("w");
    assert_eq!(j.record_command("t1", index, "command").expect("runs"), 0);
    let notes = j.turn("t1").notes;
    assert!(notes[0].contains("more than 2 files"), "{notes:?}");
}

#[test]
fn a_command_changing_a_file_the_session_read_can_be_undone() {
    let dir = tempfile::tempdir().expect("temp");
    let a = dir.path().join("a.txt");
    let unseen = dir.path().join("unseen.txt");
    std::fs::write(&a, "kept").expect("w");
    std::fs::write(&unseen, "never read").expect("w");
    let mut j = Journal::in_memory(Bounds::default());
    let first = j.index_before(dir.path());
    j.record_command("t0", first, "command").expect("runs");
    j.note_read(&a).expect("noted");
    let index = j.index_before(dir.path());
    std::fs::write(&a, "clobbered by a command").expect("w");
    std::fs::write(&unseen, "also clobbered").expect("w");
    j.record_command("t1", index, "command").expect("runs");
    let outcomes = j.undo("t1", None).expect("runs");
    assert_eq!(outcomes[0], Outcome::Restored(a.clone()));
    assert!(
        matches!(&outcomes[1], Outcome::Refused(_, why) if why.contains("never kept")),
        "{outcomes:?}"
    );
    assert_eq!(std::fs::read_to_string(&a).expect("r"), "kept");
}
