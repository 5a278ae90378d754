//! `subscribe`, and the opening of stored sessions that subscribing (and the handshake) may
//! need first.

use serde_json::{Value, json};
use tokio::sync::oneshot;

use ahp_types::commands::SubscribeParams;

use crate::channels::root::ROOT;
use crate::connection::{Conn, decode, reply_frame};
use crate::error::RpcError;
use crate::inner::mailbox;
use crate::session::SessionMsg;

impl Conn {
    /// Open the stored session a channel names unless it is open already, within the request
    /// time limit.
    pub(crate) async fn open_for(&self, channel: &str) -> Result<(), RpcError> {
        // A changeset lives in its chat's session.
        let channel = crate::changesets::owner_chat(channel).unwrap_or(channel);
        if channel == ROOT || channel.starts_with("x-") || mailbox(&self.inner, channel).is_some() {
            return Ok(());
        }
        let limit = self.limit();
        match tokio::time::timeout(limit, crate::session::open::open_past(&self.inner, channel))
            .await
        {
            Ok(r) => r.map(|_| ()),
            Err(_) => Err(RpcError::timed_out(&format!("opening {channel}"), limit)),
        }
    }

    /// Register this connection on a channel and return its snapshot as JSON.
    pub(crate) async fn subscribe_channel(&self, channel: &str) -> Result<Value, RpcError> {
        if channel == ROOT {
            let snap = crate::channels::root::subscribe(&self.inner, self.id);
            return serde_json::to_value(snap).map_err(|e| RpcError::internal(e.to_string()));
        }
        if channel.starts_with("x-") {
            let ext = self
                .inner
                .extension_for_scheme(channel)
                .ok_or_else(|| RpcError::session_not_found(channel))?;
            let (_, snap) = self.inner.hub.subscribe_with(self.id, channel, |seq| {
                ext.snapshot(channel)
                    .map(|state| json!({"resource": channel, "state": state, "fromSeq": seq}))
            });
            return match snap {
                Some(v) => Ok(v),
                None => {
                    self.inner.hub.unsubscribe(self.id, channel);
                    Err(RpcError::session_not_found(channel))
                }
            };
        }
        // A second try covers a session unloaded between finding it and asking it.
        for _ in 0..2 {
            let tx = match mailbox(&self.inner, channel) {
                Some(tx) => tx,
                None => {
                    self.open_for(channel).await?;
                    mailbox(&self.inner, channel)
                        .ok_or_else(|| RpcError::session_not_found(channel))?
                }
            };
            let (reply, rx) = oneshot::channel();
            let _ = tx
                .send(SessionMsg::Subscribe {
                    conn: self.id,
                    channel: channel.to_owned(),
                    reply,
                })
                .await;
            if let Ok(snap) = rx.await {
                return serde_json::to_value(snap?).map_err(|e| RpcError::internal(e.to_string()));
            }
        }
        Err(RpcError::session_not_found(channel))
    }

    pub(crate) async fn subscribe(&self, id: Value, params: Value) {
        let p: SubscribeParams = match decode("subscribe", params) {
            Ok(p) => p,
            Err(e) => return self.send(reply_frame(&id, Err(e))),
        };
        // Opening a stored session may take long; envelopes are held back only afterwards.
        if let Err(e) = self.open_for(&p.channel).await {
            return self.send(reply_frame(&id, Err(e)));
        }
        self.inner.hub.hold(self.id);
        // The round trip to the session (which may wait for a backend, for a changeset) has
        // the same limit as any request; a session that answers after it undoes the
        // subscription, its reply having nowhere to go (see `actor`).
        let limit = self.limit();
        let result = match tokio::time::timeout(limit, self.subscribe_channel(&p.channel)).await {
            Ok(r) => r.map(|snap| json!({"snapshot": snap})),
            Err(_) => Err(RpcError::timed_out(
                &format!("subscribing to {}", p.channel),
                limit,
            )),
        };
        self.inner.hub.release(self.id, reply_frame(&id, result));
    }
}
