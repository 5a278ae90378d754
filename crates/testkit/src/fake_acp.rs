//! A fake ACP agent for the faults real agents show rarely: it dies mid-turn, sends malformed
//! updates, asks permission with JSON-RPC id `0`, offers two `allow_always` options, reuses
//! its tool-call ids across sessions, and waits on a question until the turn is cancelled.
//!
//! Its messages are the `agent-client-protocol` crate's own schema types, written one per line
//! by a loop of its own rather than the crate's agent role, because the role never sends what
//! these faults need (an id of `0`, an update that does not parse).
//!
//! What a turn does is chosen by the prompt's first word:
//! - `echo <text>`: the text in two chunks, then `end_turn`;
//! - `think <text>`: a thought chunk, then the text;
//! - `tool`: a tool call `call-1` (kind `edit`, a diff), run and completed;
//! - `ask` / `ask0`: a tool call `call-1` that asks permission (with id `0` for `ask0`), then
//!   says the answer (`outcome: <optionId>` or `outcome: cancelled`); a cancel while it waits
//!   ends the turn `cancelled`;
//! - `die <code>`: a chunk, three lines on stderr, then exit with that code;
//! - `malformed`: updates that do not parse, a line that is not JSON, then `still here`;
//! - `plan`: a plan of two entries, then the text `planned`;
//! - `usage`: a usage update, then `counted`;
//! - `refuse`: stop with `refusal`;
//! - `config`: says its options (`model=<fast|slow> verbose=<bool>`), which `session/new`
//!   offers and `session/set_config_option` sets.

use std::io::{BufRead, Write};

use agent_client_protocol::v1::schema as acp;
use serde_json::{Value, json};

struct Agent {
    model: String,
    verbose: bool,
    out: std::io::Stdout,
    lines: std::io::Lines<std::io::StdinLock<'static>>,
    sessions: u64,
    next_id: i64,
}

impl Agent {
    fn send(&mut self, v: &Value) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn raw(&mut self, line: &str) {
        let mut out = self.out.lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    fn answer(&mut self, id: &Value, result: impl serde::Serialize) {
        let result = serde_json::to_value(result).unwrap_or(Value::Null);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    fn update(&mut self, session: &str, update: acp::SessionUpdate) {
        let n = acp::SessionNotification::new(session.to_owned(), update);
        let params = serde_json::to_value(n).unwrap_or(Value::Null);
        self.send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": params}));
    }

    fn text(&mut self, session: &str, text: &str) {
        self.update(
            session,
            acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(acp::ContentBlock::Text(
                acp::TextContent::new(text),
            ))),
        );
    }

    fn next(&mut self) -> Option<Value> {
        loop {
            let line = self.lines.next()?.ok()?;
            if line.trim().is_empty() {
                continue;
            }
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                return Some(v);
            }
        }
    }

