//! The OpenAI-compatible Chat Completions adapter for the cofold runtime.
//!
//! Streams text, reasoning and tool-call deltas as they arrive over SSE, maps errors to the
//! runtime's codes, retries only before a body was read, and reads the `GET /models` catalogue.
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
mod catalogue;
mod decode;
mod http;
mod provider;
mod reply;
mod request;
pub mod sse;
mod stream;
pub mod think;

pub use adapter::OpenAiAdapter;
pub use catalogue::DEFAULT_FEATURES;
pub use decode::StreamDecoder;
pub use http::ApiKey;
pub use provider::{
    OpenAiProvider, ProviderOptions, Providers, list_all, openai_compat, provider_for, providers_of,
};
