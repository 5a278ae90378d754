//! One connection over a byte stream (standard input/output): one JSON-RPC message per line.

use async_trait::async_trait;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::transport::peer::{Inbound, Peer, PeerError, PeerReader, PeerWriter};

struct LineReader<R> {
    r: BufReader<R>,
    max: usize,
}

#[async_trait]
impl<R: AsyncRead + Unpin + Send + 'static> PeerReader for LineReader<R> {
    async fn next(&mut self) -> Option<Inbound> {
        loop {
            let mut buf: Vec<u8> = Vec::new();
            let mut too_big = false;
            let mut eof = false;
            loop {
                let chunk = match self.r.fill_buf().await {
                    Ok(c) => c,
                    Err(_) => return None,
                };
                if chunk.is_empty() {
                    eof = true;
                    break;
                }
                match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => {
                        if !too_big {
                            buf.extend_from_slice(&chunk[..i]);
                        }
                        self.r.consume(i + 1);
                        if buf.len() > self.max {
                            too_big = true;
                        }
                        break;
                    }
                    None => {
                        let n = chunk.len();
                        if !too_big {
                            buf.extend_from_slice(chunk);
                        }
                        self.r.consume(n);
                    }
                }
                if buf.len() > self.max {
                    // Keep reading to the end of the line, but stop keeping it.
                    too_big = true;
                    buf = Vec::new();
                }
            }
            if too_big {
                return Some(Inbound::Oversized);
            }
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                if eof {
                    return None;
                }
                continue;
            }
            return Some(Inbound::Frame(String::from_utf8_lossy(&buf).into_owned()));
        }
    }
}

struct LineWriter<W> {
    w: W,
}

#[async_trait]
impl<W: AsyncWrite + Unpin + Send + 'static> PeerWriter for LineWriter<W> {
    async fn send(&mut self, frame: &str) -> Result<(), PeerError> {
        let mut line = Vec::with_capacity(frame.len() + 1);
        line.extend_from_slice(frame.as_bytes());
        line.push(b'\n');
        self.w
            .write_all(&line)
            .await
            .map_err(|e| PeerError(e.to_string()))?;
        self.w.flush().await.map_err(|e| PeerError(e.to_string()))
    }

    async fn close(&mut self, _code: u16, _reason: &str) {
        let _ = self.w.shutdown().await;
    }

    fn closes_on_oversize(&self) -> bool {
        false
    }
}

/// A peer over any line stream (tests use an in-memory duplex).
pub fn peer<R, W>(reader: R, writer: W, max_frame_bytes: usize) -> Peer
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    Peer {
        reader: Box::new(LineReader {
            r: BufReader::new(reader),
            max: max_frame_bytes,
        }),
        writer: Box::new(LineWriter { w: writer }),
        label: "stdio".into(),
    }
}

impl crate::host::Host {
    /// Serve one connection over standard input and output until input ends.
    pub async fn serve_stdio(&self) {
        let max = self.handle().inner.options.max_frame_bytes;
        self.accept(peer(tokio::io::stdin(), tokio::io::stdout(), max))
            .await;
    }
}
