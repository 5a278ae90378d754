//! Finding the host: the daemon recorded for the configuration folder, a daemon in the
//! foreground at the configured address that could not record itself, or a host built in this
//! process, joined in memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahp::client::{Client, ClientConfig};
use ahp_types::state::{RootState, SnapshotState};
use ahp_ws::WebSocketTransport;

use crate::args::RunArgs;
use crate::commands::CommandError;
use crate::config;
use crate::live::LiveSessions;
use crate::locations::Locations;
use crate::process;
use crate::vault::Vault;

/// The engine used when no plugin is enabled in the configuration.
const DEFAULT_PLUGIN: &str = "@ahpd/agent-cofold";
/// How long the probe of the configured address may take before the host is built here instead.
const PROBE_LIMIT: Duration = Duration::from_secs(2);
/// Frames the in-process host may send ahead of the client before its writes wait.
const IN_PROCESS_BUFFER: usize = 4096;

/// Where the commands find their host.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The working folder of new sessions, and the folder an in-process host serves.
    pub path: Option<PathBuf>,
    /// Build the host in this process even when a daemon runs.
    pub in_process: bool,
    /// A host built here keeps the disposable machines it made when it stops; by default it
    /// removes them, as nothing would hold or time them afterwards.
    pub keep_machines: bool,
}

/// A host kept alive inside this process.
struct Embedded {
    host: Arc<ahpd_sdk::Host>,
    live: Arc<LiveSessions>,
}

/// A connected, initialized client and, when there was no daemon, the host it talks to.
pub struct Conn {
    /// The official client.
    pub client: Client,
    /// The root state at connection time (the agents on offer).
    pub root: RootState,
    /// `ws://…` of the daemon, or `in-process`.
    pub place: String,
    embedded: Option<Embedded>,
}

impl Conn {
    /// Waits, for at most `limit`, until an in-process host's agents have read their model
    /// catalogues (a daemon read them when it started): the host was started a moment ago by
    /// this command, and a session opened before its probes answer would offer a short list.
    pub async fn catalogues_read(&self, limit: std::time::Duration) {
        if let Some(e) = &self.embedded {
            let _ = tokio::time::timeout(limit, e.host.probed()).await;
        }
    }

    /// Ends the connection; an in-process host closes its sessions and writes its store, so
    /// the conversation and the session's settings outlive the command.
    pub async fn close(self) {
        self.client.shutdown().await;
        if let Some(e) = self.embedded {
            e.host.shutdown();
            e.live.close_all().await;
            if let Err(err) = e.host.flush_session_store().await {
                eprintln!("ahpd: {err}");
            }
        }
    }
}

fn failed(msg: impl Into<String>) -> CommandError {
    CommandError::Failed(msg.into())
}

/// The folder a command works in: `--path` (which must exist) or the current folder.
pub fn work_dir(path: Option<&Path>) -> Result<PathBuf, CommandError> {
    let cwd = std::env::current_dir()
        .map_err(|e| failed(format!("cannot read the current folder: {e}")))?;
    let Some(p) = path else { return Ok(cwd) };
    let dir = cwd.join(p);
    if !dir.is_dir() {
        return Err(CommandError::Usage(format!(
            "--path {}: not an existing directory",
            p.display()
        )));
    }
    dir.canonicalize()
        .map_err(|e| CommandError::Usage(format!("--path {}: {e}", p.display())))
}

/// The token in the configuration folder's `token` file, when there is one: the last resort
/// when the daemon's options cannot be read back, since a daemon given another token file or
/// token leaves this one unused (and perhaps out of date).
fn token_file(loc: &Locations) -> Option<String> {
    crate::token::read(&loc.token()).ok()
}

fn client_config() -> ClientConfig {
    ClientConfig {
        default_request_timeout: Some(Duration::from_secs(60)),
        // Actions the reader may fall behind by before it skips some. Each slot is allocated
        // up front (about 650 bytes), so a larger queue costs start-up time for every command.
        subscription_buffer: 4096,
    }
}

/// Connects over WebSocket and initializes with the root subscribed.
async fn connect_ws(address: &str, token: Option<&str>) -> Result<(Client, RootState), String> {
    let url = crate::token::url_with_token(address, token);
    let transport = WebSocketTransport::connect(&url).await.map_err(|e| {
        format!(
            "cannot connect to {address}: {}",
            crate::client::scrub(&e.to_string(), token)
        )
    })?;
    let client = Client::connect(transport, client_config())
        .await
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    let root = initialize(&client)
        .await
        .map_err(|e| format!("{address} did not answer: {e}"))?;
    Ok((client, root))
}

