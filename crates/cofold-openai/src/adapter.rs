//! One model of an OpenAI-compatible endpoint, as a [`ModelAdapter`].

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cofold_agents::error::AgentError;
use cofold_agents::model::{
    ModelAdapter, ModelFeatures, ModelParams, ModelPricing, ModelReply, ModelRequest,
    ModelStreamEvent, ReasoningEffort,
};
use futures::stream::BoxStream;
use serde_json::Value;

use crate::body::read_whole;
use crate::dialect::ReasoningEcho;
use crate::http::Endpoint;
use crate::request::{BodyContext, build_body, check_features};
use crate::retry::Tries;
use crate::stream::Bodies;

/// An adapter built by [`crate::OpenAiProvider`]'s `model`; it shares its provider's endpoint, key,
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
        let dialect = &self.endpoint.dialect;
        let echo = match dialect.reasoning_echo {
            ReasoningEcho::Never => None,
            ReasoningEcho::Field(f) => Some(f),
            ReasoningEcho::Auto => self.endpoint.learned.reasoning_field(),
        };
        let ctx = BodyContext {
            model_id: &self.model_id,
            features: self.features,
            default_params: self.params.as_ref(),
            reasoning_budgets: &self.budgets,
            dialect,
            echo,
        };
        check_features(&ctx, request)?;
        Ok(build_body(&ctx, request, stream))
    }

    fn bodies(&self, request: &ModelRequest) -> Result<Bodies, AgentError> {
        Ok(Bodies {
            streamed: Bytes::from(self.body(request, true)?.to_string()),
            whole: Bytes::from(self.body(request, false)?.to_string()),
            offers_tools: !request.tools.is_empty(),
        })
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
        let body = Bytes::from(self.body(&request, false)?.to_string());
        let url = self.endpoint.url("/chat/completions");
        let signal = &request.signal;
        // A body cut short or not a completion is tried again like a failed request.
        let mut tries = Tries::new(self.endpoint.retry);
        loop {
            let answer = match self.endpoint.attempt(&url, Some(&body), true, signal).await {
                Ok((resp, clock)) => read_whole(resp, clock, &url, signal)
                    .await
                    .and_then(|text| crate::reply::parse_completion(&text, &url))
                    .map_err(Into::into),
                Err(f) => Err(f),
            };
            match answer {
                Ok((reply, field)) => {
                    self.endpoint.learn_from(field);
                    return Ok(reply);
                }
                Err(f) => tries.again(f, &url, signal).await?,
            }
        }
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Option<BoxStream<'static, Result<ModelStreamEvent, AgentError>>> {
        if !self.features.streaming {
            return None;
        }
        Some(crate::stream::start(
            self.endpoint.clone(),
            self.bodies(&request),
            request.signal.clone(),
        ))
    }
}
