//! What each OpenAI-compatible server accepts and sends beyond the common core: a named preset
//! per known server (picked from the base URL where that is unambiguous), individual quirks over
//! it, and what the adapter learns from the answers themselves.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// Which field of an assistant message carries reasoning, on the way in and on the way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningField {
    /// `reasoning_content` (DeepSeek, Moonshot, llama.cpp, older vLLM).
    ReasoningContent,
    /// `reasoning` (OpenRouter, Ollama, newer vLLM).
    Reasoning,
}

impl ReasoningField {
    /// The JSON field name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningField::ReasoningContent => "reasoning_content",
            ReasoningField::Reasoning => "reasoning",
        }
    }
}

/// Whether a reply's reasoning goes back to the server on the assistant messages of a tool loop
/// (the messages after the person's last input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningEcho {
    /// Never sent back.
    Never,
    /// Sent back under the field the server itself used for it, once it has used one.
    Auto,
    /// Always sent back under this field.
    Field(ReasoningField),
}

/// The name of the reply-length limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxTokensField {
    /// `max_tokens`.
    MaxTokens,
    /// `max_completion_tokens` (OpenAI's reasoning models refuse `max_tokens`).
    MaxCompletionTokens,
}

/// How a reasoning effort is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EffortParam {
    /// `reasoning_effort: "<effort>"`.
    ReasoningEffort,
    /// `reasoning: { "effort": "<effort>" }` (OpenRouter).
    ReasoningObject,
    /// Not sent.
    Omit,
}

/// One server's quirks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dialect {
    /// The preset it started from.
    pub name: &'static str,
    /// Reasoning sent back within a tool loop.
    pub reasoning_echo: ReasoningEcho,
    /// The reply-length field.
    pub max_tokens_field: MaxTokensField,
    /// Whether `stream_options: { include_usage: true }` is sent on streamed requests.
    pub stream_options: bool,
    /// Whether the request's cache key is sent as `prompt_cache_key`.
    pub prompt_cache_key: bool,
    /// `parallel_tool_calls` sent with this value when tools are offered; not sent when `None`.
    pub parallel_tool_calls: Option<bool>,
    /// How a reasoning effort is asked for.
    pub reasoning_effort: EffortParam,
    /// Whether a request that offers tools may stream; when not, it is asked whole and the reply
    /// is passed on as one delta.
    pub stream_tools: bool,
    /// Whether a streamed tool-call fragment with a new `id` starts a new call whatever its
    /// `index` says.
    pub repair_tool_index: bool,
    /// Whether a stream must end with `data: [DONE]` to count as whole (a finish reason is
    /// always required).
    pub require_done: bool,
}

/// The preset names, in the order documented.
pub const DIALECTS: [&str; 11] = [
    "generic",
    "openai",
    "deepseek",
    "moonshot",
    "openrouter",
    "gemini",
    "mistral",
    "vllm",
    "llama.cpp",
    "llama-cpp-python",
    "ollama",
];

const GENERIC: Dialect = Dialect {
    name: "generic",
    reasoning_echo: ReasoningEcho::Auto,
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_options: true,
    prompt_cache_key: true,
    parallel_tool_calls: None,
    reasoning_effort: EffortParam::ReasoningEffort,
    stream_tools: true,
    repair_tool_index: true,
    require_done: false,
};

impl Default for Dialect {
    fn default() -> Self {
        GENERIC
    }
}

