//! Project instructions: `AGENTS.md` (else `CLAUDE.md`) from the repository root down to the
//! session's folder, a global file last, a 32 KiB budget, and folders outside the served ones
//! read only once the person said so.

use std::path::Path;
use std::sync::Arc;

use ahp_types::actions::StateAction;
use serde_json::{Value, json};

use super::support::*;

/// A repository under the workspace: `AGENTS.md` at its root and in `sub`, `CLAUDE.md` in
/// `other`.
fn fixture(root: &Path) {
    std::fs::create_dir_all(root.join(".git")).expect("git");
    std::fs::create_dir_all(root.join("sub")).expect("sub");
    std::fs::create_dir_all(root.join("other")).expect("other");
    std::fs::write(root.join("AGENTS.md"), "ROOT-MARKER rules").expect("w");
    std::fs::write(root.join("sub/AGENTS.md"), "SUB-MARKER rules").expect("w");
    std::fs::write(root.join("other/CLAUDE.md"), "CLAUDE-MARKER rules").expect("w");
}

fn system(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn served_embedder(place: &Place, served: &Path) -> ahpd_agent_cofold::Embedder {
    let mut embedder = place.embedder();
    embedder.project = ahpd_agent_cofold::ProjectSetup {
        served: Some(vec![served.to_path_buf()]),
        global: Some(place.xdg.join("ahpd/AGENTS.md")),
        config_dir: Some(place.xdg.join("ahpd")),
    };
    embedder
}

async fn one_turn(
    place: &Place,
    embedder: ahpd_agent_cofold::Embedder,
    dir: &Path,
) -> (Watch, testkit::Endpoint, TestHost) {
    let ep = endpoint(vec![text("ok"), text("ok again")]);
    let options = json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" });
    let th = host(vec![Arc::new(agent(options, embedder))]).await;
    let _ = place;
    let mut w = Watch::create(&th, "cofold", &fresh_id("project"), Some(dir), json!({})).await;
    w.send("t1", "hello").await;
    (w, ep, th)
}

fn meta_files(w: &Watch) -> Vec<String> {
    w.mirror.sessions[&w.session]
        .meta
        .as_ref()
        .and_then(|m| m.get("ahpd.instructions"))
        .and_then(|v| v["files"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|f| f["path"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subfolder_session_reads_the_root_then_its_own_file_and_the_global_one_last() {
    let place = Place::new();
    let repo = place.work.join("repo");
    fixture(&repo);
    std::fs::create_dir_all(place.xdg.join("ahpd")).expect("config");
    std::fs::write(place.xdg.join("ahpd/AGENTS.md"), "GLOBAL-MARKER").expect("w");
    let (mut w, ep, th) = one_turn(
        &place,
        served_embedder(&place, &place.work),
        &repo.join("sub"),
    )
    .await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let first = system(&ep.chat_bodies()[0]);
    let root = first.find("ROOT-MARKER").expect("the root's file");
    let sub = first.find("SUB-MARKER").expect("the subfolder's file");
    let global = first.find("GLOBAL-MARKER").expect("the global file");
    assert!(root < sub && sub < global, "{first}");
    assert!(!first.contains("CLAUDE-MARKER"), "{first}");
    w.assert_mirror(&th).await;
    assert_eq!(
        meta_files(&w),
        [
            repo.join("AGENTS.md").display().to_string(),
            repo.join("sub/AGENTS.md").display().to_string(),
            place.xdg.join("ahpd/AGENTS.md").display().to_string(),
        ]
    );

    // An edit between turns reaches the next turn.
    std::fs::write(repo.join("sub/AGENTS.md"), "SUB-CHANGED rules").expect("w");
    w.send("t2", "again").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let second = system(&ep.chat_bodies()[1]);
    assert!(
        second.contains("SUB-CHANGED") && !second.contains("SUB-MARKER"),
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_without_agents_md_gives_its_claude_md() {
    let place = Place::new();
    let repo = place.work.join("repo");
    fixture(&repo);
    let (mut w, ep, _th) = one_turn(
        &place,
        served_embedder(&place, &place.work),
        &repo.join("other"),
    )
    .await;
    w.end("t1").await;
    let first = system(&ep.chat_bodies()[0]);
    let root = first.find("ROOT-MARKER").expect("the root's file");
    let claude = first
        .find("CLAUDE-MARKER")
        .expect("CLAUDE.md in place of AGENTS.md");
    assert!(root < claude && !first.contains("SUB-MARKER"), "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_is_said_when_the_files_are_over_it() {
    let place = Place::new();
    let repo = place.work.join("repo");
    fixture(&repo);
    std::fs::write(repo.join("AGENTS.md"), "ROOT-MARKER ".repeat(3000)).expect("w");
    let (mut w, ep, _th) = one_turn(
        &place,
        served_embedder(&place, &place.work),
        &repo.join("sub"),
    )
    .await;
    w.end("t1").await;
    let first = system(&ep.chat_bodies()[0]);
    assert!(first.contains("over the 32 KiB budget"), "{first}");
    assert!(first.contains("repo/AGENTS.md (cut short)"), "{first}");
    assert!(first.contains("sub/AGENTS.md (left out)"), "{first}");
    assert!(!first.contains("SUB-MARKER"), "{first}");
}

/// Waits for the instructions question and answers it with `choice` (`None` declines it).
async fn answer_trust(w: &mut Watch, choice: Option<&str>) -> String {
    let set = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    let StateAction::SessionInputNeededSet(set) = set.action else {
        unreachable!()
    };
    let asked = serde_json::to_value(&set).expect("json").to_string();
    let ahp_types::state::SessionInputRequest::ChatInput(request) = &set.request else {
        panic!("expected a question, got {:?}", set.request);
    };
    let id = request.request.id.clone();
    let answer = match choice {
        Some(c) => json!({
            "type": "chat/inputCompleted", "requestId": id, "response": "accept",
            "answers": { "trust": { "state": "submitted", "value": { "kind": "selected", "value": c } } }
        }),
        None => json!({ "type": "chat/inputCompleted", "requestId": id, "response": "decline" }),
    };
    w.client
        .dispatch(
            w.chat.clone(),
            serde_json::from_value(answer).expect("an action"),
        )
        .await
        .expect("dispatch");
    asked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_folder_gives_nothing_until_the_person_lets_it_in() {
    let place = Place::new();
    let outside = place.home.join("outside");
    fixture(&outside);
    let served = place.work.clone();

    // Declined: the turn runs without the files, and the next turn does not ask again.
    let (mut w, ep, th) = one_turn(
        &place,
        served_embedder(&place, &served),
        &outside.join("sub"),
    )
    .await;
    let asked = answer_trust(&mut w, None).await;
    assert!(
        asked.contains("is not in a folder this host serves"),
        "{asked}"
    );
    assert!(asked.contains("AGENTS.md"), "{asked}");
    w.end("t1").await;
    let first = system(&ep.chat_bodies()[0]);
    assert!(
        !first.contains("ROOT-MARKER") && !first.contains("SUB-MARKER"),
        "{first}"
    );
    w.send("t2", "again").await;
    w.end("t2").await;
    assert!(!system(&ep.chat_bodies()[1]).contains("ROOT-MARKER"));
    w.assert_mirror(&th).await;
    let withheld = w.mirror.sessions[&w.session].meta.as_ref().expect("meta")["ahpd.instructions"]
        ["withheld"]
        .clone();
    assert_eq!(withheld.as_array().map(Vec::len), Some(2), "{withheld}");

    // Allowed for good: read now, and a later session in that folder is not asked.
    let (mut w, ep, _th) = one_turn(
        &place,
        served_embedder(&place, &served),
        &outside.join("sub"),
    )
    .await;
    answer_trust(&mut w, Some("always")).await;
    w.end("t1").await;
    let first = system(&ep.chat_bodies()[0]);
    assert!(
        first.contains("ROOT-MARKER") && first.contains("SUB-MARKER"),
        "{first}"
    );
    let kept =
        std::fs::read_to_string(place.xdg.join("ahpd").join(ahpd_agent_cofold::TRUSTED_FILE))
            .expect("the trusted folders file");
    assert!(kept.contains(&outside.display().to_string()), "{kept}");

    let (mut w, ep, _th) = one_turn(
        &place,
        served_embedder(&place, &served),
        &outside.join("other"),
    )
    .await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let first = system(&ep.chat_bodies()[0]);
    assert!(first.contains("CLAUDE-MARKER"), "{first}");
}
