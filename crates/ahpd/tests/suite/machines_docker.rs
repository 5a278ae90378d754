//! Sessions in a machine on a real container engine (docker-marked cases of docs/acceptance.md).
//!
//! Gated: with `AHPD_DOCKER_TESTS=1` a missing engine fails; unset, each test pings the default
//! socket for at most 2 s and, with no answer, prints `skipped: no container engine answers`
//! and passes. Images are built here from a static busybox and this host's glibc and imported
//! through the API; nothing is pulled. Every container and volume of a test daemon is removed
//! when the test ends, even after a panic.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ahp::client::Client;
use bollard::Docker;
use bollard::query_parameters::{
    CreateImageOptions, ListContainersOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};
use futures::StreamExt;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply, chunk};

use super::support::{BIN, Env, client, rt};

/// The key the scripted endpoint expects; it must show nowhere but the inner start.
pub const KEY: &str = "sk-nested-5f1c9e";

/// The engine, when one answers within 2 s; `None` (after the skip line) when none does.
pub async fn engine() -> Option<Docker> {
    let uri = std::env::var("DOCKER_HOST")
        .ok()
        .filter(|h| h.starts_with("unix://"))
        .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
    let answered = async {
        let d = Docker::connect_with_unix(
            uri.trim_start_matches("unix://"),
            10,
            bollard::API_DEFAULT_VERSION,
        )
        .ok()?;
        let d = d.negotiate_version().await.ok()?;
        d.ping().await.ok()?;
        Some(d)
    };
    match tokio::time::timeout(Duration::from_secs(2), answered).await {
        Ok(Some(d)) => Some(d),
        _ if std::env::var("AHPD_DOCKER_TESTS").as_deref() == Ok("1") => {
            panic!("AHPD_DOCKER_TESTS=1 but no container engine answers at {uri}")
        }
        _ => {
            println!("skipped: no container engine answers");
            None
        }
    }
}

/// Imports a root filesystem as `<repo>:<tag>` unless the engine has it.
pub async fn import(
    docker: &Docker,
    repo: &str,
    fs: testkit::images::RootFs,
    user: Option<&str>,
) -> String {
    let image = format!("{repo}:{}", fs.tag);
    if docker.inspect_image(&image).await.is_ok() {
        return image;
    }
    let mut changes = vec!["ENV PATH=/usr/local/bin:/usr/bin:/bin".to_owned()];
    if let Some(u) = user {
        changes.push(format!("USER {u}"));
    }
    let mut s = docker.create_image(
        Some(CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.into()),
            tag: Some(fs.tag.clone()),
            changes,
            ..Default::default()
        }),
        Some(bollard::body_full(fs.tar.into())),
        None,
    );
    while let Some(step) = s.next().await {
        step.expect("image import");
    }
    image
}

/// The glibc test image (`ahpd-test/glibc:<hash>`), built for the ahpd under test.
pub async fn glibc_image(docker: &Docker) -> String {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let busybox = testkit::images::busybox(&cache).expect("a static busybox");
    let fs = testkit::images::glibc_rootfs(&busybox, Path::new(BIN)).expect("root filesystem");
    import(docker, "ahpd-test/glibc", fs, None).await
}

/// The bridge's gateway on this host: a container on the default network reaches a server
/// listening there. An engine that does not report it gives the subnet's first address, the
/// one it gives its bridge.
pub async fn gateway(docker: &Docker) -> IpAddr {
    let bridge = docker
        .inspect_network("bridge", None)
        .await
        .expect("the default bridge network");
    let configs = bridge.ipam.and_then(|i| i.config).unwrap_or_default();
    let given = configs
        .iter()
        .find_map(|c| c.gateway.as_ref()?.parse().ok());
    given
        .or_else(|| {
            configs.iter().find_map(|c| {
                let (net, _) = c.subnet.as_ref()?.split_once('/')?;
                let net: std::net::Ipv4Addr = net.parse().ok()?;
                Some(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(net) + 1)))
            })
        })
        .expect("the bridge's gateway")
}

/// Removes every container and volume a test daemon made, even after a panic.
pub struct Guard {
    pub docker: Docker,
    pub host_id_file: PathBuf,
}

