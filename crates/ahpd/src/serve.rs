//! The foreground daemon: plugins applied, records loaded, the host built and served over
//! WebSocket or stdio until a signal or the end of input.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahpd_agent_cofold::guard::{GUARD_SERVICE, HostGuard, Secrets};
use ahpd_sdk::ahp_types::common::JsonObject;
use ahpd_sdk::plugin::{Engine, Registrar};
use ahpd_sdk::ports::FileSessionStore;
use ahpd_sdk::resources::FileResources;
use ahpd_sdk::transport::ws::WsConfig;
use ahpd_sdk::{Agent, HostBuilder, HostError};
use futures::FutureExt;
use serde_json::Value;

use crate::args::RunArgs;
use crate::channel::{AgentsChannel, CHANNEL, FixedAgent};
use crate::config::{self, ConfigError, Settings, Source, TokenSetting};
use crate::live::LiveSessions;
use crate::locations::Locations;
use crate::plugins::{self, State, options::SecretMode};
use crate::process;
use crate::records::{EngineSlot, RecordStore};
use crate::served;
use crate::signals::Signals;
use crate::token;
use crate::vault::Vault;

/// How long a shutdown waits for the sessions' backends to close, in all.
const SESSION_CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// Why the daemon did not start or stopped with a failure.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A configuration problem (exit 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A usage problem found at start (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A failure at run time (exit 1).
    #[error("{0}")]
    Runtime(String),
}

impl ServeError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            ServeError::Config(_) | ServeError::Usage(_) => 2,
            ServeError::Runtime(_) => 1,
        }
    }
}

/// The text a missing plugin selection prints.
fn no_plugin_message() -> String {
    let names: Vec<String> = plugins::builtin()
        .iter()
        .map(|b| b.plugin.name().to_owned())
        .collect();
    let hint = names
        .iter()
        .find(|n| n.as_str() == "@ahpd/agent-cofold")
        .or_else(|| names.first());
    match hint {
        Some(n) => {
            format!("no plugin is enabled: run ahpd plugin enable {n} (or pass --plugin {n})")
        }
        None => "no plugin is enabled, and this build has no plugin built in".to_owned(),
    }
}

/// Reads or creates the connection token.
fn resolve_token(settings: &Settings, vault: &Vault) -> Result<Option<String>, ServeError> {
    let source = &settings.token.source;
    match &settings.token.value {
        TokenSetting::Without => Ok(None),
        TokenSetting::Literal(s) => Ok(Some(s.expose().to_owned())),
        TokenSetting::SecretRef(name) => match vault.read(name) {
            Ok(s) => Ok(Some(s.expose().to_owned())),
            Err(e) => Err(match source {
                Source::File(f) => ServeError::Config(ConfigError::Key {
                    file: f.clone(),
                    key: "connectionToken".into(),
                    problem: e.to_string(),
                }),
                _ => ServeError::Usage(format!("connectionToken: {e}")),
            }),
        },
        TokenSetting::File(path) => token::read_or_create(path).map(Some).map_err(|e| match e {
            token::TokenError::Bad { .. } | token::TokenError::Untrusted(_) => {
                ServeError::Usage(e.to_string())
            }
            token::TokenError::Io { .. } => ServeError::Runtime(e.to_string()),
        }),
    }
}

/// The secrets the daemon knows, for the sessions' tools to keep out of their inputs and
/// results: the connection token and every value of the vault (MCP servers' and agents' keys
/// among them). The token file was written before the host is built, so reading it is enough.
fn host_secrets(settings: &Settings, vault: &Vault) -> Secrets {
    let token = match &settings.token.value {
        TokenSetting::Literal(s) => Some(s.expose().to_owned()),
        TokenSetting::SecretRef(name) => vault.read(name).ok().map(|s| s.expose().to_owned()),
        TokenSetting::File(path) => std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_owned()),
        TokenSetting::Without => None,
    };
    let stored: Vec<String> = vault
        .names()
        .unwrap_or_default()
        .iter()
        .filter_map(|name| vault.read(name).ok())
        .map(|s| s.expose().to_owned())
        .collect();
    Secrets::new(token.map(|t| ("the connection token", t)))
        .with(stored.into_iter().map(|v| ("a secret of the vault", v)))
}

