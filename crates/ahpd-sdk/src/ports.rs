//! Optional capabilities an embedder plugs into the host: extension channels and commands
//! (`x-…`), and read-only resources.

use ahp_types::commands::{
    ContentEncoding, ResourceListResult, ResourceReadResult, ResourceResolveResult,
};
use async_trait::async_trait;
use serde_json::Value;

use crate::error::RpcError;
use crate::host::HostHandle;

/// Who sent a request, as an extension sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The connection's client id (empty before `initialize`).
    pub client_id: String,
    /// A number unique to this connection within the host process.
    pub connection_id: u64,
    /// The negotiated protocol version.
    pub protocol_version: String,
}

/// Extension channels (`x-<name>://…`) and commands (`x-…` methods) served beside the protocol.
///
/// The extension owns its state. It publishes changes with [`HostHandle::publish_extension`],
/// which numbers them with the host's `serverSeq`, fans them out to subscribers and keeps them
/// for replay; it should publish actions a client can apply twice without harm, since a
/// snapshot taken between a state change and its publication already shows the change.
#[async_trait]
pub trait Extension: Send + Sync + 'static {
    /// URI schemes served, each starting with `x-` (e.g. `x-ahpd-agents`).
    fn schemes(&self) -> Vec<String>;

    /// Methods served, each starting with `x-` (e.g. `x-ahpd/agents/put`).
    fn methods(&self) -> Vec<String>;

    /// Called once when the host is built, with the handle to publish through.
    fn attach(&self, _host: HostHandle) {}

    /// Answer one of [`Extension::methods`].
    async fn call(&self, method: &str, params: Value, conn: &ConnInfo) -> Result<Value, RpcError>;

    /// The state of a channel of one of the schemes, or `None` when it does not exist.
    fn snapshot(&self, channel: &str) -> Option<Value>;
}

/// Read-only access to resources (`resourceRead`, `resourceList`, `resourceResolve`).
#[async_trait]
pub trait Resources: Send + Sync + 'static {
    /// Read one resource.
    async fn read(
        &self,
        uri: &str,
        encoding: Option<ContentEncoding>,
    ) -> Result<ResourceReadResult, RpcError>;

    /// List a folder.
    async fn list(&self, uri: &str) -> Result<ResourceListResult, RpcError>;

    /// Resolve a URI to its canonical form and type.
    async fn resolve(
        &self,
        uri: &str,
        follow_symlinks: bool,
    ) -> Result<ResourceResolveResult, RpcError>;
}
