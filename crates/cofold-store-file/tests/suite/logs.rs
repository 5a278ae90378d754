//! The JSONL logs: torn lines, ordered appends, step folding (runtime cases 213-215, docs/acceptance.md).

use std::fs::{self, OpenOptions};
use std::io::Write;

use cofold_agents::error::ErrorCode;
use cofold_agents::id::Timestamp;
use cofold_agents::store::{
    ModelStep, RunRef, RunStatus, StepPatch, StepRecord, StepStatus, Store, ToolOriginal, ToolStep,
};
use cofold_store_file::DETAIL_CAP_BYTES;
use serde_json::json;

use super::support::{Disk, event, message, run, seqs, session};

fn append_raw(path: &std::path::Path, bytes: &[u8]) {
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .expect("open");
    file.write_all(bytes).expect("write");
}

#[tokio::test]
async fn a_torn_last_line_is_skipped_and_the_log_goes_on() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    disk.store
        .append_messages("s1", "r1", &[message("m1")])
        .await
        .expect("append");
    for seq in 1..=3 {
        disk.store
            .append_event(&event(&r1, seq))
            .await
            .expect("append");
    }
    let folder = disk.session_dir("s1").await;
    let events = folder.join("runs/r1/events.jsonl");
    let messages = folder.join("messages.jsonl");
    // What a crash in the middle of a write leaves.
    append_raw(
        &events,
        br#"{"seq":4,"runId":"r1","sessionId":"s1","agentId":"agent-a","at":"2026-"#,
    );
    append_raw(&messages, br#"{"id":"m2","role":"user","par"#);
    let fresh = disk.reopen();
    assert_eq!(
        seqs(&fresh.list_events(&r1, None).await.expect("events")),
        [1, 2, 3]
    );
    let ids: Vec<String> = fresh
        .list_messages("s1", None)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m1"]);
    assert_eq!(
        fresh
            .append_event(&event(&r1, 5))
            .await
            .expect_err("seq 5")
            .code,
        ErrorCode::SeqGap
    );
    fresh
        .append_event(&event(&r1, 4))
        .await
        .expect("seq 4 follows the last intact line");
    assert!(
        fresh
            .claim_writer("s1", "r1")
            .await
            .expect("claim from the fresh instance")
    );
    fresh
        .append_messages("s1", "r1", &[message("m3")])
        .await
        .expect("append");
    let text = fs::read_to_string(&events).expect("read");
    assert!(
        !text.contains("\"at\":\"2026-\n") && text.lines().count() == 4,
        "the torn line was cut off and the next line starts fresh: {text}"
    );
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("every line is whole");
    }
    assert_eq!(
        seqs(&fresh.list_events(&r1, None).await.expect("events")),
        [1, 2, 3, 4]
    );
    let ids: Vec<String> = fresh
        .list_messages("s1", None)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m1", "m3"]);
    let last: Vec<String> = fresh
        .list_messages("s1", Some(1))
        .await
        .expect("window")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(last, ["m3"]);
}

#[tokio::test]
async fn appends_started_together_land_in_call_order_and_a_failure_does_not_block() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let store = &disk.store;
    let batch: Vec<_> = (1..=10).map(|seq| event(&r1, seq)).collect();
    let results = futures::future::join_all(batch.iter().map(|one| store.append_event(one))).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(store.list_events(&r1, None).await.expect("events"), batch);
    let err = store
        .append_event(&event(&r1, 12))
        .await
        .expect_err("a gap");
    assert_eq!(err.code, ErrorCode::SeqGap);
    assert_eq!(err.message, "run r1 expected event 11 next, not 12");
    store
        .append_event(&event(&r1, 11))
        .await
        .expect("the next append runs");
}

/// A streamed reply's events keep the run's log open between appends; a session deleted
/// meanwhile stops receiving them through the open file once the held log looks again.
#[tokio::test]
async fn a_log_held_open_between_appends_follows_its_session_being_deleted() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    for seq in 1..=3 {
        disk.store
            .append_event(&event(&r1, seq))
            .await
            .expect("append");
    }
    disk.store.delete_session("s1").await.expect("delete");
    // A held log looks for its file's name at most every 20 ms; that time is what is tested,
    // so let it pass.
    tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    let err = disk
        .store
        .append_event(&event(&r1, 4))
        .await
        .expect_err("the session is gone");
    assert_eq!(err.code, ErrorCode::NotFound, "{err:?}");
}

/// The lines written through a held-open log reach the file at once (nothing waits in a
/// buffer), so another instance reads them all while the first still holds it.
#[tokio::test]
async fn a_log_held_open_leaves_whole_lines_for_the_next_instance() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    for seq in 1..=50 {
        disk.store
            .append_event(&event(&r1, seq))
            .await
            .expect("append");
    }
    let fresh = disk.reopen();
    let seen = seqs(&fresh.list_events(&r1, None).await.expect("events"));
    assert_eq!(seen, (1..=50).collect::<Vec<u64>>());
}

fn model_step(invocation_id: &str, index: u32) -> StepRecord {
    StepRecord::Model(ModelStep {
        session_id: "s1".into(),
        run_id: "r1".into(),
        index,
        invocation_id: invocation_id.into(),
        status: StepStatus::Started,
        request: Some(json!({ "messages": [] })),
        reply: None,
        detail: None,
        started_at: Timestamp::now(),
        ended_at: None,
    })
}

