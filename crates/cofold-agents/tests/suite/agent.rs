//! The agent builder (runtime cases A9–A12, docs/acceptance.md).

use async_trait::async_trait;
use cofold_agents::agent::{
    Agent, IN_MEMORY_STORE_WARNING, Limits, PartialContext, PartialLimits, in_memory_store_warned,
};
use cofold_agents::capability::Capability;
use cofold_agents::error::ErrorCode;
use cofold_agents::hooks::{Hooks, RunInfo};
use cofold_agents::model::{ModelAdapter, ModelParams};
use cofold_agents::policy::{Behavior, DecideArgs, Decision, Policy};
use cofold_agents::store::{MemoryStore, Store};
use cofold_agents::testing::FakeModel;
use cofold_agents::tool::{
    KvScopes, Resources, Tool, ToolDef, ToolEffects, ToolOutput, handler_fn,
};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn model() -> Arc<dyn ModelAdapter> {
    FakeModel::new(vec![]).adapter()
}

fn store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new())
}

fn tool(name: &str, effects: ToolEffects) -> Tool {
    let handler = handler_fn(|_input, _ctx| async move { Ok(ToolOutput::from("ok")) });
    Tool::new(
        ToolDef::new(name, "A test tool.", json!({ "type": "object" }), handler).effects(effects),
    )
    .expect("valid tool")
}

