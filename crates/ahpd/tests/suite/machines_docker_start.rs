//! The quick start in a machine on a real engine, through the binary a person runs: the model
//! configured by the three copapo variables alone (no copapo file, no needs), `ahpd run
//! --machine`, the machine on the default bridge network proved to be elsewhere by what only
//! it can show, and `ahpd machines` to see and clear what is left. Gated as
//! `machines_docker`.

use std::net::IpAddr;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use testkit::images::{MARKER, MARKER_TEXT};
use testkit::{Endpoint, Reply, chunk};

use super::machines_docker::{Guard, engine, gateway, glibc_image};
use super::machines_docker_bed::ENGINE;
use super::support::{Env, rt, text};

const QUICK_KEY: &str = "sk-quick-start-7d2e";

/// What the machine shows: its host name, the image's marker and its process 1's program.
const LOOK: &str = "cat /etc/hostname; cat /etc/ahpd-test-image; readlink /proc/1/exe";

/// One turn's replies: look around, write `notes.txt`, say done.
fn endpoint(at: IpAddr) -> Endpoint {
    Endpoint::builder()
        .bind(at)
        .reply(Reply::stream([
            chunk::tool_call(
                0,
                Some("c1"),
                Some("shell_exec"),
                &json!({ "command": LOOK }).to_string(),
            ),
            chunk::finish("tool_calls"),
        ]))
        .reply(Reply::stream([
            chunk::tool_call(
                0,
                Some("c2"),
                Some("write_file"),
                &json!({ "path": "notes.txt", "content": "written inside\n" }).to_string(),
            ),
            chunk::finish("tool_calls"),
        ]))
        .fallback(Reply::stream([chunk::text("done"), chunk::finish("stop")]))
        .models(["m1"])
        .start()
        .expect("endpoint")
}

/// The base file: cofold and the computer plugin with one disposable profile, `box`, on the
/// default network; nothing about the model.
fn configure(env: &Env, image: &str) {
    env.write_base(
        &json!({
            "plugins": [
                "@ahpd/agent-cofold",
                { "name": "@ahpd/computer", "options": {
                    "image": image,
                    "pull": "never",
                    "profiles": { "box": { "disposable": true, "sessionFolder": true } }
                } }
            ]
        })
        .to_string(),
    );
}

/// `ahpd <args>` with the quick start's three variables.
fn ahpd(env: &Env, endpoint: &Endpoint, args: &[&str]) -> Output {
    env.cmd()
        .env("COPAPO_BASE_URL", endpoint.base_url())
        .env("COPAPO_API_KEY", QUICK_KEY)
        .env("COPAPO_MODEL", "m1")
        .args(args)
        .output()
        .unwrap()
}

/// `ahpd run --machine box --yes --json` in `work`: the tool outputs of the turn, joined.
fn run_in_box(env: &Env, endpoint: &Endpoint, work: &Path, extra: &[&str]) -> String {
    let mut args = vec!["run", "--machine", "box", "--yes", "--json", "--path"];
    let work = work.to_string_lossy().into_owned();
    args.push(&work);
    args.extend_from_slice(extra);
    args.push("look around and write notes.txt");
    let out = ahpd(env, endpoint, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.last().unwrap()["status"], "complete");
    serde_json::to_string(&lines).unwrap()
}

