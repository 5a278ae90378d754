//! The detached daemon: `start`, `stop`, `status`, `restart`, and its record `daemon.json`.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::args::{RunArgs, RunLine};
use crate::config::{self, TokenSetting};
use crate::fsutil;
use crate::locations::Locations;
use crate::sys;
use crate::token::{self, TOKEN_ENV};
use crate::vault::Vault;

/// `daemon.json`: what the detached daemon writes once it listens.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonRecord {
    /// Its process id.
    pub pid: u32,
    /// The options it was started with (for `restart`).
    pub argv: Vec<String>,
    /// The folder it was started from.
    pub cwd: PathBuf,
    /// `ws://<host>:<port>`.
    pub address: String,
    /// The crate version.
    pub version: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// The token came from `AHPD_CONNECTION_TOKEN` (or `--connection-token` given to `start`,
    /// which hands it over that way), so `restart` needs the variable set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_from_environment: bool,
    /// Run in the foreground (not by `ahpd start`); `restart` starts it again detached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub foreground: bool,
}

/// Set on the detached child: the user's options, without the hidden marker.
const ARGV_ENV: &str = "AHPD_DETACHED_ARGV";

impl DaemonRecord {
    /// The record of the running process.
    pub fn for_this_process(address: &str) -> Self {
        let detached: Option<Vec<String>> = std::env::var(ARGV_ENV)
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok());
        let foreground = detached.is_none();
        // A foreground run's own options, so `restart` can start it again with them; a token
        // given on its command line is left out (the record must never hold it), so such a
        // restart needs the token in the environment.
        let (argv, token_on_line) = match detached {
            Some(argv) => (argv, false),
            None => {
                let (argv, token) = take_token(std::env::args().skip(1).collect());
                (argv, token.is_some())
            }
        };
        DaemonRecord {
            foreground,
            pid: std::process::id(),
            argv,
            cwd: std::env::current_dir().unwrap_or_default(),
            address: address.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_at: jiff::Timestamp::now().to_string(),
            token_from_environment: token_on_line,
        }
    }
}

/// What went wrong in process management.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// A usage problem (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A runtime failure (exit 1).
    #[error("{0}")]
    Failed(String),
    /// The child exited before listening, with this code (its log was printed).
    #[error("the daemon exited before it listened (exit code {0})")]
    ChildExited(i32),
}

impl ProcessError {
    /// The exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            ProcessError::Usage(_) => 2,
            ProcessError::Failed(_) => 1,
            ProcessError::ChildExited(c) => *c,
        }
    }
}

/// Writes `daemon.json` atomically with mode `0600`.
pub fn write_record(path: &Path, record: &DaemonRecord) -> std::io::Result<()> {
    let value = serde_json::to_value(record).map_err(std::io::Error::other)?;
    fsutil::write_json(path, &value, fsutil::PRIVATE_FILE)
}

/// Reads `daemon.json`, if present and readable.
pub fn read_record(path: &Path) -> Option<DaemonRecord> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Writes `daemon.json` for the daemon now listening on `address`, however it was started, so
/// `status`, `stop` and `restart` find it. A detached daemon must write it (its parent waits for
/// it); a foreground one leaves a record naming another live daemon alone and goes on without
/// one. Returns whether this process wrote it.
pub(crate) fn record_this_daemon(
    path: &Path,
    address: &str,
    detached: bool,
    token_from_environment: bool,
) -> Result<bool, String> {
    if !detached
        && let Some(other) = read_record(path)
        && other.pid != std::process::id()
        && sys::alive(other.pid)
        && sys::is_ahpd(other.pid)
    {
        tracing::warn!(
            pid = other.pid,
            address = %other.address,
            "another ahpd is recorded in {}; this one runs without a record (status and stop will not see it)",
            path.display()
        );
        return Ok(false);
    }
    let mut record = DaemonRecord::for_this_process(address);
    record.token_from_environment |= token_from_environment;
    match write_record(path, &record) {
        Ok(()) => Ok(true),
        Err(e) if detached => Err(format!("cannot write {}: {e}", path.display())),
        Err(e) => {
            tracing::warn!(
                "cannot write {}: {e}; status and stop will not see this daemon",
                path.display()
            );
            Ok(false)
        }
    }
}

/// Removes `daemon.json` when it names this process.
pub fn remove_record_if_ours(path: &Path) {
    if read_record(path).is_some_and(|r| r.pid == std::process::id()) {
        let _ = std::fs::remove_file(path);
    }
}