#[tokio::test]
async fn steps_are_logged_per_change_and_folded_on_read() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let store = &disk.store;
    store
        .append_step(&model_step("i1", 0))
        .await
        .expect("append");
    let patch = StepPatch {
        reply: Some(json!({ "finish": "stop" })),
        ..StepPatch::default()
    };
    store
        .update_step(&r1, "i1", &patch)
        .await
        .expect("update 1");
    let patch = StepPatch {
        status: Some(StepStatus::Completed),
        ..StepPatch::default()
    };
    store
        .update_step(&r1, "i1", &patch)
        .await
        .expect("update 2");
    let path = disk.session_dir("s1").await.join("runs/r1/steps.jsonl");
    let text = fs::read_to_string(&path).expect("read");
    assert_eq!(
        text.lines().count(),
        3,
        "the record and one line per change"
    );
    assert_eq!(
        text.matches("\"request\"").count(),
        1,
        "the model request is stored once: {text}"
    );
    let updated = store
        .update_step(
            &r1,
            "i1",
            &StepPatch {
                detail: Some(json!({ "n": 1 })),
                ..StepPatch::default()
            },
        )
        .await
        .expect("update 3");
    let StepRecord::Model(updated) = updated else {
        panic!("a model step")
    };
    assert_eq!(
        (
            updated.status,
            updated.request.clone(),
            updated.detail.clone()
        ),
        (
            StepStatus::Completed,
            Some(json!({ "messages": [] })),
            Some(json!({ "n": 1 }))
        ),
        "the update answers the whole step, read back from the log"
    );
    let steps = store.list_steps(&r1).await.expect("steps");
    assert_eq!(steps.len(), 1);
    let StepRecord::Model(step) = &steps[0] else {
        panic!("a model step: {:?}", steps[0])
    };
    assert_eq!(
        (step.status, step.reply.clone()),
        (StepStatus::Completed, Some(json!({ "finish": "stop" })))
    );
    let big = "x".repeat(300_001);
    let tool = StepRecord::Tool(ToolStep {
        session_id: "s1".into(),
        run_id: "r1".into(),
        index: 1,
        invocation_id: "i2".into(),
        call_id: "c1".into(),
        name: "read".into(),
        input: json!({}),
        status: StepStatus::Completed,
        original: Some(ToolOriginal {
            content: "ok".into(),
            is_error: false,
            detail: Some(json!({ "text": big })),
        }),
        transformed: None,
        detail: None,
        started_at: Timestamp::now(),
        ended_at: Some(Timestamp::now()),
    });
    store
        .append_step(&tool)
        .await
        .expect("append a step with a huge detail");
    let steps = store.list_steps(&r1).await.expect("steps");
    assert_eq!(steps.len(), 2);
    let StepRecord::Tool(read) = &steps[1] else {
        panic!("a tool step: {:?}", steps[1])
    };
    let detail = read
        .original
        .as_ref()
        .and_then(|original| original.detail.clone())
        .expect("detail");
    assert_eq!(detail["truncated"], true);
    let bytes = detail["bytes"].as_u64().expect("bytes");
    assert!(
        bytes > 300_000 && bytes > DETAIL_CAP_BYTES as u64,
        "{bytes}"
    );
    assert!(
        fs::metadata(&path).expect("stat").len() < 10_000,
        "the huge detail is not on disk"
    );
}

#[tokio::test]
async fn a_power_loss_tail_of_nul_bytes_is_ignored_and_the_logs_go_on_clean() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    disk.store
        .append_messages("s1", "r1", &[message("m1")])
        .await
        .expect("append");
    disk.store
        .append_event(&event(&r1, 1))
        .await
        .expect("append");
    let folder = disk.session_dir("s1").await;
    let events = folder.join("runs/r1/events.jsonl");
    let messages = folder.join("messages.jsonl");
    // A power loss can leave the end of a file as blocks of zeros where data never landed.
    append_raw(&events, &[0u8; 8192]);
    append_raw(&messages, b"{\"id\":\"m2\",\"ro");
    append_raw(&messages, &[0u8; 4096]);
    let fresh = disk.reopen();
    assert_eq!(
        seqs(&fresh.list_events(&r1, None).await.expect("events")),
        [1]
    );
    assert!(fresh.claim_writer("s1", "r1").await.expect("claim back"));
    fresh
        .append_event(&event(&r1, 2))
        .await
        .expect("the next seq follows the last intact line");
    fresh
        .append_messages("s1", "r1", &[message("m3")])
        .await
        .expect("append");
    for path in [&events, &messages] {
        let bytes = fs::read(path).expect("read");
        assert!(!bytes.contains(&0), "the damaged end was cut off");
        for line in String::from_utf8(bytes).expect("utf-8").lines() {
            serde_json::from_str::<serde_json::Value>(line).expect("every line is whole");
        }
    }
    assert_eq!(
        seqs(&fresh.list_events(&r1, None).await.expect("events")),
        [1, 2]
    );
    let ids: Vec<String> = fresh
        .list_messages("s1", None)
        .await
        .expect("messages")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m1", "m3"]);
}
