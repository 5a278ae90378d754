//! The daemon's own process and files against its commands and the machine's other users: its
//! environment holds no key or token, other processes of its user cannot read its memory, what
//! it writes is its user's alone whatever the umask, a planted token or configuration file is
//! refused, and `resourceRead` serves no hard link to a private file nor anything of `/proc`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ahp::client::Client;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply};

use super::support::*;
use super::term_support::{call, work};

/// The user the other-user checks run as.
const NOBODY: &str = "65534";

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `setpriv` switching to another user with no groups, before the program it is given.
fn setpriv() -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "--",
    ]);
    c
}

/// `program` run as another user, with no groups.
fn as_nobody(program: &str) -> Command {
    let mut c = setpriv();
    c.arg(program);
    c
}

/// The daemon's command line in `env`, started through `wrapper` when given.
fn daemon_cmd(env: &Env, wrapper: Option<Command>) -> Command {
    let mut c = match wrapper {
        Some(mut w) => {
            w.arg(BIN);
            w
        }
        None => Command::new(BIN),
    };
    c.env_clear()
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(env.home())
        .stdin(Stdio::null());
    c
}

/// The values a test puts in the daemon's environment, none of which may be read back.
const SECRETS: [(&str, &str); 5] = [
    ("COPAPO_API_KEY", "sk-model-key-1f2e3d4c"),
    ("AHPD_CONNECTION_TOKEN", "conn-token-4c5b6a7988"),
    ("DEPLOY_TOKEN", "deploy-9a8b7c6d5e"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-0d1e2f3a"),
    ("DATABASE_URL", "postgres://app:db-pass-5e6f7a8b@db/app"),
];

fn secret_values() -> Vec<&'static str> {
    let mut v: Vec<&str> = SECRETS.iter().map(|(_, v)| *v).collect();
    v.push("db-pass-5e6f7a8b");
    v
}

#[test]
fn an_approved_command_reads_no_key_or_token_in_the_daemons_environment() {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::builder().models(["m"]).start().unwrap();
    env.write_base(r#"{"port": 0, "plugins": ["@ahpd/agent-cofold"]}"#);
    let mut cmd = env.cmd();
    cmd.env("COPAPO_BASE_URL", ep.base_url())
        .env("COPAPO_MODEL", "m")
        .env("PLAIN_SETTING", "visible-value");
    for (k, v) in SECRETS {
        cmd.env(k, v);
    }
    let daemon = env.daemon_with(cmd, &[], "environ.log");
    let pid = daemon.child.id();
    let script = format!(
        "tr '\\0' '\\n' < /proc/{pid}/environ; echo ---; tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; echo ppid=$PPID"
    );
    ep.push_reply(call("c1", "shell_exec", json!({ "command": script })));
    ep.push_reply(Reply::text_stream("read it"));
    let out = env
        .cmd()
        .env("AHPD_CONNECTION_TOKEN", SECRETS[1].1)
        .arg("run")
        .arg("--path")
        .arg(&work)
        .args([
            "--mode",
            "default",
            "--yes",
            "show me the daemon's environment",
        ])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let chats = ep.chat_requests();
    assert_eq!(chats.len(), 2, "{stderr}");
    // The engine still has the key it was started with, from memory.
    assert_eq!(
        chats[0].header("authorization"),
        Some(format!("Bearer {}", SECRETS[0].1).as_str())
    );
    let result = chats[1].body.clone();
    if is_root() {
        // Root reads any process's environment: what it finds there is what matters.
        assert!(result.contains("PLAIN_SETTING=visible-value"), "{result}");
    } else {
        assert!(result.contains("Permission denied"), "{result}");
    }
    for secret in secret_values() {
        assert!(
            !result.contains(secret),
            "{secret} reached the model: {result}"
        );
        assert!(!text(&out.stdout).contains(secret));
        assert!(!stderr.contains(secret));
    }
    if is_root() {
        let block = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let block = String::from_utf8_lossy(&block);
        assert!(block.contains("PLAIN_SETTING=visible-value"));
        for secret in secret_values() {
            assert!(!block.contains(secret), "{secret} in /proc/{pid}/environ");
        }
    }
    assert_eq!(daemon.stop(), 0);
}

/// Lets `NOBODY` reach and own the test's folders, as a user's own home would be theirs.
fn give_to_nobody(env: &Env) {
    for dir in [
        env.root.path().to_path_buf(),
        env.home(),
        env.root.path().join("xdg"),
    ] {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    }
}

#[test]
fn other_processes_of_the_daemons_user_cannot_read_its_environment_memory_or_descriptors() {
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#);
    let root = is_root();
    if root {
        // The check needs a user without CAP_SYS_PTRACE: the same one for both sides.
        std::fs::set_permissions(env.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        give_to_nobody(&env);
        std::os::unix::fs::chown(env.dir(), Some(65534), Some(65534)).unwrap();
        std::os::unix::fs::chown(env.base_file(), Some(65534), Some(65534)).unwrap();
    }
    let wrapper = root.then(setpriv);
    let daemon = env.daemon_with(daemon_cmd(&env, wrapper), &[], "dump.log");
    let pid = daemon.child.id();
    let probe = format!(
        "cat /proc/{pid}/environ >/dev/null 2>&1 && echo environ; \
         ls /proc/{pid}/fd >/dev/null 2>&1 && echo fd; \
         (exec 3</proc/{pid}/mem) 2>/dev/null && echo mem; \
         head -c 1 /proc/{pid}/maps >/dev/null 2>&1 && echo maps; \
         cat /proc/self/environ >/dev/null && echo self"
    );
    let mut reader = if root {
        as_nobody("sh")
    } else {
        Command::new("sh")
    };
    let out = reader
        .args(["-c", &probe])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "self\n", "{}", text(&out.stderr));
    assert_eq!(daemon.stop(), 0);
}

/// Every file and folder under `dir`.
fn everything(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        out.push(p.clone());
        if entry.file_type().unwrap().is_dir() {
            everything(&p, out);
        }
    }
}

