//! The writing half of a connection: drains the bounded outbound queue onto the peer, in
//! batches, and closes it with the code its kill switch names. After each batch it tells the
//! reader, which stops reading while the queue is more than half full.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};

use crate::channels::hub::{Frame, KillSwitch};
use crate::transport::peer::PeerWriter;

pub(crate) async fn write_loop(
    mut writer: Box<dyn PeerWriter>,
    mut rx: mpsc::Receiver<Frame>,
    kill: Arc<KillSwitch>,
    timeout: Duration,
    drained: Arc<Notify>,
) {
    const CLOSE_GRACE: Duration = Duration::from_secs(1);
    loop {
        tokio::select! {
            biased;
            _ = kill.token().cancelled() => {
                let (code, reason) = kill.reason().unwrap_or((1000, String::new()));
                if code != 1013 {
                    // A protocol close (e.g. after an unsupported version) lets queued replies out first.
                    while let Ok(f) = rx.try_recv() {
                        if tokio::time::timeout(CLOSE_GRACE, writer.send(&f)).await.is_err() {
                            break;
                        }
                    }
                }
                let _ = tokio::time::timeout(CLOSE_GRACE, writer.close(code, &reason)).await;
                return;
            }
            frame = rx.recv() => match frame {
                None => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, writer.close(1000, "")).await;
                    return;
                }
                Some(f) => {
                    tokio::select! {
                        r = tokio::time::timeout(timeout, write_batch(writer.as_mut(), f, &mut rx)) => match r {
                            Ok(Ok(())) => drained.notify_one(),
                            Ok(Err(_)) => {
                                kill.kill(1006, "connection lost");
                                return;
                            }
                            Err(_) => kill.kill(1013, "write timeout"),
                        },
                        _ = kill.token().cancelled() => {}
                    }
                }
            }
        }
    }
}

/// Write one frame and whatever else is already queued (up to a bound), then flush once, so
/// a burst costs one flush instead of one per frame.
async fn write_batch(
    writer: &mut dyn PeerWriter,
    first: Frame,
    rx: &mut mpsc::Receiver<Frame>,
) -> Result<(), crate::transport::peer::PeerError> {
    const BATCH: usize = 64;
    writer.feed(&first).await?;
    for _ in 1..BATCH {
        match rx.try_recv() {
            Ok(f) => writer.feed(&f).await?,
            Err(_) => break,
        }
    }
    writer.flush().await
}
