//! The six permission modes and the policy each one stands for.

use super::{DecideArgs, Decision, Policy, default_decide};
use crate::tool::Tool;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// How much runs without asking. Serialized with the exact names `default`, `acceptEdits`,
/// `plan`, `auto`, `bypassPermissions`, `dontAsk`. A session naming none runs under `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Ask before writes, commands, web requests and reads outside the workspace.
    Default,
    /// Edits inside the workspace run; everything else as `default`.
    AcceptEdits,
    /// Refuse anything that would change something.
    Plan,
    /// Ask before writes and commands (memory included); reads and web requests run.
    #[default]
    Auto,
    /// Run everything.
    BypassPermissions,
    /// Never ask: refuse what `default` would ask about.
    DontAsk,
}

impl PermissionMode {
    /// The six modes in their fixed order.
    pub const ALL: [PermissionMode; 6] = [
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Plan,
        PermissionMode::Auto,
        PermissionMode::BypassPermissions,
        PermissionMode::DontAsk,
    ];

    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::Auto => "auto",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::DontAsk => "dontAsk",
        }
    }

    /// The mode with this exact name.
    pub fn parse(name: &str) -> Option<PermissionMode> {
        PermissionMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == name)
    }

    /// The one-sentence description of the mode.
    pub fn description(self) -> &'static str {
        mode_description(self)
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PermissionMode {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        PermissionMode::parse(name).ok_or_else(|| {
            let names: Vec<&str> = PermissionMode::ALL.iter().map(|m| m.as_str()).collect();
            format!(
                "permission mode \"{name}\" must be one of {}",
                names.join(", ")
            )
        })
    }
}

/// One sentence per mode.
pub fn mode_description(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Default => {
            "Asks before writing, running a command, going online, or reading outside the workspace."
        }
        PermissionMode::AcceptEdits => {
            "Edits inside the workspace run without asking; everything else asks as in default."
        }
        PermissionMode::Plan => {
            "Looks without touching: anything that would change something is refused."
        }
        PermissionMode::Auto => {
            "Asks before any write (memory notes too) and before commands; reads and web requests run."
        }
        PermissionMode::BypassPermissions => "Runs every tool without asking.",
        PermissionMode::DontAsk => "Never asks: whatever default would ask about is refused.",
    }
}

/// Whether a path (absolute, or relative to the workspace) is inside the workspace.
pub type InsideFn = Arc<dyn Fn(&Path) -> bool + Send + Sync>;
/// Whether a tool counts as an edit.
pub type IsEditFn = Arc<dyn Fn(&Tool) -> bool + Send + Sync>;
/// What a call reaches that the person keeps to themselves (a credential store, the host's own
/// files), said as a phrase (`~/.ssh/id_ed25519, a credential store`); `None` for ordinary calls.
pub type PrivateFn = Arc<dyn Fn(&Tool, &Value) -> Option<String> + Send + Sync>;
/// Whether the person approved a tool's calls in advance.
pub type ApprovedFn = Arc<dyn Fn(&Tool) -> bool + Send + Sync>;

/// What a mode needs to know about the workspace and the tools.
#[derive(Clone)]
pub struct ModeContext {
    /// Whether a path (absolute, or relative to the workspace) is inside the workspace.
    pub inside: InsideFn,
    /// Whether a tool is an edit; without it, a tool declaring `effects.writes` is.
    pub is_edit: Option<IsEditFn>,
    /// What of the person's own a call reaches. Such a call is asked in `auto`, `default` and
    /// `acceptEdits` and refused in `plan` and `dontAsk`, whatever else the mode would do;
    /// `bypassPermissions` alone runs it.
    pub private: Option<PrivateFn>,
    /// The tools the person approved in advance (a trusted server's): where the mode would ask,
    /// they run; what the mode refuses (`plan`'s changes, all `dontAsk` would ask about) they
    /// are refused like any other, and a reach into the person's own places is still asked.
    pub approved: Option<ApprovedFn>,
}

impl ModeContext {
    /// A context with an `inside` test and no `is_edit`.
    pub fn new(inside: impl Fn(&Path) -> bool + Send + Sync + 'static) -> ModeContext {
        ModeContext {
            inside: Arc::new(inside),
            is_edit: None,
            private: None,
            approved: None,
        }
    }

    /// The same context with a test for the tools approved in advance.
    pub fn with_approved(
        mut self,
        approved: impl Fn(&Tool) -> bool + Send + Sync + 'static,
    ) -> ModeContext {
        self.approved = Some(Arc::new(approved));
        self
    }

    /// The same context with a test for what is the person's own.
    pub fn with_private(
        mut self,
        private: impl Fn(&Tool, &Value) -> Option<String> + Send + Sync + 'static,
    ) -> ModeContext {
        self.private = Some(Arc::new(private));
        self
    }

