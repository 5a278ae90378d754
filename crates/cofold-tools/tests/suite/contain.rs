//! Commands cannot outlive their call, and never see the daemon's secrets: real processes,
//! found afterwards by listing the system's processes.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cofold_tools::shell::{
    ShellEnv, ShellExecArgs, ShellOptions, ShellResult, ShellSpec, commands_get_a_cgroup,
    exec_shell, shell,
};
use serde_json::json;

use super::tools_driver::Caps;

/// A `sleep` argument no other process on the machine has: the test finds its processes by it.
fn unique_seconds() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("1000.{}{n:03}", std::process::id())
}

fn args(command: &str, cwd: &Path, timeout: Duration) -> ShellExecArgs {
    ShellExecArgs {
        shell: ShellSpec::platform_default(),
        command: command.to_owned(),
        cwd: cwd.to_path_buf(),
        timeout,
        max_output_chars: 10_000,
        cancel: None,
        env: ShellEnv::default(),
        base_env: None,
        cgroup: true,
        helper: None,
    }
}

/// Live processes (not zombies) whose command line holds `needle` as one argument.
#[cfg(target_os = "linux")]
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == needle.as_bytes())
        {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|at| stat.get(at + 2..at + 3))
            .unwrap_or("?");
        if state != "Z" && state != "X" {
            found.push(format!("{pid} {}", String::from_utf8_lossy(&cmdline)));
        }
    }
    found
}

/// Polls the process list until none holds `needle`, for at most 3 s after the call returned.
#[cfg(target_os = "linux")]
fn none_left(needle: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = processes_with(needle);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::yield_now();
    }
}

/// Runs `command` (with `{s}` standing for the unique sleep) and checks that nothing of it is
/// left, once in a cgroup of its own where one can be made and once with the marker scan alone;
/// returns the results.
#[cfg(target_os = "linux")]
async fn leaves_nothing(template: &str, timeout: Duration) -> Vec<ShellResult> {
    let mut results = Vec::new();
    for cgroup in [true, false] {
        results.push(leaves_nothing_with(template, timeout, cgroup).await);
    }
    results
}

