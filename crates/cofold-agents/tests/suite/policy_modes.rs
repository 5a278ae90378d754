//! The permission modes against a real workspace (runtime cases J168–J177, J179, docs/acceptance.md): the
//! standard tool table, `is_edit`, written paths and how reads are judged.

use cofold_agents::policy::{Behavior, Decision, ModeContext, PermissionMode, policy_of};
use cofold_agents::tool::{Tool, ToolEffects};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

use super::policy::{decide, effects, plain, shell, tool};

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

/// Tools shaped like the standard ones of cofold-tools: the same names, effects, subjects and written paths.
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
    // One row per kind of call, one column per mode in PermissionMode::ALL order.
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
            ["ask", "ask", "deny", "ask", "run", "deny"],
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
        // A write asks in auto (issue 28: memory_write is a write).
        (
            PermissionMode::Auto,
            ["run", "run", "ask", "run", "ask", "run"],
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

/// What the host says is the person's own (a credential store) is asked about in every mode
/// that asks and refused in those that never do, reads included; only bypassPermissions runs it.
#[tokio::test]
async fn private_places_are_asked_everywhere_but_bypass_and_refused_where_nothing_asks() {
    let workspace = Workspace::new();
    let memory = workspace.outside.join("memory");
    let tools = Standard::new(&workspace, &memory);
    let context = workspace.context().with_private(|_: &Tool, input: &Value| {
        input["path"]
            .as_str()
            .filter(|p| p.starts_with(".ssh"))
            .map(|p| format!("{p} (a credential store)"))
    });
    for (tool, input) in [
        (&tools.read_file, json!({ "path": ".ssh/id_ed25519" })),
        (
            &tools.search_files,
            json!({ "pattern": "KEY", "path": ".ssh" }),
        ),
        (&tools.edit_file, json!({ "path": ".ssh/authorized_keys" })),
    ] {
        for (mode, want) in PermissionMode::ALL
            .into_iter()
            .zip(["ask", "ask", "deny", "ask", "run", "deny"])
        {
            let policy = policy_of(mode, context.clone());
            let decision = decide(&*policy, tool, input.clone()).await;
            assert_eq!(
                outcome(&decision),
                want,
                "{} {input} under {mode}",
                tool.name()
            );
            if let Some(reason) = decision.reason {
                assert_eq!(
                    reason,
                    format!(
                        "{} reaches {} (a credential store), which is the person's own, and the mode is {mode}",
                        tool.name(),
                        input["path"].as_str().unwrap_or_default()
                    )
                );
            }
        }
    }
    // Ordinary paths are judged as before.
    let policy = policy_of(PermissionMode::Auto, context);
    let decision = decide(&*policy, &tools.read_file, json!({ "path": "src/a.rs" })).await;
    assert_eq!(outcome(&decision), "run");
}

#[tokio::test]
async fn a_tool_approved_in_advance_skips_the_question_never_the_refusal() {
    let workspace = Workspace::new();
    // Shaped like a server's tool the person trusts: it may change something.
    let trusted = tool(plain("mcp__s__change", effects(true, false, true, true)));
    let other = tool(plain("mcp__s__other", effects(true, false, true, true)));
    let context = ModeContext::new(workspace.inside())
        .with_approved(|tool: &Tool| tool.name() == "mcp__s__change");
    for (mode, approved, unapproved) in [
        (PermissionMode::Default, "run", "ask"),
        (PermissionMode::AcceptEdits, "run", "ask"),
        (PermissionMode::Plan, "deny", "deny"),
        (PermissionMode::Auto, "run", "ask"),
        (PermissionMode::BypassPermissions, "run", "run"),
        (PermissionMode::DontAsk, "deny", "deny"),
    ] {
        let policy = policy_of(mode, context.clone());
        assert_eq!(
            outcome(&decide(&*policy, &trusted, json!({})).await),
            approved,
            "{mode}"
        );
        assert_eq!(
            outcome(&decide(&*policy, &other, json!({})).await),
            unapproved,
            "{mode}"
        );
    }
}