impl Guard {
    pub async fn sweep(docker: &Docker, host_id: &str) {
        let mut filters = HashMap::new();
        filters.insert("label".to_owned(), vec![format!("ahpd.host={host_id}")]);
        let list = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters.clone()),
                ..Default::default()
            }))
            .await
            .unwrap_or_default();
        for c in list {
            if let Some(id) = c.id {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptions {
                            force: true,
                            v: true,
                            ..Default::default()
                        }),
                    )
                    .await;
            }
        }
        let vols = docker
            .list_volumes(Some(ListVolumesOptions {
                filters: Some(filters),
            }))
            .await
            .ok()
            .and_then(|v| v.volumes)
            .unwrap_or_default();
        for v in vols {
            let _ = docker
                .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
                .await;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Ok(id) = std::fs::read_to_string(&self.host_id_file) else {
            return;
        };
        let docker = self.docker.clone();
        let id = id.trim().to_owned();
        let _ = std::thread::spawn(move || rt().block_on(Guard::sweep(&docker, &id))).join();
    }
}

/// Waits until `check` holds, polling with a deadline (the engine has no event for these).
pub async fn until<F: AsyncFnMut() -> bool>(what: &str, limit: Duration, mut check: F) {
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A daemon configured with cofold and the computer plugin over `image`.
pub fn configure(env: &Env, endpoint: &Endpoint, image: &str, computer: Value) {
    let mut options = json!({
        "image": image,
        "pull": "never",
        "network": "host",
        "needs": {
            "cofoldBaseUrl": endpoint.base_url(),
            "cofoldApiKey": { "$secret": "host:modelkey" },
            "cofoldModel": "m1"
        },
        "profiles": {
            "cofold": { "disposable": true, "disposableDelay": 1000, "sessionFolder": true }
        }
    });
    if let (Some(o), Some(extra)) = (options.as_object_mut(), computer.as_object()) {
        for (k, v) in extra {
            o.insert(k.clone(), v.clone());
        }
    }
    env.write_base(
        &json!({
            "plugins": [
                { "name": "@ahpd/agent-cofold", "options": { "memory": true } },
                { "name": "@ahpd/computer", "options": options }
            ]
        })
        .to_string(),
    );
    let out = env.run_with_input(&["vault", "set", "host:modelkey"], KEY);
    assert!(
        out.status.success(),
        "vault set: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every action published on `chat`, as JSON, until the turn ends.
async fn turn_actions(client: &Client, chat: &str, turn: &str) -> Vec<Value> {
    let (_, mut sub) = client
        .subscribe(chat.to_owned())
        .await
        .expect("subscribe chat");
    let _: Value = client
        .request("ping", json!({ "channel": ahp_types::ROOT_RESOURCE_URI }))
        .await
        .unwrap_or(Value::Null);
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": 1, "action": {
                "type": "chat/turnStarted", "turnId": turn,
                "startedAt": ahpd_sdk::util::now_iso(),
                "message": { "text": "look around and write notes.txt", "origin": { "kind": "user" } },
            }}),
        )
        .await
        .expect("start turn");
    let mut seen = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(ev) = sub.recv().await {
            if let ahp::SubscriptionEvent::Action(env) = ev {
                let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                let end = matches!(
                    v["type"].as_str(),
                    Some("chat/turnComplete" | "chat/error" | "chat/turnCancelled")
                );
                seen.push(v);
                if end {
                    break;
                }
            }
        }
    })
    .await;
    assert!(done.is_ok(), "the turn did not end; saw {seen:#?}");
    seen
}

