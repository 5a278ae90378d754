//! The resource ports: read-only `file:` resources and the providers of other URI schemes
//! that clients may also write and delete. See [`crate::ports`].

use ahp_types::commands::{
    ContentEncoding, ResourceListResult, ResourceReadResult, ResourceResolveResult,
};
use async_trait::async_trait;

use crate::error::RpcError;

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

/// Resources of one URI scheme that clients may also write and delete (`computer:` machines,
/// say). Routed by scheme through [`crate::HostBuilder::resource_provider`]; `file:` stays with
/// [`Resources`].
#[async_trait]
pub trait ResourceProvider: Send + Sync + 'static {
    /// Read one resource.
    async fn read(&self, uri: &str) -> Result<ResourceReadResult, RpcError>;

    /// List a folder.
    async fn list(&self, uri: &str) -> Result<ResourceListResult, RpcError>;

    /// Resolve a URI to its canonical form and type.
    async fn resolve(&self, uri: &str) -> Result<ResourceResolveResult, RpcError>;

    /// Write a resource from UTF-8 text.
    async fn write(&self, uri: &str, data: &str, create_only: bool) -> Result<(), RpcError>;

    /// Delete a resource.
    async fn delete(&self, uri: &str) -> Result<(), RpcError>;
}
