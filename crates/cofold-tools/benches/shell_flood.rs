//! Memory under an output flood: exec_shell reads a 200 MB stream and must keep only its
//! character cap, so the process's resident memory grows by the cap plus a small constant.
//!
//! Baseline, in the same run: `std::process::Command::output()`, which keeps everything.
//! Figures come from VmHWM (peak resident set) in /proc/self/status, so this runs on Linux.
//! `SHELL_FLOOD_MB` changes the size; `COFOLD_BENCH_ENFORCE=1` exits non-zero when the growth
//! passes 4 bytes per kept character + 16 MiB.

use std::time::{Duration, Instant};

use cofold_tools::shell::{ShellEnv, ShellExecArgs, ShellSpec, exec_shell};

const CAP_CHARS: usize = 65_536;
const SLACK_BYTES: u64 = 16 << 20;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn peak_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    if !cfg!(target_os = "linux") {
        println!("shell_flood: needs /proc/self/status (Linux); skipped");
        return;
    }
    let megabytes: u64 = std::env::var("SHELL_FLOOD_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let bytes = megabytes * 1_000_000;
    let command = format!(
        "head -c {bytes} /dev/zero | tr '\\0' x; head -c {bytes} /dev/zero | tr '\\0' y >&2"
    );
    let cwd = std::env::temp_dir();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("shell_flood: no runtime: {error}");
            std::process::exit(1);
        }
    };
    // Warm the runtime and the allocator before the first reading.
    let _ = runtime.block_on(exec_shell(args("echo warm", &cwd)));

    let before = peak_bytes();
    let started = Instant::now();
    let result = runtime.block_on(exec_shell(args(&command, &cwd)));
    let ours_time = started.elapsed();
    let ours_growth = peak_bytes().saturating_sub(before);
    let result = match result {
        Ok(result) => result,
        Err(error) => {
            eprintln!("shell_flood: cannot start sh: {error}");
            std::process::exit(1);
        }
    };
    assert!(
        result.truncated && result.exit_code == Some(0),
        "the flood ran to its end"
    );
    let kept = (result.stdout.len() + result.stderr.len()) as u64;

    let before = peak_bytes();
    let started = Instant::now();
    let output = std::process::Command::new("sh")
        .args(["-c", &command])
        .output();
    let naive_time = started.elapsed();
    let naive_growth = peak_bytes().saturating_sub(before);
    let naive_kept = output
        .map(|o| (o.stdout.len() + o.stderr.len()) as u64)
        .unwrap_or(0);

    let streamed = 2 * bytes;
    println!(
        "shell_flood: {} MB per stream ({} MB in all), cap {CAP_CHARS} characters per stream",
        megabytes,
        streamed / 1_000_000
    );
    println!(
        "exec_shell:        peak RSS growth {:>8.2} MiB, kept {:>8.2} MiB, {:>6.2} s, {:>7.1} MB/s",
        mib(ours_growth),
        mib(kept),
        ours_time.as_secs_f64(),
        rate(streamed, ours_time)
    );
    println!(
        "Command::output(): peak RSS growth {:>8.2} MiB, kept {:>8.2} MiB, {:>6.2} s, {:>7.1} MB/s",
        mib(naive_growth),
        mib(naive_kept),
        naive_time.as_secs_f64(),
        rate(streamed, naive_time)
    );
    let ratio = if naive_growth == 0 {
        0.0
    } else {
        ours_growth as f64 / naive_growth as f64
    };
    println!("exec_shell / Command::output() peak growth: {ratio:.4}");
    let bound = 2 * 4 * CAP_CHARS as u64 + SLACK_BYTES;
    println!(
        "bound (2 streams × 4 bytes × cap + 16 MiB): {:.2} MiB",
        mib(bound)
    );
    if std::env::var("COFOLD_BENCH_ENFORCE").is_ok_and(|v| v == "1") && ours_growth > bound {
        eprintln!("shell_flood: growth over the bound");
        std::process::exit(1);
    }
}

fn args(command: &str, cwd: &std::path::Path) -> ShellExecArgs {
    ShellExecArgs {
        shell: ShellSpec::platform_default(),
        command: command.to_owned(),
        cwd: cwd.to_path_buf(),
        timeout: Duration::from_secs(600),
        max_output_chars: CAP_CHARS,
        cancel: None,
        env: ShellEnv::default(),
        base_env: None,
        cgroup: true,
        helper: None,
    }
}

fn rate(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / 1e6 / time.as_secs_f64().max(1e-9)
}
