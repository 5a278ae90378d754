//! Transports: each turns a byte stream into a [`Peer`](crate::peer::Peer).

#[cfg(feature = "ws")]
mod admission;
#[cfg(feature = "memory")]
pub mod memory;
#[cfg(feature = "stdio")]
pub mod stdio;
#[cfg(feature = "ws")]
pub mod ws;
