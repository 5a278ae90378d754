//! Machines: what an agent asks of a container it runs in ([`MachineNeed`]), and the port a
//! container plugin implements so the host can run a session's agent inside one
//! ([`ComputerPort`]). The host knows nothing of containers: it prepares a machine, enters it,
//! starts an inner host there and talks to it through the process's standard streams.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;

use ahp_types::commands::SessionConfigValueItem;
use ahp_types::state::SessionConfigPropertySchema;
use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

/// The session setting that names a machine.
pub const COMPUTER_KEY: &str = "computer";

/// When a need applies, by how the machine keeps agent state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NeedWhen {
    /// Only for machines that bind the host's files (`state: "host"`).
    Host,
    /// Only for machines with state volumes (the default kind).
    Volume,
}

/// One file or folder copied into a state volume before the machine starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seed {
    /// The host path to copy (`~` is the daemon user's home).
    pub source: String,
    /// The name inside the volume; the source's base name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Entries of a seeded folder to copy (all when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// Entries of a seeded folder to leave out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop: Vec<String>,
}

/// What a need is: exactly one of these keys is present in its JSON form.
#[derive(Clone, PartialEq)]
pub enum NeedKind {
    /// A host folder bound at `target`.
    Directory {
        /// The host folder.
        path: String,
        /// Where it appears inside.
        target: String,
        /// Bound read-only.
        read_only: bool,
    },
    /// A host file bound at `target`.
    File {
        /// The host file.
        path: String,
        /// Where it appears inside.
        target: String,
        /// Bound read-only.
        read_only: bool,
    },
    /// A variable of the inner host's process.
    Env {
        /// The variable's name.
        name: String,
        /// Its value when no profile or plugin gives one: a string or `{ "$secret": name }`.
        default: Option<Value>,
    },
    /// A named volume at `target`, seeded from the host.
    State {
        /// Where the volume is mounted.
        target: String,
        /// What to copy in.
        seed: Vec<Seed>,
    },
    /// A program the machine carries; only `ahpd` exists.
    Part {
        /// The program.
        name: String,
    },
}

// Written out so a variable's default (an agent may default a key from its host's
// environment) never reaches a log line or a panic message.
impl std::fmt::Debug for NeedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NeedKind::Directory {
                path,
                target,
                read_only,
            } => f
                .debug_struct("Directory")
                .field("path", path)
                .field("target", target)
                .field("read_only", read_only)
                .finish(),
            NeedKind::File {
                path,
                target,
                read_only,
            } => f
                .debug_struct("File")
                .field("path", path)
                .field("target", target)
                .field("read_only", read_only)
                .finish(),
            NeedKind::Env { name, default } => f
                .debug_struct("Env")
                .field("name", name)
                .field("default", &default.as_ref().map(|_| "<set>"))
                .finish(),
            NeedKind::State { target, seed } => f
                .debug_struct("State")
                .field("target", target)
                .field("seed", seed)
                .finish(),
            NeedKind::Part { name } => f.debug_struct("Part").field("name", name).finish(),
        }
    }
}

/// One thing an agent asks of a machine.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineNeed {
    /// The kind and its fields.
    pub kind: NeedKind,
    /// Refuse a machine where nothing gives it a value.
    pub required: bool,
    /// One line for people.
    pub description: Option<String>,
    /// Applies only to one kind of machine.
    pub when: Option<NeedWhen>,
}

impl MachineNeed {
    /// A need of this kind, optional, for every machine.
    pub fn new(kind: NeedKind) -> Self {
        Self {
            kind,
            required: false,
            description: None,
            when: None,
        }
    }

    /// Marks it required.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Limits it to one kind of machine.
    pub fn when(mut self, when: NeedWhen) -> Self {
        self.when = Some(when);
        self
    }

