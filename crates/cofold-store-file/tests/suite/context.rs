//! The context a run reads: the newest summary and what no summary covers, found from the index
//! without reading the covered past.

use std::fs;

use cofold_agents::message::{Message, MessageSource, Part, Role};
use cofold_agents::store::{Store, uncovered_messages};

use super::support::{Disk, message, session};

fn summary(id: &str, covers: &[&str]) -> Message {
    Message {
        summarizes: Some(covers.iter().map(|c| (*c).to_owned()).collect()),
        ..Message::new(
            Role::User,
            MessageSource::Summary,
            vec![Part::text(format!("summary {id}"))],
        )
        .with_id(id)
    }
}

fn ids(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.id.as_str()).collect()
}

async fn append(disk: &Disk, messages: &[Message]) {
    disk.store
        .append_messages("s1", "r1", messages)
        .await
        .expect("append");
}

#[tokio::test]
async fn the_context_is_read_from_where_the_summaries_stop_covering() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let early: Vec<Message> = (1..=6).map(|n| message(&format!("m{n}"))).collect();
    append(&disk, &early).await;
    // Nothing summarized: the whole transcript, and no index.
    let context = disk
        .store
        .list_context_messages("s1")
        .await
        .expect("context");
    assert_eq!(ids(&context), ["m1", "m2", "m3", "m4", "m5", "m6"]);
    let folder = disk.session_dir("s1").await;
    assert!(!folder.join("context.json").exists());

    append(&disk, &[summary("S1", &["m1", "m2", "m3", "m4"])]).await;
    append(&disk, &[message("m7"), message("m8")]).await;
    let context = disk
        .store
        .list_context_messages("s1")
        .await
        .expect("context");
    assert_eq!(ids(&context), ["m5", "m6", "S1", "m7", "m8"]);
    let whole = disk.store.list_messages("s1", None).await.expect("all");
    assert_eq!(context, uncovered_messages(whole.clone()));
    assert!(folder.join("context.json").is_file());

    // Rename a covered message in place, same length: a reader of the whole transcript would now
    // see an uncovered `x1`; the indexed read never looks there.
    let path = folder.join("messages.jsonl");
    let text = fs::read_to_string(&path).expect("read");
    fs::write(&path, text.replacen("\"id\":\"m1\"", "\"id\":\"x1\"", 1)).expect("write");
    let context = disk
        .store
        .list_context_messages("s1")
        .await
        .expect("context");
    assert_eq!(ids(&context), ["m5", "m6", "S1", "m7", "m8"]);
    fs::write(&path, &text).expect("put it back");

    // A second summary moves the start on.
    append(
        &disk,
        &[summary(
            "S2",
            &["m1", "m2", "m3", "m4", "S1", "m5", "m6", "m7"],
        )],
    )
    .await;
    let context = disk
        .store
        .list_context_messages("s1")
        .await
        .expect("context");
    assert_eq!(ids(&context), ["m8", "S2"]);

    // Without its index the same answer is found by reading the whole transcript once, and the
    // index is written again.
    fs::remove_file(folder.join("context.json")).expect("remove the index");
    let reopened = disk.reopen();
    let context = reopened.list_context_messages("s1").await.expect("context");
    assert_eq!(ids(&context), ["m8", "S2"]);
    assert!(folder.join("context.json").is_file());

    // A rewind to before the summaries: the index no longer holds, the context is everything.
    disk.store
        .release_writer("s1", "r1")
        .await
        .expect("release");
    disk.store.truncate("s1", "m6").await.expect("rewind");
    let context = reopened.list_context_messages("s1").await.expect("context");
    assert_eq!(ids(&context), ["m1", "m2", "m3", "m4", "m5", "m6"]);
}

#[tokio::test]
async fn an_index_left_by_another_transcript_is_not_trusted() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    append(&disk, &[message("m1"), message("m2")]).await;
    append(&disk, &[summary("S1", &["m1"])]).await;
    let folder = disk.session_dir("s1").await;
    // The transcript replaced behind the store's back, the index kept.
    let path = folder.join("messages.jsonl");
    let lines = [
        serde_json::to_string(&message("a1")).expect("JSON"),
        serde_json::to_string(&message("a2")).expect("JSON"),
        serde_json::to_string(&message("a3")).expect("JSON"),
    ];
    fs::write(&path, format!("{}\n", lines.join("\n"))).expect("write");
    let context = disk
        .store
        .list_context_messages("s1")
        .await
        .expect("context");
    assert_eq!(ids(&context), ["a1", "a2", "a3"]);
}
