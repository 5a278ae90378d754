//! The graceful stop: a second SIGTERM/SIGINT while it runs ends the process at once
//! with code 1.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use ahp::client::SubscriptionEvent;
use serde_json::{Value, json};

use super::support::*;

fn signal(child: &std::process::Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

#[test]
fn a_second_signal_during_the_graceful_stop_exits_1_at_once() {
    let env = Env::new();
    // A record whose sessions never finish closing holds the graceful stop open (up to its
    // 10 s limit), so the second signal surely arrives while it runs.
    let agents = env.dir().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("stuck.json"),
        json!({"id": "stuck", "engine": "echo", "owner": "host", "name": "Stuck",
               "config": {"closeHangs": true}})
        .to_string(),
    )
    .unwrap();
    let mut child = env
        .cmd()
        .args(["--plugin", ECHO, "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("ahpd listening on ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();

    let rt = rt();
    let client = rt.block_on(async {
        let (client, _) = client(&address).await;
        let uri = format!("stuck:/{}", uuid::Uuid::new_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({"channel": uri, "provider": "stuck"}),
            )
            .await
            .unwrap();
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let _: Value = client
            .request("subscribe", json!({"channel": chat}))
            .await
            .unwrap();
        // One finished turn proves the session's backend is open.
        let mut sub = client.attach_subscription(&chat).await;
        client
            .notify(
                "dispatchAction",
                json!({"channel": chat, "clientSeq": 1, "action": {
                    "type": "chat/turnStarted", "turnId": "t1",
                    "startedAt": ahpd_sdk::util::now_iso(),
                    "message": {"text": "hello", "origin": {"kind": "user"}}}}),
            )
            .await
            .unwrap();
        loop {
            if let Some(SubscriptionEvent::Action(env)) = sub.recv().await
                && serde_json::to_value(&env.action).unwrap()["type"] == "chat/turnComplete"
            {
                break;
            }
        }
        client
    });

    signal(&child, rustix::process::Signal::TERM);
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        assert_ne!(
            stderr.read_line(&mut line).unwrap(),
            0,
            "the log ended before the shutdown began:\n{log}"
        );
        log.push_str(&line);
        if line.contains("shutting down") {
            break;
        }
    }
    signal(&child, rustix::process::Signal::INT);
    let code = child.wait().unwrap().code();
    std::io::Read::read_to_string(&mut stderr, &mut log).unwrap();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("second signal"), "{log}");
    assert!(
        !log.contains("sessions closed"),
        "the graceful stop did not finish:\n{log}"
    );
    drop(client);
}