#[cfg(target_os = "linux")]
async fn leaves_nothing_with(template: &str, timeout: Duration, cgroup: bool) -> ShellResult {
    let dir = tempfile::tempdir().expect("temp dir");
    let seconds = unique_seconds();
    let command = template.replace("{s}", &seconds);
    let mut run = args(&command, dir.path(), timeout);
    run.cgroup = cgroup;
    let result = exec_shell(run).await.expect("runs");
    let left = none_left(&seconds);
    assert!(
        left.is_empty(),
        "{command} (cgroup {cgroup}) left {left:?}; result {result:?}"
    );
    result
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_are_stopped_and_the_command_is_told() {
    for template in [
        "setsid sleep {s} &",
        "nohup sleep {s} > /dev/null 2>&1 &",
        "sleep {s} & echo started",
    ] {
        for result in leaves_nothing(template, Duration::from_secs(600)).await {
            assert_eq!(result.exit_code, Some(0), "{template}: {result:?}");
            assert!(!result.timed_out, "{template}: {result:?}");
            assert!(result.stopped >= 1, "{template}: {result:?}");
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_and_double_forks_die_with_the_call() {
    for template in [
        // The classic double fork: the middle process exits, the sleep is orphaned.
        "( ( sleep {s} & ) & ) ; echo forked",
        // A daemon: its own session, standard streams let go, the parent gone.
        "setsid sh -c 'sleep {s} < /dev/null > /dev/null 2>&1 &' < /dev/null > /dev/null 2>&1 &",
        // A new process group without a new session.
        "perl -e 'setpgrp(0,0); exec @ARGV' sleep {s} > /dev/null 2>&1 &",
    ] {
        for result in leaves_nothing(template, Duration::from_secs(600)).await {
            assert!(!result.timed_out, "{template}: {result:?}");
        }
    }
}

/// An orphan that ended before the call did is reaped, not left a zombie of the daemon (its
/// subreaper) for ever.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_that_already_ended_is_reaped() {
    let dir = tempfile::tempdir().expect("temp dir");
    for cgroup in [true, false] {
        let mut run = args(
            "( sh -c 'echo $$' & ) ; sleep 0.3",
            dir.path(),
            Duration::from_secs(600),
        );
        run.cgroup = cgroup;
        let result = exec_shell(run).await.expect("runs");
        let pid = result.stdout.trim().to_owned();
        assert!(!pid.is_empty(), "{result:?}");
        let deadline = Instant::now() + Duration::from_secs(3);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} is still there (cgroup {cgroup}): {}",
            std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default()
        );
    }
}

/// A daemon that also empties its environment carries no marker: only the call's cgroup holds
/// it. Where none can be made this is the documented gap, and the test says so instead.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_without_an_environment_dies_with_the_calls_cgroup() {
    if !commands_get_a_cgroup() {
        eprintln!("no cgroup v2 can be made here: the marker scan is all there is");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let own = exec_shell(args(
        "cat /proc/self/cgroup",
        dir.path(),
        Duration::from_secs(600),
    ))
    .await
    .expect("runs");
    assert!(own.stdout.contains("/cofold-call-"), "{own:?}");
    let template = "env -i setsid sh -c 'sleep {s} < /dev/null > /dev/null 2>&1 &' \
                    < /dev/null > /dev/null 2>&1 &";
    let result = leaves_nothing_with(template, Duration::from_secs(600), true).await;
    assert_eq!(result.exit_code, Some(0), "{result:?}");
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_command_past_its_timeout_is_killed() {
    for template in ["setsid sleep {s}", "setsid sleep {s} & wait"] {
        for result in leaves_nothing(template, Duration::from_secs(1)).await {
            assert!(result.timed_out, "{template}: {result:?}");
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_says_a_background_job_was_stopped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let caps = Caps::of(&shell(ShellOptions::default()), Some(dir.path())).await;
    let seconds = unique_seconds();
    let text = caps
        .ok(
            "shell_exec",
            json!({"command": format!("setsid sleep {seconds} & echo started")}),
        )
        .await;
    assert!(text.starts_with("exit 0\nstarted\n"), "{text}");
    assert!(
        text.ends_with("was stopped: nothing outlives its call]")
            || text.ends_with("were stopped: nothing outlives its call]"),
        "{text}"
    );
    assert!(none_left(&seconds).is_empty());
    // A command that leaves nothing behind gets no such line.
    let text = caps.ok("shell_exec", json!({"command": "echo done"})).await;
    assert_eq!(text, "exit 0\ndone");
    // Started behind the cgroup gate or not, the shell keeps its name and an empty input.
    let text = caps
        .ok("shell_exec", json!({"command": "echo $0; cat; echo end"}))
        .await;
    assert_eq!(text, "exit 0\nsh\nend");
}

fn daemon_env() -> Vec<(OsString, OsString)> {
    [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", "/home/someone".to_owned()),
        ("PLAIN_SETTING", "visible-1".to_owned()),
        ("COPAPO_API_KEY", "sk-copapo-secret".to_owned()),
        ("OPENAI_API_KEY", "sk-openai-secret".to_owned()),
        ("GITHUB_TOKEN", "ghp-secret".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret".to_owned()),
        ("PGPASSWORD", "pg-secret".to_owned()),
        ("GOOGLE_APPLICATION_CREDENTIALS", "gcp-secret".to_owned()),
        ("COFOLD_HOME", "cofold-secret".to_owned()),
        ("AHPD_CONNECTION_TOKEN", "ahpd-secret".to_owned()),
        ("NPM_TOKEN", "npm-wanted".to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| (OsString::from(name), OsString::from(value)))
    .collect()
}

#[cfg(unix)]
#[tokio::test]
async fn env_prints_none_of_the_excluded_variables() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut run = args("env", dir.path(), Duration::from_secs(600));
    run.base_env = Some(daemon_env());
    let result = exec_shell(run.clone()).await.expect("runs");
    assert_eq!(result.exit_code, Some(0), "{result:?}");
    assert!(
        result.stdout.contains("PLAIN_SETTING=visible-1"),
        "{result:?}"
    );
    assert!(
        !result.stdout.contains("secret") && !result.stdout.contains("npm-wanted"),
        "{}",
        result.stdout
    );

    // inherit keeps one, exclude drops another, set adds and replaces.
    run.env = ShellEnv {
        inherit: vec!["npm_*".into()],
        exclude: vec!["PLAIN_*".into()],
        set: [
            ("ADDED".to_owned(), "added-1".to_owned()),
            ("HOME".to_owned(), "/elsewhere".to_owned()),
        ]
        .into_iter()
        .collect(),
    };
    let result = exec_shell(run).await.expect("runs");
    let lines: Vec<&str> = result.stdout.lines().collect();
    assert!(lines.contains(&"NPM_TOKEN=npm-wanted"), "{lines:?}");
    assert!(lines.contains(&"ADDED=added-1"), "{lines:?}");
    assert!(lines.contains(&"HOME=/elsewhere"), "{lines:?}");
    assert!(!result.stdout.contains("PLAIN_SETTING"), "{lines:?}");
    assert!(!result.stdout.contains("secret"), "{lines:?}");
}

#[cfg(unix)]
#[tokio::test]
async fn the_tool_filters_the_environment_it_was_given() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = ShellOptions {
        base_env: Some(Arc::new(daemon_env())),
        ..ShellOptions::default()
    };
    let caps = Caps::of(&shell(options), Some(dir.path())).await;
    let text = caps.ok("shell_exec", json!({"command": "env"})).await;
    assert!(text.contains("PLAIN_SETTING=visible-1"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

/// The per-call helper of this crate's own `cofold-contain` program.
#[cfg(target_os = "linux")]
fn helper() -> cofold_tools::shell::reaper::Helper {
    cofold_tools::shell::reaper::Helper {
        program: env!("CARGO_BIN_EXE_cofold-contain").into(),
        args: Vec::new(),
    }
}

/// Runs `template` behind the helper, in a cgroup and without, and checks that nothing of it is
/// left once the call returned.
#[cfg(target_os = "linux")]
async fn helper_leaves_nothing(template: &str, timeout: Duration) -> Vec<ShellResult> {
    let mut results = Vec::new();
    for cgroup in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let seconds = unique_seconds();
        let command = template.replace("{s}", &seconds);
        let mut run = args(&command, dir.path(), timeout);
        run.cgroup = cgroup;
        run.helper = Some(helper());
        let result = exec_shell(run).await.expect("runs");
        // Listed at once: the helper has reaped everything before the call returns.
        let left = processes_with(&seconds);
        assert!(
            left.is_empty(),
            "{command} (cgroup {cgroup}) left {left:?}; result {result:?}"
        );
        results.push(result);
    }
    results
}

/// What no marker scan can find: a daemon that drops the marker, starts a session of its own
/// and whose parent is gone at once. Behind the helper, its ancestry gives it away.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_helper_nothing_outlives_its_call_whatever_it_does() {
    for template in [
        "env -u COFOLD_SHELL_CALL setsid -f sleep {s}",
        "env -i setsid -f sleep {s}; echo started",
        "( ( env -u COFOLD_SHELL_CALL sleep {s} & ) & ) ; echo forked",
        "nohup env -u COFOLD_SHELL_CALL sleep {s} > /dev/null 2>&1 &",
        "setsid sh -c 'env -i sleep {s} < /dev/null > /dev/null 2>&1 &' < /dev/null > /dev/null 2>&1 &",
    ] {
        for result in helper_leaves_nothing(template, Duration::from_secs(600)).await {
            assert_eq!(result.exit_code, Some(0), "{template}: {result:?}");
            assert!(result.stopped >= 1, "{template}: {result:?}");
        }
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_the_helper_a_timeout_ends_everything_and_exit_codes_come_through() {
    for result in helper_leaves_nothing(
        "env -u COFOLD_SHELL_CALL setsid -f sleep {s}; sleep {s}",
        Duration::from_millis(500),
    )
    .await
    {
        assert!(result.timed_out, "{result:?}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut run = args(
        "echo out; echo err >&2; exit 7",
        dir.path(),
        Duration::from_secs(60),
    );
    run.helper = Some(helper());
    let result = exec_shell(run.clone()).await.expect("runs");
    assert_eq!(
        (
            result.exit_code,
            result.stdout.as_str(),
            result.stderr.as_str(),
            result.stopped
        ),
        (Some(7), "out\n", "err\n", 0),
        "{result:?}"
    );
    run.command = "kill -TERM $$".into();
    let result = exec_shell(run.clone()).await.expect("runs");
    assert_eq!(
        (result.exit_code, result.signal),
        (None, Some(15)),
        "{result:?}"
    );
    // The shell keeps its name and an empty input behind the helper.
    run.command = "echo $0; cat; echo end".into();
    let result = exec_shell(run).await.expect("runs");
    assert_eq!(result.stdout, "sh\nend\n", "{result:?}");
}

/// A command that kills the helper just above it hands its processes to the outer half, which
/// ends them.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_helper_above_frees_nothing() {
    helper_leaves_nothing(
        "env -u COFOLD_SHELL_CALL setsid -f sleep {s}; kill -9 $PPID",
        Duration::from_secs(600),
    )
    .await;
}

/// A job that moves itself out of its call's cgroup (to the daemon's own, which a delegated
/// tree lets it write) still dies with the call: it is still below the helper.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_leaves_its_cgroup_still_dies_with_the_call() {
    if !commands_get_a_cgroup() {
        eprintln!("no cgroup v2 can be made here: nothing to leave");
        return;
    }
    // The daemon's (this process's) own cgroup folder, where the job moves itself.
    let own = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).expect("v2");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mount = mounts
        .lines()
        .find_map(|line| {
            let (fields, kind) = line.split_once(" - ")?;
            kind.starts_with("cgroup2 ")
                .then(|| fields.split(' ').nth(4).map(str::to_owned))
                .flatten()
        })
        .expect("cgroup2 mount");
    let parent = format!("{mount}/{}", path.trim_start_matches('/'));
    // The job says, through a FIFO, once it is out; the shell waits for that word and exits.
    let template = format!(
        "mkfifo ready; setsid sh -c 'echo $$ > {parent}/cgroup.procs && \
         grep -q \"^0::{path}$\" /proc/self/cgroup && echo moved > ready && \
         exec env -u COFOLD_SHELL_CALL sleep {{s}}' < /dev/null > /dev/null 2>&1 & cat ready"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let seconds = unique_seconds();
    let command = template.replace("{s}", &seconds);
    let mut run = args(&command, dir.path(), Duration::from_secs(30));
    run.helper = Some(helper());
    let result = exec_shell(run).await.expect("runs");
    assert_eq!(
        (result.exit_code, result.stdout.as_str()),
        (Some(0), "moved\n"),
        "{result:?}"
    );
    let left = processes_with(&seconds);
    assert!(left.is_empty(), "left {left:?}; {result:?}");
}

/// When the process that started the helper dies mid-call (the daemon, killed), the helper
/// ends everything the call started.
#[cfg(target_os = "linux")]
#[test]
fn the_helper_ends_the_call_when_its_starter_dies() {
    use std::io::BufRead as _;
    let seconds = unique_seconds();
    let script = format!(
        "{} -- sh -c 'env -u COFOLD_SHELL_CALL setsid -f sleep {seconds}; sleep {seconds}' & echo $!; wait",
        env!("CARGO_BIN_EXE_cofold-contain")
    );
    let mut starter = std::process::Command::new("sh")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    let mut line = String::new();
    std::io::BufReader::new(starter.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reads");
    // Both sleeps are running before the starter dies.
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(&seconds).len() < 2 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(
        processes_with(&seconds).len(),
        2,
        "{:?}",
        processes_with(&seconds)
    );
    starter.kill().expect("kill");
    starter.wait().expect("wait");
    let left = none_left(&seconds);
    assert!(left.is_empty(), "left {left:?}");
}