    /// Reads the JSON form: the one key among `directory`, `file`, `env`, `state`, `part`
    /// present gives the kind; two or none is refused.
    pub fn from_json(value: &Value) -> Result<Self, NeedError> {
        let obj = value.as_object().ok_or(NeedError::NotObject)?;
        let kinds: Vec<&str> = ["directory", "file", "env", "state", "part"]
            .into_iter()
            .filter(|k| obj.contains_key(*k))
            .collect();
        let [kind] = kinds.as_slice() else {
            return Err(NeedError::Kinds(if kinds.is_empty() {
                "none".to_owned()
            } else {
                kinds.join(", ")
            }));
        };
        let text = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_owned);
        let need_text = |k: &str| text(k).ok_or_else(|| NeedError::NotText(k.to_owned()));
        let read_only = obj
            .get("readOnly")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let kind = match *kind {
            "directory" => NeedKind::Directory {
                path: need_text("directory")?,
                target: need_text("target")?,
                read_only,
            },
            "file" => NeedKind::File {
                path: need_text("file")?,
                target: need_text("target")?,
                read_only,
            },
            "env" => NeedKind::Env {
                name: need_text("env")?,
                default: obj.get("default").cloned(),
            },
            "state" => NeedKind::State {
                target: need_text("state")?,
                seed: match obj.get("seed") {
                    Some(s) => serde_json::from_value(s.clone())
                        .map_err(|e| NeedError::Seed(e.to_string()))?,
                    None => Vec::new(),
                },
            },
            _ => NeedKind::Part {
                name: need_text("part")?,
            },
        };
        let when = match obj.get("when") {
            Some(w) => Some(serde_json::from_value(w.clone()).map_err(|_| NeedError::When)?),
            None => None,
        };
        Ok(MachineNeed {
            kind,
            required: obj
                .get("required")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            description: text("description"),
            when,
        })
    }
}

/// Why the JSON form of a machine need was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeedError {
    /// The need is not a JSON object.
    #[error("a machine need is an object")]
    NotObject,
    /// Not exactly one kind key; holds the ones present, or `none`.
    #[error(
        "a machine need has exactly one of directory, file, env, state, part; this one has {0}"
    )]
    Kinds(String),
    /// A key that holds text holds something else.
    #[error("the need's {0} is a string")]
    NotText(String),
    /// The state seed is not a list of seed entries.
    #[error("{0}")]
    Seed(String),
    /// `when` is neither `host` nor `volume`.
    #[error("the need's when is host or volume")]
    When,
}

/// A session asking for a machine.
#[derive(Debug, Clone)]
pub struct PrepareRequest {
    /// The setting's value: `computer://<id>` or `disposable:<profile>`.
    pub value: String,
    /// The agent's provider id.
    pub provider: String,
    /// The session's URI.
    pub session: String,
    /// The session's first folder on the host.
    pub folder: Option<PathBuf>,
    /// What the agent asks of the machine, read now.
    pub needs: BTreeMap<String, MachineNeed>,
}

/// Why a machine could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// The request was wrong (an unknown machine, a limit): `-32602`.
    #[error("{0}")]
    Refused(String),
    /// The engine failed: `-32603`.
    #[error("{0}")]
    Failed(String),
}

/// What an inner host is started with.
#[derive(Debug, Clone)]
pub struct InnerStart {
    /// The plugin the inner host loads (`--plugin`).
    pub plugin: String,
    /// The agent's provider id.
    pub provider: String,
    /// The agent's needs, read now (variables are resolved at each start).
    pub needs: BTreeMap<String, MachineNeed>,
    /// The session's first folder on the host.
    pub folder: Option<PathBuf>,
    /// The host is started to read a conversation, not to run it: past conversations it opens
    /// leave their unfinished runs as they are (`ahpd --stdio --leave-unfinished`), for the
    /// session's own inner host to take up at its next turn.
    pub leave_unfinished: bool,
}

/// How an inner host ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InnerEnd {
    /// Its exit code, when it exited.
    pub code: Option<i64>,
    /// The signal that ended it, by name (`SIGKILL`).
    pub signal: Option<String>,
    /// The machine's exit code when the machine is down.
    pub machine_exit_code: Option<i64>,
    /// Whether the engine says the machine ran out of memory.
    pub oom_killed: bool,
    /// Whether the machine was deleted through this daemon while the host ran.
    pub deleted: bool,
}

