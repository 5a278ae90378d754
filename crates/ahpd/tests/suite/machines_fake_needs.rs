//! Machines on `testkit::FakeEngine`: needs, vault values, state volumes and the workspace
//! (cases 13 to 21 of `crates/ahpd-computer/ACCEPTANCE.md`). Cofold sessions run in disposable
//! machines, so the inner host is the real `ahpd --stdio` with cofold.

use std::path::Path;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::FakeImage;

use super::machines_fake_support::*;
use super::support::{rt, text};

/// A rig with cofold, a copapo file and these computer options.
fn cofold_rig(extra: Value) -> Rig {
    let rig = Rig::new();
    rig.write_copapo("{}\n");
    rig.configure_plugins(rig.options(extra), true);
    rig
}

fn disposable(extra: Value) -> Value {
    let mut p = json!({ "disposable": true, "disposableDelay": 600000 });
    merge(&mut p, extra);
    p
}

/// A cofold session in `computer`; panics with the log when refused.
async fn cofold_session(
    client: &ahp::client::Client,
    daemon: &super::support::Daemon,
    computer: &str,
) -> String {
    let (uri, r) = create_session(client, "cofold", json!({ "computer": computer }), None).await;
    assert!(r.is_ok(), "{:?}\nlog:\n{}", rpc(&r), daemon.log_text());
    uri
}

