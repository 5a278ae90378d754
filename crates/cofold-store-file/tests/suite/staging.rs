//! A create or fork builds its session in a staging folder and renames it into place; the
//! staging folder of one a crash cut short is deleted when the store is next opened, while one a
//! live writer is still filling is left alone.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cofold_agents::store::{SessionQuery, Store};

use super::support::{Disk, session};

/// Writes `files` (paths relative to `folder`) and dates the folder and everything in it `at`.
fn plant(folder: &Path, files: &[&str], at: SystemTime) -> PathBuf {
    for file in files {
        let path = folder.join(file);
        fs::create_dir_all(path.parent().expect("a parent")).expect("folders");
        fs::write(&path, b"{}\n").expect("a file");
    }
    date(folder, at);
    folder.to_path_buf()
}

/// Sets the modification time of `path` and, for a folder, of everything in it; the deepest
/// first, as naming a file would touch its folder.
fn date(path: &Path, at: SystemTime) {
    if path.is_dir() {
        for entry in fs::read_dir(path).expect("list") {
            date(&entry.expect("an entry").path(), at);
        }
    }
    fs::File::open(path)
        .and_then(|f| f.set_modified(at))
        .expect("set the time");
}

#[tokio::test]
async fn staging_folders_a_crash_left_are_deleted_at_open_and_live_ones_kept() {
    let disk = Disk::new();
    session(&disk.store, "plain", None).await;
    session(&disk.store, "in-a-workspace", Some("/home/u/proj")).await;
    let sessions = disk.dir.path().join("sessions");
    let in_workspace = disk.dir.path().join("workspaces/-home-u-proj/sessions");
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);

    // A create cut short after its record, and a fork cut short while copying runs.
    let create = plant(
        &sessions.join("%tmp-4242-0"),
        &["session.json"],
        an_hour_ago,
    );
    let fork = plant(
        &in_workspace.join("%tmp-4242-1"),
        &["session.json", "messages.jsonl", "runs/r1/events.jsonl"],
        an_hour_ago,
    );
    // Another process's create that has just begun, and its fork still copying a run's events
    // (an old folder, a file deep inside being written).
    let live_create = plant(
        &sessions.join("%tmp-4243-0"),
        &["session.json"],
        SystemTime::now(),
    );
    let live_fork = plant(
        &sessions.join("%tmp-4243-1"),
        &["session.json", "runs/r1/events.jsonl"],
        an_hour_ago,
    );
    date(&live_fork.join("runs/r1/events.jsonl"), SystemTime::now());
    // A stray file with the prefix is not a staging folder.
    let stray = sessions.join("%tmp-4242-2");
    fs::write(&stray, b"x").expect("a file");
    date(&stray, an_hour_ago);

    let reopened = disk.reopen();
    assert!(!create.exists(), "the cut-short create is gone");
    assert!(!fork.exists(), "the cut-short fork is gone");
    assert!(live_create.exists(), "a create in progress is left alone");
    assert!(live_fork.exists(), "a fork in progress is left alone");
    assert!(stray.exists());

    let mut ids: Vec<String> = reopened
        .list_sessions(SessionQuery::default())
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["in-a-workspace", "plain"], "the real sessions stay");
}
