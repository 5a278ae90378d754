//! Secure by default: the token every daemon requires, web origins, and what `resourceRead`
//! refuses to serve.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;

use ahp::client::Client;
use serde_json::{Value, json};

use super::support::*;

/// The status line of a WebSocket upgrade request to `port` with extra header lines.
fn upgrade_status(port: u16, target: &str, extra: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn is_hex_token(t: &str) -> bool {
    t.len() == 64 && t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[test]
fn a_daemon_without_token_options_requires_the_token_of_its_token_file() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "token.log");
    let token_file = env.dir().join("token");
    let token = default_token(&env);
    assert!(is_hex_token(&token), "{token}");
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        format!("{token}\n")
    );
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(daemon.address, format!("{}/?tkn={token}", daemon.base()));

    let port = daemon.port();
    assert!(upgrade_status(port, "/", "").contains(" 401 "));
    assert!(upgrade_status(port, "/?tkn=wrong", "").contains(" 401 "));
    assert!(upgrade_status(port, &format!("/?tkn={token}"), "").contains(" 101 "));
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let header = format!("Authorization: {scheme} {token}\r\n");
        assert!(
            upgrade_status(port, "/", &header).contains(" 101 "),
            "{scheme}"
        );
    }
    assert!(upgrade_status(port, "/", "Authorization: Bearer nope\r\n").contains(" 401 "));
    // A web page is refused whether or not it knows the token.
    let page = "Origin: http://localhost:3000\r\n";
    assert!(upgrade_status(port, &format!("/?tkn={token}"), page).contains(" 403 "));
    assert!(upgrade_status(port, "/", page).contains(" 403 "));

    // The same token on the next start.
    assert_eq!(daemon.stop(), 0);
    let again = env.daemon(&["--plugin", ECHO, "--port", "0"], "token2.log");
    assert_eq!(default_token(&env), token);
    assert!(again.address.ends_with(&format!("?tkn={token}")));
    let log =
        again.log_text() + &std::fs::read_to_string(env.root.path().join("token.log")).unwrap();
    assert!(!log.contains(&token), "{log}");
    assert_eq!(again.stop(), 0);
}

