//! Reaching one server with the official SDK: the child process or the HTTP endpoint, the
//! `initialize` handshake, and the notifications the daemon listens for.

use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

use crate::launch::{Launch, Target};
use crate::spec::ServerSpec;
use crate::{SecretResolver, redact};

/// Lines of a server's standard error kept to explain why it failed.
const STDERR_LINES: usize = 8;

/// Variable names never passed from the daemon to a server: anything that looks like a key,
/// secret, token, password or credential, and the variables of copapo, cofold and ahpd. A
/// server that needs one names it in its `env`.
const WITHHELD: [&str; 5] = ["KEY", "SECRET", "TOKEN", "PASSWORD", "CREDENTIAL"];
const WITHHELD_PREFIXES: [&str; 3] = ["COPAPO_", "COFOLD_", "AHPD_"];

/// Whether a variable of the daemon's environment is passed to a stdio server.
pub fn passes(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    !WITHHELD.iter().any(|w| upper.contains(w))
        && !WITHHELD_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Hears the server's notifications the daemon acts on.
pub(crate) struct Handler {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.tools_changed.send(());
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("ahpd", env!("CARGO_PKG_VERSION")),
        );
        // The newest version the servers people run widely speak; it keeps a session, over
        // which `notifications/tools/list_changed` reaches the daemon.
        info.protocol_version = ProtocolVersion::V_2025_11_25;
        info
    }
}

/// A live connection.
pub(crate) struct Connected {
    pub service: RunningService<RoleClient, Handler>,
    /// Set when `notifications/tools/list_changed` arrives.
    pub tools_changed: mpsc::UnboundedReceiver<()>,
    /// The process group of a stdio server.
    pub group: Option<u32>,
    /// The last lines the server wrote to standard error (secrets blanked).
    pub stderr: Arc<Mutex<VecDeque<String>>>,
}

/// Why a server could not be reached.
pub(crate) struct Unreached {
    /// One sentence for people, every configured value blanked.
    pub why: String,
    /// Trying again cannot help until the configuration changes (an entry that cannot be
    /// read, a transport without a client): no restart is scheduled.
    pub lasting: bool,
}

impl From<String> for Unreached {
    fn from(why: String) -> Self {
        Unreached {
            why,
            lasting: false,
        }
    }
}

/// Connects and completes the handshake within the entry's startup limit.
pub(crate) async fn connect(
    name: &str,
    spec: &ServerSpec,
    secrets: &SecretResolver,
) -> Result<Connected, Unreached> {
    if let Some(why) = spec.unusable() {
        return Err(Unreached { why, lasting: true });
    }
    let Launch { target, hidden } = spec.launch(secrets).map_err(|why| Unreached {
        why,
        lasting: false,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = Handler { tools_changed: tx };
    let stderr = Arc::new(Mutex::new(VecDeque::new()));
    let (service, group) = match target {
        Target::Stdio {
            command,
            args,
            cwd,
            env,
        } => {
            let helper = crate::tree::helper().filter(|(program, _)| program.is_file());
            let mut cmd = match helper {
                // Behind the helper, a program that cannot be started would only fail inside
                // it: look for it first, so the sentence is the one a direct start gives.
                Some((helper, prefix)) => {
                    let path = env
                        .iter()
                        .find(|(k, _)| k == "PATH")
                        .map(|(_, v)| std::ffi::OsString::from(v))
                        .or_else(|| std::env::var_os("PATH"));
                    if !startable(&command, cwd.as_deref(), path.as_deref()) {
                        // ENOENT, the error a direct start gives.
                        return Err(redact(
                            &format!(
                                "cannot start {command}: {}",
                                std::io::Error::from_raw_os_error(2)
                            ),
                            &hidden,
                        )
                        .into());
                    }
                    let mut cmd = tokio::process::Command::new(helper);
                    cmd.args(prefix).arg("--").arg(&command);
                    cmd
                }
                None => tokio::process::Command::new(&command),
            };
            cmd.args(&args).env_clear();
            cmd.envs(std::env::vars_os().filter(|(n, _)| passes(&n.to_string_lossy())));
            cmd.envs(env);
            if let Some(cwd) = &cwd {
                cmd.current_dir(cwd);
            }
            // Its own process group, so stopping it reaches every process it started.
            #[cfg(unix)]
            cmd.process_group(0);
            let (child, err) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| redact(&format!("cannot start {command}: {e}"), &hidden))?;
            let group = child.id();
            if let Some(err) = err {
                keep_tail(err, stderr.clone(), hidden.clone());
            }
            let served = tokio::time::timeout(spec.startup_timeout, handler.serve(child)).await;
            let service = finish(name, served, spec.startup_timeout, &hidden, &stderr);
            if service.is_err()
                && let Some(pid) = group
            {
                crate::tree::kill_group(pid);
            }
            (service?, group)
        }
        Target::Http { url, headers } => {
            install_tls_provider();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(header_map(headers)?);
            let transport = StreamableHttpClientTransport::from_config(config);
            let served = tokio::time::timeout(spec.startup_timeout, handler.serve(transport)).await;
            (
                finish(name, served, spec.startup_timeout, &hidden, &stderr)?,
                None,
            )
        }
    };
    Ok(Connected {
        service,
        tools_changed: rx,
        group,
        stderr,
    })
}

/// Whether `program` names an executable file (a path, from `cwd` when relative), or one
/// found along `path`.
fn startable(program: &str, cwd: Option<&std::path::Path>, path: Option<&std::ffi::OsStr>) -> bool {
    let executable = |candidate: &std::path::Path| {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        }
        #[cfg(not(unix))]
        {
            candidate.is_file()
        }
    };
    if program.contains('/') {
        let candidate = std::path::Path::new(program);
        return match cwd {
            Some(cwd) if candidate.is_relative() => executable(&cwd.join(candidate)),
            _ => executable(candidate),
        };
    }
    path.is_some_and(|path| {
        std::env::split_paths(path).any(|dir| dir.is_absolute() && executable(&dir.join(program)))
    })
}

