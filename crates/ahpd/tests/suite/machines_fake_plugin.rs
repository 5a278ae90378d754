//! Machines on `testkit::FakeEngine`, the plugin, its options and `computer://` resources
//! (cases 1 to 12 of the machines acceptance list, `crates/ahpd-computer/ACCEPTANCE.md`).

use serde_json::{Value, json};
use testkit::{FailOn, FakeImage};

use super::machines_fake_support::*;
use super::support::{rt, text};

fn plugin_row(rig: &Rig, name: &str) -> Value {
    let out = rig.env.run(&["plugin", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no row {name} in {rows}"))
}

#[test]
fn case_01_enabled_with_no_options_is_ready_and_quiet() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.env
            .write_base(r#"{"plugins": ["@ahpd/agent-echo", "@ahpd/computer"]}"#);
        assert_eq!(plugin_row(&rig, "@ahpd/computer")["state"], "ready");
        let out = rig.env.run(&["plugin", "config", "@ahpd/computer"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
        for (k, v) in [
            ("runtime", json!("docker")),
            ("image", json!("debian:bookworm-slim")),
            ("pull", json!("missing")),
            ("secretUnreadable", json!("fail")),
            ("max", json!(3)),
            ("prefix", json!("ahpd-computer")),
            ("disposableDelay", json!(300000)),
            ("bodyMounts", json!(false)),
            ("sessionDefault", json!("")),
            ("startTimeoutMs", json!(30000)),
        ] {
            assert_eq!(shown[k], v, "{k} in {shown}");
        }
        let uri = rig.engine.uri();
        let (daemon, client) = rig
            .start_with("c1.log", "info", &[("DOCKER_HOST", uri.as_str())])
            .await;
        let _: Value = client
            .request("ping", json!({ "channel": ahp_types::ROOT_RESOURCE_URI }))
            .await
            .unwrap_or(Value::Null);
        // Nothing but the start-up adoption (which lists this daemon's machines, so orphans
        // and old builds can go) reaches the engine before a client asks.
        let early: Vec<String> = rig
            .engine
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .filter(|r| {
                !matches!(
                    r.as_str(),
                    "GET /version" | "GET /_ping" | "GET /containers/json"
                )
            })
            .collect();
        assert!(
            early.is_empty(),
            "the engine was asked before any client asked: {early:?}"
        );
        let before = rig.engine.requests().len();
        list(&client, "computer://").await.unwrap();
        assert!(rig.engine.requests().len() > before);
        drop(daemon);
    });
}

#[test]
fn case_02_bad_options_make_the_plugin_error_naming_the_path() {
    let cases = [
        (
            json!({ "profiles": { "p": { "state": "disk" } } }),
            "plugins.@ahpd/computer.options.profiles.p.state",
        ),
        (
            json!({ "command": "docker" }),
            "plugins.@ahpd/computer.options",
        ),
        (
            json!({ "engine": "tcp://h:2375" }),
            "plugins.@ahpd/computer.options.engine",
        ),
        (
            json!({ "needs": { "k": { "$secret": "team:core/k" } } }),
            "plugins.@ahpd/computer.options.needs.k",
        ),
    ];
    for (options, path) in cases {
        let rig = Rig::new();
        rig.configure_plugins(options.clone(), false);
        let row = plugin_row(&rig, "@ahpd/computer");
        assert_eq!(row["state"], "error", "{options}: {row}");
        let reason = row["reason"].as_str().unwrap_or("");
        assert!(reason.starts_with(path), "{options}: {reason}");
        assert!(!reason.contains('\n'), "one line: {reason}");
        if options.get("command").is_some() {
            assert!(reason.contains("command"), "{reason}");
        }
        assert_eq!(plugin_row(&rig, "@ahpd/agent-echo")["state"], "ready");
    }
    // The daemon serves the other plugins.
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure_plugins(json!({ "engine": "tcp://h:2375" }), false);
        let (_daemon, client) = rig.start("c2.log").await;
        let (_, r) = create_session(&client, "echo", json!({}), None).await;
        assert!(r.is_ok(), "{:?}", rpc(&r));
    });
}

