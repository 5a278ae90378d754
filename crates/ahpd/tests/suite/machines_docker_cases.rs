//! The real-engine acceptance cases 40–43 of docs/acceptance.md (44–46 are in
//! `machines_docker_life`), one test each, gated and cleaned up as `machines_docker` says.
//! Waits poll the engine with a deadline (it has no event for a container's state); no figure
//! of time is asserted.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};

use super::machines_docker::{KEY, engine, import};
use super::machines_docker_bed::{Bed, chat_of, ended_with, shell_endpoint, turn};
use super::support::rt;

/// 40: a cofold session in a machine runs `hostname` there; deleting the machine leaves no
/// container or volume of the daemon.
#[test]
fn case_40_cofold_session_on_glibc_image_then_delete_leaves_nothing() {
    rt().block_on(async {
        let Some(bed) = Bed::start(shell_endpoint("hostname"), None, json!({})).await else {
            return;
        };
        let made = bed.make("box", json!({})).await;
        assert!(made.is_ok(), "{made:?}\n{}", bed.log());
        let hostname = bed
            .docker
            .inspect_container("box", None)
            .await
            .unwrap()
            .config
            .and_then(|c| c.hostname)
            .unwrap();
        let (uri, computer) = bed.session("computer://box", None).await;
        assert_eq!(computer, "computer://box");
        let (chat, mut sub) = chat_of(&bed, &uri).await;
        let actions = turn(
            &bed.client,
            &mut sub,
            &chat,
            "t1",
            "which host?",
            async |_| {},
        )
        .await;
        let text = serde_json::to_string(&actions).unwrap();
        assert!(
            ended_with(&actions, "chat/turnComplete"),
            "{text}\n{}",
            bed.log()
        );
        assert!(
            text.contains(&hostname),
            "the output shows the host name {hostname}: {text}"
        );

        let deleted: Result<Value, _> = bed
            .client
            .request(
                "resourceDelete",
                json!({ "channel": "ahp-root://", "uri": "computer://box" }),
            )
            .await;
        assert!(deleted.is_ok(), "{deleted:?}");
        let (containers, volumes) = bed.leftovers().await;
        assert!(containers.is_empty(), "containers left: {containers:?}");
        assert!(volumes.is_empty(), "volumes left: {volumes:?}");
    });
}

/// Host processes whose argv holds `needle`.
fn argv_holding(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let argv = std::fs::read(e.path().join("cmdline")).ok()?;
            let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
            argv.contains(needle).then_some(argv)
        })
        .collect()
}

/// 41: while a session runs in a machine, the key is in no process's argv and no
/// `Config.Env`, and the model endpoint received it.
#[test]
fn case_41_key_absent_from_argv_and_inspect_while_running() {
    rt().block_on(async {
        let endpoint = shell_endpoint("sleep 1; echo slept");
        let Some(bed) = Bed::start(endpoint, None, json!({})).await else {
            return;
        };
        bed.make("box", json!({})).await.expect("make box");
        let (uri, _) = bed.session("computer://box", None).await;
        let (chat, mut sub) = chat_of(&bed, &uri).await;
        let mut checked = false;
        let docker = bed.docker.clone();
        let actions = turn(&bed.client, &mut sub, &chat, "t1", "sleep", async |a| {
            // The command is running inside now: the inner host holds the key in its
            // environment, which neither its argv nor the container's configuration shows.
            if a["type"] == "chat/toolCallStart" && !checked {
                checked = true;
                assert!(
                    argv_holding(KEY).is_empty(),
                    "argv shows the key: {:?}",
                    argv_holding(KEY)
                );
                let c = docker.inspect_container("box", None).await.unwrap();
                let config = serde_json::to_string(&c.config).unwrap();
                assert!(
                    !config.contains(KEY),
                    "docker inspect shows the key: {config}"
                );
            }
        })
        .await;
        assert!(checked, "no tool call was seen: {actions:#?}");
        assert!(
            ended_with(&actions, "chat/turnComplete"),
            "{actions:#?}\n{}",
            bed.log()
        );
        let bearer = format!("Bearer {KEY}");
        assert!(
            bed.endpoint
                .chat_requests()
                .iter()
                .any(|r| r.header("authorization") == Some(bearer.as_str())),
            "the endpoint never received the key"
        );
        assert!(!bed.log().contains(KEY));
    });
}

