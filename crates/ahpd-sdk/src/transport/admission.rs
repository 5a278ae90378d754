//! Admission of TCP connections to the WebSocket listener, before anyone knows who is calling.
//!
//! A connection must send its whole request head (request line and headers) within a time
//! limit, or it is closed. And only so many connections may wait at once without having shown
//! the token: when one more arrives, the one that has waited longest is closed. So an attacker
//! without the token can neither keep connections open by sending nothing (or half a request
//! line), nor fill the daemon's descriptors with them, nor keep the token holder out: a client
//! that sends its request at once gets in past any number of idle sockets.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service as _;

/// How long a connection has to send its request head, by default.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections may wait at once without having shown the token, by default.
pub const DEFAULT_MAX_PENDING: usize = 64;

/// The limits on connections not yet admitted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub header_timeout: Duration,
    pub max_pending: usize,
}

/// The connections accepted whose request has not passed the token check, oldest first.
#[derive(Clone, Default)]
struct Pending {
    inner: Arc<Mutex<Waiting>>,
}

#[derive(Default)]
struct Waiting {
    next: u64,
    /// By order of arrival; each with what closes it.
    by_age: BTreeMap<u64, CancellationToken>,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // A panic while holding this lock leaves the map whole: every change is one call.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a new connection, closing the longest waiting ones while the limit is
    /// reached.
    fn admit(&self, max: usize) -> Admission {
        let mut w = self.lock();
        while w.by_age.len() >= max.max(1) {
            let Some((_, close)) = w.by_age.pop_first() else {
                break;
            };
            close.cancel();
        }
        let id = w.next;
        w.next += 1;
        let close = CancellationToken::new();
        w.by_age.insert(id, close.clone());
        Admission {
            inner: Arc::new(Seat {
                id,
                pending: self.clone(),
                close,
            }),
        }
    }

    fn leave(&self, id: u64) {
        self.lock().by_age.remove(&id);
    }

    /// Closes every waiting connection: nothing they sent has been let in.
    fn close_all(&self) {
        for (_, close) in std::mem::take(&mut self.lock().by_age) {
            close.cancel();
        }
    }
}

/// A connection's seat among those waiting for the token check. The request handler finds it
/// in the request's extensions and calls [`Admission::pass`] once the request may go on.
#[derive(Clone)]
pub(crate) struct Admission {
    inner: Arc<Seat>,
}

struct Seat {
    id: u64,
    pending: Pending,
    close: CancellationToken,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.pending.leave(self.id);
    }
}

impl Admission {
    /// The request passed the token check: the connection no longer counts as waiting, and
    /// newer arrivals cannot close it.
    pub(crate) fn pass(&self) {
        self.inner.pending.leave(self.inner.id);
    }
}

/// Accepts connections until `stop` fires, serving each with `router` under `limits`; then
/// waits for the connections still in their HTTP phase to end (upgraded ones live on their
/// own).
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: Limits,
    stop: impl std::future::Future<Output = ()>,
) {
    let pending = Pending::default();
    let tasks = TaskTracker::new();
    let stopping = CancellationToken::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if !is_connection_error(&e) {
                    // Out of descriptors, most likely: give the closing connections a moment.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        without_nagle(&stream);
        let admission = pending.admit(limits.max_pending);
        let close = admission.inner.close.clone();
        let router = router.clone();
        let stopping = stopping.clone();
        tasks.spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut().insert(admission.clone());
                let mut router = router.clone();
                async move { router.call(req.map(Body::new)).await }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            // The timer runs from the moment the connection is read, so a socket that sends
            // nothing at all is closed too.
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            let mut shutting = false;
            loop {
                tokio::select! {
                    result = conn.as_mut() => {
                        if let Err(e) = result {
                            tracing::debug!(peer = %peer, error = %e, "connection ended before an upgrade");
                        }
                        break;
                    }
                    () = close.cancelled() => {
                        tracing::debug!(peer = %peer, "closed a connection that had not shown the token");
                        break;
                    }
                    () = stopping.cancelled(), if !shutting => {
                        conn.as_mut().graceful_shutdown();
                        shutting = true;
                    }
                }
            }
        });
    }
    drop(listener);
    pending.close_all();
    stopping.cancel();
    tasks.close();
    tasks.wait().await;
}

/// A protocol frame is one small write answered by the peer; with Nagle's algorithm on, a frame
/// written while an earlier one is unacknowledged waits for the peer's delayed ACK (about 40 ms
/// on Linux) on every turn.
fn without_nagle(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted connection");
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_waiting_connection_makes_room_and_passed_ones_stay() {
        let pending = Pending::default();
        let a = pending.admit(2);
        let b = pending.admit(2);
        b.pass();
        let c = pending.admit(2);
        assert!(!a.inner.close.is_cancelled());
        let d = pending.admit(2);
        // `a` waited longest; `b` passed and no longer counts.
        assert!(a.inner.close.is_cancelled());
        assert!(!b.inner.close.is_cancelled());
        assert!(!c.inner.close.is_cancelled());
        drop(c);
        let e = pending.admit(2);
        assert!(!d.inner.close.is_cancelled());
        assert!(!e.inner.close.is_cancelled());
        assert_eq!(pending.lock().by_age.len(), 2);
        drop((d, e));
        assert!(pending.lock().by_age.is_empty());
    }

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let client = tokio::net::TcpStream::connect(addr);
        let (accepted, client) = tokio::join!(listener.accept(), client);
        let _client = client.expect("connect");
        let (accepted, _) = accepted.expect("accept");
        without_nagle(&accepted);
        // The kernel default is off, so this fails if the helper does nothing.
        assert!(accepted.nodelay().expect("read TCP_NODELAY"));
    }
}
