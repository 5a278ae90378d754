//! MCP servers in cofold sessions. A session leases each server its agent may use (the
//! daemon's `mcpServers` with the record's merged over them) when it is created, shows each as
//! an MCP server customization whose state follows the server's, and offers the tools of every
//! ready server to each turn as `mcp__<server>__<tool>`.
//!
//! A client's stop request gives up this session's lease (the server stops once no session uses
//! it, unless it is `eager`) and hides its tools from the next turn; a start request takes a
//! lease again and retries a failed server at once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use ahp_types::actions::{
    SessionCustomizationsChangedAction, SessionMcpServerStateChangedAction, StateAction,
};
use ahp_types::state::{
    Customization, ErrorInfo, McpServerCustomization, McpServerErrorState, McpServerReadyState,
    McpServerStartingState, McpServerState, McpServerStoppedState,
};
use ahpd_mcp::{CallError, CallOutput, Lease, McpHub, McpTool, Server, Servers, Status};
use ahpd_sdk::SessionContext;
use cofold_agents::tool::{Tool, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

/// Checks a record's `mcpServers`: a valid setting whose environment and header values are all
/// `$secret` references (a record is shown to clients, so it holds no value itself).
pub fn check_record_servers(value: &Value) -> Result<(), RecordServersError> {
    let servers = ahpd_mcp::spec::parse_servers("config.mcpServers", value)?;
    for (name, spec) in &servers {
        // A record is refused whole where the daemon's own file would fail the one server:
        // the client that wrote it hears why at once.
        if let ahpd_mcp::Transport::Invalid(e) = &spec.transport {
            return Err(RecordServersError::Spec(e.clone()));
        }
        if spec.has_literal_values() {
            let key = match spec.kind() {
                "stdio" => "env",
                _ => "headers",
            };
            return Err(RecordServersError::LiteralValues {
                server: name.clone(),
                key,
            });
        }
    }
    Ok(())
}

/// Why a record's `mcpServers` was refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordServersError {
    /// Not a valid `mcpServers` setting.
    #[error(transparent)]
    Spec(#[from] ahpd_mcp::spec::SpecError),
    /// A server's environment or headers hold a value rather than a vault reference.
    #[error(
        "config.mcpServers.{server}.{key}: a record keeps these values in the vault: store each with ahpd vault set host:<name> and write {{\"$secret\": \"host:<name>\"}}"
    )]
    LiteralValues {
        /// The server's name.
        server: String,
        /// `env` or `headers`.
        key: &'static str,
    },
}

/// The customization id of a server in a session.
pub fn customization_id(server: &str) -> String {
    format!("mcp:{server}")
}

/// The name the model calls a server's tool by: `mcp__<server>__<tool>`, with characters a tool
/// name may not hold replaced by `_` and cut to 64 characters.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("mcp__{server}__{clean}");
    name.truncate(64);
    name
}

struct Entry {
    id: String,
    name: String,
    server: Arc<Server>,
    /// `None` once a client stopped it for this session.
    lease: Mutex<Option<Lease>>,
}

impl Entry {
    fn enabled(&self) -> bool {
        lock(&self.lease).is_some()
    }

    /// The state clients see: the server's, or `stopped` when this session let it go.
    fn shown(&self) -> McpServerState {
        if !self.enabled() {
            return McpServerState::Stopped(McpServerStoppedState {});
        }
        self.state_of(self.server.state().status)
    }