fn hash8(pieces: &[&str]) -> String {
    let h = Sha256::digest(pieces.join("\0").as_bytes());
    h.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The env of the newest exec-create body.
fn last_exec_env(rig: &Rig) -> Vec<String> {
    env_of(rig.exec_bodies().last().expect("an exec"))
}

#[test]
fn case_13_cofold_state_volume_and_copapo_variable() {
    rt().block_on(async {
        let rig = cofold_rig(json!({ "profiles": { "cofold": disposable(json!({})) } }));
        let (daemon, client) = rig.start("c13.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        let create = rig.creates().pop().unwrap();
        let binds = binds_of(&create);
        assert!(
            binds
                .iter()
                .any(|b| b.starts_with("ahpd-state-") && b.ends_with(":/ahpd/cofold")),
            "{binds:?}"
        );
        assert!(
            !binds.iter().any(|b| b.contains("/ahpd/cofold/config.json")),
            "{binds:?}"
        );
        assert!(
            last_exec_env(&rig)
                .contains(&"COFOLD_MACHINE_CONFIG=/ahpd/cofold/config.json".to_owned())
        );
        drop(daemon);

        let rig = cofold_rig(json!({ "profiles": { "cofold": disposable(json!({})) } }));
        rig.record("cofold", "cofold", json!({ "computerConfigDir": false }));
        let (daemon, client) = rig.start("c13b.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        let binds = binds_of(&rig.creates().pop().unwrap());
        assert!(
            !binds.iter().any(|b| b.contains("/ahpd/cofold")),
            "{binds:?}"
        );
        assert!(rig.engine.volumes().is_empty());
        assert!(
            !last_exec_env(&rig)
                .iter()
                .any(|v| v.starts_with("COFOLD_MACHINE_CONFIG="))
        );
    });
}

#[test]
fn case_14_profile_needs_win_over_the_plugins() {
    rt().block_on(async {
        let rig = cofold_rig(json!({
            "needs": { "cofoldModel": "q" },
            "profiles": {
                "cofold": disposable(json!({ "needs": { "cofoldModel": "p" } })),
                "plain": disposable(json!({}))
            }
        }));
        let (daemon, client) = rig.start("c14.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert!(last_exec_env(&rig).contains(&"COFOLD_MODEL=p".to_owned()));
        cofold_session(&client, &daemon, "disposable:plain").await;
        assert!(last_exec_env(&rig).contains(&"COFOLD_MODEL=q".to_owned()));
    });
}

const KEY: &str = "sk-9-c0ffee5eed";

#[test]
fn case_15_vault_values_reach_only_the_exec() {
    rt().block_on(async {
        let rig = cofold_rig(json!({
            "needs": { "cofoldApiKey": { "$secret": "host:deepseek" } },
            "profiles": { "cofold": disposable(json!({})) }
        }));
        rig.vault_set("host:deepseek", KEY);
        let (daemon, client) = rig.start_with("c15.log", "trace", &[]).await;
        let mut events = client.events();
        let uri = cofold_session(&client, &daemon, "disposable:cofold").await;
        let state = session_state(&client, &uri).await;
        assert!(last_exec_env(&rig).contains(&format!("COFOLD_API_KEY={KEY}")));
        for r in rig.engine.requests() {
            if r.path.ends_with("/exec") {
                continue;
            }
            let body = r.body.map(|b| b.to_string()).unwrap_or_default();
            assert!(
                !body.contains(KEY),
                "{} {} carries the key",
                r.method,
                r.path
            );
        }
        for c in rig.engine.containers() {
            assert!(!format!("{:?}", c.labels).contains(KEY));
        }
        assert!(!state.to_string().contains(KEY));
        while let Ok(Some(ev)) =
            tokio::time::timeout(std::time::Duration::from_millis(1), events.recv()).await
        {
            assert!(!format!("{ev:?}").contains(KEY), "a frame shows the key");
        }
        let log = daemon.log_text();
        let shown: Vec<String> = log
            .lines()
            .filter(|l| l.contains(KEY))
            .map(|l| l.replace(KEY, "<KEY>").chars().take(400).collect())
            .collect();
        assert!(shown.is_empty(), "the log shows the key: {shown:#?}");
        let out = rig.env.run(&["config"]);
        assert!(!text(&out.stdout).contains(KEY));
        let out = rig.env.run(&["plugin", "config", "@ahpd/computer"]);
        assert!(!text(&out.stdout).contains(KEY));
    });
}

#[test]
fn case_16_missing_dropped_and_rotated_secrets() {
    rt().block_on(async {
        let needs = json!({ "cofoldApiKey": { "$secret": "host:deepseek" } });
        let rig =
            cofold_rig(json!({ "needs": needs, "profiles": { "cofold": disposable(json!({})) } }));
        rig.vault_set("host:deepseek", "sk-first");
        let (daemon, client) = rig.start("c16.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert!(last_exec_env(&rig).contains(&"COFOLD_API_KEY=sk-first".to_owned()));
        rig.vault_set("host:deepseek", "sk-second");
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert!(last_exec_env(&rig).contains(&"COFOLD_API_KEY=sk-second".to_owned()));
        assert!(
            rig.env
                .run(&["vault", "delete", "host:deepseek"])
                .status
                .success()
        );
        let (_, r) = create_session(
            &client,
            "cofold",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        let msg = rpc(&r).1;
        assert!(
            msg.contains(
                "machine need cofoldApiKey names host:deepseek, which the vault does not hold"
            ),
            "{msg}"
        );
        drop(daemon);

        let rig = cofold_rig(json!({
            "needs": needs, "secretUnreadable": "drop",
            "profiles": { "cofold": disposable(json!({})) }
        }));
        let (daemon, client) = rig.start("c16b.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert!(
            !last_exec_env(&rig)
                .iter()
                .any(|v| v.starts_with("COFOLD_API_KEY="))
        );
        let log = daemon.log_text();
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains("which the vault does not hold")),
            "{log}"
        );
    });
}

#[test]
fn case_17_state_volume_names() {
    rt().block_on(async {
        for (scope, name) in [
            (
                "owner",
                format!(
                    "ahpd-state-box-host-cofold-{}",
                    hash8(&["box", "host", "cofold"])
                ),
            ),
            (
                "shared",
                format!("ahpd-state-box-cofold-{}", hash8(&["box", "", "cofold"])),
            ),
        ] {
            let rig = cofold_rig(
                json!({ "profiles": { "box": disposable(json!({ "stateScope": scope })) } }),
            );
            let (daemon, client) = rig.start("c17.log").await;
            cofold_session(&client, &daemon, "disposable:box").await;
            let binds = binds_of(&rig.creates().pop().unwrap());
            assert!(
                binds.contains(&format!("{name}:/ahpd/cofold")),
                "{scope}: {binds:?}"
            );
            assert!(rig.engine.volumes().contains_key(&name));
        }
    });
}

/// The `config.json` entries seeded so far.
fn seeded(rig: &Rig) -> Vec<testkit::Upload> {
    rig.engine
        .uploads()
        .into_iter()
        .filter(|u| u.path.ends_with("/config.json"))
        .collect()
}

#[test]
fn case_18_seeds_are_written_once_and_again_after_a_change() {
    rt().block_on(async {
        let rig = cofold_rig(json!({ "profiles": { "cofold": disposable(json!({})) } }));
        let (daemon, client) = rig.start("c18.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert_eq!(seeded(&rig).len(), 1);
        let (_, folder) = rig.engine.volumes().into_iter().next().unwrap();
        assert_eq!(
            std::fs::read_to_string(folder.join("config.json")).unwrap(),
            "{}\n"
        );
        std::fs::write(folder.join("kept.txt"), "mine").unwrap();
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert_eq!(seeded(&rig).len(), 1, "nothing seeded the second time");
        assert_eq!(
            std::fs::read_to_string(folder.join("kept.txt")).unwrap(),
            "mine"
        );
        let before = rig.engine.uploads().len();
        rig.write_copapo("{ \"changed\": true }\n");
        cofold_session(&client, &daemon, "disposable:cofold").await;
        let new: Vec<String> = rig.engine.uploads()[before..]
            .iter()
            .map(|u| u.path.clone())
            .collect();
        assert_eq!(seeded(&rig).len(), 2, "{new:?}");
        assert!(
            new.iter().all(|p| p.ends_with("/config.json")
                    || p.ends_with("/.ahpd-seed.json")
                    // The volume's own top folder, so its owner is the machine's user.
                    || p == "/ahpd-seed/state"),
            "{new:?}"
        );
        assert_eq!(
            std::fs::read_to_string(folder.join("config.json")).unwrap(),
            "{ \"changed\": true }\n"
        );
        assert_eq!(
            std::fs::read_to_string(folder.join("kept.txt")).unwrap(),
            "mine"
        );
    });
}

const AGENT_IMAGE: &str = "ahpd-test/glibc-agent:1";

#[test]
fn case_19_absent_seeds_and_the_image_users_ids() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.engine.image(
            FakeImage::new(AGENT_IMAGE)
                .user("agent")
                .env("HOME=/home/agent")
                .file(
                    "/etc/passwd",
                    "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000::/home/agent:/bin/sh\n",
                )
                .file("/etc/group", "root:x:0:\nagent:x:1000:\n"),
        );
        rig.configure_plugins(
            rig.options(
                json!({ "profiles": { "cofold": disposable(json!({ "image": AGENT_IMAGE })) } }),
            ),
            true,
        );
        let (daemon, client) = rig.start("c19.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        assert!(seeded(&rig).is_empty());
        let (_, folder) = rig.engine.volumes().into_iter().next().unwrap();
        let marks: Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join(".ahpd-seed.json")).unwrap())
                .unwrap();
        assert_eq!(marks["config.json"]["absent"], true, "{marks}");
        assert!(
            daemon.log_text().contains("is absent"),
            "{}",
            daemon.log_text()
        );
        rig.write_copapo("{}\n");
        cofold_session(&client, &daemon, "disposable:cofold").await;
        let s = seeded(&rig);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].uid, s[0].gid), (1000, 1000));
        let helper_execs = rig.engine.requests_to("POST", |p| {
            p.starts_with("/containers/ahpd-state-seed-") && p.ends_with("/exec")
        });
        assert!(helper_execs.is_empty(), "no command runs in the image");
    });
}

