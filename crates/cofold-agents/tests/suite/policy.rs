//! Policy, rules, the glob and the six permission modes (harness §6; acceptance J161–J180).

use async_trait::async_trait;
use cofold_agents::hooks::RunInfo;
use cofold_agents::policy::{
    Behavior, DEFAULT_DECIDE, DecideArgs, Decision, Denial, DenialBy, ModeContext, PermissionMode,
    Policy, Rule, RuleSet, match_glob, mode_description, policy_of, rules,
};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{KvScopes, Tool, ToolDef, ToolEffects, ToolOutput, handler_fn};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
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

fn effects(reads: bool, writes: bool, network: bool, destructive: bool) -> ToolEffects {
    ToolEffects {
        reads,
        writes,
        network,
        destructive,
    }
}

fn plain(name: &str, effects: ToolEffects) -> ToolDef {
    let handler = handler_fn(|_input, _ctx| async move { Ok(ToolOutput::from("ok")) });
    ToolDef::new(name, "A test tool.", json!({ "type": "object" }), handler).effects(effects)
}

fn tool(def: ToolDef) -> Tool {
    Tool::new(def).expect("valid tool")
}

/// A shell-like tool whose subject is its command.
fn shell() -> Tool {
    tool(
        plain("shell_exec", effects(false, true, false, true))
            .subject(|input| input["command"].as_str().map(str::to_owned)),
    )
}

async fn decide(policy: &dyn Policy, tool: &Tool, input: Value) -> Decision {
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

/// A workspace on disk and an `inside` test that resolves links, as the engine's is.
struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().canonicalize().expect("canonical");
        let root = base.join("w");
        let outside = base.join("elsewhere");
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(root.join("src/a.rs"), "fn main() {}").expect("write");
        std::fs::write(outside.join("secret.txt"), "x").expect("write");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("symlink");
        Workspace {
            _dir: dir,
            root,
            outside,
        }
    }

    fn inside(&self) -> impl Fn(&Path) -> bool + Send + Sync + 'static {
        let root = self.root.clone();
        move |path: &Path| {
            let joined = if path.is_absolute() {
                path.to_path_buf()
            } else {
                root.join(path)
            };
            // Resolve the deepest part that exists, so a link that leaves the workspace counts as outside.
            let mut existing = joined.as_path();
            let mut rest = Vec::new();
            while !existing.exists() {
                match (existing.parent(), existing.file_name()) {
                    (Some(parent), Some(name)) => {
                        rest.push(name.to_owned());
                        existing = parent;
                    }
                    _ => return false,
                }
            }
            let Ok(mut resolved) = existing.canonicalize() else {
                return false;
            };
            for part in rest.into_iter().rev() {
                if part == ".." {
                    return false;
                }
                resolved.push(part);
            }
            resolved.starts_with(&root)
        }
    }

    fn context(&self) -> ModeContext {
        ModeContext::new(self.inside()).with_is_edit(|tool: &Tool| tool.effects().writes)
    }
}

/// Tools shaped like the standard ones of tools.md: the same names, effects, subjects and written paths.
struct Standard {
    read_file: Tool,
    list_files: Tool,
    search_files: Tool,
    edit_file: Tool,
    write_file: Tool,
    memory_write: Tool,
    memory_read: Tool,
    shell_exec: Tool,
    web_fetch: Tool,
    web_search: Tool,
}

impl Standard {
    fn new(workspace: &Workspace, memory: &Path) -> Standard {
        let path_subject = |input: &Value| input["path"].as_str().map(str::to_owned);
        let root = workspace.root.clone();
        let written = move |input: &Value| input["path"].as_str().map(|p| root.join(p));
        let memory_dir = memory.to_path_buf();
        let memory_written =
            move |input: &Value| input["path"].as_str().map(|p| memory_dir.join(p));
        let reads = effects(true, false, false, false);
        let edits = effects(false, true, false, true);
        Standard {
            read_file: tool(plain("read_file", reads).subject(path_subject)),
            list_files: tool(plain("list_files", reads).subject(path_subject)),
            search_files: tool(plain("search_files", reads).subject(path_subject)),
            edit_file: tool(
                plain("edit_file", edits)
                    .subject(path_subject)
                    .writes(written.clone()),
            ),
            write_file: tool(
                plain("write_file", edits)
                    .subject(path_subject)
                    .writes(written),
            ),
            memory_write: tool(
                plain("memory_write", effects(false, true, false, false))
                    .subject(path_subject)
                    .writes(memory_written),
            ),
            memory_read: tool(plain("memory_read", reads).subject(path_subject)),
            shell_exec: shell(),
            web_fetch: tool(plain("web_fetch", effects(false, false, true, false))),
            web_search: tool(plain("web_search", effects(false, false, true, false))),
        }
    }
}

/// One row of the outcome table: a label, the calls, and the outcome under each mode.
type Row<'a> = (&'a str, Vec<(&'a Tool, Value)>, [&'a str; 6]);

