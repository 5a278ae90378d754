//! The model of one turn: the embedder's adapter, or the endpoint the turn's reference
//! resolves to with the key it takes, the provider's transport and what the catalogue says of
//! the model (its window and whether it takes images).

use std::sync::Arc;

use cofold_agents::model::{ModelAdapter, ModelParams, ModelSpec};

use crate::build::{AgentCore, TurnAgentError, TurnSettings};
use crate::models::{Copapo, DEFAULT_WINDOW, KeySource, resolve_connection};

/// The model a turn talks to: its adapter, the reference shown for it, its context window,
/// whether it takes images, and the network its provider's requests (and the web tools) use.
pub(crate) struct TurnModel {
    pub(crate) adapter: Arc<dyn ModelAdapter>,
    pub(crate) reference: String,
    pub(crate) window: u64,
    pub(crate) images: bool,
    pub(crate) network: cofold_openai::Network,
}

impl AgentCore {
    /// The key for a request to `base`.
    fn key_for(
        &self,
        base: &str,
        agent_endpoint: Option<&str>,
        credential: Option<String>,
        copapo: &Copapo,
    ) -> KeySource {
        let provider_key = |base: &str| {
            copapo
                .providers
                .iter()
                .find(|p| p.base_url == base)
                .and_then(|p| p.api_key.clone())
                .filter(|k| !k.is_empty())
        };
        if agent_endpoint == Some(base) {
            if let Some(token) = credential {
                return KeySource::Fixed(token);
            }
            if let Some(key) = &self.options.api_key {
                return KeySource::Fixed(key.clone());
            }
            if let Some(f) = &self.embedder.api_key {
                return KeySource::Dynamic(f.clone());
            }
        }
        match provider_key(base) {
            Some(k) => KeySource::Fixed(k),
            None => KeySource::None,
        }
    }

    /// The model ids of each copapo provider whose catalogue was read (as the probe reads it:
    /// with the entry's own key), for the sentence of a reference that names no provider.
    fn listed(&self, copapo: &Copapo) -> Vec<(String, Vec<String>)> {
        copapo
            .providers
            .iter()
            .filter_map(|p| {
                let key = p
                    .api_key
                    .clone()
                    .filter(|k| !k.is_empty())
                    .map(KeySource::Fixed)
                    .unwrap_or(KeySource::None);
                let list = self.shared.cached(&p.base_url, &key)?;
                Some((p.id.clone(), list.iter().map(|m| m.id.clone()).collect()))
            })
            .collect()
    }

    /// The embedder's model adapter when it gave one, else the model behind the turn's
    /// endpoint.
    pub(crate) fn turn_model(
        &self,
        turn: &TurnSettings,
        copapo: &Copapo,
        credential: Option<String>,
        params: &ModelParams,
        reasoning: bool,
    ) -> Result<TurnModel, TurnAgentError> {
        Ok(match &self.embedder.adapter {
            Some(adapter) => TurnModel {
                adapter: adapter.clone(),
                reference: turn
                    .reference
                    .clone()
                    .unwrap_or_else(|| adapter.model_id().to_owned()),
                window: DEFAULT_WINDOW,
                images: false,
                network: cofold_openai::Network::default(),
            },
            None => self.connected_model(turn, copapo, credential, params.clone(), reasoning)?,
        })
    }

    /// The model a turn talks to through its endpoint (no embedder adapter): the connection
    /// its reference resolves to, the provider's transport, and what the catalogue (when it
    /// has been fetched) says of the model.
    fn connected_model(
        &self,
        turn: &TurnSettings,
        copapo: &Copapo,
        credential: Option<String>,
        params: ModelParams,
        reasoning: bool,
    ) -> Result<TurnModel, TurnAgentError> {
        let lists = self.listed(copapo);
        let listed: Vec<(&str, &[String])> = lists
            .iter()
            .map(|(p, m)| (p.as_str(), m.as_slice()))
            .collect();
        let connection = resolve_connection(
            &self.id,
            turn.reference.as_deref(),
            turn.base_url.as_deref(),
            copapo,
            &listed,
        )?;
        let agent_endpoint = self.agent_endpoint(copapo);
        let key = self.key_for(
            &connection.base_url,
            agent_endpoint.as_deref(),
            credential,
            copapo,
        );
        let headers = connection
            .provider
            .as_ref()
            .and_then(|p| p.headers.clone())
            .unwrap_or_default();
        let mut settings = copapo.settings_of(connection.provider.as_ref());
        // The agent's own limits win over its provider's for its requests alone; the
        // transport cache keys on the settings, so other agents keep theirs.
        settings.limits = self.options.model_timeouts.over(settings.limits);
        let network = settings.network.clone();
        let url = &connection.base_url;
        let provider = self
            .shared
            .provider(url, &key, headers.clone(), &settings)?;
        let cached = self.shared.cached(&connection.base_url, &key);
        if cached.is_none() {
            // The turn never waits for the catalogue; the next probe and turn find it.
            let shared = self.shared.clone();
            let (base, key, headers) = (connection.base_url.clone(), key.clone(), headers.clone());
            let settings = settings.clone();
            let timeout = std::time::Duration::from_millis(self.options.catalogue_timeout_ms);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    shared.list(&base, &key, headers, &settings, timeout).await;
                });
            }
        }
        let info =
            cached.and_then(|list| list.iter().find(|m| m.id == connection.model_id).cloned());
        let images = info.as_ref().is_some_and(|i| i.features.images);
        let window = info
            .as_ref()
            .and_then(|i| i.context_tokens)
            .filter(|w| *w > 0)
            .unwrap_or(DEFAULT_WINDOW);
        // Only image support is taken from the catalogue: an explicit feature set
        // replaces the adapter's defaults, so the rest keeps them.
        let features = images.then_some(cofold_agents::model::ModelFeatures {
            tools: true,
            streaming: true,
            images: true,
            structured_output: false,
            reasoning,
        });
        let spec = ModelSpec {
            id: connection.model_id.clone(),
            features,
            params: Some(params),
            pricing: info.and_then(|i| i.pricing),
        };
        Ok(TurnModel {
            adapter: Arc::new(provider.adapter(spec)),
            reference: turn.reference.clone().unwrap_or_default(),
            window,
            images,
            network,
        })
    }
}
