//! The OpenAI-compatible Chat Completions adapter for the cofold runtime.
//!
//! Streams text, reasoning and tool-call deltas as they arrive over SSE, maps errors to the
//! runtime's codes, bounds every stage of a request by a time limit, retries failed or cut-short
//! answers without passing anything on twice, writes each server's dialect, and reads the
//! `GET /models` catalogue.
//!
//! ```no_run
//! use cofold_agents::model::{ModelProvider, ModelSpec};
//! use cofold_agents::provider::ProviderConfig;
//! use cofold_openai::{provider_for, providers_of};
//!
//! # fn demo() -> Result<(), cofold_agents::error::AgentError> {
//! let configs = vec![ProviderConfig::new("ds", "https://api.deepseek.com/v1")];
//! let providers = providers_of(&configs)?;
//! let (provider, model_id) = provider_for(&providers, "ds/deepseek-chat")?;
//! let adapter = provider.model(ModelSpec::new(model_id));
//! # let _ = adapter; Ok(()) }
//! ```

mod adapter;
mod body;
mod catalogue;
mod decode;
pub mod dialect;
mod failure;
mod http;
pub mod net;
mod plain_chunk;
mod provider;
mod reply;
mod request;
mod retry;
pub mod settings;
pub mod sse;
mod stream;
pub mod think;

pub use adapter::OpenAiAdapter;
pub use catalogue::DEFAULT_FEATURES;
pub use decode::StreamDecoder;
pub use dialect::Dialect;
pub use http::ApiKey;
pub use provider::{
    OpenAiProvider, ProviderOptions, Providers, list_all, openai_compat, provider_for, providers_of,
};
pub use settings::{Network, ProviderSettings, RetryPolicy, SettingsError, TimeLimits};