    /// Waits for the answer to request `id`; `None` when the turn was cancelled first.
    fn wait_answer(&mut self, id: i64) -> Option<Value> {
        loop {
            let msg = self.next()?;
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return Some(msg);
            }
            if msg.get("method") == Some(&json!("session/cancel")) {
                // The client answers a parked question `cancelled` before it cancels, but
                // a cancel may still come first on a slow pipe: keep reading for the answer.
                continue;
            }
        }
    }

    /// Waits until the turn is cancelled.
    fn wait_cancel(&mut self) -> bool {
        while let Some(msg) = self.next() {
            if msg.get("method") == Some(&json!("session/cancel")) {
                return true;
            }
        }
        false
    }

    fn tool_call(&mut self, session: &str, status: acp::ToolCallStatus) {
        let call = acp::ToolCall::new("call-1", "Edit notes.txt")
            .kind(acp::ToolKind::Edit)
            .status(status)
            .raw_input(json!({"path": "notes.txt"}));
        self.update(session, acp::SessionUpdate::ToolCall(call));
    }

    fn call_status(
        &mut self,
        session: &str,
        status: acp::ToolCallStatus,
        content: Vec<acp::ToolCallContent>,
    ) {
        let mut fields = acp::ToolCallUpdateFields::new().status(status);
        if !content.is_empty() {
            fields = fields.content(content);
        }
        self.update(
            session,
            acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new("call-1", fields)),
        );
    }

    fn prompt(&mut self, id: &Value, session: &str, text: &str) {
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        let stop = match word {
            "echo" => {
                let mid = rest.len() / 2;
                let cut = (0..=mid)
                    .rev()
                    .find(|i| rest.is_char_boundary(*i))
                    .unwrap_or(0);
                self.text(session, &rest[..cut]);
                self.text(session, &rest[cut..]);
                acp::StopReason::EndTurn
            }
            "think" => {
                self.update(
                    session,
                    acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(
                        acp::ContentBlock::Text(acp::TextContent::new("pondering")),
                    )),
                );
                self.text(session, rest);
                acp::StopReason::EndTurn
            }
            "tool" => {
                self.tool_call(session, acp::ToolCallStatus::Pending);
                let diff = acp::ToolCallContent::Diff(
                    acp::Diff::new("/tmp/notes.txt", "new line\n").old_text("old line\n"),
                );
                self.call_status(session, acp::ToolCallStatus::InProgress, vec![diff]);
                self.call_status(session, acp::ToolCallStatus::Completed, Vec::new());
                self.text(session, "edited");
                acp::StopReason::EndTurn
            }
            "ask" | "ask0" => {
                self.tool_call(session, acp::ToolCallStatus::InProgress);
                let ask_id = if word == "ask0" { 0 } else { self.take_id() };
                let options = vec![
                    acp::PermissionOption::new(
                        "allow_once",
                        "Allow once",
                        acp::PermissionOptionKind::AllowOnce,
                    ),
                    acp::PermissionOption::new(
                        "allow_session",
                        "Allow for this session",
                        acp::PermissionOptionKind::AllowAlways,
                    ),
                    acp::PermissionOption::new(
                        "allow_always",
                        "Always allow",
                        acp::PermissionOptionKind::AllowAlways,
                    ),
                    acp::PermissionOption::new(
                        "reject_once",
                        "Reject",
                        acp::PermissionOptionKind::RejectOnce,
                    ),
                ];
                let req = acp::RequestPermissionRequest::new(
                    session.to_owned(),
                    acp::ToolCallUpdate::new(
                        "call-1",
                        acp::ToolCallUpdateFields::new().title("Edit notes.txt"),
                    ),
                    options,
                );
                let params = serde_json::to_value(req).unwrap_or(Value::Null);
                self.send(&json!({"jsonrpc": "2.0", "id": ask_id, "method": "session/request_permission", "params": params}));
                let answer = self.wait_answer(ask_id);
                let outcome = answer
                    .as_ref()
                    .and_then(|a| a.get("result"))
                    .and_then(|r| r.get("outcome"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let chosen = match outcome.get("outcome").and_then(Value::as_str) {
                    Some("selected") => outcome
                        .get("optionId")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                        .to_owned(),
                    _ => "cancelled".to_owned(),
                };
                if chosen == "cancelled" {
                    // A cancelled question means the turn is being cancelled.
                    self.wait_cancel();
                    self.answer(id, acp::PromptResponse::new(acp::StopReason::Cancelled));
                    return;
                }
                let ok = chosen.starts_with("allow");
                self.call_status(
                    session,
                    if ok {
                        acp::ToolCallStatus::Completed
                    } else {
                        acp::ToolCallStatus::Failed
                    },
                    Vec::new(),
                );
                self.text(session, &format!("outcome: {chosen}"));
                acp::StopReason::EndTurn
            }
            "die" => {
                self.text(session, "about to die");
                let code: i32 = rest.trim().parse().unwrap_or(3);
                eprintln!("fake agent: starting the last step");
                eprintln!("fake agent: the disk is on fire");
                eprintln!("fatal: exiting with {code}");
                std::process::exit(code);
            }
            "malformed" => {
                self.send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk", "content": 42}}}));
                self.send(&json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": {"sessionUpdate": "no_such_update"}}}));
                self.raw("this line is not JSON {");
                self.text(session, "still here");
                acp::StopReason::EndTurn
            }
            "plan" => {
                let plan = acp::Plan::new(vec![
                    acp::PlanEntry::new(
                        "read",
                        acp::PlanEntryPriority::High,
                        acp::PlanEntryStatus::Completed,
                    ),
                    acp::PlanEntry::new(
                        "write",
                        acp::PlanEntryPriority::Medium,
                        acp::PlanEntryStatus::InProgress,
                    ),
                ]);
                self.update(session, acp::SessionUpdate::Plan(plan));
                self.text(session, "planned");
                acp::StopReason::EndTurn
            }
            "usage" => {
                self.update(
                    session,
                    acp::SessionUpdate::UsageUpdate(acp::UsageUpdate::new(1200, 128000)),
                );
                self.text(session, "counted");
                acp::StopReason::EndTurn
            }
            "refuse" => acp::StopReason::Refusal,
            "config" => {
                let said = format!("model={} verbose={}", self.model, self.verbose);
                self.text(session, &said);
                acp::StopReason::EndTurn
            }
            "hang" => {
                self.wait_cancel();
                acp::StopReason::Cancelled
            }
            _ => {
                self.text(session, text);
                acp::StopReason::EndTurn
            }
        };
        self.answer(id, acp::PromptResponse::new(stop));
    }

    fn options(&self) -> Vec<acp::SessionConfigOption> {
        vec![
            acp::SessionConfigOption::select(
                "model",
                "Model",
                self.model.clone(),
                vec![
                    acp::SessionConfigSelectOption::new("fast", "Fast"),
                    acp::SessionConfigSelectOption::new("slow", "Slow"),
                ],
            )
            .category(acp::SessionConfigOptionCategory::Model),
            acp::SessionConfigOption::boolean("verbose", "Verbose", self.verbose),
        ]
    }

    fn take_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
}

/// Runs the fake agent on stdin and stdout until stdin closes.
pub fn run() {
    let stdin: &'static std::io::Stdin = Box::leak(Box::new(std::io::stdin()));
    let mut agent = Agent {
        out: std::io::stdout(),
        lines: stdin.lock().lines(),
        sessions: 0,
        next_id: 100,
        model: "fast".into(),
        verbose: false,
    };
    while let Some(msg) = agent.next() {
        let id = msg.get("id").cloned();
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id else { continue };
        match method {
            "initialize" => {
                let caps = acp::AgentCapabilities::new()
                    .prompt_capabilities(acp::PromptCapabilities::new().embedded_context(true));
                agent.answer(
                    &id,
                    acp::InitializeResponse::new(
                        agent_client_protocol::schema::ProtocolVersion::V1,
                    )
                    .agent_capabilities(caps)
                    .agent_info(acp::Implementation::new("fake-acp-agent", "1.0.0")),
                );
            }
            "session/new" => {
                agent.sessions += 1;
                let sid = format!("fake-{}-{}", std::process::id(), agent.sessions);
                let options = agent.options();
                agent.answer(
                    &id,
                    acp::NewSessionResponse::new(sid).config_options(options),
                );
            }
            "session/set_config_option" => {
                let config = params.get("configId").and_then(Value::as_str).unwrap_or("");
                let value = params.get("value").cloned().unwrap_or(Value::Null);
                match (config, &value) {
                    ("model", Value::String(v)) if v == "fast" || v == "slow" => {
                        agent.model = v.clone();
                    }
                    ("verbose", Value::Bool(b)) => agent.verbose = *b,
                    _ => {
                        agent.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("{config} cannot be {value}")}}));
                        continue;
                    }
                }
                let options = agent.options();
                agent.answer(&id, acp::SetSessionConfigOptionResponse::new(options));
            }
            "session/prompt" => {
                let session = params
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let text = params
                    .get("prompt")
                    .and_then(Value::as_array)
                    .and_then(|b| b.first())
                    .and_then(|b| b.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                agent.prompt(&id, &session, &text);
            }
            _ => {
                agent.send(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("{method} is not served by the fake agent")}}));
            }
        }
    }
}
