//! Transports: each turns a byte stream into a [`Peer`](crate::transport::peer::Peer).
//!
//! This folder is the lowest layer: [`peer`] is the socket-free abstraction protocol code
//! sees, and each transport produces one and hands it to the connection layer
//! ([`crate::Host::accept`] and the `serve_*` methods). Transports know frames as text only.

pub mod peer;

#[cfg(feature = "ws")]
mod admission;
#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "stdio")]
pub mod stdio;
#[cfg(feature = "ws")]
pub mod ws;