/// `ahpd machines list --json` as rows.
fn listed(env: &Env, endpoint: &Endpoint) -> Vec<Value> {
    let out = ahpd(env, endpoint, &["machines", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// The acceptance case of issue 32's first and third items: a fresh home with only the three
/// variables, `ahpd run --machine box` edits a file inside a machine that is not this host, the
/// edit shows here, the key shows nowhere but in the model's request, and no machine is left.
/// Then `--keep` keeps one, and `ahpd machines` lists, stops and prunes it.
#[test]
fn quick_start_run_in_a_machine_leaves_nothing() {
    rt().block_on(async {
        let Some(docker) = engine().await else { return };
        let _serial = ENGINE.clone().lock_owned().await;
        let image = glibc_image(&docker).await;
        let endpoint = endpoint(gateway(&docker).await);
        let env = Env::new();
        configure(&env, &image);
        let _guard = Guard {
            docker: docker.clone(),
            host_id_file: env.dir().join("host-id"),
        };
        let work = env.root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        assert!(!env.root.path().join("xdg").join("copapo").exists());
        assert!(
            !Path::new(MARKER).exists(),
            "this host has the image's marker"
        );

        let seen = run_in_box(&env, &endpoint, &work, &[]);
        // Inside: the marker only the image holds, process 1 the machine's init from the
        // mounted build (a pid namespace of its own), a host name that is not this host's.
        assert!(
            seen.contains(MARKER_TEXT.trim()),
            "the marker shows: {seen}"
        );
        assert!(
            seen.contains("/opt/ahpd/bin/ahpd-"),
            "process 1 is the machine's init: {seen}"
        );
        let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let here = here.trim();
        let output = tool_output(&seen);
        let name = output.lines().next().unwrap_or_default().trim().to_owned();
        assert!(
            !name.is_empty() && name != here,
            "host name {name:?} is this host's"
        );
        assert_eq!(
            std::fs::read_to_string(work.join("notes.txt")).unwrap(),
            "written inside\n"
        );
        assert!(!seen.contains("was asked for"), "{seen}");
        // The key reached the model, and is nowhere in the home's files or the output.
        assert!(
            endpoint
                .chat_requests()
                .iter()
                .any(|r| r.header("authorization") == Some(&format!("Bearer {QUICK_KEY}")))
        );
        assert!(!seen.contains(QUICK_KEY));
        assert_eq!(
            env.files_containing(QUICK_KEY),
            Vec::<std::path::PathBuf>::new()
        );
        // The command's own host removed its machine as it ended.
        assert_eq!(listed(&env, &endpoint), Vec::<Value>::new());
        let out = ahpd(&env, &endpoint, &["machines", "list"]);
        assert!(out.status.success());
        assert_eq!(text(&out.stdout), "");

        // `--keep` keeps it; `ahpd machines` shows, stops and prunes it.
        endpoint.push_reply(Reply::stream([chunk::text("kept"), chunk::finish("stop")]));
        let _ = run_in_box(&env, &endpoint, &work, &["--keep"]);
        let rows = listed(&env, &endpoint);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0]["state"], "running");
        assert_eq!(rows[0]["profile"], "box");
        assert_eq!(rows[0]["disposable"], true);
        let id = rows[0]["id"].as_str().unwrap().to_owned();
        let table = text(&ahpd(&env, &endpoint, &["machines", "list"]).stdout);
        assert!(table.starts_with("ID"), "{table}");
        assert!(
            table.contains(&id) && table.contains("disposable:box"),
            "{table}"
        );
        let out = ahpd(&env, &endpoint, &["machines", "stop", &id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(listed(&env, &endpoint)[0]["state"], "exited");
        let out = ahpd(&env, &endpoint, &["machines", "prune"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("removed computer://{id}\n"));
        assert!(docker.inspect_container(&id, None).await.is_err());
        assert_eq!(listed(&env, &endpoint), Vec::<Value>::new());
        let out = ahpd(&env, &endpoint, &["machines", "rm", &id]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(
            text(&out.stderr).trim(),
            format!("ahpd: there is no computer called computer://{id}")
        );
    });
}

/// The output of the first tool call in the `--json` lines (the look-around command's).
fn tool_output(seen: &str) -> String {
    let lines: Vec<Value> = serde_json::from_str(seen).unwrap();
    lines
        .iter()
        .filter(|l| l["action"]["type"] == "chat/toolCallComplete")
        .find_map(|l| {
            let r = &l["action"]["result"];
            let content = r["content"].as_array()?;
            Some(
                content
                    .iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<String>(),
            )
        })
        .unwrap_or_default()
}
