//! A cgroup v2 of the call's own, made under the daemon's cgroup where the daemon may create
//! one: every process the command starts stays in it whatever it does with its environment,
//! session or parents, so the stop finds them all.
//!
//! The standard library cannot start a process inside a cgroup, so the shell is started behind a
//! gate: `/bin/sh` waiting for one line on its standard input, moved into the group, then let
//! through to `exec` the real shell. Nothing the command runs starts outside the group. A
//! process running as root can still move itself out of it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One call's group; removed when dropped, once its processes are gone.
#[derive(Debug)]
pub(crate) struct CallGroup {
    dir: PathBuf,
}

/// The daemon's own cgroup v2 folder, when it can make groups under it (tried once).
fn parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            let dir = own_dir()?;
            let probe = dir.join(format!("cofold-probe-{}", std::process::id()));
            std::fs::create_dir(&probe).ok()?;
            let usable = probe.join("cgroup.procs").exists();
            let _ = std::fs::remove_dir(&probe);
            usable.then_some(dir)
        })
        .as_deref()
}

/// Where the daemon's cgroup v2 is: its path in `/proc/self/cgroup` (the `0::` line) under the
/// cgroup2 mount point of `/proc/self/mountinfo`.
fn own_dir() -> Option<PathBuf> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = groups.lines().find_map(|line| line.strip_prefix("0::"))?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mounts.lines().find_map(|line| {
        let (fields, kind) = line.split_once(" - ")?;
        kind.starts_with("cgroup2 ")
            .then(|| fields.split(' ').nth(4).map(PathBuf::from))
            .flatten()
    })?;
    Some(mount.join(path.trim_start_matches('/')))
}

/// Whether commands run in a cgroup of their own here.
pub(crate) fn available() -> bool {
    parent().is_some()
}

impl CallGroup {
    /// A new, empty group for the call marked `marker`; `None` where none can be made.
    pub(crate) fn create(marker: &str) -> Option<CallGroup> {
        let dir = parent()?.join(format!("cofold-call-{marker}"));
        std::fs::create_dir(&dir).ok()?;
        Some(CallGroup { dir })
    }

    /// Moves the process `pid` (the shell) into the group.
    pub(crate) fn adopt(&self, pid: u32) {
        if let Err(error) = std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()) {
            tracing::debug!(%error, "the shell stays out of its call's cgroup");
        }
    }

    /// The processes in the group now.
    pub(crate) fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Kills every process in the group at once, forks in flight included, where the kernel
    /// has `cgroup.kill` (5.14 and later); the scans that follow catch the rest either way.
    pub(crate) fn kill(&self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
    }

    fn populated(&self) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.events"))
            .map(|events| events.lines().any(|line| line == "populated 1"))
            .unwrap_or(false)
    }
}

#[cfg(unix)]
/// The program `sh` would run for `program`: itself when it names a path, else the first
/// executable of that name along `path` (the command's `PATH`).
pub(crate) fn resolve_program(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let candidate = PathBuf::from(program);
        return executable(&candidate).then_some(candidate);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_absolute() && executable(candidate))
}

/// The gate's script: one line on standard input opens it (end of input closes it unopened),
/// and the real shell gets `/dev/null` as standard input, as it would have without the gate.
pub(crate) const GATE_SCRIPT: &str = "read -r _ || exit 125; exec \"$@\" < /dev/null";

/// The shell that keeps the gate.
pub(crate) const GATE_SHELL: &str = "/bin/sh";

impl Drop for CallGroup {
    fn drop(&mut self) {
        // A group can only be removed once empty; killed processes leave it as they exit.
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.populated() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Err(error) = std::fs::remove_dir(&self.dir) {
            tracing::warn!(%error, dir = %self.dir.display(), "cannot remove a call's cgroup");
        }
    }
}