#[test]
fn case_20_host_state_binds_the_copapo_file() {
    rt().block_on(async {
        let rig =
            cofold_rig(json!({ "profiles": { "cofold": disposable(json!({ "state": "host" })) } }));
        let (daemon, client) = rig.start("c20.log").await;
        cofold_session(&client, &daemon, "disposable:cofold").await;
        let create = rig.creates().pop().unwrap();
        let binds = binds_of(&create);
        assert!(
            binds.contains(&format!(
                "{}:/ahpd/cofold/config.json:ro",
                rig.copapo().display()
            )),
            "{binds:?}"
        );
        assert!(
            !binds.iter().any(|b| b.starts_with("ahpd-state-")),
            "{binds:?}"
        );
        assert_eq!(create["Labels"]["ahpd.state"], "host");
        assert!(
            rig.engine
                .requests_to("POST", |p| p == "/volumes/create")
                .is_empty()
        );
        drop(daemon);

        let other = tempfile::tempdir().unwrap();
        let rig = cofold_rig(json!({ "profiles": { "cofold": disposable(json!({
            "state": "host",
            "mounts": [format!("{}:/ahpd/cofold/config.json", other.path().display())]
        })) } }));
        let (_daemon, client) = rig.start("c20b.log").await;
        let (_, r) = create_session(
            &client,
            "cofold",
            json!({ "computer": "disposable:cofold" }),
            None,
        )
        .await;
        let msg = rpc(&r).1;
        assert!(msg.contains(&other.path().display().to_string()), "{msg}");
        assert!(msg.contains(&rig.copapo().display().to_string()), "{msg}");
        assert!(msg.contains("/ahpd/cofold/config.json"), "{msg}");
        assert!(rig.engine.containers().is_empty());
    });
}