impl Dialect {
    /// The preset named `name`, if it is one of [`DIALECTS`].
    pub fn preset(name: &str) -> Option<Dialect> {
        let strict = Dialect {
            require_done: true,
            prompt_cache_key: false,
            ..GENERIC
        };
        Some(match name {
            "generic" => GENERIC,
            "openai" => Dialect {
                name: "openai",
                reasoning_echo: ReasoningEcho::Never,
                max_tokens_field: MaxTokensField::MaxCompletionTokens,
                prompt_cache_key: true,
                ..strict
            },
            "deepseek" => Dialect {
                name: "deepseek",
                reasoning_echo: ReasoningEcho::Field(ReasoningField::ReasoningContent),
                reasoning_effort: EffortParam::Omit,
                ..strict
            },
            "moonshot" => Dialect {
                name: "moonshot",
                reasoning_echo: ReasoningEcho::Field(ReasoningField::ReasoningContent),
                stream_options: false,
                reasoning_effort: EffortParam::Omit,
                ..strict
            },
            "openrouter" => Dialect {
                name: "openrouter",
                reasoning_echo: ReasoningEcho::Field(ReasoningField::Reasoning),
                reasoning_effort: EffortParam::ReasoningObject,
                ..strict
            },
            "gemini" => Dialect {
                name: "gemini",
                reasoning_echo: ReasoningEcho::Never,
                stream_options: false,
                // Whether its endpoint always ends with `[DONE]` is not documented; the finish
                // reason it always sends is enough.
                require_done: false,
                ..strict
            },
            "mistral" => Dialect {
                name: "mistral",
                reasoning_echo: ReasoningEcho::Never,
                stream_options: false,
                reasoning_effort: EffortParam::Omit,
                ..strict
            },
            "vllm" => Dialect {
                name: "vllm",
                ..strict
            },
            "llama.cpp" => Dialect {
                name: "llama.cpp",
                ..strict
            },
            "llama-cpp-python" => Dialect {
                name: "llama-cpp-python",
                stream_options: false,
                stream_tools: false,
                ..strict
            },
            "ollama" => Dialect {
                name: "ollama",
                ..strict
            },
            _ => return None,
        })
    }

    /// The preset a base URL implies: the hosted APIs by host name, Ollama by its default port;
    /// anything else is `generic` (vLLM, llama.cpp and others share ports too often to guess).
    pub fn for_base_url(base_url: &str) -> Dialect {
        let Ok(url) = url::Url::parse(base_url) else {
            return GENERIC;
        };
        let host = url.host_str().unwrap_or("").to_ascii_lowercase();
        let ends = |suffix: &str| host == suffix || host.ends_with(&format!(".{suffix}"));
        let name = if ends("api.openai.com") {
            "openai"
        } else if ends("deepseek.com") {
            "deepseek"
        } else if ends("moonshot.ai") || ends("moonshot.cn") {
            "moonshot"
        } else if ends("openrouter.ai") {
            "openrouter"
        } else if ends("generativelanguage.googleapis.com") {
            "gemini"
        } else if ends("mistral.ai") {
            "mistral"
        } else if url.port() == Some(11434) {
            "ollama"
        } else {
            "generic"
        };
        Dialect::preset(name).unwrap_or(GENERIC)
    }
}

/// What the adapter learned from an endpoint's answers, shared by every request to it.
#[derive(Debug, Default)]
pub(crate) struct Learned {
    /// 0: no reasoning field seen yet; 1: `reasoning_content`; 2: `reasoning`.
    reasoning_field: AtomicU8,
    /// A streamed request offering tools came back empty: ask such requests whole from now on.
    tools_refuse_streaming: AtomicBool,
}

impl Learned {
    pub fn reasoning_field(&self) -> Option<ReasoningField> {
        match self.reasoning_field.load(Ordering::Relaxed) {
            1 => Some(ReasoningField::ReasoningContent),
            2 => Some(ReasoningField::Reasoning),
            _ => None,
        }
    }

    pub fn saw_reasoning_field(&self, field: ReasoningField) {
        let n = match field {
            ReasoningField::ReasoningContent => 1,
            ReasoningField::Reasoning => 2,
        };
        self.reasoning_field.store(n, Ordering::Relaxed);
    }

    pub fn tools_refuse_streaming(&self) -> bool {
        self.tools_refuse_streaming.load(Ordering::Relaxed)
    }

    pub fn refuse_streaming_tools(&self) {
        self.tools_refuse_streaming.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_exists_and_is_named() {
        for name in DIALECTS {
            assert_eq!(Dialect::preset(name).map(|d| d.name), Some(name));
        }
        assert!(Dialect::preset("nope").is_none());
    }

    #[test]
    fn base_urls_pick_their_preset() {
        let name = |u: &str| Dialect::for_base_url(u).name;
        assert_eq!(name("https://api.deepseek.com/v1"), "deepseek");
        assert_eq!(name("https://api.moonshot.cn/v1"), "moonshot");
        assert_eq!(name("https://openrouter.ai/api/v1"), "openrouter");
        assert_eq!(name("https://api.openai.com/v1"), "openai");
        assert_eq!(
            name("https://generativelanguage.googleapis.com/v1beta/openai"),
            "gemini"
        );
        assert_eq!(name("https://api.mistral.ai/v1"), "mistral");
        assert_eq!(name("http://localhost:11434/v1"), "ollama");
        assert_eq!(name("http://127.0.0.1:8000/v1"), "generic");
        assert_eq!(name("https://notdeepseek.com.example/v1"), "generic");
    }
}