/// What the plugins registered.
#[derive(Default)]
struct Collected {
    engines: Vec<Arc<dyn Engine>>,
    agents: Vec<Arc<dyn Agent>>,
    mcp: Option<ahpd_mcp::McpHub>,
    extras: crate::machines::Extras,
    /// What a plugin may ask of the daemon.
    context: crate::machines::Context,
    /// The secrets and private paths the sessions' tools keep to the person.
    guard: Option<Arc<HostGuard>>,
}

impl Registrar for Collected {
    fn engine(&mut self, engine: Arc<dyn Engine>) {
        self.engines.push(engine);
    }

    fn agent(&mut self, agent: Arc<dyn Agent>) {
        self.agents.push(agent);
    }

    fn service(&self, name: &str) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        match name {
            "mcp" => self
                .mcp
                .clone()
                .map(|hub| Arc::new(hub) as Arc<dyn std::any::Any + Send + Sync>),
            GUARD_SERVICE => self
                .guard
                .clone()
                .map(|guard| guard as Arc<dyn std::any::Any + Send + Sync>),
            "served-paths" => Some(Arc::new(self.context.served.clone())),
            _ => None,
        }
    }

    fn computers(&mut self, port: Arc<dyn ahpd_sdk::machine::ComputerPort>) {
        self.extras.computers = Some(port);
    }

    fn resource_provider(
        &mut self,
        scheme: &str,
        provider: Arc<dyn ahpd_sdk::ports::ResourceProvider>,
    ) {
        self.extras.providers.push((scheme.to_owned(), provider));
    }

    fn meta(&mut self, key: &str, value: Value) {
        self.extras.meta.insert(key.to_owned(), value);
    }

    fn secrets(&self) -> Option<Arc<dyn ahpd_sdk::plugin::SecretReader>> {
        Some(Arc::new(crate::channel::VaultReader(
            self.context.vault.clone()?,
        )))
    }

    fn config_dir(&self) -> Option<std::path::PathBuf> {
        self.context.dir.clone()
    }

    fn host_id(&self) -> Option<String> {
        self.context.host_id.clone()
    }

    fn served_paths(&self) -> Vec<std::path::PathBuf> {
        self.context.served.clone()
    }
}

/// Applies every enabled plugin that resolves; a failing one is reported and skipped.
async fn apply_plugins(
    cands: &[plugins::Candidate],
    vault: &Vault,
    mcp: &ahpd_mcp::McpHub,
    context: &crate::machines::Context,
    extras: &mut crate::machines::Extras,
    guard: &Arc<HostGuard>,
) -> Result<(Vec<EngineSlot>, Vec<FixedAgent>), ServeError> {
    let mut engines: Vec<EngineSlot> = Vec::new();
    let mut fixed: Vec<FixedAgent> = Vec::new();
    let mut engine_owner: BTreeMap<String, String> = BTreeMap::new();
    let mut agent_owner: BTreeMap<String, String> = BTreeMap::new();
    for (order, c) in cands.iter().enumerate() {
        let options = match plugins::resolve(c, vault, SecretMode::Values) {
            Ok(o) => o,
            Err(State::Disabled) => continue,
            Err(state) => {
                tracing::error!(plugin = %c.name, state = state.word(), "plugin {} skipped: {}", c.name, state.reason());
                continue;
            }
        };
        let Some(b) = &c.builtin else { continue };
        let mut collected = Collected {
            mcp: Some(mcp.clone()),
            context: context.clone(),
            guard: Some(guard.clone()),
            ..Collected::default()
        };
        let applied = std::panic::AssertUnwindSafe(b.plugin.apply(options.clone(), &mut collected))
            .catch_unwind()
            .await;
        match applied {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(plugin = %c.name, "plugin {} skipped: {e}", c.name);
                continue;
            }
            Err(_) => {
                tracing::error!(plugin = %c.name, "plugin {} skipped: it panicked while starting", c.name);
                continue;
            }
        }
        for engine in collected.engines {
            let name = engine.name().to_owned();
            if let Some(other) = engine_owner.insert(name.clone(), c.name.clone()) {
                return Err(ServeError::Usage(format!(
                    "the plugins {other} and {} both register the engine {name}",
                    c.name
                )));
            }
            engines.push(EngineSlot {
                engine,
                plugin: c.name.clone(),
                title: b.plugin.title().to_owned(),
                options: options.clone(),
                order,
            });
        }
        for agent in collected.agents {
            let provider = agent.descriptor().provider;
            if let Some(other) = agent_owner.insert(provider.clone(), c.name.clone()) {
                return Err(ServeError::Usage(format!(
                    "the plugins {other} and {} both provide the agent {provider}",
                    c.name
                )));
            }
            fixed.push(FixedAgent {
                order,
                agent,
                plugin: Some(c.name.clone()),
            });
        }
        extras.absorb(collected.extras, &options);
        tracing::info!(plugin = %c.name, "plugin {} ready", c.name);
    }
    Ok((engines, fixed))
}

