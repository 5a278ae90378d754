//! Machines from the terminal on `testkit::FakeEngine`: `ahpd run --machine` with the host in
//! the command's own process (its disposable machine removed as it ends, kept with `--keep`),
//! `ahpd machines list|stop|rm|prune`, and the refusals of `--machine`.

use std::process::Output;

use serde_json::{Value, json};

use super::machines_fake_support::*;
use super::support::text;

fn ahpd(rig: &Rig, args: &[&str]) -> Output {
    rig.env.cmd().args(args).output().unwrap()
}

fn run_in_box(rig: &Rig, extra: &[&str]) {
    let mut args = vec!["run", "--machine", "box", "--yes"];
    args.extend_from_slice(extra);
    args.push("hello from the terminal");
    let out = ahpd(rig, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn listed(rig: &Rig) -> Vec<Value> {
    let out = ahpd(rig, &["machines", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn boxed_rig() -> Rig {
    let rig = Rig::new();
    rig.configure(json!({ "profiles": { "box": { "disposable": true, "sessionFolder": true } } }));
    rig
}

#[test]
fn run_in_a_machine_removes_it_as_the_command_ends_unless_kept() {
    let rig = boxed_rig();
    run_in_box(&rig, &[]);
    let made = rig.creates();
    assert_eq!(made.len(), 1, "one machine was made");
    assert_eq!(made[0]["Labels"]["ahpd.disposable"], "box");
    assert!(rig.engine.execs().len() >= 2, "the turn ran inside");
    assert_eq!(rig.engine.containers().len(), 0, "the machine is gone");
    assert_eq!(listed(&rig), Vec::<Value>::new());

    run_in_box(&rig, &["--keep"]);
    let kept = rig.engine.containers();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].status, "running");
    let rows = listed(&rig);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["id"], kept[0].name.as_str());
    assert_eq!(rows[0]["profile"], "box");
    assert_eq!(rows[0]["disposable"], true);
    let out = ahpd(
        &rig,
        &["machines", "rm", &format!("computer://{}", kept[0].name)],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("removed computer://{}\n", kept[0].name)
    );
    assert!(rig.engine.containers().is_empty());
}

#[test]
fn machines_stop_and_prune_from_the_terminal() {
    let rig = boxed_rig();
    run_in_box(&rig, &["--keep"]);
    let first = rig.engine.containers()[0].name.clone();
    let out = ahpd(&rig, &["machines", "stop", &first]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(rig.engine.container(&first).unwrap().status, "exited");
    run_in_box(&rig, &["--keep"]);
    assert_eq!(rig.engine.containers().len(), 2);
    let table = text(&ahpd(&rig, &["machines", "list"]).stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("ID  "), "{table}");
    assert!(
        table.contains("exited") && table.contains("running"),
        "{table}"
    );
    // No daemon runs: the stopped one and the disposable one left running both go.
    let out = ahpd(&rig, &["machines", "prune"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().count(),
        2,
        "{}",
        text(&out.stdout)
    );
    assert!(rig.engine.containers().is_empty());
    let out = ahpd(&rig, &["machines", "rm", &first]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr).trim(),
        format!("ahpd: there is no computer called computer://{first}")
    );
}

#[test]
fn machine_refusals_are_one_sentence() {
    let rig = boxed_rig();
    let out = ahpd(&rig, &["machines", "list"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr).trim(),
        "no machines: this host has not made any"
    );
    assert_eq!(
        text(&ahpd(&rig, &["machines", "list", "--json"]).stdout),
        "[]\n"
    );

    let out = ahpd(&rig, &["run", "--machine", "box", "-c", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--machine"),
        "{}",
        text(&out.stderr)
    );

    let plain = Rig::new();
    plain
        .env
        .write_base(&json!({ "plugins": ["@ahpd/agent-echo"] }).to_string());
    let out = ahpd(&plain, &["run", "--machine", "box", "--yes", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr).trim(),
        "ahpd: --machine box: this host runs no machines; enable @ahpd/computer (ahpd plugin enable @ahpd/computer) and give it a disposable profile"
    );
    assert!(plain.engine.requests().is_empty());
}
