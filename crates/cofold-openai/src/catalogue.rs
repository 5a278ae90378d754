//! The `GET <base>/models` catalogue mapped to [`ModelInfo`].

use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::model::{ModelFeatures, ModelInfo, ModelPricing};
use serde_json::Value;

/// Features an adapter has unless told otherwise: tools and streaming.
pub const DEFAULT_FEATURES: ModelFeatures = ModelFeatures {
    tools: true,
    streaming: true,
    images: false,
    structured_output: false,
    reasoning: false,
};

/// Reads a catalogue body; entries without a non-blank string `id` are skipped.
pub(crate) fn parse_models(body: &str) -> Result<Vec<ModelInfo>, AgentError> {
    let json: Value = serde_json::from_str(body)
        .map_err(|_| AgentError::new(ErrorCode::InvalidResponse, "model list is not JSON"))?;
    let Some(data) = json.get("data").and_then(Value::as_array) else {
        return Err(AgentError::new(
            ErrorCode::InvalidResponse,
            "model list has no data[]",
        ));
    };
    Ok(data.iter().filter_map(model_info).collect())
}

fn model_info(entry: &Value) -> Option<ModelInfo> {
    let id = entry
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())?;
    let name = entry
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(id);
    let mut features = match entry.get("supported_parameters").and_then(Value::as_array) {
        None => DEFAULT_FEATURES,
        Some(params) => {
            let has = |p: &str| params.iter().any(|v| v.as_str() == Some(p));
            ModelFeatures {
                tools: has("tools"),
                streaming: DEFAULT_FEATURES.streaming,
                images: false,
                structured_output: has("structured_outputs") || has("response_format"),
                reasoning: has("reasoning") || has("include_reasoning"),
            }
        }
    };
    // Image input is a statement about the model's inputs, not about request parameters: an
    // entry that lists its modalities without `supported_parameters` still says it reads images.
    features.images = takes_images(entry);
    let context_tokens = entry
        .get("context_length")
        .and_then(Value::as_f64)
        .filter(|n| n.is_finite() && *n > 0.0)
        .map(|n| n as u64);
    let max_output_tokens = entry
        .pointer("/top_provider/max_completion_tokens")
        .and_then(Value::as_f64)
        .filter(|n| n.is_finite() && *n >= 0.0)
        .map(|n| n as u64);
    Some(ModelInfo {
        id: id.to_owned(),
        name: name.to_owned(),
        features,
        context_tokens,
        max_output_tokens,
        pricing: entry.get("pricing").and_then(pricing_of),
    })
}

/// Whether the entry lists `image` among its input modalities: `architecture.input_modalities`,
/// or, when that list is absent, the input side of the older `architecture.modality` string
/// (`text+image->text`).
fn takes_images(entry: &Value) -> bool {
    let Some(arch) = entry.get("architecture") else {
        return false;
    };
    if let Some(list) = arch.get("input_modalities").and_then(Value::as_array) {
        return list.iter().any(|v| v.as_str() == Some("image"));
    }
    arch.get("modality")
        .and_then(Value::as_str)
        .and_then(|m| m.split("->").next())
        .is_some_and(|inputs| inputs.split('+').any(|m| m.trim() == "image"))
}

/// A per-token price (a string or a number) as a finite number.
fn price(v: Option<&Value>) -> Option<f64> {
    let n = match v? {
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        Value::Number(n) => n.as_f64()?,
        _ => return None,
    };
    n.is_finite().then_some(n)
}

/// Per token to per million, rounded to 6 decimals so `"0.000003"` gives exactly 3.
fn per_million(per_token: f64) -> f64 {
    (per_token * 1e6 * 1e6).round() / 1e6
}

fn pricing_of(p: &Value) -> Option<ModelPricing> {
    let input = price(p.get("prompt"))?;
    let output = price(p.get("completion"))?;
    Some(ModelPricing {
        input_per_million: per_million(input),
        output_per_million: per_million(output),
        cache_read_per_million: price(p.get("input_cache_read")).map(per_million),
        cache_write_per_million: price(p.get("input_cache_write")).map(per_million),
        currency: "USD".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn per_token_strings_become_exact_per_million() {
        assert_eq!(per_million(0.000003), 3.0);
        assert_eq!(per_million(0.00000015), 0.15);
        let p = pricing_of(&json!({ "prompt": "0.000003", "completion": "0.000015",
            "input_cache_read": "0.0000003", "input_cache_write": "n/a" }))
        .expect("priced");
        assert_eq!((p.input_per_million, p.output_per_million), (3.0, 15.0));
        assert_eq!(p.cache_read_per_million, Some(0.3));
        assert_eq!(p.cache_write_per_million, None);
        assert!(pricing_of(&json!({ "prompt": "0.1" })).is_none());
    }

    #[test]
    fn entries_without_an_id_are_skipped() {
        let list = parse_models(r#"{"data":[{"id":" "},{"name":"x"},{"id":7},{"id":"ok"}]}"#)
            .expect("list");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].name, "ok");
        assert_eq!(list[0].features, DEFAULT_FEATURES);
    }
}
