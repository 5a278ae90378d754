//! Ending a stdio server's whole process tree, the way the shell tool ends a command's.
//!
//! Where the daemon installed a containing helper ([`contain_with`]), each server is started
//! behind it: a child subreaper of the server's own that ends every process below it when the
//! server exits, when the daemon kills it, or when the daemon goes away, whatever those
//! processes did to their session or process group (the daemon's `__contain` subcommand; its
//! limits are in SECURITY.md). Without one, killing the server's process group is all there is.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

static HELPER: OnceLock<(PathBuf, Vec<OsString>)> = OnceLock::new();

/// Starts every stdio server of this process behind `program args… -- SERVER ARGS…` (once;
/// later calls are ignored).
pub fn contain_with(program: PathBuf, args: Vec<OsString>) {
    let _ = HELPER.set((program, args));
}

/// The helper in force, if any.
pub(crate) fn helper() -> Option<&'static (PathBuf, Vec<OsString>)> {
    HELPER.get()
}

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
