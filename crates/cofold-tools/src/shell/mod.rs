//! The shell capability: `shell_exec`, one command through the platform shell in the run's
//! workspace, and `exec_shell`, the runner on its own.
//!
//! A command cannot outlive its call. Where the process installed a per-call helper
//! ([`reaper::install`], or [`ShellOptions::helper`]; Linux), the shell starts behind it: a child
//! subreaper that ends everything below it when the call ends or its starter goes away, whatever
//! those processes did to their environment, session or process group (see the [`reaper`]
//! module for how, and its limits). Besides, and alone without a helper, each command carries a
//! marker of its own in its environment ([`MARKER_VAR`]), which children inherit through `fork`,
//! `setsid`, `setpgid`, `nohup` and a daemon's double fork; without a helper the daemon makes
//! itself a child subreaper (Linux), so orphans come back to it rather than to init. When the
//! call ends every live process holding the marker, every process in one of their process groups
//! or sessions (the daemon's own excepted), and every descendant of those is killed with
//! `SIGKILL`, scanning `/proc` again until none is left; the daemon then reaps the ones
//! re-parented to it, and the call's orphans that had already ended. A command that left
//! something running is told so in its result.
//!
//! Being a subreaper is process-wide: an orphan of anything else the daemon starts (not a
//! command) is re-parented to the daemon too, and if it ends it stays a zombie until the daemon
//! exits, since only a call's own processes are reaped.
//!
//! Where the daemon may create cgroups under its own cgroup v2 (root, or a delegated tree such
//! as a systemd user service's), each call also gets a group of its own: the shell (or its
//! helper) is moved into it before it runs anything, everything it starts stays there unless it
//! moves itself out, and the stop kills the group (`cgroup.kill`) besides what the helper and
//! the scan find. [`commands_get_a_cgroup`] says which applies.
//!
//! Limits without a helper or a cgroup: a process that empties its environment, starts a session
//! of its own and whose parents have all exited before the scan is not recognised. With a
//! cgroup alone, a process that can write another group's `cgroup.procs` moves itself out.
//! Either way another user's processes (after a setuid program) can be neither read nor killed,
//! and the scans give up after 5 s on a tree that forks faster than they kill. On other Unix
//! systems the command's process group is killed, on Windows its process tree.
//!
//! The environment is the daemon's minus the variables [`DEFAULT_EXCLUDE`] matches, as
//! [`ShellEnv`] configures (`tools.shell.env`).

mod cgroup;
mod contain;
mod env;
mod exec;
pub mod reaper;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::tool::{
    Tool, ToolContext, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn,
};
use serde::Deserialize;
use serde_json::{Value, json};

pub use contain::MARKER_VAR;

/// Whether each command runs in a cgroup v2 of its own on this machine (the daemon may create
/// groups under its own); without one, the marker scan alone finds a call's processes.
pub fn commands_get_a_cgroup() -> bool {
    cgroup::available()
}
pub use env::{DEFAULT_EXCLUDE, ShellEnv};
pub use exec::{ShellExecArgs, ShellResult, ShellSpec, TRUNCATED_MARKER, exec_shell};

use crate::paths::{absolute_of, display_path, normalize, resolve_within};

/// Prints a millisecond count as seconds, the shortest decimal with no trailing zeros:
/// 300 → `0.3`, 1500 → `1.5`, 120000 → `120`.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

/// Options of the shell capability. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    /// Time limit of a call that gives no `timeoutMs` (default 120 000 ms).
    pub timeout_ms: u64,
    /// Upper bound for any call (default 600 000 ms).
    pub max_timeout_ms: u64,
    /// Characters kept per stream (default 65 536).
    pub max_output_chars: usize,
    /// The shell; `None` is [`ShellSpec::platform_default`].
    pub shell: Option<ShellSpec>,
    /// Which of the daemon's environment variables commands see (default: all but those
    /// [`DEFAULT_EXCLUDE`] matches).
    pub env: ShellEnv,
    /// The variables `env` filters; `None` is the daemon's own environment at each call.
    pub base_env: Option<Arc<Vec<(OsString, OsString)>>>,
    /// The per-call helper commands start behind; `None` is the process's
    /// ([`reaper::install`]).
    pub helper: Option<reaper::Helper>,
}

