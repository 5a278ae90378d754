//! Clients' requests to start or stop a session's MCP server. The host holds the session's
//! customizations but not the servers: it checks the id names an MCP server the session shows,
//! applies the request (the reducer moves it to `starting` or `stopped` at once), and hands it
//! to the session's default chat's backend, which runs the servers and reports their state.

use ahp_types::actions::{ActionOrigin, StateAction};
use ahp_types::state::Customization;

use crate::session::actor::Actor;

impl Actor {
    pub(crate) fn client_mcp_request(
        &mut self,
        action: &StateAction,
        id: &str,
        run: bool,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        let known = self.state.customizations.iter().flatten().any(|c| match c {
            Customization::McpServer(m) => m.id == id,
            _ => false,
        });
        if !known {
            return Err(format!("the session has no MCP server {id}"));
        }
        let chat = self.default_chat.clone();
        let Some(answer) = self.with_backend(&chat, |s| s.mcp_server(id, run)) else {
            return Err("the session's agent is not open; try again once it is".into());
        };
        answer.map_err(|refusal| refusal.0)?;
        self.apply_session(action, Some(origin));
        Ok(())
    }
}