    /// The same context with an `is_edit` test.
    pub fn with_is_edit(
        mut self,
        is_edit: impl Fn(&Tool) -> bool + Send + Sync + 'static,
    ) -> ModeContext {
        self.is_edit = Some(Arc::new(is_edit));
        self
    }
}

impl fmt::Debug for ModeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModeContext")
            .field("is_edit", &self.is_edit.is_some())
            .field("private", &self.private.is_some())
            .field("approved", &self.approved.is_some())
            .finish_non_exhaustive()
    }
}

struct ModePolicy {
    mode: PermissionMode,
    context: ModeContext,
}

/// The policy of a mode, for hosts to put as `otherwise` under their `rules` (so deny and ask
/// rules win in every mode).
pub fn policy_of(mode: PermissionMode, context: ModeContext) -> Arc<dyn Policy> {
    Arc::new(ModePolicy { mode, context })
}

fn string_field<'v>(input: &'v Value, key: &str) -> Option<&'v str> {
    input.get(key).and_then(Value::as_str)
}

impl ModePolicy {
    /// The rule the stricter modes share: ask before a write, a destructive call or a network
    /// call, and before a read whose target (`path`, else `cwd`) is outside the workspace.
    ///
    /// `inside` is the host's: the engine's resolves links, dangling ones too, so the target is
    /// judged by where it lands, not how it is spelled. Glob inputs (`glob`, `pattern`) are not
    /// judged here; the standard tools confine a glob to the folder it applies to and refuse
    /// one that could leave it, so the folder is all there is to judge.
    fn ask_on_effects(&self, tool: &Tool, input: &Value) -> Decision {
        let effects = tool.effects();
        if effects.writes || effects.destructive || effects.network {
            return Decision::ask();
        }
        if effects.reads {
            let target = string_field(input, "path").or_else(|| string_field(input, "cwd"));
            if let Some(target) = target
                && !(self.context.inside)(Path::new(target))
            {
                return Decision::ask();
            }
        }
        Decision::allow()
    }

    fn is_edit(&self, tool: &Tool) -> bool {
        match &self.context.is_edit {
            Some(is_edit) => is_edit(tool),
            None => tool.effects().writes,
        }
    }

    /// The path an edit writes: `writes(input)` for a tool declaring it, else `input.path`.
    fn written_path(tool: &Tool, input: &Value) -> Option<PathBuf> {
        if tool.has_writes() {
            tool.writes(input)
        } else {
            string_field(input, "path").map(PathBuf::from)
        }
    }
}

#[async_trait]
impl Policy for ModePolicy {
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        let (tool, input) = (args.tool, args.input);
        if self.mode != PermissionMode::BypassPermissions
            && let Some(private) = &self.context.private
            && let Some(what) = private(tool, input)
        {
            return match self.mode {
                PermissionMode::Plan | PermissionMode::DontAsk => Decision::deny(format!(
                    "{} reaches {what}, which is the person's own, and the mode is {}",
                    tool.name(),
                    self.mode
                )),
                _ => Decision::ask(),
            };
        }
        let decision = self.decide_by_mode(tool, input);
        if decision.behavior == super::Behavior::Ask
            && self.context.approved.as_ref().is_some_and(|a| a(tool))
        {
            return Decision::allow();
        }
        decision
    }
}

impl ModePolicy {
    /// The mode's own decision, before approvals given in advance.
    fn decide_by_mode(&self, tool: &Tool, input: &Value) -> Decision {
        match self.mode {
            PermissionMode::Default => self.ask_on_effects(tool, input),
            PermissionMode::AcceptEdits => {
                if self.is_edit(tool)
                    && let Some(path) = Self::written_path(tool, input)
                    && (self.context.inside)(&path)
                {
                    return Decision::allow();
                }
                self.ask_on_effects(tool, input)
            }
            PermissionMode::Plan => {
                let effects = tool.effects();
                if effects.writes || effects.destructive {
                    return Decision::deny(format!(
                        "{} would change something and the mode is plan",
                        tool.name()
                    ));
                }
                self.ask_on_effects(tool, input)
            }
            // A write is a write, memory notes included: a later session reads them.
            PermissionMode::Auto => {
                if tool.effects().writes {
                    Decision::ask()
                } else {
                    default_decide(tool)
                }
            }
            PermissionMode::BypassPermissions => Decision::allow(),
            PermissionMode::DontAsk => {
                let decision = self.ask_on_effects(tool, input);
                if decision.behavior == super::Behavior::Ask {
                    Decision::deny(format!(
                        "{} would need approval and the mode is dontAsk",
                        tool.name()
                    ))
                } else {
                    decision
                }
            }
        }
    }
}