#[test]
fn case_03_secret_needs_stay_references_and_the_plugin_ready() {
    let rig = Rig::new();
    rig.configure(json!({ "needs": { "cofoldApiKey": { "$secret": "host:deepseek" } } }));
    assert_eq!(plugin_row(&rig, "@ahpd/computer")["state"], "ready");
    let out = rig.env.run(&["config"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("host:deepseek"), "{shown}");
    let out = rig
        .env
        .run(&["plugin", "config", "@ahpd/computer", "needs"]);
    let needs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        needs,
        json!({ "cofoldApiKey": { "$secret": "host:deepseek" } })
    );
}

#[test]
fn case_04_no_engine_warns_and_docker_host_is_used() {
    rt().block_on(async {
        let rig = Rig::new();
        let missing = rig.env.root.path().join("no.sock");
        rig.configure(json!({ "engine": format!("unix://{}", missing.display()) }));
        let (daemon, client) = rig.start("c4.log").await;
        let r = make(&client, "box", json!({})).await;
        let (_, msg) = rpc(&r);
        assert!(
            msg.starts_with(&format!(
                "no container engine answers at unix://{}",
                missing.display()
            )),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "start Docker or Podman's socket, or set the engine option of @ahpd/computer"
            ),
            "{msg}"
        );
        let log = daemon.log_text();
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains(&missing.display().to_string())),
            "{log}"
        );
        drop(daemon);

        // No engine option: DOCKER_HOST names the fake.
        let rig = Rig::new();
        let mut options = rig.options(json!({}));
        options.as_object_mut().unwrap().remove("engine");
        rig.configure_plugins(options, false);
        let uri = rig.engine.uri();
        let (_daemon, client) = rig
            .start_with("c4b.log", "info", &[("DOCKER_HOST", uri.as_str())])
            .await;
        make(&client, "box", json!({})).await.unwrap();
        assert!(rig.engine.container("box").is_some());
    });
}

#[test]
fn case_05_write_creates_a_labelled_machine() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": { "cofold": {} } }));
        let (_daemon, client) = rig.start("c5.log").await;
        make(
            &client,
            "box",
            json!({ "image": IMAGE, "profile": "cofold" }),
        )
        .await
        .unwrap();
        let reqs = rig.engine.requests();
        let create = reqs
            .iter()
            .position(|r| r.path == "/containers/create" && r.param("name") == Some("box"))
            .expect("a create named box");
        let start = reqs
            .iter()
            .position(|r| r.method == "POST" && r.path == "/containers/box/start")
            .expect("a start");
        assert!(create < start);
        let body = reqs[create].body.clone().unwrap();
        let labels = &body["Labels"];
        assert_eq!(labels["ahpd.computer"], "1");
        assert_eq!(labels["ahpd.host"], rig.host_id());
        assert_eq!(labels["ahpd.profile"], "cofold");
        assert_eq!(labels["ahpd.state"], "volume");
        assert!(labels.get("ahpd.agents").is_some(), "{labels}");
        let build = labels["ahpd.init"].as_str().unwrap().to_owned();
        assert!(build.starts_with("ahpd-"), "{build}");
        assert_eq!(
            body["Entrypoint"],
            json!([format!("/opt/ahpd/bin/{build}")])
        );
        assert_eq!(body["Cmd"], json!(["machine-init"]));
        let bin = rig.env.dir().join("computer").join("bin");
        assert!(
            binds_of(&body).contains(&format!("{}:/opt/ahpd/bin:ro", bin.display())),
            "{body}"
        );
        assert!(bin.join(&build).is_file());
        assert!(env_of(&body).is_empty(), "no need in Env: {body}");
        assert_eq!(rig.engine.container("box").unwrap().status, "running");
    });
}