impl Default for ShellOptions {
    fn default() -> Self {
        Self {
            timeout_ms: 120_000,
            max_timeout_ms: 600_000,
            max_output_chars: 65_536,
            shell: None,
            env: ShellEnv::default(),
            base_env: None,
            helper: None,
        }
    }
}

/// The shell capability (id `shell`), built by [`shell`].
#[derive(Debug, Clone)]
pub struct ShellCapability {
    options: Arc<ShellOptions>,
    spec: Arc<ShellSpec>,
}

/// Builds the shell capability: `shell_exec` and its instructions section.
pub fn shell(options: ShellOptions) -> ShellCapability {
    let spec = options.shell.clone().unwrap_or_default();
    ShellCapability {
        options: Arc::new(options),
        spec: Arc::new(spec),
    }
}

/// The workspace a run works against: the session's, or the current directory without one.
fn workspace_of(args: &CapabilityArgs) -> PathBuf {
    let given = args.workspace.as_deref().unwrap_or(".");
    normalize(&absolute_of(Path::new(given)))
}

#[async_trait]
impl Capability for ShellCapability {
    fn id(&self) -> &str {
        "shell"
    }

    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        let run = Arc::new(Run {
            workspace: workspace_of(args),
            options: Arc::clone(&self.options),
            spec: Arc::clone(&self.spec),
        });
        Tool::new(shell_exec_def(run))
            .map(|tool| vec![tool])
            .map_err(|e| CapabilityError::from(e.to_string()))
    }

    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        let name = self.spec.name();
        Ok(Some(format!(
            "shell_exec runs each command through {name} and returns when it ends. It is not a \
             terminal session: a cd or a variable does not survive to the next call, so steps \
             that depend on each other go into one command.\n\
             Interactive or never-ending commands run until the timeout, so pass flags that make \
             them finish, and do not start servers or watchers: whatever a command leaves running \
             (a background job, a daemon) is stopped when its call ends."
        )))
    }
}