#[test]
fn allowed_origins_let_a_browser_client_in() {
    let env = Env::new();
    env.write_base(
        r#"{"plugins": ["@ahpd/agent-echo"], "port": 0, "allowedOrigins": ["https://vscode.dev"]}"#,
    );
    let daemon = env.daemon(&[], "origins.log");
    let token = default_token(&env);
    let with = format!("/?tkn={token}");
    let port = daemon.port();
    assert!(upgrade_status(port, &with, "Origin: https://vscode.dev\r\n").contains(" 101 "));
    assert!(upgrade_status(port, "/", "Origin: https://vscode.dev\r\n").contains(" 401 "));
    assert!(upgrade_status(port, &with, "Origin: https://evil.dev\r\n").contains(" 403 "));
    assert!(upgrade_status(port, &with, "Origin: http://localhost:3000\r\n").contains(" 403 "));
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn without_connection_token_still_refuses_web_pages() {
    let env = Env::new();
    let daemon = env.daemon(
        &[
            "--plugin",
            ECHO,
            "--port",
            "0",
            "--without-connection-token",
        ],
        "none.log",
    );
    assert!(!daemon.address.contains("tkn"));
    assert!(!env.dir().join("token").exists());
    assert!(upgrade_status(daemon.port(), "/", "").contains(" 101 "));
    let page = "Origin: http://127.0.0.1:8080\r\n";
    assert!(upgrade_status(daemon.port(), "/", page).contains(" 403 "));
    assert!(daemon.log_text().contains("without a connection token"));
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn the_detached_daemon_keeps_its_token_out_of_its_files_and_status_shows_it() {
    let env = Env::new();
    let out = env.run(&["start", "--plugin", ECHO, "--port", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let token = default_token(&env);
    assert!(
        text(&out.stdout).contains(&format!("?tkn={token}")),
        "{}",
        text(&out.stdout)
    );
    let status = env.run(&["status", "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["answers"], true);
    assert_eq!(
        status["url"],
        format!("{}/?tkn={token}", status["address"].as_str().unwrap())
    );
    let human = text(&env.run(&["status"]).stdout);
    assert!(human.contains(&format!("?tkn={token}")), "{human}");
    let entry = env.run(&["token"]);
    assert_eq!(entry.status.code(), Some(0));
    let entry: Value = serde_json::from_slice(&entry.stdout).unwrap();
    assert_eq!(entry["address"], status["address"]);
    assert_eq!(entry["connectionToken"], token.as_str());
    assert!(entry["name"].as_str().unwrap().starts_with("ahpd on "));
    let url = text(&env.run(&["token", "--url"]).stdout);
    assert_eq!(url.trim(), status["url"].as_str().unwrap());
    assert_eq!(env.run(&["stop"]).status.code(), Some(0));
    // Only the token file holds it: not daemon.json (gone now, so checked by its log too),
    // not the log.
    assert_eq!(env.files_containing(&token), vec![env.dir().join("token")]);
}

#[test]
fn a_token_given_to_start_stays_off_the_command_line_and_out_of_daemon_json() {
    let env = Env::new();
    let token = "start-secret-9c1d";
    let out = env.run(&[
        "start",
        "--plugin",
        ECHO,
        "--port",
        "0",
        "--connection-token",
        token,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let record_text = std::fs::read_to_string(env.dir().join("daemon.json")).unwrap();
    assert!(!record_text.contains(token), "{record_text}");
    let record: Value = serde_json::from_str(&record_text).unwrap();
    let pid = record["pid"].as_u64().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(token));
    let status: Value = serde_json::from_slice(&env.run(&["status", "--json"]).stdout).unwrap();
    // This process does not have the token, so it cannot show it nor get an answer.
    assert_eq!(status["answers"], false);
    let refused = env.run(&["restart"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("AHPD_CONNECTION_TOKEN"));
    let status = env
        .cmd()
        .env("AHPD_CONNECTION_TOKEN", token)
        .args(["status", "--json"])
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["answers"], true);
    assert_eq!(env.run(&["stop"]).status.code(), Some(0));
    assert_eq!(
        env.files_containing(token),
        Vec::<std::path::PathBuf>::new()
    );
}

async fn read(client: &Client, path: &Path) -> Result<Value, (i64, String)> {
    client
        .request::<_, Value>(
            "resourceRead",
            json!({"channel": ahp_types::ROOT_RESOURCE_URI, "uri": ahpd_sdk::util::file_uri(path)}),
        )
        .await
        .map_err(|e| match e {
            ahp::ClientError::Rpc(e) => (e.code as i64, e.message),
            other => panic!("not an RPC error: {other}"),
        })
}

#[test]
fn resource_read_serves_the_home_folder_but_not_its_secrets() {
    let env = Env::new();
    let home = env.home();
    // The configuration folder inside the home folder, as by default.
    let config = home.join(".config");
    let dir = config.join("ahpd");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"resourceDeny": ["~/private"]}"#,
    )
    .unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/x"), "PRIVATE KEY").unwrap();
    std::fs::create_dir_all(home.join("private")).unwrap();
    std::fs::write(home.join("private/p.txt"), "mine").unwrap();
    std::fs::write(home.join("notes.txt"), "hello").unwrap();
    let mut cmd = env.cmd();
    cmd.env("XDG_CONFIG_HOME", &config);
    let mut vault_cmd = env.cmd();
    let mut put = vault_cmd
        .env("XDG_CONFIG_HOME", &config)
        .args(["vault", "set", "host:k"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    put.stdin.take().unwrap().write_all(b"VAULT-VALUE").unwrap();
    assert!(put.wait().unwrap().success());
    let vault = dir.join("vault.json");
    assert!(vault.is_file());
    let daemon = env.daemon_with(cmd, &["--plugin", ECHO, "--port", "0"], "resources.log");
    let token_file = dir.join("token");
    assert!(token_file.is_file());
    let links = [
        ("link-ssh", home.join(".ssh/x")),
        ("link-ssh-dir", home.join(".ssh")),
        ("link-vault", vault.clone()),
        ("link-token", token_file.clone()),
        ("link-config", dir.clone()),
    ];
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, home.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(home.join("notes.txt"), home.join("link-notes")).unwrap();
    // 100 MB of nothing: a sparse file costs no disk.
    std::fs::File::create(home.join("big.bin"))
        .unwrap()
        .set_len(100_000_000)
        .unwrap();

    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        assert_eq!(read(&client, &home.join("notes.txt")).await.unwrap()["data"], "hello");
        assert_eq!(read(&client, &home.join("link-notes")).await.unwrap()["data"], "hello");
        let refused = [
            home.join(".ssh/x"),
            vault.clone(),
            token_file.clone(),
            dir.join("config.json"),
            home.join("link-ssh"),
            home.join("link-ssh-dir/x"),
            home.join("link-vault"),
            home.join("link-token"),
            home.join("link-config/vault.json"),
            home.join("private/p.txt"),
            home.join("notes.txt/../.ssh/x"),
        ];
        for path in &refused {
            let (code, message) = read(&client, path).await.expect_err("refused");
            assert_eq!(code, -32009, "{}: {message}", path.display());
            for secret in ["PRIVATE KEY", "VAULT-VALUE", "mine"] {
                assert!(!message.contains(secret), "{message}");
            }
        }
        let listed = client
            .request::<_, Value>(
                "resourceList",
                json!({"channel": ahp_types::ROOT_RESOURCE_URI, "uri": ahpd_sdk::util::file_uri(&home.join("link-config"))}),
            )
            .await;
        assert!(listed.is_err(), "{listed:?}");
        let (code, message) = read(&client, &home.join("big.bin")).await.expect_err("too big");
        assert_eq!(code, -32602);
        assert!(message.contains("8 MiB"), "{message}");
        assert!(message.contains("100000000 bytes"), "{message}");
        // The connection is still there.
        client.ping().await.unwrap();
    });
    assert_eq!(daemon.stop(), 0);
}

/// Starts a daemon with the echo plugin on a free port serving `served`, which is made here.
fn serve_echo(env: &Env, served: &Path, log: &str) -> Daemon {
    std::fs::create_dir_all(served).unwrap();
    env.daemon(
        &[
            "--plugin",
            ECHO,
            "--port",
            "0",
            "--path",
            served.to_str().unwrap(),
        ],
        log,
    )
}

#[test]
fn a_live_sessions_folder_is_served_until_the_session_goes() {
    let env = Env::new();
    let served = env.root.path().join("served");
    let project = env.root.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("main.rs"), "fn main() {}").unwrap();
    let daemon = serve_echo(&env, &served, "live.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let file = project.join("main.rs");
        assert_eq!(read(&client, &file).await.expect_err("not yet").0, -32009);
        let uri = format!("echo:/{}", uuid::Uuid::new_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({"channel": uri, "provider": "echo",
                       "workingDirectories": [ahpd_sdk::util::file_uri(&project)]}),
            )
            .await
            .unwrap();
        assert_eq!(read(&client, &file).await.unwrap()["data"], "fn main() {}");
        let _: Value = client
            .request("disposeSession", json!({"channel": uri}))
            .await
            .unwrap();
        assert_eq!(read(&client, &file).await.expect_err("gone").0, -32009);
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn a_session_without_a_folder_has_its_scratch_folder_served() {
    let env = Env::new();
    let served = env.root.path().join("served");
    let id = uuid::Uuid::new_v4().to_string();
    // Where the cofold engine keeps the scratch folder of a session started without a folder.
    let scratch = env.home().join(".copilot/chats").join(&id);
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("draft.md"), "draft").unwrap();
    let daemon = serve_echo(&env, &served, "scratch.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let file = scratch.join("draft.md");
        assert_eq!(
            read(&client, &file).await.expect_err("no session yet").0,
            -32009
        );
        let uri = format!("echo:/{id}");
        let _: Value = client
            .request("createSession", json!({"channel": uri, "provider": "echo"}))
            .await
            .unwrap();
        assert_eq!(read(&client, &file).await.unwrap()["data"], "draft");
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn a_served_configuration_folder_keeps_the_files_named_after_the_daemons_own() {
    let env = Env::new();
    // `--config-file` in a folder of the served project: the daemon's own files sit there too.
    let project = env.root.path().join("project");
    let conf = project.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let base = conf.join("ahpd.json");
    std::fs::write(&base, "{}").unwrap();
    let own = [
        "daemon.log.1",
        "daemon.log.5",
        "sessions.json.corrupt-1767225600000",
        ".token.0123abcd.tmp",
        ".vault.json.0123abcd.tmp",
        ".ahpd.json.0123abcd.tmp",
    ];
    for name in own {
        std::fs::write(conf.join(name), "SECRET-BITS").unwrap();
    }
    std::fs::write(conf.join("notes.txt"), "hello").unwrap();
    std::os::unix::fs::symlink(conf.join("daemon.log.1"), project.join("link-log")).unwrap();
    let daemon = env.daemon(
        &[
            "--config-file",
            base.to_str().unwrap(),
            "--plugin",
            ECHO,
            "--port",
            "0",
            "--path",
            project.to_str().unwrap(),
        ],
        "own-files.log",
    );
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        // The folder itself is served, so the refusals below are the rule's doing.
        assert_eq!(
            read(&client, &conf.join("notes.txt")).await.unwrap()["data"],
            "hello"
        );
        let refused = own
            .iter()
            .map(|n| conf.join(n))
            .chain([conf.join("token"), project.join("link-log")]);
        for path in refused {
            let (code, message) = read(&client, &path).await.expect_err("refused");
            assert_eq!(code, -32009, "{}: {message}", path.display());
            assert!(message.contains("private"), "{message}");
        }
    });
    assert_eq!(daemon.stop(), 0);
}
