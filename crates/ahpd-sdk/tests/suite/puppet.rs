//! A backend whose turns run a script the test supplies, so a rule test can make a backend do
//! exactly the wrong (or right) thing it is about. Provider `pup`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ahp::Client;
use ahp_types::actions::*;
use ahp_types::commands::{CompletionItem, CompletionItemKind};
use ahpd_sdk::agent::*;
use ahpd_sdk::testing::ScriptedAgent;
use async_trait::async_trait;
use serde_json::json;

use super::support::*;

type Script = Arc<
    dyn Fn(TurnRequest, SessionContext) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync,
>;

#[derive(Clone)]
pub struct Puppet {
    script: Script,
    pub completions: Vec<CompletionItem>,
    /// Let runs go on after a cancel or close (they end when what they wait for settles),
    /// so a test can see how the host settled them.
    pub keep_runs: bool,
}

impl Puppet {
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(TurnRequest, SessionContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            script: Arc::new(move |t, c| Box::pin(f(t, c))),
            completions: Vec::new(),
            keep_runs: false,
        }
    }
}

#[async_trait]
impl Agent for Puppet {
    fn descriptor(&self) -> AgentDescriptor {
        let mut d = AgentDescriptor::new("pup", "Puppet");
        d.completions = !self.completions.is_empty();
        d
    }
    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        Ok(Box::new(PuppetSession {
            ctx: start.ctx,
            script: self.script.clone(),
            completions: self.completions.clone(),
            keep_runs: self.keep_runs,
            runs: HashMap::new(),
        }))
    }
}

struct PuppetSession {
    ctx: SessionContext,
    script: Script,
    completions: Vec<CompletionItem>,
    keep_runs: bool,
    runs: HashMap<String, tokio::task::JoinHandle<()>>,
}

#[async_trait]
impl Session for PuppetSession {
    fn backend_id(&self) -> String {
        "s".into()
    }
    fn begin(&mut self, turn: TurnRequest) {
        let id = turn.turn_id.clone();
        let run = tokio::spawn((self.script)(turn, self.ctx.clone()));
        self.runs.insert(id, run);
    }
    fn cancel(&mut self, turn_id: &str) {
        if let Some(h) = self.runs.remove(turn_id)
            && !self.keep_runs
        {
            h.abort();
        }
    }
    fn completions(&self, _: &CompletionItemKind, _: &str, _: i64) -> Vec<CompletionItem> {
        self.completions.clone()
    }
    async fn close(&mut self) {
        for (_, h) in self.runs.drain() {
            if !self.keep_runs {
                h.abort();
            }
        }
    }
}

/// A host serving the puppet (and the scripted agent), one official client watching the
/// session `pup:/s` and its default chat.
pub async fn pup_host(p: Puppet) -> (TestHost, Client, Watch, String, String) {
    let th = start_with(ScriptedAgent::new(), |b| b.agent(Arc::new(p))).await;
    let session = "pup:/s".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let create = json!({"channel": session, "provider": "pup"});
    let a = client(&th.url).await;
    let w = open_session_with(&a, "pup", create, &[&session, &chat]).await;
    (th, a, w, session, chat)
}

// Actions a script emits, spelled once.

pub fn complete(turn: &str) -> StateAction {
    StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: turn.into(),
        duration: 4,
        meta: None,
    })
}

pub fn tool_start(turn: &str, id: &str, name: &str) -> StateAction {
    StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: turn.into(),
        tool_call_id: id.into(),
        meta: None,
        tool_name: name.into(),
        display_name: name.into(),
        intention: None,
        contributor: None,
    })
}

pub fn tool_ready(turn: &str, id: &str) -> StateAction {
    serde_json::from_value(
        json!({"type": "chat/toolCallReady", "turnId": turn, "toolCallId": id,
        "invocationMessage": "run it", "confirmed": "not-needed"}),
    )
    .unwrap()
}

pub fn tool_complete(turn: &str, id: &str, success: bool) -> StateAction {
    let mut result = json!({"success": success, "pastTenseMessage": "ran it"});
    if !success {
        result["error"] = json!({"message": "it broke"});
    }
    serde_json::from_value(json!({"type": "chat/toolCallComplete", "turnId": turn,
        "toolCallId": id, "result": result}))
    .unwrap()
}

pub fn approval(turn: &str, id: &str) -> ApprovalRequest {
    ApprovalRequest {
        turn_id: turn.into(),
        tool_call_id: id.into(),
        invocation_message: ahp_types::common::StringOrMarkdown::Plain(format!("run {id}")),
        tool_input: None,
        confirmation_title: None,
        edits: None,
        risk_assessment: None,
        editable: None,
        meta: None,
    }
}
