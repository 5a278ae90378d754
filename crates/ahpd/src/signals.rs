//! The signals the foreground daemon answers: SIGTERM and SIGINT stop it (a second one at
//! once), SIGHUP is noted and ignored.

/// SIGTERM, SIGINT and SIGHUP, caught from the moment this is made.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for SIGTERM or SIGINT; SIGHUP is noted and ignored.
    pub async fn first(&mut self) {
        loop {
            tokio::select! {
                _ = self.term.recv() => break,
                _ = self.int.recv() => break,
                _ = self.hup.recv() => tracing::info!("SIGHUP ignored: the configuration is read at start only"),
            }
        }
    }

    /// Waits for the next SIGTERM or SIGINT.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.int.recv() => {},
        }
    }
}
