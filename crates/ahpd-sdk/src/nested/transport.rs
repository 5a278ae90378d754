//! The inner host's standard streams as an `ahp` transport (one JSON message per line), and
//! the tail of its standard error kept for failure sentences.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use ahp::TransportError;
use ahp::transport::{Transport, TransportMessage};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

/// The longest line read from the inner host: the host's own default frame limit.
const MAX_LINE: usize = 16 * 1024 * 1024;
/// Standard error lines kept for a sentence.
const KEPT_LINES: usize = 12;
/// Each kept line is cut here.
const LINE_CUT: usize = 400;

/// Line-framed JSON over a writer and a reader.
pub(crate) struct LineTransport {
    writer: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    reader: BufReader<Pin<Box<dyn AsyncRead + Send>>>,
    line: Vec<u8>,
}

impl LineTransport {
    pub(crate) fn new(
        writer: Pin<Box<dyn AsyncWrite + Send>>,
        reader: Pin<Box<dyn AsyncRead + Send>>,
    ) -> Self {
        Self {
            writer: Some(writer),
            reader: BufReader::new(reader),
            line: Vec::new(),
        }
    }
}

impl Transport for LineTransport {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        let mut text = match msg {
            TransportMessage::Parsed(m) => {
                serde_json::to_string(&m).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
            TransportMessage::Text(s) => s,
            TransportMessage::Binary(b) => {
                String::from_utf8(b).map_err(|e| TransportError::Protocol(e.to_string()))?
            }
        };
        text.push('\n');
        let Some(w) = self.writer.as_mut() else {
            return Err(TransportError::Closed);
        };
        w.write_all(text.as_bytes())
            .await
            .map_err(|_| TransportError::Closed)?;
        w.flush().await.map_err(|_| TransportError::Closed)
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        loop {
            self.line.clear();
            let n = (&mut self.reader)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut self.line)
                .await
                .map_err(|_| TransportError::Closed)?;
            if n == 0 {
                return Ok(None);
            }
            if self.line.len() > MAX_LINE {
                return Err(TransportError::Protocol(
                    "the host inside sent a message over the frame limit".into(),
                ));
            }
            let text = String::from_utf8_lossy(&self.line);
            let text = text.trim();
            if !text.is_empty() {
                return Ok(Some(TransportMessage::Text(text.to_owned())));
            }
        }
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        if let Some(mut w) = self.writer.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

/// The last lines the inner host wrote on standard error.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    /// Reads the stream until it ends, keeping the last lines and logging each at `debug`.
    pub(crate) fn follow(&self, stream: Pin<Box<dyn AsyncRead + Send>>) -> JoinHandle<()> {
        let kept = self.0.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // Characters may be split across reads; a lossy decode of the whole line
                // keeps them together.
                let line = String::from_utf8_lossy(&buf);
                let line: String = line.trim_end().chars().take(LINE_CUT).collect();
                if line.is_empty() {
                    continue;
                }
                tracing::debug!(target: "ahpd_computer::inner", "{line}");
                let mut k = kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if k.len() == KEPT_LINES {
                    k.pop_front();
                }
                k.push_back(line);
            }
        })
    }

    /// `; it said: <lines joined by " | ">`, or nothing when it said nothing.
    pub(crate) fn said(&self) -> String {
        let k = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if k.is_empty() {
            String::new()
        } else {
            format!(
                "; it said: {}",
                k.iter().cloned().collect::<Vec<_>>().join(" | ")
            )
        }
    }
}
