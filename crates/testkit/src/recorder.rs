//! A loopback TCP server that notes the first line of every request it is sent and answers each
//! with the same bytes: a proxy that refuses, or a plain HTTP server, for tests about where a
//! request went.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The first lines of the requests a [`Recorder`] received, in order.
pub type Seen = Arc<Mutex<Vec<String>>>;

/// A running recorder; it serves until the runtime it was started on ends.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Where it listens (on 127.0.0.1).
    pub addr: SocketAddr,
    /// What it was asked.
    pub seen: Seen,
}

impl Recorder {
    /// Starts a recorder answering every request with `answer`, then closing.
    pub async fn start(answer: Vec<u8>) -> std::io::Result<Recorder> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen: Seen = Arc::default();
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let first = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                if let Ok(mut lines) = record.lock() {
                    lines.push(first);
                }
                let _ = socket.write_all(&answer).await;
            }
        });
        Ok(Recorder { addr, seen })
    }

    /// The first lines received so far.
    pub fn lines(&self) -> Vec<String> {
        self.seen.lock().map(|l| l.clone()).unwrap_or_default()
    }
}
