//! `long_chat`: per-turn host time as one chat grows. A loopback WebSocket client runs turns
//! one after another in a single chat; each turn's backend answers at once from `begin` (a
//! reply part, three deltas, a tool call that runs and completes, usage, the end), so a turn's
//! time is the host's work plus loopback I/O. The figure is the median turn among turns
//! 51–100 (a chat of about 100 turns, the baseline) against turns 951–1,000 (about 1,000
//! turns); a host whose per-turn work is independent of the chat's length gives a ratio
//! near 1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;
use ahpd_sdk::agent::*;
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::transport::ws::WsConfig;
use async_trait::async_trait;
use serde_json::json;

use super::RawClient;

/// An agent whose every turn is answered in full from `begin`.
struct Answerer;
struct AnswererSession(SessionContext);

#[async_trait]
impl Agent for Answerer {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor::new("long", "Long chat")
    }
    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        Ok(Box::new(AnswererSession(start.ctx)))
    }
}

fn answer(ctx: &SessionContext, turn: &str) {
    let t = || turn.to_owned();
    let call = format!("call-{turn}");
    ctx.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: t(),
        part: ResponsePart::Markdown(MarkdownResponsePart {
            id: "m".into(),
            content: String::new(),
        }),
        meta: None,
    }));
    for chunk in ["Here ", "is the ", "answer."] {
        ctx.emit(StateAction::ChatDelta(ChatDeltaAction {
            turn_id: t(),
            part_id: "m".into(),
            content: chunk.into(),
            meta: None,
        }));
    }
    ctx.emit(StateAction::ChatToolCallStart(ChatToolCallStartAction {
        turn_id: t(),
        tool_call_id: call.clone(),
        meta: None,
        tool_name: "shell".into(),
        display_name: "Shell".into(),
        intention: None,
        contributor: None,
    }));
    ctx.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
        turn_id: t(),
        tool_call_id: call.clone(),
        meta: None,
        contributor: None,
        intention: None,
        invocation_message: StringOrMarkdown::Plain("Run ls".into()),
        tool_input: None,
        confirmation_title: None,
        risk_assessment: None,
        edits: None,
        editable: None,
        confirmed: Some(ToolCallConfirmationReason::NotNeeded),
        options: None,
    }));
    ctx.emit(StateAction::ChatToolCallComplete(
        ChatToolCallCompleteAction {
            turn_id: t(),
            tool_call_id: call,
            meta: None,
            result: ToolCallResult {
                success: true,
                past_tense_message: StringOrMarkdown::Plain("Ran ls".into()),
                content: None,
                structured_content: None,
                error: None,
            },
            requires_result_confirmation: None,
        },
    ));
    ctx.emit(StateAction::ChatUsage(ChatUsageAction {
        turn_id: t(),
        usage: serde_json::from_value(json!({"inputTokens": 100, "outputTokens": 10}))
            .expect("usage"),
        meta: None,
    }));
    ctx.emit(StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: t(),
        duration: 1,
        meta: None,
    }));
}

#[async_trait]
impl Session for AnswererSession {
    fn backend_id(&self) -> String {
        "long".into()
    }
    fn begin(&mut self, turn: TurnRequest) {
        answer(&self.0, &turn.turn_id);
    }
    fn cancel(&mut self, _: &str) {}
    async fn close(&mut self) {}
}

/// Run `turns` turns in one chat; the time of each, in order.
pub async fn run_turns(turns: usize) -> Vec<Duration> {
    let host = HostBuilder::new()
        .agent(Arc::new(Answerer))
        .delta_window(Duration::ZERO)
        .build()
        .expect("host");
    let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listen");
    let url = format!("ws://{}", server.local_addr());
    let session = "long:/one".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let mut c = RawClient::connect(&url).await;
    c.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId":"long"}})).await;
    c.reply().await;
    c.send(json!({"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel": session}}))
        .await;
    c.reply().await;
    c.send(json!({"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel": chat}}))
        .await;
    c.reply().await;
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns {
        let t0 = Instant::now();
        c.send(json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel": chat,"clientSeq": i + 1,"action":{"type":"chat/turnStarted","turnId": format!("t{i}"),"message":{"text":"go"}}}})).await;
        loop {
            let f = c.frame().await;
            if f.contains("\"chat/turnComplete\"") {
                break;
            }
        }
        times.push(t0.elapsed());
    }
    server.stop();
    host.shutdown();
    times
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

pub async fn long_chat() {
    let times = run_turns(1_000).await;
    let at_100 = median(&times[50..100]);
    let at_1000 = median(&times[950..1_000]);
    println!("long_chat (1,000 turns in one chat, median of 50 turns)");
    println!(
        "  turns   51-100 : {:>8.1} us per turn (baseline)",
        at_100.as_secs_f64() * 1e6
    );
    println!(
        "  turns 951-1000 : {:>8.1} us per turn",
        at_1000.as_secs_f64() * 1e6
    );
    println!(
        "  ratio 1,000/100: {:.2}x",
        at_1000.as_secs_f64() / at_100.as_secs_f64()
    );
}
