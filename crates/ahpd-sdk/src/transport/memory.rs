//! An in-process connection pair, for tests and for a client that runs its host in its own
//! process. The host half is a [`Peer`]; the client half
//! implements `ahp::transport::Transport`, so the official client runs over it. The client
//! can be made to stall (never read), which a real socket's kernel buffer would hide.

use ahp::TransportError;
use ahp::transport::{Transport, TransportMessage};
use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use crate::transport::peer::{Inbound, Peer, PeerError, PeerReader, PeerWriter};

/// The client half of an in-memory connection.
pub struct MemoryClient {
    tx: Option<mpsc::Sender<String>>,
    rx: mpsc::Receiver<String>,
    closed: watch::Receiver<Option<(u16, String)>>,
}

impl std::fmt::Debug for MemoryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryClient").finish_non_exhaustive()
    }
}

impl MemoryClient {
    /// Send one raw text frame to the host.
    pub async fn send_text(&self, text: &str) -> bool {
        match &self.tx {
            Some(tx) => tx.send(text.to_owned()).await.is_ok(),
            None => false,
        }
    }

    /// The next frame from the host; `None` once the host closed.
    pub async fn recv_text(&mut self) -> Option<String> {
        self.rx.recv().await
    }

    /// A watcher that sees the close code and reason once the host closes.
    pub fn close_watch(&self) -> watch::Receiver<Option<(u16, String)>> {
        self.closed.clone()
    }

    /// Stop sending (the host sees end of input).
    pub fn hang_up(&mut self) {
        self.tx = None;
    }
}

impl Transport for MemoryClient {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        let text = match msg {
            TransportMessage::Parsed(m) => {
                serde_json::to_string(&m).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
            TransportMessage::Text(s) => s,
            TransportMessage::Binary(b) => {
                String::from_utf8(b).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
        };
        match &self.tx {
            Some(tx) => tx.send(text).await.map_err(|_| TransportError::Closed),
            None => Err(TransportError::Closed),
        }
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        Ok(self.rx.recv().await.map(TransportMessage::Text))
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.tx = None;
        Ok(())
    }
}

struct MemReader {
    rx: mpsc::Receiver<String>,
    max: usize,
}

#[async_trait]
impl PeerReader for MemReader {
    async fn next(&mut self) -> Option<Inbound> {
        let s = self.rx.recv().await?;
        Some(if s.len() > self.max {
            Inbound::Oversized
        } else {
            Inbound::Frame(s)
        })
    }
}

struct MemWriter {
    tx: Option<mpsc::Sender<String>>,
    closed: watch::Sender<Option<(u16, String)>>,
}

#[async_trait]
impl PeerWriter for MemWriter {
    async fn send(&mut self, frame: &str) -> Result<(), PeerError> {
        match &self.tx {
            Some(tx) => tx
                .send(frame.to_owned())
                .await
                .map_err(|_| PeerError("the client is gone".into())),
            None => Err(PeerError("closed".into())),
        }
    }

    async fn close(&mut self, code: u16, reason: &str) {
        self.tx = None;
        let _ = self.closed.send(Some((code, reason.to_owned())));
    }
}

/// A connected pair. `client_buffer` is how many frames the client half holds unread before
/// the host's writes wait (a stalled client never reads).
pub fn pair(client_buffer: usize, max_frame_bytes: usize) -> (Peer, MemoryClient) {
    let (c2h_tx, c2h_rx) = mpsc::channel(1024);
    let (h2c_tx, h2c_rx) = mpsc::channel(client_buffer.max(1));
    let (closed_tx, closed_rx) = watch::channel(None);
    let peer = Peer {
        reader: Box::new(MemReader {
            rx: c2h_rx,
            max: max_frame_bytes,
        }),
        writer: Box::new(MemWriter {
            tx: Some(h2c_tx),
            closed: closed_tx,
        }),
        label: "memory".into(),
    };
    (
        peer,
        MemoryClient {
            tx: Some(c2h_tx),
            rx: h2c_rx,
            closed: closed_rx,
        },
    )
}