fn outcome(decision: &Decision) -> &'static str {
    match decision.behavior {
        Behavior::Allow => "run",
        Behavior::Ask => "ask",
        Behavior::Deny => "deny",
    }
}

#[tokio::test]
async fn every_cell_of_the_standard_tool_table() {
    let workspace = Workspace::new();
    let memory = workspace.outside.join("memory");
    let tools = Standard::new(&workspace, &memory);
    let outside_file = workspace
        .outside
        .join("secret.txt")
        .to_string_lossy()
        .into_owned();
    let outside_dir = workspace.outside.to_string_lossy().into_owned();
    // One row per line of the table in harness §6.3, columns in PermissionMode::ALL order.
    let rows: Vec<Row> = vec![
        (
            "reads inside",
            vec![
                (&tools.read_file, json!({ "path": "src/a.rs" })),
                (&tools.list_files, json!({ "path": "." })),
                (
                    &tools.search_files,
                    json!({ "pattern": "main", "path": "src" }),
                ),
            ],
            ["run", "run", "run", "run", "run", "run"],
        ),
        (
            "reads outside",
            vec![
                (&tools.read_file, json!({ "path": outside_file })),
                (&tools.list_files, json!({ "path": outside_dir })),
                (
                    &tools.search_files,
                    json!({ "pattern": "x", "path": "link" }),
                ),
            ],
            ["ask", "ask", "ask", "run", "run", "deny"],
        ),
        (
            "edits inside",
            vec![
                (&tools.edit_file, json!({ "path": "src/a.rs" })),
                (&tools.write_file, json!({ "path": "src/new.rs" })),
            ],
            ["ask", "run", "deny", "ask", "run", "deny"],
        ),
        (
            "edits outside or through a link",
            vec![
                (
                    &tools.edit_file,
                    json!({ "path": "../elsewhere/secret.txt" }),
                ),
                (&tools.write_file, json!({ "path": "link/new.txt" })),
                (&tools.write_file, json!({ "path": outside_file })),
            ],
            ["ask", "ask", "deny", "ask", "run", "deny"],
        ),
        (
            "memory_write",
            vec![(&tools.memory_write, json!({ "path": "notes.md" }))],
            ["ask", "ask", "deny", "run", "run", "deny"],
        ),
        (
            "memory_read relative or none",
            vec![
                (&tools.memory_read, json!({ "path": "notes.md" })),
                (&tools.memory_read, json!({})),
            ],
            ["run", "run", "run", "run", "run", "run"],
        ),
        (
            "shell_exec",
            vec![(&tools.shell_exec, json!({ "command": "ls" }))],
            ["ask", "ask", "deny", "ask", "run", "deny"],
        ),
        (
            "web",
            vec![
                (&tools.web_fetch, json!({ "url": "http://127.0.0.1/" })),
                (&tools.web_search, json!({ "query": "x" })),
            ],
            ["ask", "ask", "ask", "run", "run", "deny"],
        ),
    ];
    for (label, calls, expected) in rows {
        for (tool, input) in calls {
            for (mode, want) in PermissionMode::ALL.into_iter().zip(expected) {
                let policy = policy_of(mode, workspace.context());
                let decision = decide(&*policy, tool, input.clone()).await;
                assert_eq!(
                    outcome(&decision),
                    want,
                    "{label}: {} {input} under {mode}",
                    tool.name()
                );
                if decision.behavior == Behavior::Deny {
                    let reason = decision.reason.expect("a deny carries a reason");
                    let expected_reason = match mode {
                        PermissionMode::Plan => format!(
                            "{} would change something and the mode is plan",
                            tool.name()
                        ),
                        _ => format!(
                            "{} would need approval and the mode is dontAsk",
                            tool.name()
                        ),
                    };
                    assert_eq!(reason, expected_reason);
                }
            }
        }
    }
}

#[tokio::test]
async fn accept_edits_without_is_edit_judges_the_written_path() {
    let workspace = Workspace::new();
    let context = ModeContext::new(workspace.inside());
    let policy = policy_of(PermissionMode::AcceptEdits, context);
    // `writes` points outside although `input.path` looks inside: the written path decides.
    let outside = workspace.outside.clone();
    let sneaky = tool(
        plain("sneaky", effects(false, true, false, false))
            .writes(move |_input| Some(outside.join("x"))),
    );
    assert_eq!(
        decide(&*policy, &sneaky, json!({ "path": "src/a.rs" })).await,
        Decision::ask()
    );
    // A tool without `writes` is judged by `input.path`.
    let by_path = tool(plain("by_path", effects(false, true, false, false)));
    assert_eq!(
        decide(&*policy, &by_path, json!({ "path": "src/a.rs" })).await,
        Decision::allow()
    );
    assert_eq!(
        decide(&*policy, &by_path, json!({ "path": "../elsewhere/x" })).await,
        Decision::ask()
    );
    // `writes` answering None: no file, so ask.
    let none = tool(plain("none", effects(false, true, false, false)).writes(|_input| None));
    assert_eq!(
        decide(&*policy, &none, json!({ "path": "src/a.rs" })).await,
        Decision::ask()
    );
    // A shell declares writes but names no file: ask.
    assert_eq!(
        decide(&*policy, &shell(), json!({ "command": "touch a" })).await,
        Decision::ask()
    );
    // Network still asks; a read inside runs.
    let fetch = tool(plain("web_fetch", effects(false, false, true, false)));
    assert_eq!(decide(&*policy, &fetch, json!({})).await, Decision::ask());
    let read = tool(plain("read_file", effects(true, false, false, false)));
    assert_eq!(
        decide(&*policy, &read, json!({ "path": "src/a.rs" })).await,
        Decision::allow()
    );
}

