//! The real-engine acceptance cases 44–46 of docs/acceptance.md: a machine's stop and its
//! init's reaping, state volumes, disposable delays and adoption, and the session folder.
//! Gated and cleaned up as `machines_docker` says; no figure of time is asserted.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::Docker;
use serde_json::{Value, json};

use super::machines_docker::{engine, import, until};
use super::machines_docker_bed::{Bed, chat_of, ended_with, exec, shell_endpoint, turn};
use super::support::rt;

/// `pid state comm` of every process in a container.
async fn processes(docker: &Docker, id: &str) -> Vec<(String, String)> {
    let (out, _) = exec(docker, id, &["sh", "-c", "cat /proc/[0-9]*/stat"]).await;
    out.lines()
        .filter_map(|l| {
            let (left, right) = l.rsplit_once(") ")?;
            let comm = left.split_once(" (")?.1.to_owned();
            let state = right.split_whitespace().next()?.to_owned();
            Some((comm, state))
        })
        .collect()
}

/// 44: a stopped machine stops on SIGTERM (its init exits 0, no kill after the grace time),
/// and a backgrounded `sleep 1` leaves no zombie.
#[test]
fn case_44_stop_is_prompt_and_orphans_are_reaped() {
    rt().block_on(async {
        let Some(bed) = Bed::start(shell_endpoint("true"), None, json!({})).await else {
            return;
        };
        bed.make("box", json!({})).await.expect("make box");
        let (_, code) = exec(
            &bed.docker,
            "box",
            &["sh", "-c", "sleep 1 >/dev/null 2>&1 &"],
        )
        .await;
        assert_eq!(code, 0);
        until(
            "the background sleep to end",
            Duration::from_secs(20),
            async || {
                !processes(&bed.docker, "box")
                    .await
                    .iter()
                    .any(|(comm, state)| comm == "sleep" && state != "Z")
            },
        )
        .await;
        let procs = processes(&bed.docker, "box").await;
        assert!(
            procs.iter().all(|(_, s)| s != "Z"),
            "a zombie is left: {procs:?}"
        );

        let t = Instant::now();
        let wrote: Result<Value, _> = bed
            .client
            .request(
                "resourceWrite",
                json!({ "channel": "ahp-root://", "uri": "computer://box/state",
                        "data": "stopped", "encoding": "utf-8" }),
            )
            .await;
        assert!(wrote.is_ok(), "{wrote:?}");
        println!("case 44: stopped in {:?}", t.elapsed());
        let state = bed
            .docker
            .inspect_container("box", None)
            .await
            .unwrap()
            .state
            .unwrap();
        assert_eq!(state.running, Some(false));
        // 0, not 137: machine-init ended on SIGTERM, the engine never had to kill it.
        assert_eq!(state.exit_code, Some(0));
        let read: Value = bed
            .client
            .request(
                "resourceRead",
                json!({ "channel": "ahp-root://", "uri": "computer://box/state" }),
            )
            .await
            .unwrap();
        assert!(
            read["data"]
                .as_str()
                .unwrap_or_default()
                .contains("stopped"),
            "{read}"
        );
    });
}

