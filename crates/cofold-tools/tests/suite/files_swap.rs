//! Tools cases 9.4 (docs/acceptance.md): the file written is the file checked, even when the path is swapped between
//! the check and the open (through the `before_open` seam), and tools cases 9.6 case 43.
#![cfg(unix)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cofold_tools::files::FilesOptions;
use serde_json::json;

use super::files_fixture::{Files, Ws, f_options};

/// Options whose seam runs `swap` once, for the first write whose real path ends with `name`.
fn swapping(name: &'static str, swap: impl Fn(&Path) + Send + Sync + 'static) -> FilesOptions {
    let done = AtomicBool::new(false);
    FilesOptions {
        before_open: Some(Arc::new(move |real: &Path| {
            if real.ends_with(name) && !done.swap(true, Ordering::SeqCst) {
                swap(real);
            }
        })),
        ..f_options()
    }
}

fn relink(at: &Path, to: &Path) {
    if at.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(at).expect("remove folder");
    } else {
        let _ = fs::remove_file(at);
    }
    symlink(to, at).expect("link");
}

async fn swap_then_write(require_read: bool) {
    let ws = Ws::f();
    let outside = Ws::empty();
    outside.write("secret.txt", "kept");
    ws.write("swap.txt", "mine");
    let secret = outside.path("secret.txt");
    let options = swapping("swap.txt", move |real| relink(real, &secret));
    let files = Files::new(
        &ws.root,
        "s",
        FilesOptions {
            require_read,
            ..options
        },
    )
    .await;
    files.ok("read_file", json!({"path": "swap.txt"})).await;
    assert_eq!(
        files
            .refused(
                "write_file",
                json!({"path": "swap.txt", "content": "stolen"})
            )
            .await,
        "swap.txt changed after it was checked; nothing was written"
    );
    assert_eq!(outside.read("secret.txt"), "kept");
}

#[tokio::test]
async fn an_existing_file_swapped_for_a_link_is_not_written() {
    swap_then_write(true).await;
}

#[tokio::test]
async fn the_swap_is_caught_with_require_read_off_too() {
    swap_then_write(false).await;
}

#[tokio::test]
async fn an_edit_of_a_swapped_file_is_not_written() {
    let ws = Ws::f();
    let outside = Ws::empty();
    outside.write("other.txt", "inside too");
    ws.write("swap-edit.txt", "inside too");
    let other = outside.path("other.txt");
    let files = Files::new(
        &ws.root,
        "s",
        swapping("swap-edit.txt", move |r| relink(r, &other)),
    )
    .await;
    files
        .ok("read_file", json!({"path": "swap-edit.txt"}))
        .await;
    let edit = json!({"path": "swap-edit.txt", "old": "inside", "new": "outside"});
    assert_eq!(
        files.refused("edit_file", edit).await,
        "swap-edit.txt changed after it was checked; nothing was written"
    );
    assert_eq!(outside.read("other.txt"), "inside too");
}

#[tokio::test]
async fn a_link_planted_at_a_new_name_is_not_followed() {
    let ws = Ws::f();
    let outside = Ws::empty();
    let planted = outside.path("planted.txt");
    let target = planted.clone();
    let files = Files::new(
        &ws.root,
        "s",
        swapping("planted.txt", move |r| relink(r, &target)),
    )
    .await;
    assert_eq!(
        files
            .refused("write_file", json!({"path": "planted.txt", "content": "x"}))
            .await,
        "planted.txt changed after it was checked; nothing was written"
    );
    assert!(planted.symlink_metadata().is_err());
}

#[tokio::test]
async fn a_dangling_link_creates_its_target_and_stays_a_link() {
    let ws = Ws::f();
    symlink(ws.path("deep/new.txt"), ws.path("dl")).expect("link");
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .ok("write_file", json!({"path": "dl", "content": "made"}))
            .await,
        "created dl (4 bytes)"
    );
    assert_eq!(ws.read("deep/new.txt"), "made");
    assert!(
        ws.path("dl")
            .symlink_metadata()
            .expect("meta")
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn a_dangling_link_out_of_the_workspace_creates_nothing() {
    let ws = Ws::f();
    let outside = Ws::empty();
    symlink(outside.path("deep/new.txt"), ws.path("dl")).expect("link");
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .refused("write_file", json!({"path": "dl", "content": "made"}))
            .await,
        "dl leads out of the workspace through a link; nothing was written"
    );
    assert!(!outside.path("deep").exists());
}

#[tokio::test]
async fn a_dangling_links_target_taken_in_between_is_not_overwritten() {
    let ws = Ws::f();
    let taken = ws.path("taken.txt");
    symlink(&taken, ws.path("dl-taken")).expect("link");
    let files = Files::new(
        &ws.root,
        "s",
        swapping("taken.txt", |real| {
            fs::write(real, "theirs").expect("write")
        }),
    )
    .await;
    assert_eq!(
        files
            .refused("write_file", json!({"path": "dl-taken", "content": "mine"}))
            .await,
        "dl-taken changed after it was checked; nothing was written"
    );
    assert_eq!(ws.read("taken.txt"), "theirs");
}

#[tokio::test]
async fn a_parent_folder_swapped_for_a_link_is_caught() {
    let ws = Ws::f();
    let outside = Ws::empty();
    fs::create_dir(ws.path("sub")).expect("folder");
    let sub = ws.path("sub");
    let out = outside.root.clone();
    let files = Files::new(
        &ws.root,
        "s",
        swapping("new.txt", move |_| relink(&sub, &out)),
    )
    .await;
    assert_eq!(
        files
            .refused("write_file", json!({"path": "sub/new.txt", "content": "x"}))
            .await,
        "sub/new.txt changed after it was checked; nothing was written"
    );
    assert_eq!(fs::read_dir(&outside.root).expect("list").count(), 0);
}