struct Named(&'static str);

impl Capability for Named {
    fn id(&self) -> &str {
        self.0
    }
}

fn refusal(builder: cofold_agents::agent::AgentBuilder) -> String {
    let error = builder.build().expect_err("refused");
    assert_eq!(error.code, ErrorCode::InvalidOptions);
    error.message
}

#[test]
fn bad_settings_are_refused_with_one_sentence() {
    let base = || Agent::builder("helper", "be brief", model()).store(store());
    assert_eq!(
        refusal(Agent::builder("bad id", "x", model()).store(store())),
        "agent id \"bad id\" must be 1 to 64 letters, digits, underscores or hyphens"
    );
    assert_eq!(
        refusal(Agent::builder("helper", "  \n", model()).store(store())),
        "agent \"helper\" needs instructions"
    );
    let echo = tool("echo", ToolEffects::default());
    assert_eq!(
        refusal(base().tools([echo.clone(), echo])),
        "agent \"helper\" has two tools named \"echo\""
    );
    assert_eq!(
        refusal(
            base()
                .capability(Arc::new(Named("clock")))
                .capability(Arc::new(Named("clock")))
        ),
        "agent \"helper\" has two capabilities with id \"clock\""
    );
    assert_eq!(
        refusal(base().capability(Arc::new(Named("files:read")))),
        "capability id \"files:read\" must be 1 to 64 letters, digits, underscores or hyphens"
    );
    let message = refusal(base().context(PartialContext {
        auto_compact_tokens: Some(0),
        ..PartialContext::default()
    }));
    assert!(
        message.contains("context.autoCompactTokens must be positive"),
        "{message}"
    );
}

#[tokio::test]
async fn defaults_are_as_documented() {
    let fake = FakeModel::new(vec![]);
    let agent = Agent::builder("helper", "be brief", fake.adapter())
        .store(store())
        .tool(tool("echo", ToolEffects::default()))
        .build()
        .expect("builds");
    assert_eq!(
        *agent.limits(),
        Limits {
            max_steps: 20,
            max_tool_calls: 50,
            timeout_ms: 0,
            max_cost: 0.0,
            max_tool_output_chars: 16_000
        }
    );
    let context = agent.context();
    assert_eq!(context.max_tokens, 32_000);
    assert_eq!(context.estimate("abcd"), 1);
    assert_eq!(context.estimate("abcde"), 2);
    assert_eq!(context.estimate("éééé"), 1, "characters, not bytes");
    assert_eq!(context.compact_keep_tokens, 6_400);
    assert_eq!(context.auto_compact_tokens, None);
    let smaller = Agent::builder("helper", "x", model())
        .store(store())
        .context(PartialContext {
            max_tokens: Some(10_000),
            ..PartialContext::default()
        })
        .build()
        .expect("builds");
    assert_eq!(smaller.context().compact_keep_tokens, 2_000);
    assert_eq!(agent.shared_namespace(), "default");
    assert!(agent.params().is_empty());
    assert!(agent.resources().is_empty());
    assert!(agent.model().id().starts_with("fake:"));

    let run = RunInfo {
        run_id: "r".into(),
        session_id: "s".into(),
        agent_id: "helper".into(),
        step: 1,
        kv: KvScopes::new(store(), "helper", "default", None),
    };
    let destructive = tool(
        "rm",
        ToolEffects {
            destructive: true,
            ..ToolEffects::default()
        },
    );
    let gentle = tool(
        "ls",
        ToolEffects {
            reads: true,
            writes: true,
            ..ToolEffects::default()
        },
    );
    let input = json!({});
    assert_eq!(
        agent
            .policy()
            .decide(&DecideArgs {
                tool: &destructive,
                input: &input,
                run: &run
            })
            .await
            .behavior,
        Behavior::Ask
    );
    assert_eq!(
        agent
            .policy()
            .decide(&DecideArgs {
                tool: &gentle,
                input: &input,
                run: &run
            })
            .await
            .behavior,
        Behavior::Allow
    );

    assert_eq!(
        serde_json::to_value(agent.definition()).expect("json"),
        json!({
            "id": "helper",
            "instructions": "be brief",
            "model": { "id": "fake:fake-model", "modelId": "fake-model" },
            "tools": ["echo"],
            "capabilities": [],
            "limits": { "maxSteps": 20, "maxToolCalls": 50, "timeoutMs": 0, "maxCost": 0.0, "maxToolOutputChars": 16000 },
            "context": { "maxTokens": 32000 }
        })
    );
}

struct Refuse;

#[async_trait]
impl Policy for Refuse {
    async fn decide(&self, _args: &DecideArgs<'_>) -> Decision {
        Decision::deny("no")
    }
}

struct Quiet;

impl Hooks for Quiet {}

#[derive(Debug, PartialEq)]
struct HostValue(u32);

#[tokio::test]
async fn overrides_are_applied_field_by_field_without_warnings() {
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = warnings.clone();
    let given = store();
    let agent = Agent::builder("helper", "be brief", model())
        .store(given.clone())
        .limits(PartialLimits {
            max_steps: Some(3),
            max_cost: Some(0.5),
            ..PartialLimits::default()
        })
        .context(PartialContext {
            max_tokens: Some(1_000),
            estimate_tokens: Some(Arc::new(|text: &str| text.len() as u64)),
            compact_keep_tokens: Some(7),
            auto_compact_tokens: Some(900),
        })
        .policy(Arc::new(Refuse))
        .hooks(Arc::new(Quiet))
        .params(ModelParams {
            temperature: Some(0.2),
            ..ModelParams::default()
        })
        .resources(Resources::new().with(HostValue(7)))
        .shared_namespace("team")
        .warn(move |message: &str| sink.lock().expect("lock").push(message.to_owned()))
        .capability_excluding(Arc::new(Named("files")), ["write_file"])
        .build()
        .expect("builds");
    assert_eq!(agent.limits().max_steps, 3);
    assert_eq!(
        agent.limits().max_tool_calls,
        50,
        "fields not given keep their defaults"
    );
    assert_eq!(agent.limits().max_cost, 0.5);
    assert_eq!(agent.context().max_tokens, 1_000);
    assert_eq!(agent.context().estimate("ééé"), 6);
    assert_eq!(agent.context().compact_keep_tokens, 7);
    assert_eq!(agent.context().auto_compact_tokens, Some(900));
    assert_eq!(agent.params().temperature, Some(0.2));
    assert_eq!(agent.resources().get::<HostValue>(), Some(&HostValue(7)));
    assert_eq!(agent.shared_namespace(), "team");
    assert!(Arc::ptr_eq(agent.store(), &given));
    assert_eq!(agent.capabilities()[0].exclude, ["write_file"]);
    let run = RunInfo {
        run_id: "r".into(),
        session_id: "s".into(),
        agent_id: "helper".into(),
        step: 1,
        kv: KvScopes::new(store(), "helper", "team", None),
    };
    let echo = tool("echo", ToolEffects::default());
    let decision = agent
        .policy()
        .decide(&DecideArgs {
            tool: &echo,
            input: &json!({}),
            run: &run,
        })
        .await;
    assert_eq!(decision, Decision::deny("no"));
    agent.warn("custom warning");
    assert_eq!(
        *warnings.lock().expect("lock"),
        ["custom warning"],
        "no warning of its own"
    );
}

#[test]
fn agents_without_a_store_get_separate_memory_stores_and_one_warning_per_process() {
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let build = || {
        let sink = warnings.clone();
        Agent::builder("helper", "x", model())
            .warn(move |message: &str| sink.lock().expect("lock").push(message.to_owned()))
            .build()
            .expect("builds")
    };
    let first = build();
    let second = build();
    assert!(
        !Arc::ptr_eq(first.store(), second.store()),
        "two separate stores"
    );
    assert!(in_memory_store_warned());
    // Other tests in this process may build agents without a store too, so this one may not have
    // been first; either way the two builds here add at most the single process-wide warning.
    let seen = warnings.lock().expect("lock").clone();
    assert!(seen.len() <= 1, "{seen:?}");
    for message in &seen {
        assert_eq!(message, IN_MEMORY_STORE_WARNING);
        assert!(message.contains("in-memory store"));
    }
}

#[test]
fn agents_are_cheap_clones_of_one_definition() {
    let agent = Agent::builder("helper", "x", model())
        .store(store())
        .build()
        .expect("builds");
    let copy = agent.clone();
    assert!(Arc::ptr_eq(agent.store(), copy.store()));
    assert_eq!(copy.definition(), agent.definition());
}

/// Builds two agents without a store and prints how many warnings they gave. Run only as the
/// child of the test below, alone in a fresh process, so it is the first such build there.
#[test]
#[ignore = "run in its own process by agents_without_a_store_warn_exactly_once_in_a_fresh_process"]
fn store_warning_child() {
    if std::env::var_os("COFOLD_STORE_WARNING_CHILD").is_none() {
        return;
    }
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    for _ in 0..2 {
        let sink = warnings.clone();
        Agent::builder("helper", "x", model())
            .warn(move |message: &str| sink.lock().expect("lock").push(message.to_owned()))
            .build()
            .expect("builds");
    }
    let seen = warnings.lock().expect("lock");
    println!("WARNINGS={}", seen.len());
    for message in seen.iter() {
        println!("WARNING={message}");
    }
}

#[test]
fn agents_without_a_store_warn_exactly_once_in_a_fresh_process() {
    let exe = std::env::current_exe().expect("the test binary");
    let output = std::process::Command::new(exe)
        .args([
            "--exact",
            "suite::agent::store_warning_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("COFOLD_STORE_WARNING_CHILD", "1")
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("WARNINGS=1\n"), "{stdout}");
    assert!(
        stdout.contains(&format!("WARNING={IN_MEMORY_STORE_WARNING}\n")),
        "{stdout}"
    );
}
