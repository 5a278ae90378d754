//! Ending a stdio server's whole process tree, the way the shell tool ends a command's.

/// Sends SIGKILL to the process group `pid` leads (each stdio server is started as the leader
/// of its own group). A group already gone is not an error.
#[cfg(unix)]
pub(crate) fn kill_group(pid: u32) {
    use rustix::process::{Pid, Signal, kill_process_group};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

/// `taskkill /T /F` ends the tree.
#[cfg(windows)]
pub(crate) fn kill_group(pid: u32) {
    let _ = std::process::Command::new("taskkill")
        .args(["/pid", &pid.to_string(), "/T", "/F"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}
