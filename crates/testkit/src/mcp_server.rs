//! An MCP server of the project's own, built on the official SDK's server side and served over
//! streamable HTTP on loopback. It runs on a thread and runtime of its own, so [`McpServer::crash`]
//! ends it the way a dying process would: every connection and session gone at once.
//!
//! Its tools: `echo` (read-only; text and structured content), `picture` (read-only; a text
//! and a PNG image), `slow` (waits until cancelled), `note` (not read-only; records that it
//! ran). [`McpServer::add_tool`] adds `extra` and sends `notifications/tools/list_changed`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A one-pixel PNG, base64: the `picture` tool's image.
pub const PIXEL_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

#[derive(Default)]
struct Seen {
    calls: Vec<(String, Value)>,
    cancelled: usize,
    extra: bool,
    peers: Vec<Peer<RoleServer>>,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Seen>,
    changed: Notify,
}

impl Shared {
    fn note(&self, f: impl FnOnce(&mut Seen)) {
        if let Ok(mut seen) = self.seen.lock() {
            f(&mut seen);
        }
        self.changed.notify_waiters();
    }
}

#[derive(Clone)]
struct Handler {
    shared: Arc<Shared>,
}

fn tool(name: &str, description: &str, read_only: bool) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": read_only}
    })
}

impl Handler {
    fn tools(&self) -> Vec<Value> {
        let mut tools = vec![
            tool("echo", "Says the text back.", true),
            tool("picture", "Shows a picture.", true),
            tool("slow", "Takes as long as it is let.", true),
            tool("note", "Writes a note down.", false),
        ];
        if self.shared.seen.lock().is_ok_and(|s| s.extra) {
            tools.push(tool("extra", "Appeared later.", true));
        }
        tools
    }
}

fn result(value: Value) -> Result<CallToolResponse, ErrorData> {
    serde_json::from_value::<CallToolResult>(value)
        .map(CallToolResponse::from)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        serde_json::from_value(json!({ "tools": self.tools() }))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let name = request.name.to_string();
        self.shared
            .note(|s| s.calls.push((name.clone(), args.clone())));
        let text = args
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match name.as_str() {
            "echo" | "extra" => result(json!({
                "content": [{"type": "text", "text": format!("echo: {text}")}],
                "structuredContent": {"echoed": text}
            })),
            "picture" => result(json!({
                "content": [
                    {"type": "text", "text": "a picture of one pixel"},
                    {"type": "image", "mimeType": "image/png", "data": PIXEL_PNG}
                ]
            })),
            "slow" => {
                context.ct.cancelled().await;
                result(json!({"content": [{"type": "text", "text": "cancelled"}]}))
            }
            "note" => {
                result(json!({"content": [{"type": "text", "text": format!("noted: {text}")}]}))
            }
            _ => Err(ErrorData::invalid_params(format!("no tool {name}"), None)),
        }
    }

    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.shared.note(|s| s.cancelled += 1);
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.shared.note(|s| s.peers.push(context.peer.clone()));
    }
}

/// The running test server.
pub struct McpServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl McpServer {
    /// Starts on `127.0.0.1:0`.
    pub fn start() -> std::io::Result<McpServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let server = McpServer {
            addr,
            shared: Arc::default(),
            runtime: Mutex::new(None),
        };
        server.serve(listener)?;
        Ok(server)
    }

    fn serve(&self, listener: std::net::TcpListener) -> std::io::Result<()> {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let handler = Handler {
            shared: self.shared.clone(),
        };
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        runtime.spawn(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let router = axum::Router::new().nest_service("/mcp", service);
            let _ = axum::serve(listener, router).await;
        });
        if let Ok(mut slot) = self.runtime.lock() {
            *slot = Some(runtime);
        }
        Ok(())
    }

    /// `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Ends the server at once, as a crash would: its runtime is dropped with every task.
    pub fn crash(&self) {
        let runtime = self.runtime.lock().ok().and_then(|mut r| r.take());
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
        self.shared.note(|s| s.peers.clear());
    }

    /// Starts again on the same port after [`McpServer::crash`].
    pub fn restart(&self) -> std::io::Result<()> {
        let listener = std::net::TcpListener::bind(self.addr)?;
        self.serve(listener)
    }

    /// Adds the tool `extra` and tells every connected client its tool list changed.
    pub async fn add_tool(&self) {
        let peers = self.shared.seen.lock().map(|mut s| {
            s.extra = true;
            s.peers.clone()
        });
        for peer in peers.unwrap_or_default() {
            let _ = peer.notify_tool_list_changed().await;
        }
    }

    /// Every call so far: tool name and arguments.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.shared
            .seen
            .lock()
            .map(|s| s.calls.clone())
            .unwrap_or_default()
    }

    /// Waits until `pred` holds for (calls, cancellations seen).
    pub async fn wait_for(&self, pred: impl Fn(&[(String, Value)], usize) -> bool) {
        loop {
            let notified = self.shared.changed.notified();
            if self
                .shared
                .seen
                .lock()
                .is_ok_and(|s| pred(&s.calls, s.cancelled))
            {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.crash();
    }
}