#[test]
fn case_06_bad_writes_are_refused_naming_the_field() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "images": ["node:*"] }));
        let (_daemon, client) = rig.start("c6.log").await;
        make(&client, "box", json!({})).await.unwrap();
        for create_only in [true, false] {
            let r = write(&client, "computer://box", "{}", create_only).await;
            assert_eq!(rpc(&r).0, -32010, "{:?}", rpc(&r));
        }
        for id in ["Box", "a.b", "-x"] {
            let r = make(&client, id, json!({})).await;
            let (code, msg) = rpc(&r);
            assert_eq!(code, -32602, "{id}: {msg}");
            assert!(msg.starts_with("uri:"), "{id}: {msg}");
        }
        for (body, field) in [
            (json!({ "image": "-v" }), "image"),
            (json!({ "image": "other:1" }), "image"),
            (json!({ "mounts": ["/tmp:/tmp"] }), "mounts"),
        ] {
            let r = make(&client, "two", body.clone()).await;
            let (code, msg) = rpc(&r);
            assert_eq!(code, -32602, "{body}: {msg}");
            assert!(msg.starts_with(&format!("{field}:")), "{body}: {msg}");
        }
        let creates = rig
            .engine
            .requests_to("POST", |p| p == "/containers/create");
        assert_eq!(creates.len(), 1, "{creates:?}");
    });
}

#[test]
fn case_07_max_holds_under_concurrent_writes() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "max": 2 }));
        let (_daemon, client) = rig.start("c7.log").await;
        let (a, b, c) = tokio::join!(
            make(&client, "m1", json!({})),
            make(&client, "m2", json!({})),
            make(&client, "m3", json!({}))
        );
        let all = [a, b, c];
        let ok = all.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 2, "{:?}", all.iter().map(rpc).collect::<Vec<_>>());
        let refused: Vec<(i64, String)> = all.iter().filter(|r| r.is_err()).map(rpc).collect();
        assert_eq!(
            refused,
            vec![(
                -32011,
                "this host already has 2 machines, its limit: `ahpd machines list` shows them, `ahpd machines rm <id>` removes one and `ahpd machines prune` the stopped and disposable ones left; or raise max".to_owned()
            )]
        );
        assert_eq!(rig.engine.containers().len(), 2);
    });
}

#[test]
fn case_08_only_this_daemons_containers_are_seen() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let (_daemon, client) = rig.start("c8.log").await;
        rig.engine.insert_container("box", IMAGE, &[]);
        rig.engine.insert_container(
            "other",
            IMAGE,
            &[("ahpd.computer", "1"), ("ahpd.host", "0123456789abcdef")],
        );
        for id in ["box", "other"] {
            let r = read(&client, &format!("computer://{id}/status")).await;
            assert_eq!(rpc(&r).0, -32008, "{id}: {:?}", rpc(&r));
        }
        let entries = list(&client, "computer://").await.unwrap();
        assert_eq!(entries["entries"], json!([]), "{entries}");
    });
}

#[test]
fn case_09_status_capabilities_stats_and_state() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let (_daemon, client) = rig.start("c9.log").await;
        make(&client, "box", json!({})).await.unwrap();
        let status = read(&client, "computer://box/status").await.unwrap();
        assert_eq!(status["id"], "box");
        assert_eq!(status["runtime"], "docker");
        assert_eq!(status["image"], IMAGE);
        assert_eq!(status["status"], "running");
        for k in ["agents", "workdir", "mounts", "createdAt", "sessions"] {
            assert!(status.get(k).is_some(), "{k} in {status}");
        }
        let caps = read(&client, "computer://box/capabilities").await.unwrap();
        assert_eq!(
            caps,
            json!({ "runtime": "docker",
                    "actions": ["create", "destroy", "exec", "start", "stop", "restart"],
                    "resources": ["status", "capabilities", "stats", "state"] })
        );
        let stats = read(&client, "computer://box/stats").await.unwrap();
        assert_eq!(stats["running"], true);
        for k in ["cpuPercent", "memoryBytes", "memoryLimitBytes"] {
            assert!(stats[k].is_number(), "{k} in {stats}");
        }
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "running"
        );
        write(&client, "computer://box/state", "stopped", false)
            .await
            .unwrap();
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "stopped"
        );
        assert_eq!(
            read(&client, "computer://box/stats").await.unwrap(),
            json!({ "running": false })
        );
        write(&client, "computer://box/state", "restarted", false)
            .await
            .unwrap();
        assert_eq!(
            read(&client, "computer://box/state").await.unwrap(),
            "running"
        );
    });
}

