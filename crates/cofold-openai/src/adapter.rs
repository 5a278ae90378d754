//! One model of an OpenAI-compatible endpoint, as a [`ModelAdapter`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{
    ModelAdapter, ModelFeatures, ModelParams, ModelPricing, ModelReply, ModelRequest,
    ModelStreamEvent, ReasoningEffort,
};
use futures::stream::BoxStream;
use serde_json::Value;

use crate::http::{Endpoint, abort_error, error_chain};
use crate::request::{BodyContext, build_body, check_features};

/// An adapter built by [`crate::OpenAiProvider::model`]; it shares its provider's endpoint, key,
/// headers and HTTP client.
pub struct OpenAiAdapter {
    pub(crate) id: String,
    pub(crate) model_id: String,
    pub(crate) features: ModelFeatures,
    pub(crate) params: Option<ModelParams>,
    pub(crate) pricing: Option<ModelPricing>,
    pub(crate) endpoint: Arc<Endpoint>,
    pub(crate) budgets: Arc<HashMap<ReasoningEffort, u64>>,
}

impl std::fmt::Debug for OpenAiAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiAdapter")
            .field("id", &self.id)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

impl OpenAiAdapter {
    fn body(&self, request: &ModelRequest, stream: bool) -> Result<Value, AgentError> {
        let ctx = BodyContext {
            model_id: &self.model_id,
            features: self.features,
            default_params: self.params.as_ref(),
            reasoning_budgets: &self.budgets,
        };
        check_features(&ctx, request)?;
        Ok(build_body(&ctx, request, stream))
    }

    /// The model's default params (request params override them key by key).
    pub fn params(&self) -> Option<&ModelParams> {
        self.params.as_ref()
    }

    /// Whether two adapters send through the same endpoint, key, headers and HTTP client.
    pub fn shares_endpoint_with(&self, other: &OpenAiAdapter) -> bool {
        Arc::ptr_eq(&self.endpoint, &other.endpoint)
    }
}

#[async_trait]
impl ModelAdapter for OpenAiAdapter {
    fn id(&self) -> &str {
        &self.id
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn features(&self) -> ModelFeatures {
        self.features
    }

    fn pricing(&self) -> Option<ModelPricing> {
        self.pricing.clone()
    }

    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, AgentError> {
        let body = self.body(&request, false)?;
        let url = self.endpoint.url("/chat/completions");
        let signal = &request.signal;
        let resp = self.endpoint.send(&url, Some(&body), signal).await?;
        let text = tokio::select! {
            t = resp.text() => t.map_err(|e| {
                AgentError::new(
                    ErrorCode::Network,
                    format!("the answer from {url} broke off: {}", error_chain(&e)),
                )
            })?,
            _ = signal.cancelled() => return Err(abort_error(signal, &url)),
        };
        crate::reply::parse_completion(&text)
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Option<BoxStream<'static, Result<ModelStreamEvent, AgentError>>> {
        if !self.features.streaming {
            return None;
        }
        let body = self.body(&request, true);
        Some(crate::stream::start(
            self.endpoint.clone(),
            body,
            request.signal.clone(),
        ))
    }
}
