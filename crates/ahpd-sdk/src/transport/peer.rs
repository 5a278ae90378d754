//! The socket-free connection abstraction every transport produces. Protocol code sees only a
//! [`PeerReader`] and a [`PeerWriter`].

use async_trait::async_trait;

/// One inbound item from a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inbound {
    /// One complete JSON-RPC message as text.
    Frame(String),
    /// A frame larger than the host accepts; the transport decides whether to go on.
    Oversized,
}

/// Why a peer could not be written to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the connection could not be written to: {0}")]
pub struct PeerError(pub String);

/// The reading half of a connection.
#[async_trait]
pub trait PeerReader: Send + 'static {
    /// The next inbound frame; `None` when the peer is gone.
    async fn next(&mut self) -> Option<Inbound>;
}

/// The writing half of a connection.
#[async_trait]
pub trait PeerWriter: Send + 'static {
    /// Write one frame.
    async fn send(&mut self, frame: &str) -> Result<(), PeerError>;
    /// Queue one frame without flushing; [`PeerWriter::flush`] pushes queued frames out.
    /// Transports that cannot batch write at once (the default).
    async fn feed(&mut self, frame: &str) -> Result<(), PeerError> {
        self.send(frame).await
    }
    /// Push out frames queued by [`PeerWriter::feed`].
    async fn flush(&mut self) -> Result<(), PeerError> {
        Ok(())
    }
    /// Close with a code (WebSocket close codes) and a short reason.
    async fn close(&mut self, code: u16, reason: &str);
    /// Whether an oversized inbound frame should end the connection (`1009`) rather than be
    /// answered with `-32600` and skipped (stdio).
    fn closes_on_oversize(&self) -> bool {
        true
    }
}

/// A connection: both halves and a label for logs.
pub struct Peer {
    /// Reading half.
    pub reader: Box<dyn PeerReader>,
    /// Writing half.
    pub writer: Box<dyn PeerWriter>,
    /// Where the peer is, for logs (never carries a token).
    pub label: String,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}