/// The live daemon named by `daemon.json`; a stale record is removed.
pub fn running(loc: &Locations) -> Option<DaemonRecord> {
    let path = loc.daemon_record();
    let record = read_record(&path)?;
    if sys::alive(record.pid) && sys::is_ahpd(record.pid) {
        Some(record)
    } else {
        let _ = std::fs::remove_file(&path);
        None
    }
}

/// The user's arguments after removing the `start` word (and the program name).
pub fn start_argv(all: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut removed = false;
    let mut skip_value = false;
    for arg in all.iter().skip(1) {
        if skip_value {
            skip_value = false;
            out.push(arg.clone());
            continue;
        }
        if arg == "--config-file" {
            skip_value = true;
        } else if !removed && arg == "start" {
            removed = true;
            continue;
        }
        out.push(arg.clone());
    }
    out
}

/// Takes a `--connection-token` value out of the arguments, so neither the detached daemon's
/// command line (seen by `ps`) nor `daemon.json` holds it; it is handed over in
/// `AHPD_CONNECTION_TOKEN` instead.
pub fn take_token(argv: Vec<String>) -> (Vec<String>, Option<String>) {
    let mut out = Vec::new();
    let mut token = None;
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg);
            out.extend(args.by_ref());
            break;
        }
        if arg == "--connection-token" {
            token = args.next();
        } else if let Some(v) = arg.strip_prefix("--connection-token=") {
            token = Some(v.to_owned());
        } else {
            out.push(arg);
        }
    }
    (out, token)
}

/// `ahpd start`.
pub fn start(
    loc: &Locations,
    run: &RunArgs,
    argv: Vec<String>,
    cwd: &Path,
) -> Result<(), ProcessError> {
    if run.stdio {
        return Err(ProcessError::Usage(
            "start runs the daemon detached; --stdio needs a foreground run".into(),
        ));
    }
    if let Some(r) = running(loc) {
        println!("ahpd is already running (pid {}, {})", r.pid, r.address);
        return Ok(());
    }
    let (argv, token) = take_token(argv);
    spawn_detached(loc, argv, cwd, token)
}

