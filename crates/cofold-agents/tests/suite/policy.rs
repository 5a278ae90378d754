//! Policy rules and the glob (runtime cases J161–J167, J178, J180, docs/acceptance.md): rule order, names and
//! subjects, `otherwise`, the default decision, the modes list and the denial wire names.

use async_trait::async_trait;
use cofold_agents::hooks::RunInfo;
use cofold_agents::policy::{
    Behavior, DEFAULT_DECIDE, DecideArgs, Decision, Denial, DenialBy, ModeContext, PermissionMode,
    Policy, Rule, RuleSet, match_glob, mode_description, policy_of, rules,
};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{KvScopes, Tool, ToolDef, ToolEffects, ToolOutput, handler_fn};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

fn run_info() -> RunInfo {
    RunInfo {
        run_id: "r1".into(),
        session_id: "s1".into(),
        agent_id: "agent".into(),
        step: 1,
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "agent", "default", None),
    }
}

pub(super) fn effects(reads: bool, writes: bool, network: bool, destructive: bool) -> ToolEffects {
    ToolEffects {
        reads,
        writes,
        network,
        destructive,
    }
}

pub(super) fn plain(name: &str, effects: ToolEffects) -> ToolDef {
    let handler = handler_fn(|_input, _ctx| async move { Ok(ToolOutput::from("ok")) });
    ToolDef::new(name, "A test tool.", json!({ "type": "object" }), handler).effects(effects)
}

pub(super) fn tool(def: ToolDef) -> Tool {
    Tool::new(def).expect("valid tool")
}

/// A shell-like tool whose subject is its command.
pub(super) fn shell() -> Tool {
    tool(
        plain("shell_exec", effects(false, true, false, true))
            .subject(|input| input["command"].as_str().map(str::to_owned)),
    )
}

pub(super) async fn decide(policy: &dyn Policy, tool: &Tool, input: Value) -> Decision {
    let run = run_info();
    policy
        .decide(&DecideArgs {
            tool,
            input: &input,
            run: &run,
        })
        .await
}

#[test]
fn the_glob_is_anchored_with_star_and_question_mark_only() {
    assert!(match_glob("rm *", "rm -rf /"));
    assert!(!match_glob("rm *", "sudo rm -rf /"));
    assert!(match_glob("*.ts", "src/a.ts"));
    assert!(!match_glob("*.ts", "src/a.tsx"));
    assert!(match_glob("a?c", "abc"));
    assert!(!match_glob("a?c", "ac"));
    assert!(!match_glob("a?c", "abbc"));
    assert!(match_glob("(a|b)", "(a|b)"));
    assert!(!match_glob("(a|b)", "a"));
    assert!(match_glob("a.c", "a.c"));
    assert!(!match_glob("a.c", "abc"));
    assert!(match_glob("[x]", "[x]"));
    assert!(!match_glob("[x]", "x"));
    assert!(
        match_glob("a\\*", "a\\bc"),
        "a backslash is literal and does not escape the star"
    );
    assert!(match_glob("$HOME/*", "$HOME/x"));
    assert!(!match_glob("$HOME/*", "/root/x"));
    assert!(match_glob("", ""));
    assert!(!match_glob("", "x"));
    assert!(match_glob("*", ""));
    assert!(match_glob("echo *", "echo a\nb"));
    assert!(match_glob("**", "anything/at/all"));
    assert!(
        !match_glob(&"*a".repeat(40), &"b".repeat(10_000)),
        "many stars stay linear-ish"
    );
}

#[tokio::test]
async fn deny_beats_ask_beats_allow_whatever_the_list_order() {
    let policy = rules(RuleSet {
        allow: vec![Rule::tool("*")],
        ask: vec![Rule::matching("shell_exec", "git *")],
        deny: vec![Rule::matching("shell_exec", "rm *")],
        otherwise: None,
    });
    let shell = shell();
    let denied = decide(&*policy, &shell, json!({ "command": "rm -rf /" })).await;
    assert_eq!(
        denied,
        Decision {
            behavior: Behavior::Deny,
            reason: Some("Denied by rule: shell_exec(rm *)".into())
        }
    );
    assert_eq!(
        decide(&*policy, &shell, json!({ "command": "git push" })).await,
        Decision::ask()
    );
    assert_eq!(
        decide(&*policy, &shell, json!({ "command": "ls" })).await,
        Decision::allow()
    );
}

#[tokio::test]
async fn a_rule_without_match_refuses_by_name_and_star_names_every_tool() {
    let policy = rules(RuleSet {
        deny: vec![Rule::tool("shell_exec")],
        ..RuleSet::default()
    });
    let denied = decide(&*policy, &shell(), json!({ "command": "ls" })).await;
    assert_eq!(denied.reason.as_deref(), Some("Denied by rule: shell_exec"));
    let other = tool(plain("echo", ToolEffects::default()));
    assert_eq!(decide(&*policy, &other, json!({})).await, Decision::allow());

    let everything = rules(RuleSet {
        deny: vec![Rule::tool("*")],
        ..RuleSet::default()
    });
    assert_eq!(
        decide(&*everything, &other, json!({}))
            .await
            .reason
            .as_deref(),
        Some("Denied by rule: echo")
    );
}