#[test]
fn nothing_the_daemon_wrote_under_umask_022_is_readable_by_another_user() {
    if !is_root() {
        eprintln!("skipped: reading as another user needs root to switch users");
        return;
    }
    let env = Env::new();
    let work = work(&env);
    // A home others may enter, as homes usually are.
    for dir in [
        env.root.path().to_path_buf(),
        env.home(),
        env.root.path().join("xdg"),
        work.clone(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A store an older version left open to everyone.
    let old = env.home().join(".cofold/workspaces/-old/sessions/s1");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(
        old.join("messages.jsonl"),
        "{\"secret\": \"old transcript\"}\n",
    )
    .unwrap();
    let mut open = vec![old.join("messages.jsonl")];
    let mut p = old.clone();
    while p != env.home() {
        open.push(p.clone());
        p = p.parent().unwrap().to_path_buf();
    }
    for path in &open {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let ep = Endpoint::with_replies(vec![Reply::text_stream("hello there")]).unwrap();
    super::term_support::configure(&env, &ep);
    let mut base: Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    base["port"] = json!(0);
    std::fs::write(env.base_file(), base.to_string()).unwrap();
    // The umask most desktops start with.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 022; exec \"$@\"", "sh"]);
    let cmd = daemon_cmd(&env, Some(cmd));
    let daemon = env.daemon_with(cmd, &["--path", work.to_str().unwrap()], "modes.log");
    let out = env
        .cmd()
        .arg("run")
        .arg("--path")
        .arg(&work)
        .arg("say hello")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(daemon.stop(), 0);

    let mut written = Vec::new();
    everything(&env.home().join(".cofold"), &mut written);
    everything(&env.dir(), &mut written);
    assert!(
        written
            .iter()
            .any(|p| p.ends_with("messages.jsonl") && !p.starts_with(&old)),
        "the turn left no transcript: {written:?}"
    );
    // Every one of them, tried as another user; the readable ones are printed.
    let probe = "for f in \"$@\"; do if [ -d \"$f\" ]; then ls \"$f\" >/dev/null 2>&1 && echo \"$f\"; \
                 else cat \"$f\" >/dev/null 2>&1 && echo \"$f\"; fi; done";
    let out = as_nobody("sh")
        .args(["-c", probe, "sh"])
        .args(&written)
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "", "readable by another user");
    // And by mode, which a later `chmod` of a parent cannot undo (the configuration file is
    // the person's, kept as they keep it).
    for path in written.iter().filter(|p| **p != env.base_file()) {
        let mode = std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
    }
}

#[test]
fn a_token_or_configuration_file_another_user_could_have_planted_is_refused() {
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#);
    let planted = env.root.path().join("planted-token");
    std::fs::write(&planted, "attacker-knows-this\n").unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o666)).unwrap();
    let check = |args: &[&str], file: &Path, words: &str| {
        let out = env.run(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert!(stderr.contains(words), "{stderr}");
        // One sentence, after whatever the log said before it.
        let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("ahpd: ")).collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(!stderr.contains("attacker-knows-this"), "{stderr}");
    };
    let token_args = [
        "--port",
        "0",
        "--connection-token-file",
        planted.to_str().unwrap(),
    ];
    check(&token_args, &planted, "chmod go-w");
    // A configuration file others may change is refused the same way.
    std::fs::set_permissions(env.base_file(), std::fs::Permissions::from_mode(0o664)).unwrap();
    check(&["--port", "0"], &env.base_file(), "chmod go-w");
    std::fs::set_permissions(env.base_file(), std::fs::Permissions::from_mode(0o644)).unwrap();
    if is_root() {
        // Owned by another user, even if only they may write it.
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        check(&token_args, &planted, "belongs to another user");
        let other = env.root.path().join("other.json");
        std::fs::write(&other, r#"{"plugins": ["@ahpd/agent-echo"], "port": 0}"#).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        check(
            &["--config-file", other.to_str().unwrap()],
            &other,
            "belongs to another user",
        );
    }
    // The person's own file is used.
    std::fs::write(&planted, "mine\n").unwrap();
    if is_root() {
        std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
    }
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
    let daemon = env.daemon(&token_args, "mine.log");
    assert!(daemon.address.ends_with("?tkn=mine"), "{}", daemon.address);
    assert_eq!(daemon.stop(), 0);
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
fn resource_read_refuses_hard_links_to_private_files_and_a_session_at_proc_self() {
    let env = Env::new();
    let home = env.home();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::hard_link(home.join(".ssh/id_ed25519"), home.join("notes.txt")).unwrap();
    std::fs::write(home.join("a.txt"), "fine").unwrap();
    std::fs::hard_link(home.join("a.txt"), home.join("b.txt")).unwrap();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "links.log");
    let pid = daemon.child.id();
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        assert_eq!(
            read(&client, &home.join("b.txt")).await.unwrap()["data"],
            "fine"
        );
        let (code, message) = read(&client, &home.join("notes.txt"))
            .await
            .expect_err("a hard link to the key");
        assert_eq!(code, -32009, "{message}");
        assert!(message.contains("hard link"), "{message}");
        assert!(!message.contains("PRIVATE KEY"), "{message}");

        let uri = format!("echo:/{}", uuid::Uuid::new_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({"channel": uri, "provider": "echo",
                       "workingDirectories": ["file:///proc/self"]}),
            )
            .await
            .unwrap();
        for path in [
            PathBuf::from("/proc/self/environ"),
            PathBuf::from(format!("/proc/{pid}/environ")),
            PathBuf::from("/proc/self/maps"),
        ] {
            let (code, message) = read(&client, &path).await.expect_err("refused");
            assert_eq!(code, -32009, "{}: {message}", path.display());
            assert!(message.contains("never served"), "{message}");
        }
    });
    assert_eq!(daemon.stop(), 0);
}