/// What one run's shell_exec captured.
struct Run {
    workspace: PathBuf,
    options: Arc<ShellOptions>,
    spec: Arc<ShellSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShellInput {
    command: String,
    cwd: Option<String>,
    timeout_ms: Option<u64>,
}

/// Why shell_exec refused.
#[derive(Debug, thiserror::Error)]
enum ShellRefusal {
    #[error("no folder at {0}")]
    NoFolder(String),
    #[error("cannot start {command}: {error}")]
    CannotStart {
        command: String,
        error: std::io::Error,
    },
    #[error("{0}")]
    BadInput(String),
}

fn shell_exec_def(run: Arc<Run>) -> ToolDef {
    let options = &run.options;
    let name = run.spec.name();
    let description = format!(
        "Run one {name} command in the workspace; you get its exit code, stdout and stderr. It is \
         stopped after {} s unless timeoutMs says otherwise, {} s at most. Each call starts fresh: \
         nothing carries over from the previous one.",
        seconds(options.timeout_ms.min(options.max_timeout_ms)),
        seconds(options.max_timeout_ms),
    );
    let input = json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": format!("{name} syntax")},
            "cwd": {"type": "string", "description": "Working folder, absolute or relative to the workspace; default the workspace"},
            "timeoutMs": {"type": "integer", "minimum": 1, "maximum": options.max_timeout_ms, "description": "Time limit for this command, in milliseconds"},
        },
        "required": ["command"],
        "additionalProperties": false,
    });
    let handler_run = Arc::clone(&run);
    ToolDef::new(
        "shell_exec",
        description,
        input,
        handler_fn(move |input: Value, ctx: ToolContext| {
            let run = Arc::clone(&handler_run);
            async move { run.execute(input, ctx).await.map(ToolOutput::from) }
        }),
    )
    .effects(ToolEffects {
        writes: true,
        destructive: true,
        ..ToolEffects::default()
    })
    .subject(|input: &Value| {
        input
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

impl Run {
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let input: ShellInput = serde_json::from_value(input)
            .map_err(|e| ToolError::failed(ShellRefusal::BadInput(format!("bad input: {e}"))))?;
        let options = &self.options;
        let timeout_ms = input
            .timeout_ms
            .unwrap_or(options.timeout_ms)
            .min(options.max_timeout_ms);
        let cwd = resolve_within(
            &self.workspace,
            Path::new(input.cwd.as_deref().unwrap_or(".")),
        )
        .absolute;
        let is_folder = tokio::fs::metadata(&cwd)
            .await
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_folder {
            return Err(ToolError::failed(ShellRefusal::NoFolder(display_path(
                &self.workspace,
                &cwd,
            ))));
        }
        let result = exec_shell(ShellExecArgs {
            shell: (*self.spec).clone(),
            command: input.command,
            cwd,
            timeout: Duration::from_millis(timeout_ms),
            max_output_chars: options.max_output_chars,
            cancel: Some(ctx.signal.token().clone()),
            env: options.env.clone(),
            base_env: options.base_env.as_ref().map(|vars| vars.to_vec()),
            cgroup: true,
            helper: options.helper.clone(),
        })
        .await
        .map_err(|error| {
            ToolError::failed(ShellRefusal::CannotStart {
                command: self.spec.command.clone(),
                error,
            })
        })?;
        Ok(render(&result, timeout_ms))
    }
}

/// The text the model reads: the first line says how it ended, then stdout, then stderr under
/// `--- stderr ---`.
pub(crate) fn render(result: &ShellResult, timeout_ms: u64) -> String {
    let head = if result.aborted {
        "killed: the run was cancelled".to_owned()
    } else if result.timed_out {
        format!("killed: timed out after {} s", seconds(timeout_ms))
    } else if let Some(signal) = result.signal {
        format!("killed: signal {signal}")
    } else {
        format!("exit {}", result.exit_code.unwrap_or(-1))
    };
    let mut parts = vec![head];
    let stdout = result.stdout.trim_end();
    if !stdout.is_empty() {
        parts.push(stdout.to_owned());
    }
    let stderr = result.stderr.trim_end();
    if !stderr.is_empty() {
        parts.push(format!("--- stderr ---\n{stderr}"));
    }
    match result.stopped {
        0 => {}
        1 => parts.push(
            "[1 process the command left running (a background job) was stopped: nothing \
             outlives its call]"
                .to_owned(),
        ),
        n => parts.push(format!(
            "[{n} processes the command left running (background jobs) were stopped: nothing \
             outlives its call]"
        )),
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_print_without_trailing_zeros() {
        assert_eq!(seconds(300), "0.3");
        assert_eq!(seconds(1500), "1.5");
        assert_eq!(seconds(50), "0.05");
        assert_eq!(seconds(20_000), "20");
        assert_eq!(seconds(120_000), "120");
    }

    #[test]
    fn the_first_line_that_applies_wins() {
        let mut result = ShellResult {
            stdout: "out\n".into(),
            stderr: "err  \n".into(),
            exit_code: Some(3),
            ..ShellResult::default()
        };
        assert_eq!(render(&result, 1000), "exit 3\nout\n--- stderr ---\nerr");
        result.timed_out = true;
        assert_eq!(
            render(&result, 300),
            "killed: timed out after 0.3 s\nout\n--- stderr ---\nerr"
        );
        result.aborted = true;
        result.stdout.clear();
        result.stderr.clear();
        assert_eq!(render(&result, 300), "killed: the run was cancelled");
    }
}
