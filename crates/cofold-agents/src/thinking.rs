//! Thinking levels, what a host offers a person (`off`, `low`, `medium`, `high`), and how a level
//! becomes the reasoning effort a provider is sent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{ModelInfo, ReasoningEffort};

/// A thinking level a host offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffortLevel {
    /// No reasoning effort is sent.
    Off,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
}

/// Every level, in the order a host lists them.
pub const EFFORT_LEVELS: [EffortLevel; 4] = [
    EffortLevel::Off,
    EffortLevel::Low,
    EffortLevel::Medium,
    EffortLevel::High,
];

impl EffortLevel {
    /// The level's name: `off`, `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffortLevel::Off => "off",
            EffortLevel::Low => "low",
            EffortLevel::Medium => "medium",
            EffortLevel::High => "high",
        }
    }

    /// The level named `name` (exact spelling), if it is one.
    pub fn parse(name: &str) -> Option<EffortLevel> {
        EFFORT_LEVELS
            .into_iter()
            .find(|level| level.as_str() == name)
    }

    /// The effort this level sends: `None` for `off`.
    pub fn effort(self) -> Option<ReasoningEffort> {
        match self {
            EffortLevel::Off => None,
            EffortLevel::Low => Some(ReasoningEffort::Low),
            EffortLevel::Medium => Some(ReasoningEffort::Medium),
            EffortLevel::High => Some(ReasoningEffort::High),
        }
    }
}

impl std::fmt::Display for EffortLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The effort a thinking value asks for: `"low"`, `"medium"` and `"high"` map to themselves;
/// `"off"`, `null`, numbers, objects and every other string (`"xhigh"`, `"max"`) send nothing.
pub fn effort_of(value: &Value) -> Option<ReasoningEffort> {
    value
        .as_str()
        .and_then(EffortLevel::parse)
        .and_then(EffortLevel::effort)
}

/// The levels a host offers for a model.
///
/// With an operator's declared list (`supportsReasoningEffort`), the four levels it names, in the
/// order of [`EFFORT_LEVELS`] (unknown names ignored); otherwise all four when the catalogue says
/// the model reasons; otherwise none.
pub fn thinking_levels(declared: Option<&[String]>, info: Option<&ModelInfo>) -> Vec<EffortLevel> {
    match declared {
        Some(names) => EFFORT_LEVELS
            .into_iter()
            .filter(|level| names.iter().any(|n| n == level.as_str()))
            .collect(),
        None if info.is_some_and(|i| i.features.reasoning) => EFFORT_LEVELS.to_vec(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelFeatures;
    use serde_json::json;

    fn info(reasoning: bool) -> ModelInfo {
        ModelInfo {
            id: "m".into(),
            name: "m".into(),
            features: ModelFeatures {
                reasoning,
                ..ModelFeatures::default()
            },
            context_tokens: None,
            max_output_tokens: None,
            pricing: None,
        }
    }

    #[test]
    fn effort_of_maps_only_the_three_named_levels() {
        assert_eq!(effort_of(&json!("low")), Some(ReasoningEffort::Low));
        assert_eq!(effort_of(&json!("medium")), Some(ReasoningEffort::Medium));
        assert_eq!(effort_of(&json!("high")), Some(ReasoningEffort::High));
        for other in [
            json!("off"),
            json!(null),
            json!(3),
            json!({ "effort": "high" }),
            json!("xhigh"),
            json!("max"),
            json!("High"),
        ] {
            assert_eq!(effort_of(&other), None, "{other}");
        }
    }

    #[test]
    fn declared_levels_win_and_keep_the_canonical_order() {
        let declared = vec!["high".to_owned(), "low".to_owned(), "max".to_owned()];
        assert_eq!(
            thinking_levels(Some(&declared), Some(&info(true))),
            vec![EffortLevel::Low, EffortLevel::High]
        );
        assert_eq!(
            thinking_levels(Some(&[]), Some(&info(true))),
            Vec::<EffortLevel>::new()
        );
    }

    #[test]
    fn catalogue_reasoning_offers_all_four_else_none() {
        assert_eq!(
            thinking_levels(None, Some(&info(true))),
            EFFORT_LEVELS.to_vec()
        );
        assert!(thinking_levels(None, Some(&info(false))).is_empty());
        assert!(thinking_levels(None, None).is_empty());
    }

    #[test]
    fn levels_round_trip_through_their_names() {
        for level in EFFORT_LEVELS {
            assert_eq!(EffortLevel::parse(level.as_str()), Some(level));
            assert_eq!(
                serde_json::to_value(level).expect("json"),
                json!(level.as_str())
            );
        }
        assert_eq!(EffortLevel::Off.effort(), None);
    }
}