/// 45: the `agent` image and a disposable profile: seeded files owned by 1000, the state found
/// again by a second machine, the first removed after its delay, and a restarted daemon
/// holding a live one for its kept session.
#[test]
fn case_45_agent_user_state_volume_disposable_delay_and_adoption() {
    rt().block_on(async {
        let Some(docker) = engine().await else { return };
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let busybox = testkit::images::busybox(&cache).expect("a static busybox");
        let fs = testkit::images::glibc_rootfs(&busybox, Path::new(super::support::BIN))
            .expect("root filesystem");
        let image = import(&docker, "ahpd-test/glibc-agent", fs, Some("agent")).await;
        let options = json!({ "profiles": { "box": {
            "image": image, "disposable": true, "disposableDelay": 1000
        }}});
        let Some(mut bed) = Bed::start(shell_endpoint("true"), Some(&image), options).await else {
            return;
        };
        // A copapo file, so there is a seed whose owner to check.
        let copapo = bed.env.root.path().join("xdg").join("copapo");
        std::fs::create_dir_all(&copapo).unwrap();
        std::fs::write(copapo.join("config.json"), "{}\n").unwrap();
        let (first, computer) = bed.session("disposable:box", None).await;
        let a = computer.strip_prefix("computer://").unwrap().to_owned();
        let (owner, _) = exec(
            &bed.docker,
            &a,
            &["stat", "-c", "%u:%g", "/ahpd/cofold/config.json"],
        )
        .await;
        assert_eq!(owner.trim(), "1000:1000");
        let (who, _) = exec(&bed.docker, &a, &["id", "-u"]).await;
        assert_eq!(who.trim(), "1000");
        let (_, code) = exec(
            &bed.docker,
            &a,
            &["sh", "-c", "echo kept > /ahpd/cofold/mark"],
        )
        .await;
        assert_eq!(code, 0, "the machine user writes its state");

        bed.dispose(&first).await;
        let disposed = Instant::now();
        assert!(bed.exists(&a).await, "removed before its delay");
        until(
            "the first machine's removal",
            Duration::from_secs(30),
            async || !bed.exists(&a).await,
        )
        .await;
        println!(
            "case 45: removed {:?} after dispose (delay 1 s)",
            disposed.elapsed()
        );

        let (_second, computer) = bed.session("disposable:box", None).await;
        let b = computer.strip_prefix("computer://").unwrap().to_owned();
        assert_ne!(a, b);
        let (mark, _) = exec(&bed.docker, &b, &["cat", "/ahpd/cofold/mark"]).await;
        assert_eq!(mark.trim(), "kept", "the state volume is found again");

        // A restart with that session kept: its machine is held, not armed for removal.
        bed.restart().await;
        let log = bed.env.root.path().join("machines-2.log");
        until("the adoption line", Duration::from_secs(30), async || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains(&format!("computer://{b} is held for"))
        })
        .await;
        assert!(bed.exists(&b).await);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!text.contains(&format!("computer://{b} goes")), "{text}");
    });
}

/// 46: with `sessionFolder`, a file written inside lands on the host, and `.git` stays
/// read-only inside.
#[test]
fn case_46_session_folder_writes_through_and_git_is_read_only() {
    rt().block_on(async {
        let endpoint = shell_endpoint(
            "echo inside > from-inside.txt; pwd; (echo planted > .git/planted && echo WROTE) || echo REFUSED",
        );
        let Some(bed) = Bed::start(endpoint, None, json!({})).await else {
            return;
        };
        let repo = bed.env.root.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(repo.join(".git").join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let (uri, _) = bed.session("disposable:cofold", Some(&repo)).await;
        let (chat, mut sub) = chat_of(&bed, &uri).await;
        let actions = turn(&bed.client, &mut sub, &chat, "t1", "write", async |_| {}).await;
        let text = serde_json::to_string(&actions).unwrap();
        assert!(ended_with(&actions, "chat/turnComplete"), "{text}\n{}", bed.log());
        assert_eq!(
            std::fs::read_to_string(repo.join("from-inside.txt")).unwrap_or_default(),
            "inside\n",
            "{text}"
        );
        // The command's output, not its text (which names both words).
        let output = actions
            .iter()
            .find(|a| a["type"] == "chat/toolCallComplete")
            .map(|a| a["result"]["content"].to_string())
            .unwrap_or_default();
        assert!(output.contains(&repo.display().to_string()), "the command ran in the folder: {text}");
        assert!(output.contains("REFUSED"), "{output}");
        assert!(!output.contains("WROTE"), "{output}");
        assert!(!repo.join(".git").join("planted").exists());
    });
}

/// A need whose vault value is gone refuses the next session with the sentence naming the
/// need and the vault name, and leaves the machine as it was.
#[test]
fn missing_vault_value_refuses_the_session_in_a_machine() {
    rt().block_on(async {
        let Some(bed) = Bed::start(shell_endpoint("true"), None, json!({})).await else {
            return;
        };
        bed.make("box", json!({})).await.expect("make box");
        let out = bed.env.run(&["vault", "delete", "host:modelkey"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
        let created: Result<Value, _> = bed
            .client
            .request(
                "createSession",
                json!({ "channel": uri, "provider": "cofold",
                        "config": { "computer": "computer://box" } }),
            )
            .await;
        let message = match created {
            Err(ahp::ClientError::Rpc(e)) => e.message,
            other => panic!("the session was created: {other:?}\n{}", bed.log()),
        };
        assert_eq!(
            message,
            "machine need cofoldApiKey names host:modelkey, which the vault does not hold"
        );
        assert!(bed.exists("box").await);
    });
}
