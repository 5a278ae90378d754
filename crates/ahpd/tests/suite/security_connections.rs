//! Attacks without the token on the listener itself: connections that never finish their
//! request, more idle sockets than the daemon has descriptors, and the token in every spelling
//! of the query string, which must never reach the log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::support::*;

/// Long enough never to pass on a healthy run; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// Raises this process's soft descriptor limit to its hard one, for tests that open thousands
/// of sockets.
fn raise_own_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    );
}

/// Waits until the daemon closes `s` (end of file or a reset), failing after [`PATIENCE`].
fn wait_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            // Whatever the daemon answers before closing (a 408) is read past.
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("the connection stayed open: {e}"),
        }
    }
}

#[test]
fn connections_that_never_finish_their_request_line_are_closed_by_the_header_limit() {
    let env = Env::new();
    // Room for all 200, so only the header limit can close them.
    env.write_base(
        r#"{"plugins": ["@ahpd/agent-echo"], "port": 0, "headerTimeoutSec": 1, "pendingConnectionCap": 500}"#,
    );
    let daemon = env.daemon(&[], "slow.log");
    let port = daemon.port();
    let mut slow: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(b"GET /?tkn=").unwrap();
            s
        })
        .collect();
    // The token holder gets in meanwhile.
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        client.ping().await.unwrap();
    });
    for s in &mut slow {
        wait_closed(s);
    }
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn the_token_holder_initializes_past_two_thousand_idle_sockets_on_a_1024_descriptor_limit() {
    raise_own_limit();
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#);
    // A hard limit of 1,024 too, so raising the soft one cannot help: only the bound on
    // connections that have not shown the token can.
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=1024:1024", "--", BIN])
        .env_clear()
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(env.home())
        .stdin(Stdio::null());
    let daemon = env.daemon_with(cmd, &[], "idle.log");
    let port = daemon.port();
    let idle: Vec<TcpStream> = (0..2000)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    rt().block_on(async {
        let connect = async {
            let (client, init) = client(&daemon.address).await;
            client.ping().await.unwrap();
            init
        };
        let init = tokio::time::timeout(PATIENCE, connect)
            .await
            .expect("the token holder could not connect");
        assert_eq!(init.protocol_version, "1.0.0");
    });
    drop(idle);
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn the_daemon_raises_its_soft_descriptor_limit_to_the_hard_one() {
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#);
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=1024:4096", "--", BIN])
        .env_clear()
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(env.home())
        .stdin(Stdio::null());
    let daemon = env.daemon_with(cmd, &[], "limit.log");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.child.id())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers, ["4096", "4096"], "{line}");
    assert_eq!(daemon.stop(), 0);
}

/// Sends one upgrade request for `target` with extra header lines; returns the status line.
fn upgrade(port: u16, target: &str, extra: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut line).unwrap();
    line
}

#[test]
fn no_spelling_of_the_token_parameter_puts_the_token_in_the_log() {
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#);
    let mut cmd = env.cmd();
    // Every level, the networking libraries' too as far as the daemon lets them.
    cmd.env("RUST_LOG", "trace");
    let daemon = env.daemon_with(cmd, &[], "spellings.log");
    let token = default_token(&env);
    let encoded: String = token.bytes().map(|b| format!("%{b:02X}")).collect();
    let port = daemon.port();
    let targets = [
        format!("/?tkn={token}"),
        format!("/?token={token}"),
        format!("/?TKN={token}"),
        format!("/?Tkn={token}"),
        format!("/?%74kn={token}"),
        format!("/?%74%6B%6E={token}"),
        format!("/?tkn={encoded}"),
        format!("/?x=1&tkn={token}&y=2"),
        format!("/?tkn={token}&tkn={token}"),
        format!("/?access_token={token}"),
        format!("/?{token}"),
        format!("/{token}"),
        format!("/{encoded}/"),
        format!("/x;tkn={token}"),
    ];
    let mut accepted = 0;
    for target in &targets {
        let status = upgrade(port, target, "");
        assert!(
            status.contains(" 101 ") || status.contains(" 401 "),
            "{target}: {status}"
        );
        accepted += usize::from(status.contains(" 101 "));
    }
    // The valid spellings got in, and were logged as connections.
    assert!(accepted >= 2, "{accepted}");
    for header in [
        format!("Authorization: Bearer {token}\r\n"),
        format!("Authorization: Basic {token}\r\n"),
        format!("Origin: https://{token}.example\r\n"),
        format!("Origin: https://example.com/?tkn={token}\r\n"),
        format!("X-Token: {token}\r\n"),
    ] {
        let status = upgrade(port, "/?tkn=wrong", &header);
        assert!(!status.is_empty(), "{header}");
    }
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        client.ping().await.unwrap();
    });
    let log_path = daemon.log.clone();
    assert_eq!(daemon.stop(), 0);
    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(log.contains("connection opened"), "{log}");
    assert!(log.contains("without the right token"), "{log}");
    for needle in [token.as_str(), encoded.as_str(), &token[..16]] {
        assert!(!log.contains(needle), "{needle} in the log:\n{log}");
    }
}
