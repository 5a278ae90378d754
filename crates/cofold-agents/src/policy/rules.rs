//! `rules`: deny, ask and allow lists over tool names and subject globs, falling back to another
//! policy.

use super::{DecideArgs, Decision, DefaultDecide, Policy, match_glob};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// One rule: a tool name (or `*` for every tool) and an optional glob over the call's subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    /// A tool name, or `*`.
    pub tool: String,
    /// A glob over the tool's subject; a rule with one never matches a tool without a subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<String>,
}

impl Rule {
    /// A rule on a tool name alone.
    pub fn tool(tool: impl Into<String>) -> Rule {
        Rule {
            tool: tool.into(),
            r#match: None,
        }
    }

    /// A rule on a tool name and a subject glob.
    pub fn matching(tool: impl Into<String>, glob: impl Into<String>) -> Rule {
        Rule {
            tool: tool.into(),
            r#match: Some(glob.into()),
        }
    }

    fn matches(&self, args: &DecideArgs<'_>) -> bool {
        if self.tool != "*" && self.tool != args.tool.name() {
            return false;
        }
        match &self.r#match {
            None => true,
            Some(glob) => args
                .tool
                .subject(args.input)
                .is_some_and(|subject| match_glob(glob, &subject)),
        }
    }
}

/// The lists of a rules policy and what decides when no rule matches.
#[derive(Clone, Default)]
pub struct RuleSet {
    /// Refuse matching calls.
    pub deny: Vec<Rule>,
    /// Ask before matching calls.
    pub ask: Vec<Rule>,
    /// Run matching calls.
    pub allow: Vec<Rule>,
    /// Decides when nothing matches (default: the default policy).
    pub otherwise: Option<Arc<dyn Policy>>,
}

impl fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuleSet")
            .field("deny", &self.deny)
            .field("ask", &self.ask)
            .field("allow", &self.allow)
            .field("otherwise", &self.otherwise.is_some())
            .finish()
    }
}

struct Rules {
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
    otherwise: Arc<dyn Policy>,
}

/// A policy from rule lists: the first matching deny rule, then ask, then allow, whatever order
/// they were written in; nothing matching → `otherwise`. A deny rule's reason is
/// `Denied by rule: <tool>` plus `(<match>)` when it has one.
pub fn rules(set: RuleSet) -> Arc<dyn Policy> {
    Arc::new(Rules {
        deny: set.deny,
        ask: set.ask,
        allow: set.allow,
        otherwise: set.otherwise.unwrap_or_else(|| Arc::new(DefaultDecide)),
    })
}

#[async_trait]
impl Policy for Rules {
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        if let Some(rule) = self.deny.iter().find(|rule| rule.matches(args)) {
            let name = args.tool.name();
            return Decision::deny(match &rule.r#match {
                Some(glob) => format!("Denied by rule: {name}({glob})"),
                None => format!("Denied by rule: {name}"),
            });
        }
        if self.ask.iter().any(|rule| rule.matches(args)) {
            return Decision::ask();
        }
        if self.allow.iter().any(|rule| rule.matches(args)) {
            return Decision::allow();
        }
        self.otherwise.decide(args).await
    }
}
