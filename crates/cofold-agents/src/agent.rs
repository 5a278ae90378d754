//! The agent: an immutable, cheap-to-clone bundle of instructions, a model, tools, capabilities,
//! a store, hooks, a policy, limits and context settings, made with [`Agent::builder`].

use crate::capability::{Capability, CapabilityEntry};
use crate::error::AgentError;
use crate::hooks::{Hooks, NoHooks};
use crate::id::is_valid_name;
use crate::model::{ModelAdapter, ModelParams};
use crate::policy::{DefaultDecide, Policy};
use crate::secrets::Secrets;
use crate::store::{MemoryStore, Store};
use crate::tool::{Resources, Tool};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A run's limits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Model steps per run (default 20).
    pub max_steps: u32,
    /// Tool calls that reach an executor per run (default 50).
    pub max_tool_calls: u32,
    /// Wall-clock limit in milliseconds, pauses included; 0 = none (default).
    pub timeout_ms: u64,
    /// Cost limit in USD; 0 = none (default). Never trips without pricing.
    pub max_cost: f64,
    /// Characters of tool output the model reads (default 16000).
    pub max_tool_output_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 20,
            max_tool_calls: 50,
            timeout_ms: 0,
            max_cost: 0.0,
            max_tool_output_chars: 16_000,
        }
    }
}

/// Limits to override, field by field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialLimits {
    /// See [`Limits::max_steps`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// See [`Limits::max_tool_calls`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// See [`Limits::timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// See [`Limits::max_cost`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// See [`Limits::max_tool_output_chars`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_output_chars: Option<usize>,
}

impl Limits {
    /// These limits with every field `partial` sets replaced.
    pub fn merged(self, partial: PartialLimits) -> Limits {
        Limits {
            max_steps: partial.max_steps.unwrap_or(self.max_steps),
            max_tool_calls: partial.max_tool_calls.unwrap_or(self.max_tool_calls),
            timeout_ms: partial.timeout_ms.unwrap_or(self.timeout_ms),
            max_cost: partial.max_cost.unwrap_or(self.max_cost),
            max_tool_output_chars: partial
                .max_tool_output_chars
                .unwrap_or(self.max_tool_output_chars),
        }
    }
}

/// A token estimator: text in, estimated tokens out.
pub type EstimateFn = Arc<dyn Fn(&str) -> u64 + Send + Sync>;

/// The default estimate: ceil(characters / 4), characters being Unicode scalar values.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The default context budget.
pub const DEFAULT_MAX_TOKENS: u64 = 32_000;

/// How much context a run may use and when it compacts.
#[derive(Clone)]
pub struct ContextSettings {
    /// The context budget in tokens (default 32000).
    pub max_tokens: u64,
    /// The token estimator (default [`estimate_tokens`]).
    pub estimate_tokens: EstimateFn,
    /// Tokens of recent history a summary keeps verbatim (default floor(maxTokens / 5)).
    pub compact_keep_tokens: u64,
    /// Compact when the history estimate is above this; `None` never auto-compacts (default).
    pub auto_compact_tokens: Option<u64>,
}

impl ContextSettings {
    /// The settings with a given budget and every other field at its default.
    pub fn with_max_tokens(max_tokens: u64) -> ContextSettings {
        ContextSettings {
            max_tokens,
            estimate_tokens: Arc::new(estimate_tokens),
            compact_keep_tokens: max_tokens / 5,
            auto_compact_tokens: None,
        }
    }

    /// The estimator, shared.
    pub fn estimator(&self) -> EstimateFn {
        self.estimate_tokens.clone()
    }

    /// The estimate of `text`.
    pub fn estimate(&self, text: &str) -> u64 {
        (self.estimate_tokens)(text)
    }

    /// Defaults overridden field by field; `compactKeepTokens` defaults from the final budget.
    pub fn from_partial(partial: PartialContext) -> ContextSettings {
        let max_tokens = partial.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        ContextSettings {
            max_tokens,
            estimate_tokens: partial
                .estimate_tokens
                .unwrap_or_else(|| Arc::new(estimate_tokens)),
            compact_keep_tokens: partial.compact_keep_tokens.unwrap_or(max_tokens / 5),
            auto_compact_tokens: partial.auto_compact_tokens,
        }
    }
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings::with_max_tokens(DEFAULT_MAX_TOKENS)
    }
}

