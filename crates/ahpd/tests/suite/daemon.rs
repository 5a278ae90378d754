//! The foreground daemon over a real WebSocket and over stdio.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use super::support::*;

#[test]
fn initialize_is_answered_and_lists_the_echo_agent() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "init.log");
    assert!(daemon.address.starts_with("ws://127.0.0.1:"));
    assert_ne!(daemon.port(), 0);
    rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        assert_eq!(init.protocol_version, "1.0.0");
        let state = serde_json::to_value(&init.snapshots[0].state).unwrap();
        let agents = state["agents"].as_array().unwrap();
        assert_eq!(agents.len(), 1, "{state}");
        assert_eq!(agents[0]["provider"], "echo");
        assert_eq!(agents[0]["displayName"], "Echo");
        assert_eq!(state["_meta"]["ahpd.agentsChannel"], "x-ahpd-agents://");
        client.ping().await.unwrap();
    });
    assert_eq!(daemon.stop(), 0);
    assert!(env.dir().join("agents").join("echo.json").is_file());
}

#[test]
fn a_token_file_is_created_and_required() {
    let env = Env::new();
    let token_file = env.root.path().join("t");
    let daemon = env.daemon(
        &[
            "--plugin",
            ECHO,
            "--port",
            "0",
            "--connection-token-file",
            token_file.to_str().unwrap(),
        ],
        "token.log",
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    assert_eq!(token.len(), 64);
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(mode(&token_file), 0o600);
    rt().block_on(async {
        let refused = ahp_ws::WebSocketTransport::connect(&daemon.base()).await;
        let err = refused
            .err()
            .expect("connect without a token must fail")
            .to_string();
        assert!(err.contains("401"), "{err}");
        let with = format!("{}/?tkn={token}", daemon.base());
        assert_eq!(with, daemon.address, "the listening line carries the token");
        assert!(ahp_ws::WebSocketTransport::connect(&with).await.is_ok());
    });
    let log = daemon.log_text();
    assert!(log.contains("token file"), "{log}");
    assert!(!log.contains(token));
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn stdio_answers_ping_and_prints_nothing_else() {
    let env = Env::new();
    let mut child = env
        .cmd()
        .args(["--plugin", ECHO, "--stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        reply,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": null})
    );
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest, "");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn an_address_in_use_exits_1() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "first.log");
    let port = daemon.port().to_string();
    let out = env.run(&["--plugin", ECHO, "--port", &port]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!(
            "ahpd: cannot listen on 127.0.0.1:{port}: address in use"
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn no_plugins_starts_with_no_agent_and_serves_the_paths() {
    let env = Env::new();
    let work = env.root.path().join("work dir");
    std::fs::create_dir(&work).unwrap();
    let daemon = env.daemon(
        &[
            "--no-plugins",
            "--port",
            "0",
            "--path",
            work.to_str().unwrap(),
        ],
        "bare.log",
    );
    rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        let state = serde_json::to_value(&init.snapshots[0].state).unwrap();
        assert_eq!(state["agents"], serde_json::json!([]));
        assert_eq!(
            init.default_directory.as_deref(),
            Some(ahpd_sdk::util::file_uri(&work).as_str())
        );
        std::fs::write(work.join("note.txt"), "served").unwrap();
        let listed: serde_json::Value = client
            .request(
                "resourceList",
                serde_json::json!({"channel": ahp_types::ROOT_RESOURCE_URI, "uri": ahpd_sdk::util::file_uri(&work)}),
            )
            .await
            .unwrap();
        assert!(listed.to_string().contains("note.txt"), "{listed}");
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn sighup_is_ignored() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "hup.log");
    let pid = rustix::process::Pid::from_raw(daemon.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        client.ping().await.unwrap();
    });
    // The default action of SIGHUP would have ended the process before the ping.
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn the_connection_token_is_never_logged_even_at_trace() {
    let env = Env::new();
    let mut cmd = env.cmd();
    cmd.env("RUST_LOG", "trace");
    let token = "tok-secret-7f3a";
    let daemon = env.daemon_with(
        cmd,
        &["--plugin", ECHO, "--port", "0", "--connection-token", token],
        "token-trace.log",
    );
    rt().block_on(async {
        let url = format!("{}/?tkn={token}", daemon.base());
        let transport = ahp_ws::WebSocketTransport::connect(&url).await.unwrap();
        let client = ahp::client::Client::connect(transport, Default::default())
            .await
            .unwrap();
        client
            .initialize("trace".into(), vec!["1.0.0".into()], Vec::new())
            .await
            .unwrap();
        client.ping().await.unwrap();
    });
    assert_eq!(daemon.stop(), 0);
    assert_eq!(
        env.files_containing(token),
        Vec::<std::path::PathBuf>::new()
    );
}
