//! The ACP client side of one agent child: a connection over its pipes whose dispatch loop only
//! forwards what the agent sends into one ordered channel.
//!
//! Callbacks run inside the crate's dispatch loop, and awaiting a request from inside one
//! deadlocks, so they do nothing but forward; the session's worker answers permission
//! requests through the responder it is handed, from its own task. Because a notification's
//! callback finishes before the loop routes the next message, a prompt's answer, forwarded by
//! the task that awaited it, always lands behind the updates the agent sent before it.

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{ByteStreams, Client};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::child::Pipes;

/// What the agent sent, in its order.
pub enum Inbound {
    /// A `session/update`.
    Update(Box<acp::SessionNotification>),
    /// A `session/request_permission`, to be answered through its responder.
    Permission(
        Box<acp::RequestPermissionRequest>,
        Responder<acp::RequestPermissionResponse>,
    ),
    /// A prompt's answer (sent by the task that awaited it).
    PromptDone {
        /// The turn whose prompt it answers.
        turn_id: String,
        /// The answer.
        result: Result<acp::PromptResponse, agent_client_protocol::Error>,
    },
    /// The connection ended (the agent closed its stdout or the transport failed).
    Closed(Option<String>),
}

/// The handle to an agent's connection.
pub type Peer = ConnectionTo<agent_client_protocol::Agent>;

/// Starts the client connection over the child's pipes. Resolves once it is up.
pub async fn connect(pipes: Pipes, tx: mpsc::UnboundedSender<Inbound>) -> Result<Peer, String> {
    let transport = ByteStreams::new(pipes.stdin.compat_write(), pipes.stdout.compat());
    let (up_tx, up_rx) = oneshot::channel();
    let notify = tx.clone();
    let ask = tx.clone();
    tokio::spawn(async move {
        let result = Client
            .v1()
            .name("ahpd")
            .on_receive_notification(
                async move |n: acp::SessionNotification, _cx| {
                    let _ = notify.send(Inbound::Update(Box::new(n)));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |r: acp::RequestPermissionRequest, responder, _cx| {
                    if let Err(mpsc::error::SendError(Inbound::Permission(_, responder))) =
                        ask.send(Inbound::Permission(Box::new(r), responder))
                    {
                        // Nobody is left to ask: the turn is over.
                        let _ = responder.respond(acp::RequestPermissionResponse::new(
                            acp::RequestPermissionOutcome::Cancelled,
                        ));
                    }
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(transport, async move |cx: Peer| {
                let _ = up_tx.send(cx.clone());
                cx.incoming_closed().await;
                Ok(())
            })
            .await;
        let _ = tx.send(Inbound::Closed(result.err().map(|e| e.to_string())));
    });
    up_rx
        .await
        .map_err(|_| "the agent's connection ended before it started".to_owned())
}