#[test]
fn case_10_unknown_schemes_and_the_provider_in_initialize() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({ "profiles": {
            "cofold": { "title": "Cofold box" },
            "scratch": { "disposable": true }
        }}));
        let daemon = {
            let mut cmd = rig.env.cmd();
            cmd.env("RUST_LOG", "info");
            rig.env.daemon_with(cmd, &["--port", "0"], "c10.log")
        };
        let (client, init) = super::support::client(&daemon.address).await;
        let r = read(&client, "unknown://x").await;
        let (code, msg) = rpc(&r);
        assert_eq!(code, -32601, "{msg}");
        assert!(msg.contains("unknown:"), "{msg}");
        let init = serde_json::to_value(&init).unwrap();
        let p = &init["_meta"]["ahpd.resourceProviders"]["computer"];
        assert_eq!(p["title"], "Computer", "{init}");
        assert_eq!(p["root"], "computer://");
        assert_eq!(
            p["operations"],
            json!(["get", "list", "resolve", "put", "delete"])
        );
        assert_eq!(
            p["manifest"]["properties"]["profile"]["enum"],
            json!(["cofold"])
        );
        assert!(p["manifest"]["properties"].get("mounts").is_none());
    });
}

#[test]
fn case_11_absent_images_failed_pulls_and_images_without_glibc() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.engine.image(FakeImage::new("ahpd-test/noglibc:1").no_glibc());
        rig.configure(json!({}));
        let (daemon, client) = rig.start("c11.log").await;
        let r = make(&client, "box", json!({ "image": "absent:1" })).await;
        assert_eq!(
            rpc(&r).1,
            "the image absent:1 is not on this engine and pull is never; build or load it there first"
        );
        assert!(rig.engine.requests_to("POST", |p| p == "/images/create").is_empty());
        let r = make(&client, "box", json!({ "image": "ahpd-test/noglibc:1" })).await;
        let msg = rpc(&r).1;
        assert!(msg.starts_with("the image ahpd-test/noglibc:1 cannot run ahpd: "), "{msg}");
        assert!(msg.contains("glibc") && msg.contains("not Alpine or busybox"), "{msg}");
        assert!(rig.engine.containers().is_empty(), "{:?}", rig.engine.containers());
        drop(daemon);

        let rig = Rig::new();
        rig.configure(json!({ "pull": "missing" }));
        rig.engine.fail(FailOn::Pull, 404, "pull access denied for absent, repository does not exist");
        let (_daemon, client) = rig.start("c11b.log").await;
        let r = make(&client, "box", json!({ "image": "absent:1" })).await;
        assert_eq!(
            rpc(&r).1,
            "cannot pull the image absent:1: pull access denied for absent, repository does not exist"
        );
        assert_eq!(rig.engine.requests_to("POST", |p| p == "/images/create").len(), 1);
        assert!(rig.engine.containers().is_empty());
    });
}

#[test]
fn case_12_deleting_a_machine_ends_the_turn_inside() {
    rt().block_on(async {
        let rig = Rig::new();
        rig.configure(json!({}));
        let (daemon, client) = rig.start("c12.log").await;
        make(&client, "box", json!({})).await.unwrap();
        let (uri, r) = create_session(
            &client,
            "echo",
            json!({ "computer": "computer://box" }),
            None,
        )
        .await;
        assert!(r.is_ok(), "{:?}\n{}", rpc(&r), daemon.log_text());
        let mut t = begin_turn(&client, &uri, "t1", "/hang").await;
        t.until(Some("chat/turnStarted")).await;
        rig.engine
            .wait_for(|e| {
                e.execs()
                    .iter()
                    .any(|x| x.running && x.pid.is_some())
                    .then_some(())
            })
            .await;
        delete(&client, "computer://box").await.unwrap();
        let seen = t.until(None).await;
        let last = seen.last().unwrap();
        assert_eq!(last["type"], "chat/error", "{seen:#?}");
        assert!(
            last.to_string()
                .contains("computer://box was deleted while this session ran in it"),
            "{last}"
        );
        assert!(rig.engine.container("box").is_none());
        list(&client, "computer://").await.unwrap();
        let (_, r) = create_session(&client, "echo", json!({}), None).await;
        assert!(r.is_ok());
    });
}
