//! A connection to a host inside this process: the host half is a [`Peer`], the client half an
//! `ahp` [`Transport`], joined by two channels of JSON text. The terminal client speaks the same
//! protocol to its in-process host as to a daemon, so both paths share every line of it.

use ahp::TransportError;
use ahp::transport::{Transport, TransportMessage};
use ahpd_sdk::{Inbound, Peer, PeerError, PeerReader, PeerWriter};
use async_trait::async_trait;
use tokio::sync::mpsc;

/// Frames either side may hold unread before the writer waits.
const BUFFER: usize = 4096;

/// The client half.
pub struct ClientHalf {
    tx: Option<mpsc::Sender<String>>,
    rx: mpsc::Receiver<String>,
}

impl Transport for ClientHalf {
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

struct HostReader(mpsc::Receiver<String>);

#[async_trait]
impl PeerReader for HostReader {
    async fn next(&mut self) -> Option<Inbound> {
        self.0.recv().await.map(Inbound::Frame)
    }
}

struct HostWriter(Option<mpsc::Sender<String>>);

#[async_trait]
impl PeerWriter for HostWriter {
    async fn send(&mut self, frame: &str) -> Result<(), PeerError> {
        match &self.0 {
            Some(tx) => tx
                .send(frame.to_owned())
                .await
                .map_err(|_| PeerError("the terminal client is gone".into())),
            None => Err(PeerError("closed".into())),
        }
    }

    async fn close(&mut self, _code: u16, _reason: &str) {
        self.0 = None;
    }

    fn closes_on_oversize(&self) -> bool {
        false
    }
}

/// A connected pair.
pub fn pair() -> (Peer, ClientHalf) {
    let (to_host, from_client) = mpsc::channel(BUFFER);
    let (to_client, from_host) = mpsc::channel(BUFFER);
    let peer = Peer {
        reader: Box::new(HostReader(from_client)),
        writer: Box::new(HostWriter(Some(to_client))),
        label: "in-process".into(),
    };
    (
        peer,
        ClientHalf {
            tx: Some(to_host),
            rx: from_host,
        },
    )
}