/// The acceptance case: a disposable machine runs cofold's tools, edits land on the host, the
/// key shows nowhere but in the request to the model, and the machine goes after its delay.
#[test]
fn disposable_session_runs_its_tools_in_a_container() {
    rt().block_on(async {
        let Some(docker) = engine().await else { return };
        let image = glibc_image(&docker).await;
        let endpoint = Endpoint::builder()
            .reply(Reply::stream([
                chunk::tool_call(0, Some("c1"), Some("shell_exec"), &json!({ "command": "cat /etc/hostname; cat /etc/ahpd-test-image; readlink /proc/1/exe; ls /" }).to_string()),
                chunk::finish("tool_calls"),
            ]))
            .reply(Reply::stream([
                chunk::tool_call(0, Some("c2"), Some("write_file"), &json!({ "path": "notes.txt", "content": "written inside\n" }).to_string()),
                chunk::finish("tool_calls"),
            ]))
            .reply(Reply::stream([chunk::text("done"), chunk::finish("stop")]))
            .models(["m1"])
            // On the default bridge network, where the host's loopback is not the machine's.
            .bind(gateway(&docker).await)
            .start()
            .expect("endpoint");
        let env = Env::new();
        configure(&env, &endpoint, &image, json!({ "network": "bridge" }));
        let _guard = Guard { docker: docker.clone(), host_id_file: env.dir().join("host-id") };
        let work = env.root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let daemon = env.daemon(&["--port", "0"], "machines.log");
        let (client, _) = client(&daemon.address).await;
        let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
        let created: Result<Value, _> = client
            .request(
                "createSession",
                json!({
                    "channel": uri, "provider": "cofold",
                    "workingDirectories": [ahpd_sdk::util::file_uri(&work)],
                    "config": { "computer": "disposable:cofold", "permissionMode": "bypassPermissions" },
                }),
            )
            .await;
        assert!(created.is_ok(), "createSession: {created:?}\nlog:\n{}", daemon.log_text());
        let (state, _) = client.subscribe(uri.clone()).await.expect("subscribe session");
        let state = serde_json::to_value(&state).unwrap();
        let computer = state["snapshot"]["state"]["config"]["values"]["computer"]
            .as_str()
            .expect("the session names its machine")
            .to_owned();
        let machine = computer.strip_prefix("computer://").expect("a computer:// URI").to_owned();
        assert!(machine.starts_with("ahpd-computer-"), "{machine}");
        let inspected = docker.inspect_container(&machine, None).await.expect("the machine exists");
        let hostname = inspected.config.as_ref().and_then(|c| c.hostname.clone()).unwrap();

        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let actions = turn_actions(&client, &chat, "t1").await;
        let text = serde_json::to_string(&actions).unwrap();
        assert!(text.contains("chat/turnComplete"), "{text}\nlog:\n{}", daemon.log_text());
        // Facts this host cannot show: the machine's own host name (not this host's, as the
        // network is not the host's), the image's marker, and process 1 being the machine's init
        // from the mounted build (a pid namespace of its own).
        let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_ne!(hostname, here.trim());
        assert!(text.contains(&hostname), "the command's output shows the container's host name {hostname}: {text}");
        assert!(!Path::new(testkit::images::MARKER).exists());
        assert!(text.contains(testkit::images::MARKER_TEXT.trim()), "the image's marker: {text}");
        assert!(text.contains("/opt/ahpd/bin/ahpd-"), "process 1 is the machine's init: {text}");
        assert!(text.contains("opt"), "ls / inside lists /opt (the build's folder): {text}");
        assert_eq!(std::fs::read_to_string(work.join("notes.txt")).unwrap(), "written inside\n");

        // The key reached the model, and nothing else shows it.
        let seen = endpoint.chat_requests();
        assert!(seen.iter().any(|r| r.header("authorization") == Some(&format!("Bearer {KEY}"))));
        let env_list = inspected.config.and_then(|c| c.env).unwrap_or_default();
        assert!(env_list.iter().all(|e| !e.contains(KEY)), "docker inspect shows the key: {env_list:?}");
        let labels = serde_json::to_string(&docker.inspect_container(&machine, None).await.unwrap().config).unwrap();
        assert!(!labels.contains(KEY));
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let argv = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            assert!(!String::from_utf8_lossy(&argv).contains(KEY), "a process's argv shows the key");
        }
        assert!(!daemon.log_text().contains(KEY));

        // Disposed: the machine goes after its delay.
        let _: Value = client
            .request("disposeSession", json!({ "channel": uri }))
            .await
            .expect("dispose");
        until("the disposable machine's removal", Duration::from_secs(30), async || {
            docker.inspect_container(&machine, None).await.is_err()
        })
        .await;
        // The conversation inside was disposed before the machine was let go.
        assert!(
            !daemon.log_text().contains("was not disposed"),
            "{}",
            daemon.log_text()
        );
    });
}