fn spawn_detached(
    loc: &Locations,
    argv: Vec<String>,
    cwd: &Path,
    token: Option<String>,
) -> Result<(), ProcessError> {
    let failed =
        |what: &str, e: std::io::Error| ProcessError::Failed(format!("cannot {what}: {e}"));
    fsutil::ensure_dir(&loc.dir)
        .map_err(|e| failed(&format!("create {}", loc.dir.display()), e))?;
    let log_path = loc.daemon_log();
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(fsutil::PRIVATE_FILE)
        .open(&log_path)
        .map_err(|e| failed(&format!("open {}", log_path.display()), e))?;
    let _ = fsutil::tighten(&log_path);
    let log_err = log
        .try_clone()
        .map_err(|e| failed(&format!("open {}", log_path.display()), e))?;
    let exe = std::env::current_exe().map_err(|e| failed("find the ahpd executable", e))?;
    let record_path = loc.daemon_record();
    let _ = std::fs::remove_file(&record_path);
    let encoded = serde_json::to_string(&argv).unwrap_or_else(|_| "[]".into());
    let mut command = Command::new(exe);
    if let Some(t) = &token {
        command.env(TOKEN_ENV, t);
    }
    let mut child = command
        .args(&argv)
        .arg("--detached-child")
        .env(ARGV_ENV, encoded)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| failed("start the daemon", e))?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The child has no channel back to this process but its record and its exit, so both are
    // checked until one appears or the deadline passes.
    loop {
        if let Some(record) = read_record(&record_path).filter(|r| r.pid == pid) {
            let token = token.or_else(|| token_for(loc, &record));
            println!(
                "ahpd started (pid {pid}) on {}",
                token::url_with_token(&record.address, token.as_deref())
            );
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            print_log_tail(&log_path);
            return Err(ProcessError::ChildExited(status.code().unwrap_or(1)));
        }
        if Instant::now() > deadline {
            print_log_tail(&log_path);
            return Err(ProcessError::Failed(format!(
                "the daemon (pid {pid}) did not listen within 10 seconds; see {}",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn print_log_tail(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(20);
    for line in &lines[from..] {
        eprintln!("{line}");
    }
}

/// `ahpd stop`.
pub fn stop(loc: &Locations) -> Result<(), ProcessError> {
    let Some(record) = running(loc) else {
        println!("ahpd is not running");
        return Ok(());
    };
    stop_pid(loc, record.pid)?;
    println!("ahpd stopped (pid {})", record.pid);
    Ok(())
}

fn stop_pid(loc: &Locations, pid: u32) -> Result<(), ProcessError> {
    sys::signal(pid, false)
        .map_err(|e| ProcessError::Failed(format!("cannot signal pid {pid}: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while sys::alive(pid) {
        if Instant::now() > deadline {
            let _ = sys::signal(pid, true);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(loc.daemon_record());
    Ok(())
}

/// The token a client of the recorded daemon presents, derived from its recorded options and
/// the configuration (and `AHPD_CONNECTION_TOKEN`, as the daemon read it).
pub fn token_for(loc: &Locations, record: &DaemonRecord) -> Option<String> {
    let mut args = vec!["ahpd".to_owned()];
    args.extend(record.argv.iter().cloned());
    let cli = RunLine::try_parse_from(args).ok()?;
    let mut settings = config::load(loc).ok()?;
    // Relative token-file paths on the recorded command line are relative to its folder.
    settings.apply_flags_in(&cli.run, &record.cwd).ok()?;
    token_of(loc, &settings)
}

/// The token the settings (files and flags already applied) make a daemon require, read from
/// wherever they say it is kept.
pub fn token_of(loc: &Locations, settings: &config::Settings) -> Option<String> {
    match &settings.token.value {
        TokenSetting::Literal(s) => Some(s.expose().to_owned()),
        TokenSetting::SecretRef(name) => Vault::new(loc.vault())
            .read(name)
            .ok()
            .map(|s| s.expose().to_owned()),
        TokenSetting::File(p) => token::read(p).ok(),
        TokenSetting::Without => None,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ProcessError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProcessError::Failed(format!("cannot start the async runtime: {e}")))
}

/// `ahpd status`; returns the exit code (0 running, 3 not).
pub fn status(loc: &Locations, json: bool) -> Result<i32, ProcessError> {
    let Some(record) = running(loc) else {
        if json {
            println!("{}", serde_json::json!({"running": false}));
        } else {
            println!("ahpd is not running");
        }
        return Ok(3);
    };
    let token = token_for(loc, &record);
    let url = token::url_with_token(&record.address, token.as_deref());
    let answers = runtime()?.block_on(crate::client::answers_ping(
        &record.address,
        token.as_deref(),
    ));
    if json {
        println!(
            "{}",
            serde_json::json!({
                "running": true,
                "pid": record.pid,
                "address": record.address,
                "url": url,
                "version": record.version,
                "startedAt": record.started_at,
                "foreground": record.foreground,
                "answers": answers,
            })
        );
    } else {
        let uptime = record
            .started_at
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| {
                let secs = jiff::Timestamp::now().as_second() - t.as_second();
                format!(", up {}s", secs.max(0))
            })
            .unwrap_or_default();
        println!(
            "ahpd {} is running{} (pid {}) on {url}{uptime}; {}",
            record.version,
            if record.foreground {
                " in the foreground"
            } else {
                ""
            },
            record.pid,
            if answers {
                "it answers ping"
            } else {
                "it does not answer ping"
            }
        );
    }
    Ok(0)
}

/// `ahpd restart`.
pub fn restart(loc: &Locations, force: bool) -> Result<(), ProcessError> {
    let Some(record) = running(loc) else {
        return Err(ProcessError::Failed(
            "ahpd is not running: use ahpd start".into(),
        ));
    };
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    if record.token_from_environment && token.is_none() {
        return Err(ProcessError::Usage(format!(
            "the daemon was given its token in {TOKEN_ENV} or --connection-token, which are not kept: set {TOKEN_ENV} for the restart, or stop and start it again"
        )));
    }
    if !force {
        let token = token_for(loc, &record);
        let busy = runtime()?.block_on(busy_sessions(&record.address, token.as_deref()))?;
        if !busy.is_empty() {
            return Err(ProcessError::Failed(format!(
                "restart refused: a turn is at work in {} (use --force to restart anyway; turns waiting on a person are kept either way)",
                busy.join(", ")
            )));
        }
    }
    stop_pid(loc, record.pid)?;
    spawn_detached(loc, record.argv, &record.cwd, None)
}

/// Sessions with a chat whose turn is at work: the in-progress bit (8) without the rest of
/// `InputNeeded` (24). A turn waiting on a person is suspended by the graceful stop and asked
/// again after it, so it does not hold a restart up.
async fn busy_sessions(address: &str, token: Option<&str>) -> Result<Vec<String>, ProcessError> {
    let client = crate::client::connect(address, token)
        .await
        .map_err(ProcessError::Failed)?;
    let result: Result<serde_json::Value, _> = client
        .request(
            "listSessions",
            serde_json::json!({"channel": ahpd_sdk::ahp_types::ROOT_RESOURCE_URI}),
        )
        .await;
    client.shutdown().await;
    let value = result.map_err(|e| ProcessError::Failed(format!("listSessions failed: {e}")))?;
    let rows = value
        .get("items")
        .or_else(|| value.get("sessions"))
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(rows
        .iter()
        .filter(|r| at_work(r))
        .filter_map(|r| {
            r.get("resource")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        })
        .collect())
}

/// Whether a `listSessions` row has a turn at work. The session's status promotes a chat's
/// `InputNeeded` over another chat's `InProgress`, so the chats' own statuses are read when the
/// row has them.
fn at_work(row: &serde_json::Value) -> bool {
    const IN_PROGRESS: i64 = 8;
    const INPUT_NEEDED: i64 = 24;
    let working = |status: Option<i64>| status.is_some_and(|s| s & INPUT_NEEDED == IN_PROGRESS);
    let status = |v: &serde_json::Value| v.get("status").and_then(serde_json::Value::as_i64);
    match row.get("chats").and_then(serde_json::Value::as_array) {
        Some(chats) if chats.iter().any(|c| status(c).is_some()) => {
            chats.iter().any(|c| working(status(c)))
        }
        _ => working(status(row)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_waiting_on_a_person_is_not_at_work() {
        let row = |v: serde_json::Value| v;
        assert!(at_work(&row(serde_json::json!({"status": 8}))));
        assert!(!at_work(&row(serde_json::json!({"status": 24}))));
        assert!(!at_work(&row(serde_json::json!({"status": 1}))));
        // One chat waits on a person, another is at work: the session status says 24.
        assert!(at_work(&row(serde_json::json!({"status": 24,
            "chats": [{"resource": "a", "status": 24}, {"resource": "b", "status": 8}]}))));
        assert!(!at_work(&row(serde_json::json!({"status": 24,
            "chats": [{"resource": "a", "status": 24}, {"resource": "b", "status": 1}]}))));
    }

    #[test]
    fn a_token_on_the_start_line_is_taken_out() {
        let argv = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (rest, token) = take_token(argv(&[
            "--port",
            "0",
            "--connection-token",
            "s3",
            "--plugin",
            "p",
        ]));
        assert_eq!(rest, argv(&["--port", "0", "--plugin", "p"]));
        assert_eq!(token.as_deref(), Some("s3"));
        let (rest, token) = take_token(argv(&["--connection-token=s4"]));
        assert!(rest.is_empty());
        assert_eq!(token.as_deref(), Some("s4"));
    }

    #[test]
    fn a_recorded_relative_token_file_is_read_from_the_recorded_folder() {
        let root = tempfile::tempdir().expect("temp folder");
        let conf = root.path().join("conf");
        let started_in = root.path().join("started-in");
        std::fs::create_dir_all(&conf).expect("conf folder");
        std::fs::create_dir_all(started_in.join("keys")).expect("keys folder");
        std::fs::write(conf.join("ahpd.json"), "{}").expect("config file");
        std::fs::write(started_in.join("keys/tok"), "recorded-folder-token\n").expect("token");
        let loc = Locations::resolve(Some(&conf.join("ahpd.json"))).expect("locations");
        let before = std::env::current_dir().ok();
        let record = DaemonRecord {
            pid: 0,
            argv: vec!["--connection-token-file".into(), "keys/tok".into()],
            cwd: started_in,
            address: "ws://127.0.0.1:1".into(),
            version: String::new(),
            started_at: String::new(),
            token_from_environment: false,
            foreground: true,
        };
        assert_eq!(
            token_for(&loc, &record).as_deref(),
            Some("recorded-folder-token")
        );
        assert_eq!(std::env::current_dir().ok(), before);
    }

    #[test]
    fn the_start_word_is_removed_once() {
        let all: Vec<String> = ["ahpd", "--config-file", "start", "start", "--port", "0"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(
            start_argv(&all),
            vec!["--config-file", "start", "--port", "0"]
        );
    }
}