impl InnerEnd {
    /// The `<how>` of a failure sentence: the code or signal, then the machine's state.
    pub fn how(&self) -> String {
        let mut out = match (&self.signal, self.code) {
            (Some(sig), _) => format!("it was killed by {sig}"),
            (None, Some(c)) if c > 128 => format!("it was killed by {}", signal_name(c - 128)),
            (None, Some(c)) => format!("it exited with code {c}"),
            (None, None) => "its output ended".to_owned(),
        };
        if let Some(code) = self.machine_exit_code {
            out.push_str(&format!("; the machine stopped with exit code {code}"));
            if self.oom_killed {
                out.push_str(", out of memory");
            }
        }
        out
    }
}

/// The name of a signal number, as the sentences spell it.
pub fn signal_name(n: i64) -> String {
    match n {
        1 => "SIGHUP".into(),
        2 => "SIGINT".into(),
        6 => "SIGABRT".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        13 => "SIGPIPE".into(),
        15 => "SIGTERM".into(),
        other => format!("signal {other}"),
    }
}

/// A running inner host: its standard streams and how it ends.
pub struct InnerProcess {
    /// Its standard input.
    pub stdin: Pin<Box<dyn AsyncWrite + Send>>,
    /// Its standard output: one JSON message per line.
    pub stdout: Pin<Box<dyn AsyncRead + Send>>,
    /// Its standard error.
    pub stderr: Pin<Box<dyn AsyncRead + Send>>,
    /// The folder it runs in, inside the machine.
    pub working_directory: Option<String>,
    /// Resolves once it ended.
    pub ended: BoxFuture<'static, InnerEnd>,
}

impl std::fmt::Debug for InnerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InnerProcess")
            .field("working_directory", &self.working_directory)
            .finish_non_exhaustive()
    }
}

/// A kept session that names a machine, handed to [`ComputerPort::adopt`] after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptSession {
    /// The session's URI.
    pub session: String,
    /// The machine's id; empty when the record still names a disposable profile, whose
    /// machine carries the session in a label.
    pub machine: String,
}

/// What the host asks of a container plugin. Object-safe.
#[async_trait]
pub trait ComputerPort: Send + Sync + 'static {
    /// The `computer` property of the session schema, with its default.
    fn setting(&self) -> SessionConfigPropertySchema;

    /// The values offered for a provider's `computer` setting.
    async fn completions(&self, provider: &str, query: Option<&str>)
    -> Vec<SessionConfigValueItem>;

    /// Turns a setting value into a running machine of this daemon; its id.
    async fn prepare(&self, request: PrepareRequest) -> Result<String, MachineError>;

    /// A session opened its backend in the machine.
    async fn enter(&self, id: &str, session: &str);

    /// A session in the machine was disposed.
    async fn leave(&self, id: &str, session: &str);

    /// Starts an inner host in the machine.
    async fn start_inner(&self, id: &str, start: InnerStart) -> Result<InnerProcess, MachineError>;

    /// After a restart: the kept sessions that name machines.
    async fn adopt(&self, kept: Vec<KeptSession>);

    /// Whether the machine is this daemon's and running, asked without starting it (a past
    /// session's transcript is read from a machine only while it runs). `true` by default.
    async fn running(&self, _id: &str) -> bool {
        true
    }

    /// The daemon is stopping, its sessions closed: pending work is settled (armed removals
    /// cleared, removals under way awaited). Nothing by default.
    async fn shutdown(&self) {}

    /// The host's agents that run nested, each time they change, so a machine made without a
    /// session (a client's write) is prepared for them and gets their needs. Nothing by
    /// default.
    fn nested_agents(&self, _agents: Vec<NestedNeeds>) {}
}

/// What an agent that runs nested asks of a machine, as a computer port is told it: the provider
/// it serves and its needs. (The proxy agent itself is [`crate::nested::NestedAgent`].)
#[derive(Debug, Clone, PartialEq)]
pub struct NestedNeeds {
    /// The agent's provider (its descriptor's).
    pub provider: String,
    /// Its machine needs, by name.
    pub needs: BTreeMap<String, MachineNeed>,
}