#[tokio::test]
async fn a_rule_with_match_skips_tools_without_a_subject() {
    let policy = rules(RuleSet {
        deny: vec![Rule::matching("*", "*")],
        ..RuleSet::default()
    });
    let subjectless = tool(plain("echo", ToolEffects::default()));
    assert_eq!(
        decide(&*policy, &subjectless, json!({})).await,
        Decision::allow()
    );
    let denied = decide(&*policy, &shell(), json!({ "command": "ls" })).await;
    assert_eq!(
        denied.reason.as_deref(),
        Some("Denied by rule: shell_exec(*)")
    );
    // A subject function answering None counts as no subject.
    assert_eq!(
        decide(&*policy, &shell(), json!({})).await.behavior,
        Behavior::Ask
    );
}

/// A policy that records the arguments it was called with.
struct Recorder {
    seen: Mutex<Vec<(String, Value, String)>>,
}

#[async_trait]
impl Policy for Recorder {
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        self.seen.lock().expect("lock").push((
            args.tool.name().to_owned(),
            args.input.clone(),
            args.run.run_id.clone(),
        ));
        Decision::deny("from otherwise")
    }
}

#[tokio::test]
async fn otherwise_decides_only_when_no_rule_matched() {
    let recorder = Arc::new(Recorder {
        seen: Mutex::new(Vec::new()),
    });
    let policy = rules(RuleSet {
        allow: vec![Rule::matching("shell_exec", "ls*")],
        otherwise: Some(recorder.clone()),
        ..RuleSet::default()
    });
    assert_eq!(
        decide(&*policy, &shell(), json!({ "command": "ls -l" })).await,
        Decision::allow()
    );
    assert!(recorder.seen.lock().expect("lock").is_empty());
    let decision = decide(&*policy, &shell(), json!({ "command": "make" })).await;
    assert_eq!(decision.reason.as_deref(), Some("from otherwise"));
    assert_eq!(
        *recorder.seen.lock().expect("lock"),
        [(
            "shell_exec".to_owned(),
            json!({ "command": "make" }),
            "r1".to_owned()
        )]
    );
}

#[tokio::test]
async fn the_default_decision_asks_only_for_destructive_tools() {
    let policy = rules(RuleSet::default());
    let destructive = tool(plain("rm", effects(false, false, false, true)));
    let writer = tool(plain("note", effects(false, true, true, false)));
    assert_eq!(
        decide(&*policy, &destructive, json!({})).await,
        Decision::ask()
    );
    assert_eq!(
        decide(&*policy, &writer, json!({})).await,
        Decision::allow()
    );
    assert_eq!(
        decide(&DEFAULT_DECIDE, &destructive, json!({})).await,
        Decision::ask()
    );
    assert_eq!(
        Decision::deny_without_reason().deny_reason("echo"),
        "Denied by policy: echo"
    );
}

#[tokio::test]
async fn a_deny_rule_wins_even_over_bypass_permissions() {
    let context = ModeContext::new(|_path: &Path| true);
    let policy = rules(RuleSet {
        deny: vec![Rule::matching("shell_exec", "rm *")],
        otherwise: Some(policy_of(PermissionMode::BypassPermissions, context)),
        ..RuleSet::default()
    });
    assert_eq!(
        decide(&*policy, &shell(), json!({ "command": "rm -rf /" }))
            .await
            .behavior,
        Behavior::Deny
    );
    assert_eq!(
        decide(&*policy, &shell(), json!({ "command": "ls" }))
            .await
            .behavior,
        Behavior::Allow
    );
}

#[test]
fn the_six_modes_in_order_with_their_names_and_descriptions() {
    let names: Vec<&str> = PermissionMode::ALL.iter().map(|m| m.as_str()).collect();
    assert_eq!(
        names,
        [
            "default",
            "acceptEdits",
            "plan",
            "auto",
            "bypassPermissions",
            "dontAsk"
        ]
    );
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 6);
    for mode in PermissionMode::ALL {
        assert_eq!(
            serde_json::to_value(mode).expect("json"),
            json!(mode.as_str())
        );
        assert_eq!(
            serde_json::from_value::<PermissionMode>(json!(mode.as_str())).expect("parses"),
            mode
        );
        assert_eq!(mode.as_str().parse::<PermissionMode>(), Ok(mode));
        let description = mode_description(mode);
        assert!(description.starts_with(char::is_uppercase), "{description}");
        assert!(description.ends_with('.'), "{description}");
    }
    assert_eq!(PermissionMode::default(), PermissionMode::Auto);
    assert_eq!(
        "ask".parse::<PermissionMode>(),
        Err("permission mode \"ask\" must be one of default, acceptEdits, plan, auto, bypassPermissions, dontAsk".to_owned())
    );
}

#[test]
fn denials_serialize_with_their_wire_names() {
    let denial = Denial {
        call_id: "c1".into(),
        name: "echo".into(),
        input: None,
        reason: "Invalid arguments: not valid JSON".into(),
        by: DenialBy::Invalid,
    };
    assert_eq!(
        serde_json::to_value(&denial).expect("json"),
        json!({ "callId": "c1", "name": "echo", "reason": "Invalid arguments: not valid JSON", "by": "invalid" })
    );
    let names: Vec<Value> = [
        DenialBy::Invalid,
        DenialBy::Hook,
        DenialBy::Policy,
        DenialBy::User,
        DenialBy::Limit,
    ]
    .iter()
    .map(|by| serde_json::to_value(by).expect("json"))
    .collect();
    assert_eq!(
        names,
        [
            json!("invalid"),
            json!("hook"),
            json!("policy"),
            json!("user"),
            json!("limit")
        ]
    );
    let rule: Rule =
        serde_json::from_value(json!({ "tool": "shell_exec", "match": "rm *" })).expect("rule");
    assert_eq!(rule, Rule::matching("shell_exec", "rm *"));
}