fn flags_given_for_network(run: &RunArgs) -> bool {
    run.host.is_some()
        || run.port.is_some()
        || run.connection_token.is_some()
        || run.connection_token_file.is_some()
        || run.without_connection_token
}

/// Runs the daemon in the foreground; returns the exit code of a clean end.
pub async fn run(loc: &Locations, run: &RunArgs) -> Result<i32, ServeError> {
    crate::ownership::tighten_own_files(loc);
    let mut settings = config::load(loc)?;
    settings.apply_flags(run)?;
    let vault = Vault::new(loc.vault());
    let token = network_token(&settings, &vault, run)?;

    // Signals are caught from here on, so a stop sent right after the listening line is handled.
    let mut signals =
        Signals::new().map_err(|e| ServeError::Runtime(format!("cannot catch signals: {e}")))?;
    let (host, live) = build_host(loc, &settings, run, &vault).await?;
    crate::memory::give_back_after_turns(&host);
    if let Some(hub) = live.mcp() {
        crate::mcp::report_status(hub, loc.dir.join(crate::mcp::STATUS_FILE));
    }

    if run.stdio {
        tokio::select! {
            () = host.serve_stdio() => {
                // The input ended: the client is gone, so no second signal is awaited.
                live.close_all().await;
                if let Err(e) = host.flush_session_store().await {
                    tracing::error!("{e}");
                }
                return Ok(0);
            }
            () = signals.first() => {}
        }
        return Ok(shutdown(&host, None, &live, signals, None).await);
    }

    let server = listen(&host, &settings, token.clone()).await?;
    let port = server.local_addr().port();
    let address = format!("ws://{}:{port}", url_host(&settings.host.value));
    // Recorded before the line is printed: whoever reads the line can find the record.
    let record_path = loc.daemon_record();
    let recorded = process::record_this_daemon(
        &record_path,
        &address,
        run.detached_child,
        settings.token.source == Source::Env(token::TOKEN_ENV),
    )
    .map_err(ServeError::Runtime)?;
    print_listening(&address, token.as_deref(), run.detached_child);
    tracing::info!(address = %address, "listening");

    signals.first().await;
    Ok(shutdown(
        &host,
        Some(server),
        &live,
        signals,
        recorded.then_some(record_path.as_path()),
    )
    .await)
}

/// Listens for WebSocket clients where the settings say.
async fn listen(
    host: &ahpd_sdk::Host,
    settings: &Settings,
    token: Option<String>,
) -> Result<ahpd_sdk::transport::ws::WsServer, ServeError> {
    let addr = resolve_addr(&settings.host.value, settings.port.value).await?;
    let config = WsConfig {
        addr,
        token,
        allow_without_token: settings.token.value == TokenSetting::Without,
        allowed_origins: settings.allowed_origins.value.clone(),
        header_timeout: Duration::from_secs(settings.header_timeout_sec.value),
        max_pending: usize::try_from(settings.pending_connection_cap.value).unwrap_or(usize::MAX),
    };
    match host.serve_ws(config).await {
        Ok(s) => Ok(s),
        Err(HostError::Listen { source, .. }) => {
            let why = if source.kind() == std::io::ErrorKind::AddrInUse {
                "address in use".to_owned()
            } else {
                source.to_string()
            };
            Err(ServeError::Runtime(format!(
                "cannot listen on {}:{}: {why}",
                settings.host.value, settings.port.value
            )))
        }
        Err(e) => Err(ServeError::Usage(e.to_string())),
    }
}