/// The working folder of the newest exec (a trailing slash of the session's URI dropped).
fn exec_dir(rig: &Rig) -> Value {
    let dir = rig.exec_bodies().last().expect("an exec")["WorkingDir"].clone();
    match dir.as_str() {
        Some(d) if d.len() > 1 => json!(d.trim_end_matches('/')),
        _ => dir,
    }
}

#[test]
fn case_21_session_folders_git_and_mapped_working_folders() {
    rt().block_on(async {
        let rig = Rig::new();
        let work = rig.env.root.path().join("srv-app");
        std::fs::create_dir_all(work.join(".git")).unwrap();
        let app = rig.env.root.path().join("app");
        std::fs::create_dir_all(app.join("x")).unwrap();
        let elsewhere = rig.env.root.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        rig.configure(json!({ "profiles": {
            "ws": disposable(json!({ "sessionFolder": true })),
            "mapped": disposable(json!({ "mounts": [format!("{}:/workspaces/app", app.display())], "workdir": "/w" }))
        }}));
        let (daemon, client) = rig.start("c21.log").await;
        let (_, r) = create_session(&client, "echo", json!({ "computer": "disposable:ws" }), Some(&work)).await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        let binds = binds_of(&rig.creates().pop().unwrap());
        let w = work.display().to_string();
        assert!(binds.contains(&format!("{w}:{w}")), "{binds:?}");
        assert!(binds.contains(&format!("{w}/.git:{w}/.git:ro")), "{binds:?}");
        assert_eq!(exec_dir(&rig), json!(w));

        let x = app.join("x");
        let (uri, r) = create_session(&client, "echo", json!({ "computer": "disposable:mapped" }), Some(&x)).await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
        assert_eq!(exec_dir(&rig), json!("/workspaces/app/x"));
        let state = session_state(&client, &uri).await;
        let dirs = state["summary"]["workingDirectories"].to_string()
            + &state["workingDirectories"].to_string();
        assert!(dirs.contains(&x.display().to_string()), "{state}");
        assert!(!dirs.contains("/workspaces/app"), "{state}");

        let (_, r) = create_session(&client, "echo", json!({ "computer": "disposable:mapped" }), Some(Path::new(&elsewhere))).await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
        assert_eq!(exec_dir(&rig), json!("/w"));
        assert!(daemon.log_text().contains("is not mounted in computer://"), "{}", daemon.log_text());
    });
}
