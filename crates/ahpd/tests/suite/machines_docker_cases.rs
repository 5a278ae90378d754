//! The real-engine acceptance cases 40–46 of docs/acceptance.md, one test each, gated and
//! cleaned up as `machines_docker` says. Waits poll the engine with a deadline (it has no
//! event for a container's state); no figure of time is asserted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahp::SessionSubscription;
use ahp::client::Client;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::{ListContainersOptions, ListVolumesOptions};
use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply, chunk};

use super::machines_docker::{Guard, KEY, configure, engine, glibc_image, import, until};
use super::support::{Daemon, Env, client, rt};

/// One test's daemon, engine and model endpoint. Fields drop in order: the daemon stops, the
/// guard sweeps (reading the host id from the folder), then the folder goes.
struct Bed {
    client: Client,
    daemon: Daemon,
    _guard: Guard,
    env: Env,
    endpoint: Endpoint,
    docker: Docker,
}

/// A scripted endpoint that answers `shell_exec` of `command` once, then `done` forever.
fn shell_endpoint(command: &str) -> Endpoint {
    Endpoint::builder()
        .reply(Reply::stream([
            chunk::tool_call(
                0,
                Some("c1"),
                Some("shell_exec"),
                &json!({ "command": command }).to_string(),
            ),
            chunk::finish("tool_calls"),
        ]))
        .fallback(Reply::stream([chunk::text("done"), chunk::finish("stop")]))
        .models(["m1"])
        .start()
        .expect("endpoint")
}

impl Bed {
    /// A daemon with cofold and the computer plugin over `image`, `options` laid over the
    /// suite's; `None` when no engine answers (the skip line is printed).
    async fn start(endpoint: Endpoint, image: Option<&str>, options: Value) -> Option<Bed> {
        let docker = engine().await?;
        let image = match image {
            Some(i) => i.to_owned(),
            None => glibc_image(&docker).await,
        };
        let env = Env::new();
        configure(&env, &endpoint, &image, options);
        let guard = Guard {
            docker: docker.clone(),
            host_id_file: env.dir().join("host-id"),
        };
        let daemon = env.daemon(&["--port", "0"], "machines.log");
        let (client, _) = client(&daemon.address).await;
        Some(Bed {
            client,
            daemon,
            _guard: guard,
            env,
            endpoint,
            docker,
        })
    }

    /// Stops the daemon and starts it again on the same folders; the client is new.
    async fn restart(&mut self) {
        // A graceful stop (SIGTERM), as a person's restart would be.
        let pid = rustix::process::Pid::from_raw(self.daemon.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = self.daemon.child.wait().unwrap();
        assert!(
            status.success(),
            "the daemon stopped with {status}\n{}",
            self.log()
        );
        self.daemon = self.env.daemon(&["--port", "0"], "machines-2.log");
        let (client, _) = client(&self.daemon.address).await;
        self.client = client;
    }

    fn host_id(&self) -> String {
        std::fs::read_to_string(self.env.dir().join("host-id"))
            .expect("the daemon's host id")
            .trim()
            .to_owned()
    }

    /// `resourceWrite computer://<id>` with `body`.
    async fn make(&self, id: &str, body: Value) -> Result<Value, ahp::ClientError> {
        self.client
            .request(
                "resourceWrite",
                json!({ "channel": "ahp-root://", "uri": format!("computer://{id}"),
                        "data": body.to_string(), "encoding": "utf-8", "createOnly": true }),
            )
            .await
    }

    /// A cofold session in `computer`, bypassing approvals; its URI and `computer` value.
    async fn session(&self, computer: &str, folder: Option<&Path>) -> (String, String) {
        let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
        let dirs: Vec<String> = folder.map(ahpd_sdk::util::file_uri).into_iter().collect();
        let created: Result<Value, _> = self
            .client
            .request(
                "createSession",
                json!({
                    "channel": uri, "provider": "cofold", "workingDirectories": dirs,
                    "config": { "computer": computer, "permissionMode": "bypassPermissions" },
                }),
            )
            .await;
        assert!(
            created.is_ok(),
            "createSession: {created:?}\nlog:\n{}",
            self.log()
        );
        let (state, _) = self.client.subscribe(uri.clone()).await.expect("subscribe");
        let state = serde_json::to_value(&state).unwrap();
        let computer = state["snapshot"]["state"]["config"]["values"]["computer"]
            .as_str()
            .expect("the session names its machine")
            .to_owned();
        (uri, computer)
    }

    async fn dispose(&self, uri: &str) {
        let _: Value = self
            .client
            .request("disposeSession", json!({ "channel": uri }))
            .await
            .expect("dispose");
    }

    fn log(&self) -> String {
        self.daemon.log_text()
    }

    /// Names of this daemon's containers and volumes still on the engine.
    async fn leftovers(&self) -> (Vec<String>, Vec<String>) {
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![format!("ahpd.host={}", self.host_id())],
        );
        let containers = self
            .docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_iter()
            .flat_map(|c| c.names.unwrap_or_default())
            .collect();
        let volumes = self
            .docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(filters),
            }))
            .await
            .unwrap()
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name)
            .collect();
        (containers, volumes)
    }

    async fn exists(&self, id: &str) -> bool {
        self.docker.inspect_container(id, None).await.is_ok()
    }
}

/// Runs `cmd` in container `id` as its user; standard output and error, and the exit code.
async fn exec(docker: &Docker, id: &str, cmd: &[&str]) -> (String, i64) {
    let e = docker
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                ..Default::default()
            },
        )
        .await
        .expect("exec create");
    let mut out = String::new();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&e.id, None).await.expect("exec start")
    {
        while let Some(Ok(chunk)) = output.next().await {
            out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    let code = docker
        .inspect_exec(&e.id)
        .await
        .ok()
        .and_then(|x| x.exit_code)
        .unwrap_or(-1);
    (out, code)
}

/// Starts turn `turn` on `chat` and collects its actions until it ends, calling `seen` on each.
async fn turn<F: AsyncFnMut(&Value)>(
    client: &Client,
    sub: &mut SessionSubscription,
    chat: &str,
    turn: &str,
    text: &str,
    mut seen: F,
) -> Vec<Value> {
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": fastrand::u32(..), "action": {
                "type": "chat/turnStarted", "turnId": turn,
                "startedAt": ahpd_sdk::util::now_iso(),
                "message": { "text": text, "origin": { "kind": "user" } },
            }}),
        )
        .await
        .expect("start turn");
    let mut all = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = sub.recv().await {
            if let ahp::SubscriptionEvent::Action(env) = ev {
                let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                if v["turnId"] != turn {
                    continue;
                }
                seen(&v).await;
                let end = matches!(
                    v["type"].as_str(),
                    Some("chat/turnComplete" | "chat/error" | "chat/turnCancelled")
                );
                all.push(v);
                if end {
                    break;
                }
            }
        }
    })
    .await;
    assert!(done.is_ok(), "turn {turn} did not end; saw {all:#?}");
    all
}

async fn chat_of(bed: &Bed, uri: &str) -> (String, SessionSubscription) {
    let chat = ahpd_sdk::util::default_chat_uri(uri);
    let (_, sub) = bed
        .client
        .subscribe(chat.clone())
        .await
        .expect("subscribe chat");
    (chat, sub)
}

fn ended_with(actions: &[Value], kind: &str) -> bool {
    actions.last().and_then(|a| a["type"].as_str()) == Some(kind)
}

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
