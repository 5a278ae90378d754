//! The commands a ready connection serves besides the handshake and `subscribe`, routed by
//! method and channel. Anything not served answers `-32601`.

use std::sync::Arc;

use ahp_types::commands::*;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::connection::{Conn, decode, to_json};
use crate::error::{RpcError, codes};
use crate::inner::ConnInfo;
use crate::inner::mailbox;
use crate::session::SessionMsg;

impl Conn {
    pub(crate) async fn command(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "listSessions" => {
                to_json(crate::store::catalogue::list(&self.inner, decode(method, params)?).await)
            }
            "createSession" => {
                let p: CreateSessionParams = decode(method, params)?;
                crate::session::open::create(&self.inner, self.conn_ref(), p)
                    .await
                    .map(|()| Value::Null)
            }
            "disposeSession" => {
                let p: DisposeSessionParams = decode(method, params)?;
                crate::session::open::dispose(&self.inner, &p.channel)
                    .await
                    .map(|()| Value::Null)
            }
            "createChat" | "disposeChat" | "fetchTurns" | "completions" => {
                self.chat_command(method, params).await
            }
            "resolveSessionConfig" | "sessionConfigCompletions" => {
                self.config_command(method, params).await
            }
            "authenticate" => self.authenticate(decode(method, params)?),
            "invokeChangesetOperation" => self.invoke_changeset_operation(params).await,
            "resourceRead" | "resourceList" | "resourceResolve" | "resourceWrite"
            | "resourceDelete" => self.resource_command(method, params).await,
            m if m.starts_with("x-") => match self.inner.extension_for_method(m) {
                Some(ext) => {
                    let info = ConnInfo {
                        client_id: self.client_id.clone(),
                        connection_id: self.id,
                        protocol_version: self.version.clone(),
                    };
                    ext.call(m, params, &info).await
                }
                None => Err(RpcError::method_not_found(m)),
            },
            other => Err(RpcError::method_not_found(other)),
        }
    }

    /// The commands a session's task answers about its chats.
    async fn chat_command(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "createChat" => {
                let p: CreateChatParams = decode(method, params)?;
                let tx = self.live_session(&p.channel)?;
                let (reply, rx) = oneshot::channel();
                let _ = tx
                    .send(SessionMsg::CreateChat {
                        conn: self.conn_ref(),
                        params: Box::new(p),
                        reply,
                    })
                    .await;
                rx.await
                    .map_err(|_| RpcError::internal("the session stopped"))?
                    .map(|()| Value::Null)
            }
            "disposeChat" => {
                let p: DisposeChatParams = decode(method, params)?;
                let tx = mailbox(&self.inner, &p.channel)
                    .ok_or_else(|| RpcError::session_not_found(&p.channel))?;
                let (reply, rx) = oneshot::channel();
                let _ = tx
                    .send(SessionMsg::DisposeChat {
                        channel: p.channel,
                        reply,
                    })
                    .await;
                rx.await
                    .map_err(|_| RpcError::internal("the session stopped"))?
                    .map(|()| Value::Null)
            }
            "fetchTurns" => {
                let p: FetchTurnsParams = decode(method, params)?;
                let tx = mailbox(&self.inner, &p.channel)
                    .ok_or_else(|| RpcError::session_not_found(&p.channel))?;
                let (reply, rx) = oneshot::channel();
                let _ = tx
                    .send(SessionMsg::FetchTurns {
                        channel: p.channel,
                        cursor: p.cursor,
                        reply,
                    })
                    .await;
                rx.await
                    .map_err(|_| RpcError::internal("the session stopped"))?
                    .map(|()| json!({}))
            }
            _ => {
                let p: CompletionsParams = decode(method, params)?;
                let tx = mailbox(&self.inner, &p.channel)
                    .ok_or_else(|| RpcError::session_not_found(&p.channel))?;
                let (reply, rx) = oneshot::channel();
                let _ = tx
                    .send(SessionMsg::Completions {
                        params: Box::new(p),
                        reply,
                    })
                    .await;
                let items = rx.await.unwrap_or_default();
                Ok(json!({"items": items}))
            }
        }
    }

    /// The configuration an agent offers a session about to be created.
    async fn config_command(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        if method == "resolveSessionConfig" {
            let p: ResolveSessionConfigParams = decode(method, params)?;
            let agent = self.agent(p.provider.as_deref())?;
            let dir = p
                .working_directory
                .as_deref()
                .and_then(crate::util::path_of);
            let (schema, values) =
                crate::session::config::resolve(agent.as_ref(), dir.as_deref(), p.config.as_ref())?;
            to_json(Ok(ResolveSessionConfigResult { schema, values }))
        } else {
            let p: SessionConfigCompletionsParams = decode(method, params)?;
            let agent = self.agent(p.provider.as_deref())?;
            let dir = p
                .working_directory
                .as_deref()
                .and_then(crate::util::path_of);
            let values = p.config.clone().unwrap_or_default();
            let items = agent
                .config_completions(&p.property, p.query.as_deref(), dir.as_deref(), &values)
                .await;
            Ok(json!({"items": items}))
        }
    }

    /// A token a client pushes for a resource some agent asks one for.
    fn authenticate(&self, p: AuthenticateParams) -> Result<Value, RpcError> {
        let known = self.inner.agents().iter().any(|a| {
            a.descriptor()
                .protected_resources
                .unwrap_or_default()
                .iter()
                .any(|r| r.resource == p.resource)
        });
        if !known {
            return Err(RpcError::invalid_params(format!(
                "no agent asks for a token for {}",
                p.resource
            )));
        }
        if let Ok(mut creds) = self.inner.credentials.lock() {
            creds
                .entry(self.client_id.clone())
                .or_default()
                .insert(p.resource, crate::agent::Secret::new(p.token));
        }
        Ok(json!({}))
    }

    /// Resource requests: a `data:` URI read from itself (a preview's content, say), then a
    /// registered provider's scheme, then `file:` when the host serves resources; anything else
    /// is not served.
    async fn resource_command(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        if method == "resourceRead"
            && let Some(read) = crate::resources::routing::read_data_uri(&params)
        {
            return read;
        }
        if crate::resources::routing::routed(&self.inner.providers, &params).is_some() {
            return crate::resources::routing::provided(&self.inner.providers, method, params)
                .await;
        }
        if let Some(scheme) = crate::resources::routing::unserved(&params, method) {
            return Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("nothing here serves {scheme}:"),
            ));
        }
        let Some(res) = self.inner.resources.clone() else {
            return Err(RpcError::method_not_found(method));
        };
        match method {
            "resourceRead" => {
                let p: ResourceReadParams = decode(method, params)?;
                to_json(res.read(&p.uri, p.encoding).await)
            }
            "resourceList" => {
                let p: ResourceListParams = decode(method, params)?;
                to_json(res.list(&p.uri).await)
            }
            _ => {
                let p: ResourceResolveParams = decode(method, params)?;
                to_json(res.resolve(&p.uri, p.follow_symlinks.unwrap_or(true)).await)
            }
        }
    }

    fn agent(&self, provider: Option<&str>) -> Result<Arc<dyn crate::agent::Agent>, RpcError> {
        self.inner.agent(provider).ok_or_else(|| match provider {
            Some(p) => RpcError::new(
                codes::PROVIDER_NOT_FOUND,
                format!("no agent has the provider id {p}"),
            ),
            None => RpcError::new(codes::PROVIDER_NOT_FOUND, "this host has no agents"),
        })
    }

    fn live_session(&self, uri: &str) -> Result<mpsc::Sender<SessionMsg>, RpcError> {
        let reg = self
            .inner
            .registry
            .lock()
            .map_err(|_| RpcError::internal("the session table is unavailable"))?;
        reg.sessions
            .get(uri)
            .map(|e| e.tx.clone())
            .ok_or_else(|| RpcError::session_not_found(uri))
    }
}