#[tokio::test]
async fn a_host_is_edit_is_obeyed_both_ways() {
    let workspace = Workspace::new();
    let root = workspace.root.clone();
    let custom = tool(
        plain("patch", effects(false, false, false, false))
            .writes(move |input| input["path"].as_str().map(|p| root.join(p))),
    );
    let always = policy_of(
        PermissionMode::AcceptEdits,
        ModeContext::new(workspace.inside()).with_is_edit(|t: &Tool| t.name() == "patch"),
    );
    assert_eq!(
        decide(&*always, &custom, json!({ "path": "src/a.rs" })).await,
        Decision::allow()
    );

    let never = policy_of(
        PermissionMode::AcceptEdits,
        ModeContext::new(workspace.inside()).with_is_edit(|_t: &Tool| false),
    );
    let root = workspace.root.clone();
    let write_file = tool(
        plain("write_file", effects(false, true, false, true))
            .writes(move |input| input["path"].as_str().map(|p| root.join(p))),
    );
    assert_eq!(
        decide(&*never, &write_file, json!({ "path": "src/a.rs" })).await,
        Decision::ask()
    );
}

#[tokio::test]
async fn each_mode_on_reads_writes_network_and_destructive_calls() {
    let workspace = Workspace::new();
    let read = tool(plain("read_file", effects(true, false, false, false)));
    let write = tool(plain("write", effects(false, true, false, false)));
    let net = tool(plain("net", effects(false, false, true, false)));
    let destroy = tool(plain("destroy", effects(false, false, false, true)));
    let quiet = tool(plain("quiet", ToolEffects::default()));
    let inside = json!({ "path": "src/a.rs" });
    let outside = json!({ "path": workspace.outside.join("secret.txt").to_string_lossy() });
    let cases: [(PermissionMode, [&str; 6]); 6] = [
        // read inside, read outside, write, network, destructive, no effects
        (
            PermissionMode::Default,
            ["run", "ask", "ask", "ask", "ask", "run"],
        ),
        (
            PermissionMode::AcceptEdits,
            ["run", "ask", "ask", "ask", "ask", "run"],
        ),
        (
            PermissionMode::Plan,
            ["run", "ask", "deny", "ask", "deny", "run"],
        ),
        (
            PermissionMode::Auto,
            ["run", "run", "run", "run", "ask", "run"],
        ),
        (
            PermissionMode::BypassPermissions,
            ["run", "run", "run", "run", "run", "run"],
        ),
        (
            PermissionMode::DontAsk,
            ["run", "deny", "deny", "deny", "deny", "run"],
        ),
    ];
    for (mode, expected) in cases {
        let policy = policy_of(mode, ModeContext::new(workspace.inside()));
        let got = [
            outcome(&decide(&*policy, &read, inside.clone()).await),
            outcome(&decide(&*policy, &read, outside.clone()).await),
            outcome(&decide(&*policy, &write, json!({})).await),
            outcome(&decide(&*policy, &net, json!({})).await),
            outcome(&decide(&*policy, &destroy, json!({})).await),
            outcome(&decide(&*policy, &quiet, json!({})).await),
        ];
        assert_eq!(got, expected, "{mode}");
    }
}

#[tokio::test]
async fn a_read_is_judged_by_path_then_cwd() {
    let workspace = Workspace::new();
    let policy = policy_of(
        PermissionMode::Default,
        ModeContext::new(workspace.inside()),
    );
    let read = tool(plain("search_files", effects(true, false, false, false)));
    let outside = workspace.outside.to_string_lossy().into_owned();
    assert_eq!(
        decide(&*policy, &read, json!({ "cwd": outside })).await,
        Decision::ask()
    );
    assert_eq!(
        decide(&*policy, &read, json!({ "cwd": "src" })).await,
        Decision::allow()
    );
    assert_eq!(
        decide(&*policy, &read, json!({ "path": "src", "cwd": outside })).await,
        Decision::allow()
    );
    assert_eq!(
        decide(&*policy, &read, json!({ "path": outside, "cwd": "src" })).await,
        Decision::ask()
    );
    assert_eq!(decide(&*policy, &read, json!({})).await, Decision::allow());
    assert_eq!(
        decide(&*policy, &read, json!({ "path": 3 })).await,
        Decision::allow()
    );
    assert_eq!(
        decide(&*policy, &read, Value::Null).await,
        Decision::allow()
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
