//! Permission policy: the decision contract, the default decision, rules with their glob, the six
//! permission modes, and the denials record.

mod glob;
mod modes;
mod risk;
mod rules;

pub use glob::match_glob;
pub use modes::{
    ApprovedFn, InsideFn, IsEditFn, ModeContext, PermissionMode, PrivateFn, mode_description,
    policy_of,
};
pub use risk::{destructive_command, explained, risk_of};
pub use rules::{Rule, RuleSet, rules};

pub use crate::status::{Denial, DenialBy};

use crate::hooks::RunInfo;
use crate::tool::Tool;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

/// Decides whether a call of a known tool runs, needs approval, or is refused.
#[async_trait]
pub trait Policy: Send + Sync {
    /// The decision for one call.
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision;
}

/// What a policy judges.
#[derive(Debug, Clone, Copy)]
pub struct DecideArgs<'a> {
    /// The tool called.
    pub tool: &'a Tool,
    /// The validated input, defaults filled and any `before_tool` change applied.
    pub input: &'a Value,
    /// The run.
    pub run: &'a RunInfo,
}

/// Run, ask a person, or refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    /// Run the call.
    Allow,
    /// Ask a person first.
    Ask,
    /// Refuse the call.
    Deny,
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Run, ask or refuse.
    pub behavior: Behavior,
    /// For a refusal: what the model reads (default `Denied by policy: <tool>`). For an ask: why
    /// the policy asks (outside the workspace, a credential store, a command that destroys, a
    /// network fetch), one sentence the person sees beside the question; none when it asks only
    /// because the tool can change things.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Decision {
    /// Run the call.
    pub fn allow() -> Decision {
        Decision {
            behavior: Behavior::Allow,
            reason: None,
        }
    }

    /// Ask a person first.
    pub fn ask() -> Decision {
        Decision {
            behavior: Behavior::Ask,
            reason: None,
        }
    }

    /// Ask a person first, saying why.
    pub fn ask_because(reason: impl Into<String>) -> Decision {
        Decision {
            behavior: Behavior::Ask,
            reason: Some(reason.into()),
        }
    }

    /// Refuse the call with a reason.
    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision {
            behavior: Behavior::Deny,
            reason: Some(reason.into()),
        }
    }

    /// Refuse the call without a reason (the runtime then says `Denied by policy: <tool>`).
    pub fn deny_without_reason() -> Decision {
        Decision {
            behavior: Behavior::Deny,
            reason: None,
        }
    }

    /// The reason a refusal carries: its own, or `Denied by policy: <tool>`.
    pub fn deny_reason(&self, tool: &str) -> String {
        self.reason
            .clone()
            .unwrap_or_else(|| format!("Denied by policy: {tool}"))
    }
}

/// The default decision: `Ask` for a destructive tool, `Allow` for every other.
pub fn default_decide(tool: &Tool) -> Decision {
    if tool.effects().destructive {
        Decision::ask()
    } else {
        Decision::allow()
    }
}

/// The default policy as a value: the agent's default, the default `otherwise` of [`rules`], and
/// what mode `auto` decides.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultDecide;

/// The default policy (see [`DefaultDecide`]).
pub const DEFAULT_DECIDE: DefaultDecide = DefaultDecide;

#[async_trait]
impl Policy for DefaultDecide {
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        default_decide(args.tool)
    }
}

/// The default policy, shared.
pub fn default_policy() -> Arc<dyn Policy> {
    Arc::new(DefaultDecide)
}

struct FnPolicy<F>(F);

#[async_trait]
impl<F> Policy for FnPolicy<F>
where
    F: Fn(&DecideArgs<'_>) -> Decision + Send + Sync,
{
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        (self.0)(args)
    }
}

/// A policy from a synchronous function.
pub fn policy_fn<F>(f: F) -> Arc<dyn Policy>
where
    F: Fn(&DecideArgs<'_>) -> Decision + Send + Sync + 'static,
{
    Arc::new(FnPolicy(f))
}