/// Reads a stdio server's standard error to its end: each line logged and the last
/// [`STDERR_LINES`] kept, configured values blanked, to explain a failure.
fn keep_tail(
    err: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    tail: Arc<Mutex<VecDeque<String>>>,
    hidden: Vec<String>,
) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(err).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = redact(&line, &hidden);
            tracing::debug!(target: "ahpd_mcp::stderr", "{line}");
            let Ok(mut tail) = tail.lock() else { return };
            if tail.len() == STDERR_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
}

/// An HTTP server's headers as sent.
fn header_map(
    headers: Vec<(String, String)>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let (Ok(k), Ok(v)) = (
            http::HeaderName::from_bytes(k.as_bytes()),
            http::HeaderValue::from_str(&v),
        ) else {
            return Err(format!("the header {k} has a value that cannot be sent"));
        };
        custom.insert(k, v);
    }
    Ok(custom)
}

fn finish<E: std::fmt::Display>(
    name: &str,
    served: Result<Result<RunningService<RoleClient, Handler>, E>, tokio::time::error::Elapsed>,
    limit: Duration,
    hidden: &[String],
    stderr: &Mutex<VecDeque<String>>,
) -> Result<RunningService<RoleClient, Handler>, String> {
    let why = match served {
        Ok(Ok(service)) => return Ok(service),
        Ok(Err(e)) => format!("the MCP handshake failed: {e}"),
        Err(_) => format!(
            "the server did not complete the MCP handshake within {} s",
            limit.as_secs_f64()
        ),
    };
    let mut why = redact(&why, hidden);
    if let Some(last) = stderr.lock().ok().and_then(|t| t.back().cloned()) {
        why.push_str(&format!(" (its last words: {last})"));
    }
    tracing::debug!(server = name, "{why}");
    Err(why)
}

/// HTTP servers reached over TLS use the ring provider the rest of the workspace builds;
/// installing it once here keeps the SDK's HTTP client from looking for another.
fn install_tls_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_variables_stay_behind() {
        assert!(passes("PATH"));
        assert!(passes("HOME"));
        assert!(!passes("OPENAI_API_KEY"));
        assert!(!passes("github_token"));
        assert!(!passes("AHPD_CONNECTION_TOKEN"));
        assert!(!passes("COPAPO_HOME"));
    }
}