impl fmt::Debug for ContextSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextSettings")
            .field("max_tokens", &self.max_tokens)
            .field("compact_keep_tokens", &self.compact_keep_tokens)
            .field("auto_compact_tokens", &self.auto_compact_tokens)
            .finish_non_exhaustive()
    }
}

/// Context settings to override, field by field.
#[derive(Clone, Default)]
pub struct PartialContext {
    /// See [`ContextSettings::max_tokens`].
    pub max_tokens: Option<u64>,
    /// See [`ContextSettings::estimate_tokens`].
    pub estimate_tokens: Option<EstimateFn>,
    /// See [`ContextSettings::compact_keep_tokens`].
    pub compact_keep_tokens: Option<u64>,
    /// See [`ContextSettings::auto_compact_tokens`]; must be positive when set.
    pub auto_compact_tokens: Option<u64>,
}

impl fmt::Debug for PartialContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialContext")
            .field("max_tokens", &self.max_tokens)
            .field("estimate_tokens", &self.estimate_tokens.is_some())
            .field("compact_keep_tokens", &self.compact_keep_tokens)
            .field("auto_compact_tokens", &self.auto_compact_tokens)
            .finish()
    }
}

/// A warning sink.
pub type WarnFn = Arc<dyn Fn(&str) + Send + Sync>;

/// The shared namespace an agent uses when none is given.
pub const DEFAULT_SHARED_NAMESPACE: &str = "default";

/// The warning given once per process when an agent is built without a store.
pub const IN_MEMORY_STORE_WARNING: &str = "no store was given to the agent, so an in-memory store is used and nothing outlives the process";

static IN_MEMORY_STORE_WARNED: AtomicBool = AtomicBool::new(false);

/// Whether this process already gave the in-memory store warning.
pub fn in_memory_store_warned() -> bool {
    IN_MEMORY_STORE_WARNED.load(Ordering::SeqCst)
}

struct AgentInner {
    id: String,
    instructions: String,
    model: Arc<dyn ModelAdapter>,
    tools: Vec<Tool>,
    capabilities: Vec<CapabilityEntry>,
    store: Arc<dyn Store>,
    hooks: Arc<dyn Hooks>,
    policy: Arc<dyn Policy>,
    limits: Limits,
    context: ContextSettings,
    params: ModelParams,
    resources: Resources,
    secrets: Secrets,
    shared_namespace: String,
    warn: WarnFn,
}

/// An agent definition; immutable and cheap to clone. Hosts build a fresh one per turn.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("model", &self.inner.model.id())
            .finish_non_exhaustive()
    }
}

/// The model part of [`AgentDefinition`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelIdentity {
    /// The adapter id.
    pub id: String,
    /// The provider's model id.
    pub model_id: String,
}

/// The context part of [`AgentDefinition`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextDefinition {
    /// The context budget.
    pub max_tokens: u64,
}

/// What [`Agent::definition`] returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentDefinition {
    /// The agent id.
    pub id: String,
    /// The agent's own instructions.
    pub instructions: String,
    /// The model.
    pub model: ModelIdentity,
    /// The agent's own tool names, in order.
    pub tools: Vec<String>,
    /// The capability ids, in order.
    pub capabilities: Vec<String>,
    /// The limits.
    pub limits: Limits,
    /// The context budget.
    pub context: ContextDefinition,
}