async fn initialize(client: &Client) -> Result<RootState, String> {
    let id = format!("ahpd-term-{}", uuid::Uuid::new_v4().simple());
    // The root comes with the answer, which saves a round trip before the first turn.
    let result = client
        .initialize(
            id,
            vec!["1.0.0".into()],
            vec![ahp_types::ROOT_RESOURCE_URI.into()],
        )
        .await
        .map_err(|e| e.to_string())?;
    result
        .snapshots
        .into_iter()
        .find_map(|s| match s.state {
            SnapshotState::Root(root) => Some(*root),
            _ => None,
        })
        .ok_or_else(|| "the root channel has no state".into())
}

/// Connects to the daemon for this configuration folder, else builds the host here.
pub async fn connect(loc: &Locations, target: &Target) -> Result<Conn, CommandError> {
    if !target.in_process {
        if let Some(record) = process::running(loc) {
            // A daemon started with `ahpd start` is the one to use; failing to reach it is an
            // error, not a reason to run a second host on the same sessions.
            let token = process::token_for(loc, &record).or_else(|| token_file(loc));
            let (client, root) = connect_ws(&record.address, token.as_deref())
                .await
                .map_err(failed)?;
            return Ok(Conn {
                client,
                root,
                place: record.address,
                embedded: None,
            });
        }
        // A daemon records itself even in the foreground; one that could not write its
        // record (a read-only folder, say) is still found at the configured address, rather
        // than a second host being built on the same sessions.
        if let Some(conn) = probe_configured(loc).await {
            return Ok(conn);
        }
    }
    embedded(loc, target).await
}

async fn probe_configured(loc: &Locations) -> Option<Conn> {
    let mut settings = config::load(loc).ok()?;
    // No options of its own to read back: the daemon there runs on the configuration (and
    // the token variable, which these flags let through).
    settings.apply_flags(&RunArgs::default()).ok()?;
    let address = format!(
        "ws://{}:{}",
        crate::serve::url_host(&settings.host.value),
        settings.port.value
    );
    let token = process::token_of(loc, &settings).or_else(|| token_file(loc));
    let (client, root) = tokio::time::timeout(PROBE_LIMIT, connect_ws(&address, token.as_deref()))
        .await
        .ok()?
        .ok()?;
    Some(Conn {
        client,
        root,
        place: address,
        embedded: None,
    })
}

/// Builds the daemon's host in this process (the configured plugins, or the cofold engine when
/// none is enabled) and connects to it in memory.
async fn embedded(loc: &Locations, target: &Target) -> Result<Conn, CommandError> {
    let dir = work_dir(target.path.as_deref())?;
    let mut settings = config::load(loc)?;
    let vault = Vault::new(loc.vault());
    let mut run = RunArgs {
        paths: vec![dir],
        // Nothing crosses a network here, so deltas go out as they come.
        delta_window_ms: Some(0),
        ..RunArgs::default()
    };
    let planned = crate::plugins::plan(&settings, None, &loc.dir)?;
    if !planned.iter().any(|c| c.enabled) {
        run.plugins = vec![DEFAULT_PLUGIN.to_owned()];
    }
    if !target.keep_machines
        && planned
            .iter()
            .any(|c| c.enabled && c.name == ahpd_computer::PLUGIN_NAME)
    {
        run.plugin_options.push(format!(
            "{}.disposableAtStop=remove",
            ahpd_computer::PLUGIN_NAME
        ));
    }
    settings.apply_flags(&run)?;
    let (host, live) = crate::serve::build_host(loc, &settings, &run, &vault)
        .await
        .map_err(|e| match e.exit_code() {
            2 => CommandError::Usage(e.to_string()),
            _ => failed(e.to_string()),
        })?;
    let host = Arc::new(host);
    // No frame limit: both ends are this process.
    let (peer, half) = ahpd_sdk::transport::memory::pair(IN_PROCESS_BUFFER, usize::MAX);
    let serving = host.clone();
    tokio::spawn(async move { serving.accept(peer).await });
    let client = Client::connect(half, client_config())
        .await
        .map_err(|e| failed(format!("cannot reach the in-process host: {e}")))?;
    let root = initialize(&client)
        .await
        .map_err(|e| failed(format!("the in-process host did not answer: {e}")))?;
    Ok(Conn {
        client,
        root,
        place: "in-process".into(),
        embedded: Some(Embedded { host, live }),
    })
}

/// A runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| failed(format!("cannot start the async runtime: {e}")))
}
