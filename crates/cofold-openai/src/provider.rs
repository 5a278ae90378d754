//! The provider: one endpoint with its key, headers and HTTP client, making adapters for its
//! models and reading its catalogue; and building providers from configuration.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cofold_agents::error::AgentError;
use cofold_agents::model::{
    ListOptions, ModelAdapter, ModelInfo, ModelProvider, ModelSpec, ReasoningEffort,
};
use cofold_agents::provider::{ProviderConfig, split_model};
use cofold_agents::tool::AbortSignal;
use indexmap::IndexMap;

use crate::adapter::OpenAiAdapter;
use crate::body::read_whole;
use crate::catalogue::{DEFAULT_FEATURES, parse_models};
use crate::dialect::{Dialect, Learned};
use crate::failure::no_answer;
use crate::http::{ApiKey, Endpoint};
use crate::settings::{Network, ProviderSettings, RetryPolicy, TimeLimits};

/// How to reach an endpoint. Defaults: no key, no extra headers, no reasoning budgets, the name
/// taken from the base URL's host and port, 3 attempts, the default time limits, the proxy
/// variables of the process's environment, and the dialect the base URL implies.
#[derive(Debug, Clone, Default)]
pub struct ProviderOptions {
    /// The base URL, such as `https://api.deepseek.com/v1`; a trailing `/` is removed.
    pub base_url: String,
    /// The bearer key.
    pub api_key: Option<ApiKey>,
    /// Extra headers sent with every request, in order.
    pub headers: Vec<(String, String)>,
    /// A reasoning token budget per effort, sent as `reasoning: { max_tokens }` instead of the
    /// effort's name.
    pub reasoning_budgets: HashMap<ReasoningEffort, u64>,
    /// The provider's name; its id is `openai-compat:<name>`.
    pub name: Option<String>,
    /// Extra attempts after a failed one; when set, overrides `retry.max_attempts` (as its
    /// value + 1).
    pub retries: Option<u32>,
    /// Attempts and the longest wait a server may ask for.
    pub retry: RetryPolicy,
    /// Connect, first-byte and idle limits.
    pub limits: TimeLimits,
    /// Proxy, extra certificates, and where proxy variables are read.
    pub network: Network,
    /// The server's quirks; `None` takes the preset the base URL implies.
    pub dialect: Option<Dialect>,
    /// Leave a streamed reply's `raw` out (`None`) rather than keep every chunk's data until
    /// the reply ends. Default `false`; a host whose hooks never read `raw` sets it, as the
    /// chunks weigh about ten times the reply's text while it streams.
    pub skip_stream_raw: bool,
}

impl ProviderOptions {
    /// Options for `base_url` with every default.
    pub fn new(base_url: impl Into<String>) -> Self {
        ProviderOptions {
            base_url: base_url.into(),
            ..ProviderOptions::default()
        }
    }

    /// The same options with a fixed key.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::Fixed(key.into()));
        self
    }

    /// The options a configured provider gives: its id as the name, its key (an empty key is
    /// none) and headers.
    pub fn from_config(config: &ProviderConfig) -> Self {
        ProviderOptions {
            base_url: config.base_url.clone(),
            api_key: config
                .api_key
                .as_ref()
                .filter(|k| !k.is_empty())
                .map(|k| ApiKey::Fixed(k.clone())),
            headers: config.headers.clone().unwrap_or_default(),
            name: Some(config.id.clone()),
            ..ProviderOptions::default()
        }
    }

    /// The same options with a provider entry's settings (limits, retries, network, dialect).
    pub fn with_settings(mut self, settings: &ProviderSettings) -> Self {
        self.limits = settings.limits;
        self.retry = settings.retry;
        self.network = settings.network.clone();
        self.dialect = Some(settings.dialect_for(&self.base_url));
        self
    }
}

/// An OpenAI-compatible endpoint as a [`ModelProvider`].
#[derive(Debug)]
pub struct OpenAiProvider {
    id: String,
    endpoint: Arc<Endpoint>,
    budgets: Arc<HashMap<ReasoningEffort, u64>>,
}

fn host_and_port(base_url: &str) -> Option<String> {
    let url = url::Url::parse(base_url).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    })
}

impl OpenAiProvider {
    /// A provider for `options.base_url`. Fails when no name is given and the base URL has no
    /// host to take one from, or when the HTTP client cannot be built.
    pub fn new(options: ProviderOptions) -> Result<Self, AgentError> {
        let base_url = options.base_url.trim_end_matches('/').to_owned();
        let name = match options.name {
            Some(n) => n,
            None => host_and_port(&base_url).ok_or_else(|| {
                AgentError::invalid_options(format!(
                    "the base URL \"{base_url}\" is not an http(s) URL with a host"
                ))
            })?,
        };
        let client = crate::net::build_client(&options.limits, &options.network)?;
        let mut retry = options.retry;
        if let Some(extra) = options.retries {
            retry.max_attempts = extra.saturating_add(1);
        }
        let dialect = options
            .dialect
            .unwrap_or_else(|| Dialect::for_base_url(&base_url));
        Ok(OpenAiProvider {
            id: format!("openai-compat:{name}"),
            endpoint: Arc::new(Endpoint {
                base_url,
                api_key: options.api_key,
                headers: options.headers,
                client,
                retry,
                limits: options.limits,
                dialect,
                learned: Learned::default(),
                keep_stream_raw: !options.skip_stream_raw,
            }),
            budgets: Arc::new(options.reasoning_budgets),
        })
    }

