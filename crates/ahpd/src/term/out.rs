//! One writer thread for standard output and standard error, fed through an unbounded queue.
//!
//! The host's actions arrive on a queue of fixed size that skips what a slow reader falls
//! behind on; were the event loop to write to a blocked standard output itself (a pager, a
//! full pipe), it would fall behind and actions would be lost without a word. The loop only
//! queues text here, and never waits on the terminal; both streams share the one queue, so
//! what reaches a terminal keeps the order it was written in.

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender, channel};

enum Msg {
    Out(String),
    Err(String),
    Sync(Sender<()>),
}

/// A handle on the writer; clones share it.
#[derive(Clone)]
pub struct Out {
    tx: Sender<Msg>,
}

fn write_all(rx: Receiver<Msg>) {
    for msg in rx {
        match msg {
            Msg::Out(s) => {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(s.as_bytes());
                let _ = o.flush();
            }
            Msg::Err(s) => {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(s.as_bytes());
                let _ = e.flush();
            }
            Msg::Sync(done) => {
                let _ = done.send(());
            }
        }
    }
}

impl Out {
    /// Starts the writer thread.
    pub fn start() -> Out {
        let (tx, rx) = channel();
        std::thread::spawn(move || write_all(rx));
        Out { tx }
    }

    /// Queues text for standard output.
    pub fn out(&self, s: impl Into<String>) {
        let _ = self.tx.send(Msg::Out(s.into()));
    }

    /// Queues text for standard error.
    pub fn err(&self, s: impl Into<String>) {
        let _ = self.tx.send(Msg::Err(s.into()));
    }

    /// Queues one line for standard error.
    pub fn err_line(&self, s: &str) {
        self.err(format!("{s}\n"));
    }

    /// Waits until everything queued so far is written.
    pub fn sync(&self) {
        let (done, wait) = channel();
        if self.tx.send(Msg::Sync(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}