/// 42: an image without glibc cannot start a machine: the glibc sentence names it, and no
/// container is left.
#[test]
fn case_42_noglibc_image_refused_with_the_glibc_sentence() {
    rt().block_on(async {
        let Some(docker) = engine().await else { return };
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let busybox = testkit::images::busybox(&cache).expect("a static busybox");
        let fs = testkit::images::noglibc_rootfs(&busybox).expect("root filesystem");
        let image = import(&docker, "ahpd-test/noglibc", fs, None).await;
        let Some(bed) = Bed::start(shell_endpoint("true"), Some(&image), json!({})).await else {
            return;
        };
        let made = bed.make("nog", json!({ "image": image })).await;
        let message = match made {
            Err(ahp::ClientError::Rpc(e)) => e.message,
            other => panic!("a machine of {image} was made: {other:?}"),
        };
        assert!(
            message.starts_with(&format!("the image {image} cannot run ahpd: ")),
            "{message}"
        );
        assert!(message.contains("use an image built on glibc"), "{message}");
        assert!(!bed.exists("nog").await);
        let (containers, _) = bed.leftovers().await;
        assert!(containers.is_empty(), "containers left: {containers:?}");
    });
}

/// 43: the engine kills the machine during a turn: the turn fails naming the signal, the
/// daemon serves on, and the next turn starts the machine again and resumes.
#[test]
fn case_43_machine_killed_during_a_turn_then_resumed() {
    rt().block_on(async {
        let Some(bed) = Bed::start(shell_endpoint("sleep 60"), None, json!({})).await else {
            return;
        };
        bed.make("box", json!({})).await.expect("make box");
        let (uri, _) = bed.session("computer://box", None).await;
        let (chat, mut sub) = chat_of(&bed, &uri).await;
        let docker = bed.docker.clone();
        let mut killed_at = None;
        let actions = turn(
            &bed.client,
            &mut sub,
            &chat,
            "t1",
            "remember the word tangerine",
            async |a| {
                if a["type"] == "chat/toolCallStart" && killed_at.is_none() {
                    docker
                        .kill_container(
                            "box",
                            None::<bollard::query_parameters::KillContainerOptions>,
                        )
                        .await
                        .expect("kill");
                    killed_at = Some(Instant::now());
                }
            },
        )
        .await;
        let failed_after = killed_at.map(|t| t.elapsed());
        let text = serde_json::to_string(&actions).unwrap();
        assert!(ended_with(&actions, "chat/error"), "{text}\n{}", bed.log());
        let message = actions.last().unwrap()["part"]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("SIGKILL"), "{message}");
        assert!(message.contains("137"), "{message}");
        println!("case 43: the turn failed {failed_after:?} after the kill: {message}");

        // Serving: a resource read answers; then the next turn restarts the machine.
        let status: Result<Value, _> = bed
            .client
            .request(
                "resourceRead",
                json!({ "channel": "ahp-root://", "uri": "computer://box/state" }),
            )
            .await;
        assert!(status.is_ok(), "{status:?}");
        let actions = turn(
            &bed.client,
            &mut sub,
            &chat,
            "t2",
            "which word?",
            async |_| {},
        )
        .await;
        let text = serde_json::to_string(&actions).unwrap();
        assert!(
            ended_with(&actions, "chat/turnComplete"),
            "{text}\n{}",
            bed.log()
        );
        let state = bed
            .docker
            .inspect_container("box", None)
            .await
            .unwrap()
            .state
            .unwrap();
        assert_eq!(state.running, Some(true));
        // Resumed by id: the model's last request carries the first turn's message.
        let last = bed.endpoint.chat_bodies().pop().unwrap();
        assert!(
            last.to_string().contains("tangerine"),
            "not resumed: {last}"
        );
    });
}