    /// The base URL without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.endpoint.base_url
    }

    /// The dialect requests to this endpoint are written in.
    pub fn dialect(&self) -> &Dialect {
        &self.endpoint.dialect
    }

    /// The adapter for one model, typed (see [`ModelProvider::model`]).
    pub fn adapter(&self, spec: ModelSpec) -> OpenAiAdapter {
        let mut features = DEFAULT_FEATURES;
        if spec.params.as_ref().is_some_and(|p| p.reasoning.is_some()) {
            features.reasoning = true;
        }
        if let Some(explicit) = spec.features {
            features = explicit;
        }
        OpenAiAdapter {
            id: format!("openai-compat:{}", spec.id),
            model_id: spec.id,
            features,
            params: spec.params,
            pricing: spec.pricing,
            endpoint: self.endpoint.clone(),
            budgets: self.budgets.clone(),
        }
    }

    async fn fetch_models(&self, signal: &AbortSignal) -> Result<Vec<ModelInfo>, AgentError> {
        let url = self.endpoint.url("/models");
        let (resp, clock) = self.endpoint.send(&url, None, signal).await?;
        let text = read_whole(resp, clock, &url, signal).await?;
        parse_models(&text)
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn id(&self) -> &str {
        &self.id
    }

    async fn list_models(&self, options: ListOptions) -> Result<Vec<ModelInfo>, AgentError> {
        let signal = options.signal.unwrap_or_default();
        match options.timeout {
            Some(limit) => tokio::time::timeout(limit, self.fetch_models(&signal))
                .await
                .unwrap_or_else(|_| Err(no_answer(&self.endpoint.url("/models")))),
            None => self.fetch_models(&signal).await,
        }
    }

    fn model(&self, spec: ModelSpec) -> Arc<dyn ModelAdapter> {
        Arc::new(self.adapter(spec))
    }
}

/// The one-model shortcut: a provider from `options` and its adapter for `spec`.
pub fn openai_compat(
    options: ProviderOptions,
    spec: ModelSpec,
) -> Result<OpenAiAdapter, AgentError> {
    Ok(OpenAiProvider::new(options)?.adapter(spec))
}

/// Configured providers by id, in configuration order.
pub type Providers = IndexMap<String, Arc<OpenAiProvider>>;

/// Builds every configured provider, named by its configured id (so its provider id is
/// `openai-compat:<id>`).
pub fn providers_of(configs: &[ProviderConfig]) -> Result<Providers, AgentError> {
    let mut out = IndexMap::with_capacity(configs.len());
    for c in configs {
        let provider = OpenAiProvider::new(ProviderOptions::from_config(c))?;
        out.insert(c.id.clone(), Arc::new(provider));
    }
    Ok(out)
}

/// The provider and model id a reference `<provider>/<model>` names.
pub fn provider_for(
    providers: &Providers,
    reference: &str,
) -> Result<(Arc<OpenAiProvider>, String), AgentError> {
    let Some(r) = split_model(reference) else {
        return Err(AgentError::invalid_options(format!(
            "model \"{reference}\" must be written <provider>/<model>"
        )));
    };
    if providers.is_empty() {
        return Err(AgentError::invalid_options("no provider is configured"));
    }
    match providers.get(&r.provider) {
        Some(p) => Ok((p.clone(), r.model)),
        None => {
            let ids: Vec<&str> = providers.keys().map(String::as_str).collect();
            // A model id with a slash of its own (`model/llm/x.gguf`) reads as a provider; the
            // usual fix is the first provider's id in front of it.
            let first = ids.first().copied().unwrap_or("default");
            Err(AgentError::invalid_options(format!(
                "model \"{reference}\" names provider \"{}\", which is not configured \
                 (configured: {}); if \"{reference}\" is a model id, write \"{first}/{reference}\"",
                r.provider,
                ids.join(", ")
            )))
        }
    }
}

/// Asks every provider for its catalogue at once, each bounded by `timeout`. A provider that
/// fails contributes nothing (its failure is logged without any key). Returns
/// `(configured provider id, model)` pairs in provider order.
pub async fn list_all(providers: &Providers, timeout: Duration) -> Vec<(String, ModelInfo)> {
    let asks = providers.iter().map(|(id, p)| async move {
        let options = ListOptions {
            signal: None,
            timeout: Some(timeout),
        };
        match p.list_models(options).await {
            Ok(models) => models.into_iter().map(|m| (id.clone(), m)).collect(),
            Err(e) => {
                tracing::warn!(provider = %id, error = %e, "a provider's model list is unavailable");
                Vec::new()
            }
        }
    });
    futures::future::join_all(asks)
        .await
        .into_iter()
        .flatten()
        .collect()
}
