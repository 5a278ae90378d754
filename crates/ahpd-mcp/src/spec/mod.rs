//! The `mcpServers` setting, in the shapes Claude Code and Codex write: one entry per server,
//! each checked whole before it starts. A wrong entry becomes a server that fails with the key
//! that is wrong (never quoting a value), so no server runs half configured and the others run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The per-call time limit when an entry sets none.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting and the `initialize` handshake may take when an entry sets no limit.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A wrong entry: the key (`mcpServers.time.args[1]`) and what is wrong with it, never quoting a
/// value (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct SpecError {
    /// The dotted key, starting at the name the caller gave the whole setting.
    pub key: String,
    /// What is wrong, as one sentence.
    pub problem: String,
}

fn err(key: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        key: key.into(),
        problem: problem.into(),
    }
}

/// An environment or header value: written out, or a reference to a secret the daemon keeps.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum SecretValue {
    /// The value itself.
    Literal(String),
    /// `{"$secret": "<name>"}`: read from the vault each time the server starts.
    Secret(String),
}

// Either kind may be a secret: the value never reaches a log through Debug.
impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretValue::Literal(_) => f.write_str("Literal(..)"),
            SecretValue::Secret(name) => write!(f, "Secret({name})"),
        }
    }
}

/// How the daemon reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its working folder (else the daemon's).
        cwd: Option<PathBuf>,
        /// Variables set over the daemon's environment (less the secret-looking ones).
        env: BTreeMap<String, SecretValue>,
        /// Variables of the daemon's environment passed on even when they look secret (Codex's
        /// `env_vars`).
        env_vars: Vec<String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, SecretValue>,
    },
    /// The older HTTP with server-sent events transport (`"type": "sse"`): understood, but the
    /// SDK the daemon is built on has no client for it, so such a server fails saying so.
    Sse {
        /// The endpoint's URL.
        url: String,
        /// Headers it would be sent.
        headers: BTreeMap<String, SecretValue>,
    },
    /// An entry that could not be read: its server fails with this reason while the others
    /// run.
    Invalid(SpecError),
}

/// Which of a server's tools run without asking a person.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Trust {
    /// None beyond what the mode lets run; the server's own read-only marks do not count.
    #[default]
    ReadOnly,
    /// Every tool of the server (`"trust": true`), and its read-only marks count.
    All,
    /// These tools (`"allow": [...]`).
    Tools(BTreeSet<String>),
}

impl Trust {
    /// Whether calls of `tool` were approved in advance: the person is not asked, though a
    /// mode that refuses what is not read-only still refuses them.
    pub fn trusts(&self, tool: &str) -> bool {
        match self {
            Trust::ReadOnly => false,
            Trust::All => true,
            Trust::Tools(names) => names.contains(tool),
        }
    }

    /// Whether the server's `readOnlyHint` is believed: only for a server the person trusts.
    pub fn believes_hints(&self) -> bool {
        matches!(self, Trust::All)
    }
}

/// Which of a server's tools are offered at all (Codex's `enabled_tools` and `disabled_tools`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ToolFilter {
    /// Only these, when set.
    pub only: Option<BTreeSet<String>>,
    /// Never these.
    pub never: BTreeSet<String>,
}

impl ToolFilter {
    /// Whether `tool` is offered.
    pub fn offers(&self, tool: &str) -> bool {
        !self.never.contains(tool) && self.only.as_ref().is_none_or(|only| only.contains(tool))
    }
}

/// One checked entry of `mcpServers`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    /// How to reach it.
    pub transport: Transport,
    /// `false` when the entry says `"enabled": false` (or `"disabled": true`): kept in the
    /// configuration, never started.
    pub enabled: bool,
    /// Started with the daemon rather than with the first session that may use it.
    pub eager: bool,
    /// Which tools need no asking.
    pub trust: Trust,
    /// Which tools are offered.
    pub tools: ToolFilter,
    /// The time limit of one tool call.
    pub call_timeout: Duration,
    /// The time limit of connecting and the handshake.
    pub startup_timeout: Duration,
    /// Whether `${VAR}` references are expanded from the daemon's environment (the daemon's own
    /// files); a record's entries are passed as written.
    pub variables: bool,
}

impl ServerSpec {
    /// An entry that fails with `error`.
    pub fn invalid(error: SpecError) -> ServerSpec {
        ServerSpec {
            transport: Transport::Invalid(error),
            enabled: true,
            eager: false,
            trust: Trust::ReadOnly,
            tools: ToolFilter::default(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            variables: true,
        }
    }

    /// `stdio`, `http`, `sse` or `invalid`.
    pub fn kind(&self) -> &'static str {
        match self.transport {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
            Transport::Sse { .. } => "sse",
            Transport::Invalid(_) => "invalid",
        }
    }

    /// Why the entry cannot be used at all, when it cannot: its reading failed, or its
    /// transport has no client here.
    pub fn unusable(&self) -> Option<String> {
        match &self.transport {
            Transport::Invalid(e) => Some(e.to_string()),
            Transport::Sse { .. } => Some(SSE_UNSUPPORTED.to_owned()),
            _ => None,
        }
    }

    /// The command line or URL, as written (references unexpanded).
    pub fn target(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => std::iter::once(command.clone())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url, .. } | Transport::Sse { url, .. } => url.clone(),
            Transport::Invalid(_) => String::new(),
        }
    }

    fn values(&self) -> Vec<&SecretValue> {
        match &self.transport {
            Transport::Stdio { env, .. } => env.values().collect(),
            Transport::Http { headers, .. } | Transport::Sse { headers, .. } => {
                headers.values().collect()
            }
            Transport::Invalid(_) => Vec::new(),
        }
    }

    /// Every secret name the entry refers to.
    pub fn secret_names(&self) -> Vec<&str> {
        self.values()
            .into_iter()
            .filter_map(|v| match v {
                SecretValue::Secret(name) => Some(name.as_str()),
                SecretValue::Literal(_) => None,
            })
            .collect()
    }

    /// Whether any environment or header value is written out rather than referenced.
    pub fn has_literal_values(&self) -> bool {
        self.values()
            .into_iter()
            .any(|v| matches!(v, SecretValue::Literal(_)))
    }
}

/// Why an `sse` server does not start.
pub const SSE_UNSUPPORTED: &str = "the server uses the older HTTP+SSE transport (\"type\": \"sse\"), which the MCP SDK this daemon is built on (rmcp) no longer has a client for; if the server also serves streamable HTTP, configure that URL with \"type\": \"http\"";

/// The checked servers, by name.
pub type Servers = BTreeMap<String, ServerSpec>;

mod read;

pub use read::{parse_server, parse_servers, valid_server_name};

/// `over` merged over `base`: an entry of `over` replaces the whole entry of that name.
pub fn merge(base: &Servers, over: &Servers) -> Servers {
    let mut out = base.clone();
    for (name, spec) in over {
        out.insert(name.clone(), spec.clone());
    }
    out
}