    /// A server status as clients see it while this session uses the server. A server not yet
    /// started is about to start: the session holds a lease on it.
    fn state_of(&self, status: Status) -> McpServerState {
        match status {
            Status::Starting | Status::Stopped => {
                McpServerState::Starting(McpServerStartingState {
                    blocking: Some(true),
                })
            }
            Status::Ready => McpServerState::Ready(McpServerReadyState {}),
            Status::Failed(why) => McpServerState::Error(McpServerErrorState {
                error: ErrorInfo {
                    error_type: "mcpServerFailed".into(),
                    message: why,
                    stack: None,
                    meta: None,
                },
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One session's servers, shared by its chats.
pub(crate) struct SessionMcp {
    entries: Vec<Arc<Entry>>,
    ctx: SessionContext,
    stop: CancellationToken,
}

impl Drop for SessionMcp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The sessions of one agent that have servers, by session id.
#[derive(Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Weak<SessionMcp>>>,
}

impl Sessions {
    /// The session's servers: the ones its other chats already hold, else leased now (which
    /// starts them) and shown to the session's clients through `ctx`.
    pub(crate) fn attach(
        &self,
        session_id: &str,
        hub: Option<&McpHub>,
        servers: &Servers,
        ctx: &SessionContext,
    ) -> Option<Arc<SessionMcp>> {
        let hub = hub?;
        if servers.is_empty() {
            return None;
        }
        let mut open = lock(&self.open);
        open.retain(|_, w| w.strong_count() > 0);
        if let Some(found) = open.get(session_id).and_then(Weak::upgrade) {
            return Some(found);
        }
        let entries: Vec<Arc<Entry>> = servers
            .iter()
            .map(|(name, spec)| {
                let server = hub.server(name, spec);
                let lease = server.lease();
                Arc::new(Entry {
                    id: customization_id(name),
                    name: name.clone(),
                    server,
                    lease: Mutex::new(Some(lease)),
                })
            })
            .collect();
        // Listening before the state is first shown: a change in between is said again rather
        // than lost (a server that fails for good says so once).
        let listening: Vec<_> = entries.iter().map(|e| e.server.statuses()).collect();
        let mcp = Arc::new(SessionMcp {
            entries,
            ctx: ctx.clone(),
            stop: CancellationToken::new(),
        });
        mcp.publish();
        for (entry, statuses) in mcp.entries.iter().zip(listening) {
            tokio::spawn(follow(
                entry.clone(),
                statuses,
                ctx.clone(),
                mcp.stop.clone(),
            ));
        }
        open.insert(session_id.to_owned(), Arc::downgrade(&mcp));
        Some(mcp)
    }
}

/// Says each of the server's states to the session's clients, in order (a failure followed at
/// once by the restart's `starting` is still said).
async fn follow(
    entry: Arc<Entry>,
    mut statuses: tokio::sync::broadcast::Receiver<Status>,
    ctx: SessionContext,
    stop: CancellationToken,
) {
    loop {
        let status = tokio::select! {
            status = statuses.recv() => match status {
                Ok(status) => Some(status),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => None,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            () = stop.cancelled() => return,
        };
        if entry.enabled() {
            let state = match status {
                Some(status) => entry.state_of(status),
                None => entry.shown(),
            };
            emit(&ctx, &entry.id, state);
        }
    }
}

fn emit_state(ctx: &SessionContext, entry: &Entry) {
    emit(ctx, &entry.id, entry.shown());
}

fn emit(ctx: &SessionContext, id: &str, state: McpServerState) {
    ctx.emit(StateAction::SessionMcpServerStateChanged(Box::new(
        SessionMcpServerStateChangedAction {
            id: id.to_owned(),
            state,
            channel: None,
        },
    )));
}

impl SessionMcp {
    /// Shows every server as a customization of the session, in its state now.
    fn publish(&self) {
        let customizations = self
            .entries
            .iter()
            .map(|e| {
                Customization::McpServer(Box::new(McpServerCustomization {
                    id: e.id.clone(),
                    uri: format!("x-ahpd-mcp:/{}", e.name),
                    name: e.name.clone(),
                    icons: None,
                    range: None,
                    meta: None,
                    enablement: None,
                    state: e.shown(),
                    channel: None,
                    mcp_app: None,
                }))
            })
            .collect();
        self.ctx.emit(StateAction::SessionCustomizationsChanged(
            SessionCustomizationsChangedAction { customizations },
        ));
    }

    /// A client's start (`run`) or stop request for the customization `id`.
    pub(crate) fn request(&self, id: &str, run: bool) -> Result<(), String> {
        let Some(entry) = self.entries.iter().find(|e| e.id == id) else {
            return Err(format!("the session has no MCP server {id}"));
        };
        {
            let mut lease = lock(&entry.lease);
            if run {
                if lease.is_none() {
                    *lease = Some(entry.server.lease());
                }
                entry.server.retry();
            } else {
                *lease = None;
            }
        }
        emit_state(&self.ctx, entry);
        Ok(())
    }

    /// Whether a server this session uses is still starting (a turn waits for it).
    pub(crate) fn starting(&self) -> bool {
        self.entries
            .iter()
            .any(|e| e.enabled() && e.server.state().status == Status::Starting)
    }

    /// Resolves once no server this session uses is starting.
    pub(crate) async fn settled(&self) {
        for entry in &self.entries {
            let mut state = entry.server.watch();
            while entry.enabled() && state.borrow().status == Status::Starting {
                if state.changed().await.is_err() {
                    break;
                }
            }
        }
    }

    /// The tools of every ready server this session uses, named for the model, with the name
    /// each is shown under and whether the person approved its calls in advance (`trust`,
    /// `allow`). `taken` names are skipped (a host or client tool has them).
    pub(crate) fn tools(&self, taken: &[String], images_dir: &Path) -> Vec<OfferedTool> {
        let mut out = Vec::new();
        for entry in self.entries.iter().filter(|e| e.enabled()) {
            let state = entry.server.state();
            if state.status != Status::Ready {
                continue;
            }
            for tool in state.tools.iter() {
                let name = tool_name(&entry.name, &tool.name);
                if taken.contains(&name) || out.iter().any(|o: &OfferedTool| o.tool.name() == name)
                {
                    continue;
                }
                let shown = tool.title.clone().unwrap_or_else(|| tool.name.clone());
                if let Some(wrapped) = wrap(&entry.server, tool, &name, images_dir) {
                    out.push(OfferedTool {
                        tool: wrapped,
                        shown: format!("{} ({})", shown, entry.name),
                        approved: entry.server.spec().trust.trusts(&tool.name),
                    });
                }
            }
        }
        out
    }
}

/// A server's tool as a turn offers it.
pub(crate) struct OfferedTool {
    /// The tool, named for the model.
    pub tool: Tool,
    /// The name people see.
    pub shown: String,
    /// The person approved its calls in advance: the mode does not ask, though it may refuse.
    pub approved: bool,
}

/// One server tool as a cofold tool.
fn wrap(server: &Arc<Server>, tool: &McpTool, name: &str, images_dir: &Path) -> Option<Tool> {
    let mut schema = tool.input_schema.clone();
    if let Value::Object(obj) = &mut schema {
        obj.entry("type").or_insert_with(|| json!("object"));
        if obj.get("type") == Some(&json!("object")) && !obj.contains_key("properties") {
            obj.insert("properties".into(), json!({}));
        }
    } else {
        schema = json!({"type": "object", "properties": {}});
    }
    let description = tool
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .or_else(|| tool.title.clone())
        .unwrap_or_else(|| format!("The {} tool of the MCP server {}", tool.name, server.name()));
    // A server's own read-only mark counts only when the person trusts the server; every other
    // tool may change something, whatever `allow` says (that decides asking, in the policy).
    let effects = if tool.read_only && server.spec().trust.believes_hints() {
        ToolEffects {
            reads: true,
            ..ToolEffects::default()
        }
    } else {
        ToolEffects {
            reads: true,
            writes: false,
            network: tool.open_world,
            destructive: true,
        }
    };
    let server = server.clone();
    let remote = tool.name.clone();
    let images_dir = images_dir.to_path_buf();
    let handler = handler_fn(move |input: Value, tcx| {
        let server = server.clone();
        let remote = remote.clone();
        let images_dir = images_dir.clone();
        async move {
            let arguments = match input {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            let signal = tcx.signal.clone();
            let stop = async move { signal.cancelled().await };
            match server.call(&remote, arguments, None, stop).await {
                Ok(output) => output_of(output, &images_dir, &tcx.call_id),
                Err(CallError::Cancelled) => Err(ToolError::failed("The turn was stopped")),
                Err(e) => Err(ToolError::failed(e.to_string())),
            }
        }
    });
    match Tool::new(ToolDef::new(name.to_owned(), description, schema, handler).effects(effects)) {
        Ok(tool) => Some(tool),
        Err(error) => {
            tracing::warn!(tool = %name, "an MCP tool is not offered: {}", error.message);
            None
        }
    }
}

/// The model reads the text, then the structured content; images are kept as files beside the
/// session's attachments and named in the text.
fn output_of(
    output: CallOutput,
    images_dir: &Path,
    call_id: &str,
) -> Result<ToolOutput, ToolError> {
    let mut text = output.text;
    if let Some(structured) = &output.structured {
        let rendered = serde_json::to_string(structured).unwrap_or_default();
        if !text.contains(&rendered) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&rendered);
        }
    }
    let mut kept: Vec<Value> = Vec::new();
    for (n, image) in output.images.iter().enumerate() {
        let path = save_image(images_dir, call_id, n, &image.mime_type, &image.data);
        let note = match &path {
            Some(p) => format!("[image {} kept at {}]", image.mime_type, p.display()),
            None => format!(
                "[image {} (not kept: it could not be decoded or written)]",
                image.mime_type
            ),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&note);
        kept.push(json!({"mimeType": image.mime_type, "path": path.map(|p| p.to_string_lossy().into_owned())}));
    }
    if output.is_error {
        let sentence = if text.trim().is_empty() {
            "The MCP tool reported an error".to_owned()
        } else {
            text
        };
        return Err(ToolError::failed(sentence));
    }
    let detail = json!({
        "structuredContent": output.structured,
        "images": kept,
    });
    Ok(ToolOutput::with_detail(text, detail))
}

fn save_image(dir: &Path, call_id: &str, n: usize, mime: &str, data: &str) -> Option<PathBuf> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    let ext = match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => "bin",
    };
    let safe: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    // A tool's output may hold what only the person may read, whatever the umask.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .ok()?;
    let path = dir.join(format!("mcp-{safe}-{n}.{ext}"));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(&bytes))
        .ok()?;
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_convention() {
        assert_eq!(
            tool_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        assert_eq!(tool_name("fs", "read.file"), "mcp__fs__read_file");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), 64);
    }
}