/// The token clients must present, or none (over stdio, or when the settings say so), with a
/// warning when what is served may be reached by others.
fn network_token(
    settings: &Settings,
    vault: &Vault,
    run: &RunArgs,
) -> Result<Option<String>, ServeError> {
    if run.stdio {
        if flags_given_for_network(run) {
            tracing::warn!("--stdio ignores --host, --port and the token options");
        }
        return Ok(None);
    }
    let token = resolve_token(settings, vault)?;
    if token.is_some() && !config::is_loopback(&settings.host.value) {
        tracing::warn!(
            host = %settings.host.value,
            "listening beyond loopback over ws://: the token and every message travel in clear; put TLS (a reverse proxy or an SSH tunnel) in front"
        );
    }
    if token.is_none() {
        tracing::warn!(
            "serving without a connection token: any local process (and, off loopback, anyone on the network) can connect and run commands as this user"
        );
    }
    Ok(token)
}

/// The `ahpd listening on` line on standard output.
fn print_listening(address: &str, token: Option<&str>, detached: bool) {
    use std::io::Write;
    // The detached daemon's standard output is its log, which never holds the token.
    let line = match token {
        Some(_) if detached => {
            format!("{address} (with its connection token: ahpd token prints it)")
        }
        Some(t) => token::url_with_token(address, Some(t)),
        None => address.to_owned(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ahpd listening on {line}");
    let _ = out.flush();
}

/// The `_meta` of the root state and of `initialize`: the agents channel's name and what the
/// plugins added.
fn root_meta(extras: &crate::machines::Extras) -> JsonObject {
    let mut meta = JsonObject::new();
    meta.insert("ahpd.agentsChannel".into(), Value::String(CHANNEL.into()));
    for (k, v) in &extras.meta {
        meta.insert(k.clone(), v.clone());
    }
    meta
}

/// The files served as resources: the served folders and the live sessions' roots, less the
/// daemon's private files.
fn resources(
    loc: &Locations,
    settings: &Settings,
    live: &Arc<LiveSessions>,
    engine_options: &[Value],
) -> FileResources {
    let resources = FileResources::new(settings.paths.value.clone())
        .with_live_roots(live.clone())
        .with_denied(served::private_paths(loc, settings, engine_options));
    match served::daemon_files(loc) {
        Some((dir, rule)) => resources.with_denied_names(dir, rule),
        None => resources,
    }
}

/// Builds the host a run serves: plugins applied, agent records loaded, the session store opened.
/// The daemon and the terminal client's in-process host (`ahpd run` with no daemon) share it.
pub(crate) async fn build_host(
    loc: &Locations,
    settings: &Settings,
    run: &RunArgs,
    vault: &Vault,
) -> Result<(ahpd_sdk::Host, Arc<LiveSessions>), ServeError> {
    let cands = plugins::plan(settings, Some(run), &loc.dir)?;
    if !run.no_plugins && !cands.iter().any(|c| c.enabled) {
        return Err(ServeError::Usage(no_plugin_message()));
    }
    for c in cands.iter().filter(|c| c.enabled && c.builtin.is_none()) {
        tracing::warn!(
            "plugin {} skipped: not a built-in plugin (built in: {})",
            c.name,
            plugins::builtin_names()
        );
    }
    let mcp = crate::mcp::hub(settings, vault);
    let mut context = crate::machines::Context::for_run(loc, vault, run.stdio);
    context.served = settings.paths.value.clone();
    let mut extras = crate::machines::Extras::default();
    let guard = HostGuard::new();
    guard.set_secrets(host_secrets(settings, vault));
    let (engines, fixed) =
        apply_plugins(&cands, vault, &mcp, &context, &mut extras, &guard).await?;
    let engine_options: Vec<Value> = engines.iter().map(|e| e.options.clone()).collect();
    guard.set_private(served::private_set(loc, settings, &engine_options));

    let store = RecordStore::new(loc.agents(), vault.clone());
    if let Err(e) = store.seed(&engines) {
        tracing::error!("cannot write the default agent records: {e}");
    }
    let live = LiveSessions::new();
    mcp.start_eager();
    live.set_mcp(mcp);
    let mut channel = AgentsChannel::new(store, engines, fixed, live.clone());
    let nested = Arc::new(ahpd_sdk::nested::NestedIndex::default());
    if let Some(port) = &extras.computers {
        channel = channel.with_computers(port.clone(), extras.start_timeout, nested.clone());
        live.set_computers(port.clone());
    }
    let channel = Arc::new(channel);
    let agents = channel.agents();
    let (valid, other) = channel.counts();
    if agents.is_empty() && !run.no_plugins {
        tracing::warn!("no agent is available: clients can still put agent records on {CHANNEL}");
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        files = ?settings.files,
        agents = agents.len(),
        records_valid = valid,
        records_other = other,
        "ahpd starting"
    );

    let meta = root_meta(&extras);
    let mut builder = HostBuilder::new()
        .agents(agents)
        .server_info("ahpd", env!("CARGO_PKG_VERSION"))
        .delta_window(Duration::from_millis(settings.delta_window_ms.value))
        .request_timeout(Duration::from_secs(settings.request_timeout_sec.value))
        .loaded_cap(usize::try_from(settings.loaded_session_cap.value).unwrap_or(usize::MAX))
        .in_flight_cap(usize::try_from(settings.in_flight_request_cap.value).unwrap_or(usize::MAX))
        .idle_unload(Duration::from_secs(settings.idle_unload_sec.value))
        .take_up_unfinished(!run.leave_unfinished)
        .root_meta(meta.clone())
        .initialize_meta(meta)
        .extension(channel.clone())
        .resources(Arc::new(resources(loc, settings, &live, &engine_options)));
    for p in &settings.paths.value {
        builder = builder.path(p.clone());
    }
    for (scheme, provider) in &extras.providers {
        builder = builder.resource_provider(scheme.clone(), provider.clone());
    }
    // Titles, flags and settings of sessions survive a restart. An inner host in a machine
    // whose configuration folder cannot be written serves without a store.
    if context.dir.is_some() || !run.stdio {
        let sessions = FileSessionStore::open(loc.sessions())
            .map_err(|e| ServeError::Runtime(e.to_string()))?;
        if let Some(port) = &extras.computers {
            crate::machines::adopt(port.clone(), &sessions, &nested);
        }
        builder = builder.session_store(Arc::new(sessions));
    }
    let host = builder
        .build()
        .map_err(|e| ServeError::Usage(e.to_string()))?;

    Ok((host, live))
}

/// The graceful stop after the first SIGTERM/SIGINT: stop listening, close every
/// connection (the host sends `1001`), close every session's backend within 10 s in all (turns
/// at work are cancelled, turns waiting on a person are left for the next start to ask again),
/// write the session store. A second signal meanwhile ends the process at once with code 1.
async fn shutdown(
    host: &ahpd_sdk::Host,
    server: Option<ahpd_sdk::transport::ws::WsServer>,
    live: &LiveSessions,
    mut signals: Signals,
    record: Option<&Path>,
) -> i32 {
    tracing::info!("shutting down");
    let graceful = async {
        if let Some(server) = &server {
            server.stop();
        }
        host.shutdown();
        let closing = async {
            if let Some(server) = server {
                server.wait().await;
            }
            live.suspend_all().await
        };
        match tokio::time::timeout(SESSION_CLOSE_LIMIT, closing).await {
            Ok(n) => tracing::info!(sessions = n, "sessions closed"),
            Err(_) => tracing::warn!(
                "sessions still closing after {} s: stopping without them",
                SESSION_CLOSE_LIMIT.as_secs()
            ),
        }
        if let Err(e) = host.flush_session_store().await {
            tracing::error!("{e}");
        }
    };
    tokio::select! {
        // A second signal wins over a shutdown that could also finish now.
        biased;
        () = signals.next() => {
            tracing::warn!("second signal: exiting now");
            std::process::exit(1);
        }
        () = graceful => {}
    }
    if let Some(path) = record {
        process::remove_record_if_ours(path);
    }
    tracing::info!("stopped");
    0
}

/// Brackets an IPv6 literal for a URL.
pub fn url_host(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

async fn resolve_addr(host: &str, port: u16) -> Result<SocketAddr, ServeError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let mut found = tokio::net::lookup_host((bare, port))
        .await
        .map_err(|e| ServeError::Runtime(format!("cannot resolve the host {host}: {e}")))?;
    found
        .next()
        .ok_or_else(|| ServeError::Runtime(format!("cannot resolve the host {host}")))
}
