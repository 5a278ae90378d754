//! `invokeChangesetOperation`: routed to the task of the session that owns the changeset.

use serde_json::Value;
use tokio::sync::oneshot;

use ahp_types::commands::InvokeChangesetOperationParams;

use crate::changesets::owner_chat;
use crate::connection::{Conn, decode, to_json};
use crate::error::RpcError;
use crate::session::SessionMsg;

impl Conn {
    /// `invokeChangesetOperation`, routed to the session that owns the changeset.
    pub(crate) async fn invoke_changeset_operation(
        &self,
        params: Value,
    ) -> Result<Value, RpcError> {
        let p: InvokeChangesetOperationParams = decode("invokeChangesetOperation", params)?;
        self.open_for(owner_chat(&p.channel).unwrap_or(&p.channel))
            .await?;
        let tx = crate::inner::mailbox(&self.inner, &p.channel)
            .ok_or_else(|| RpcError::session_not_found(&p.channel))?;
        let (reply, rx) = oneshot::channel();
        let _ = tx
            .send(SessionMsg::ChangesetOperation {
                params: Box::new(p),
                reply,
            })
            .await;
        to_json(
            rx.await
                .map_err(|_| RpcError::internal("the session stopped"))?,
        )
    }
}