impl Agent {
    /// Starts building an agent.
    pub fn builder(
        id: impl Into<String>,
        instructions: impl Into<String>,
        model: Arc<dyn ModelAdapter>,
    ) -> AgentBuilder {
        AgentBuilder {
            id: id.into(),
            instructions: instructions.into(),
            model,
            tools: Vec::new(),
            capabilities: Vec::new(),
            store: None,
            hooks: None,
            policy: None,
            limits: PartialLimits::default(),
            context: PartialContext::default(),
            params: ModelParams::default(),
            resources: Resources::default(),
            secrets: Secrets::none(),
            shared_namespace: None,
            warn: None,
        }
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The agent's own instructions.
    pub fn instructions(&self) -> &str {
        &self.inner.instructions
    }

    /// The model.
    pub fn model(&self) -> &Arc<dyn ModelAdapter> {
        &self.inner.model
    }

    /// The agent's own tools, in declaration order (source `agent`).
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// The capabilities, in order.
    pub fn capabilities(&self) -> &[CapabilityEntry] {
        &self.inner.capabilities
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The hooks ([`NoHooks`] when none were given).
    pub fn hooks(&self) -> &Arc<dyn Hooks> {
        &self.inner.hooks
    }

    /// The policy.
    pub fn policy(&self) -> &Arc<dyn Policy> {
        &self.inner.policy
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The context settings.
    pub fn context(&self) -> &ContextSettings {
        &self.inner.context
    }

    /// Request settings sent with every model request.
    pub fn params(&self) -> &ModelParams {
        &self.inner.params
    }

    /// The host's secrets, kept out of tools' inputs and results.
    pub fn secrets(&self) -> &Secrets {
        &self.inner.secrets
    }

    /// Host values handed to tools.
    pub fn resources(&self) -> &Resources {
        &self.inner.resources
    }

    /// The namespace of the shared kv scope.
    pub fn shared_namespace(&self) -> &str {
        &self.inner.shared_namespace
    }

    /// Reports a warning through the agent's `warn` callback.
    pub fn warn(&self, message: &str) {
        (self.inner.warn)(message);
    }

    /// The warning callback.
    pub fn warn_fn(&self) -> &WarnFn {
        &self.inner.warn
    }

    /// A description of the agent: id, instructions, model, tool names, capability ids, limits and
    /// context budget.
    pub fn definition(&self) -> AgentDefinition {
        AgentDefinition {
            id: self.inner.id.clone(),
            instructions: self.inner.instructions.clone(),
            model: ModelIdentity {
                id: self.inner.model.id().to_owned(),
                model_id: self.inner.model.model_id().to_owned(),
            },
            tools: self
                .inner
                .tools
                .iter()
                .map(|t| t.name().to_owned())
                .collect(),
            capabilities: self
                .inner
                .capabilities
                .iter()
                .map(|c| c.capability.id().to_owned())
                .collect(),
            limits: self.inner.limits,
            context: ContextDefinition {
                max_tokens: self.inner.context.max_tokens,
            },
        }
    }
}

/// Builds an [`Agent`]; every setting has a documented default.
pub struct AgentBuilder {
    id: String,
    instructions: String,
    model: Arc<dyn ModelAdapter>,
    tools: Vec<Tool>,
    capabilities: Vec<CapabilityEntry>,
    store: Option<Arc<dyn Store>>,
    hooks: Option<Arc<dyn Hooks>>,
    policy: Option<Arc<dyn Policy>>,
    limits: PartialLimits,
    context: PartialContext,
    params: ModelParams,
    resources: Resources,
    secrets: Secrets,
    shared_namespace: Option<String>,
    warn: Option<WarnFn>,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// The host's secrets: a call whose input carries one is refused, a result carrying one is
    /// masked, in every mode (default none).
    pub fn secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Adds tools (source `agent`), after any added before.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds one tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a capability.
    pub fn capability(self, capability: Arc<dyn Capability>) -> Self {
        self.capability_excluding(capability, Vec::<String>::new())
    }

    /// Adds a capability, leaving out the tools with these names.
    pub fn capability_excluding(
        mut self,
        capability: Arc<dyn Capability>,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.capabilities.push(CapabilityEntry {
            capability,
            exclude: names.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// The store (default: a new in-memory store, with one warning per process).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The hooks (default: none).
    pub fn hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// The policy (default: [`crate::policy::DEFAULT_DECIDE`]).
    pub fn policy(mut self, policy: Arc<dyn Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Limits to override (defaults: maxSteps 20, maxToolCalls 50, timeoutMs 0, maxCost 0,
    /// maxToolOutputChars 16000).
    pub fn limits(mut self, limits: PartialLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Context settings to override (defaults: maxTokens 32000, ceil(chars / 4),
    /// compactKeepTokens maxTokens / 5, no auto-compaction).
    pub fn context(mut self, context: PartialContext) -> Self {
        self.context = context;
        self
    }

    /// Request settings (default: none).
    pub fn params(mut self, params: ModelParams) -> Self {
        self.params = params;
        self
    }

    /// Host values for tools (default: none).
    pub fn resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    /// The shared kv namespace (default `default`).
    pub fn shared_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.shared_namespace = Some(namespace.into());
        self
    }

    /// The warning sink (default: `tracing::warn!`).
    pub fn warn(mut self, warn: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.warn = Some(Arc::new(warn));
        self
    }

    // Longer than 80 lines: one check per setting, each with its own refusal, reads best whole.
    /// Checks the settings and builds the agent; refusals are `invalid_options`.
    pub fn build(self) -> Result<Agent, AgentError> {
        if !is_valid_name(&self.id) {
            return Err(AgentError::invalid_options(format!(
                "agent id \"{}\" must be 1 to 64 letters, digits, underscores or hyphens",
                self.id
            )));
        }
        if self.instructions.trim().is_empty() {
            return Err(AgentError::invalid_options(format!(
                "agent \"{}\" needs instructions",
                self.id
            )));
        }
        let mut tool_names = HashSet::new();
        for tool in &self.tools {
            if !tool_names.insert(tool.name()) {
                return Err(AgentError::invalid_options(format!(
                    "agent \"{}\" has two tools named \"{}\"",
                    self.id,
                    tool.name()
                )));
            }
        }
        let mut capability_ids = HashSet::new();
        for entry in &self.capabilities {
            let id = entry.capability.id();
            if !is_valid_name(id) {
                return Err(AgentError::invalid_options(format!(
                    "capability id \"{id}\" must be 1 to 64 letters, digits, underscores or hyphens"
                )));
            }
            if !capability_ids.insert(id) {
                return Err(AgentError::invalid_options(format!(
                    "agent \"{}\" has two capabilities with id \"{id}\"",
                    self.id
                )));
            }
        }
        if self.context.auto_compact_tokens == Some(0) {
            return Err(AgentError::invalid_options(
                "context.autoCompactTokens must be positive",
            ));
        }
        if self.context.max_tokens == Some(0) {
            return Err(AgentError::invalid_options(
                "context.maxTokens must be positive",
            ));
        }
        if let Some(cost) = self.limits.max_cost
            && !(cost.is_finite() && cost >= 0.0)
        {
            return Err(AgentError::invalid_options(
                "limits.maxCost must be a non-negative number",
            ));
        }
        let warn: WarnFn = self
            .warn
            .unwrap_or_else(|| Arc::new(|message: &str| tracing::warn!("{message}")));
        let store: Arc<dyn Store> = match self.store {
            Some(store) => store,
            None => {
                if !IN_MEMORY_STORE_WARNED.swap(true, Ordering::SeqCst) {
                    warn(IN_MEMORY_STORE_WARNING);
                }
                Arc::new(MemoryStore::new())
            }
        };
        Ok(Agent {
            inner: Arc::new(AgentInner {
                limits: Limits::default().merged(self.limits),
                context: ContextSettings::from_partial(self.context),
                policy: self.policy.unwrap_or_else(|| Arc::new(DefaultDecide)),
                shared_namespace: self
                    .shared_namespace
                    .unwrap_or_else(|| DEFAULT_SHARED_NAMESPACE.to_owned()),
                id: self.id,
                instructions: self.instructions,
                model: self.model,
                tools: self.tools,
                capabilities: self.capabilities,
                store,
                hooks: self.hooks.unwrap_or_else(|| Arc::new(NoHooks)),
                params: self.params,
                resources: self.resources,
                secrets: self.secrets,
                warn,
            }),
        })
    }
}
