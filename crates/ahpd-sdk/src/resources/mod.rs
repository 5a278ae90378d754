//! Resources: what `resourceRead`, `resourceList`, `resourceResolve`, `resourceWrite` and
//! `resourceDelete` reach.
//!
//! The ports an embedder implements are in `port` (re-exported from [`crate::ports`]);
//! [`FileResources`] serves read-only `file:` resources inside the host's folders; `routing`
//! sends requests for other URI schemes to the provider registered for that scheme. This layer
//! uses only `error` and `util`; the protocol layer calls it.

mod files;
pub(crate) mod port;
pub(crate) mod routing;

pub use files::{DEFAULT_MAX_READ_BYTES, FileResources, RootSource};
