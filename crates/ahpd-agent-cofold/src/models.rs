//! Model resolution: the copapo reading, the reference in force, the endpoint a
//! reference resolves to, keys, the shared provider transports and the catalogue cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cofold_agents::model::{ListOptions, ModelInfo, ModelProvider};
use cofold_agents::provider::ProviderConfig;
use cofold_config::{AppConfig, LoadOptions, Mode, UnknownProvider, load_copapo};
use cofold_openai::{ApiKey, OpenAiProvider, ProviderOptions, ProviderSettings};

use crate::options::Environment;

/// The window used when the catalogue lists none.
pub const DEFAULT_WINDOW: u64 = 32_000;

/// The part of the copapo configuration the engine uses.
#[derive(Clone, Default)]
pub struct Copapo {
    /// Providers in the configured order.
    pub providers: Vec<ProviderConfig>,
    /// Each provider's transport settings (limits, retries, network, dialect) by provider id.
    pub settings: HashMap<String, ProviderSettings>,
    /// The configured model reference.
    pub model: Option<String>,
    /// The configured instructions.
    pub instructions: Option<String>,
    /// `$COPAPO_CONFIG`, else the user file, as an absolute path (for sentences).
    pub path: PathBuf,
    /// The reading's failure, when a named file was absent or not an object.
    pub error: Option<String>,
}

// Written out so a provider's key never reaches a log line or a panic message.
impl std::fmt::Debug for Copapo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let providers: Vec<_> = self
            .providers
            .iter()
            .map(|p| {
                let key = p.api_key.as_ref().map(|_| "<set>");
                let headers: Vec<&str> = p
                    .headers
                    .iter()
                    .flatten()
                    .map(|(k, _)| k.as_str())
                    .collect();
                (p.id.as_str(), p.base_url.as_str(), key, headers)
            })
            .collect();
        f.debug_struct("Copapo")
            .field("providers", &providers)
            .field("model", &self.model)
            .field("instructions", &self.instructions.as_ref().map(|_| "<set>"))
            .field("path", &self.path)
            .field("error", &self.error)
            .finish()
    }
}

/// Reads the copapo configuration, with the project file searched from `dir` when given.
pub fn read_copapo(env: &Environment, dir: Option<&Path>) -> Copapo {
    // In a machine, the file the machine carries, when it carries one: a host with no copapo
    // file makes a machine without it, configured by the model variables alone.
    let carried = env
        .var(crate::machine::MACHINE_CONFIG)
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    let path = match (&carried, env.var("COPAPO_CONFIG")) {
        (Some(c), _) => c.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => match env.var("XDG_CONFIG_HOME") {
            Some(x) => PathBuf::from(x).join("copapo").join("config.json"),
            None => env.home.join(".config").join("copapo").join("config.json"),
        },
    };
    // Without a session folder the project layer is skipped: search from a folder that holds
    // none (the root of an empty temporary tree would do, but `/` never has `.copapo.json` in
    // practice and is always there).
    let cwd = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let loaded = load_copapo(LoadOptions {
        cwd,
        env: Some(env.vars.clone()),
        home: Some(env.home.clone()),
        path: carried,
        mode: Mode::Lenient,
    });
    match loaded {
        Ok(config) => from_app(config, path),
        Err(e) => {
            tracing::warn!("copapo configuration: {e}");
            Copapo {
                path,
                error: Some(e.to_string()),
                ..Copapo::default()
            }
        }
    }
}

fn from_app(config: AppConfig, path: PathBuf) -> Copapo {
    Copapo {
        providers: config.providers,
        settings: config.provider_settings,
        model: config.model.filter(|m| !m.trim().is_empty()),
        instructions: config.instructions.filter(|i| !i.trim().is_empty()),
        path,
        error: None,
    }
}

impl Copapo {
    /// The transport settings of the provider a connection came from; every default for an
    /// endpoint no provider entry names.
    pub fn settings_of(&self, provider: Option<&ProviderConfig>) -> ProviderSettings {
        provider
            .and_then(|p| self.settings.get(&p.id))
            .cloned()
            .unwrap_or_default()
    }
}

/// Splits a reference at its first slash; a reference with an empty side is a bare id.
pub fn split_reference(reference: &str) -> Option<(&str, &str)> {
    let (p, m) = reference.split_once('/')?;
    (!p.is_empty() && !m.is_empty()).then_some((p, m))
}

/// Where a turn's requests go.
#[derive(Clone, PartialEq)]
pub struct Connection {
    /// The endpoint's base URL.
    pub base_url: String,
    /// The model id sent on the wire.
    pub model_id: String,
    /// The copapo provider it came from, when any.
    pub provider: Option<ProviderConfig>,
}

// The provider's key stays out of the output.
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("base_url", &self.base_url)
            .field("model_id", &self.model_id)
            .field("provider", &self.provider.as_ref().map(|p| p.id.as_str()))
            .finish()
    }
}

/// Why a model reference leads to no endpoint. Each message is the one sentence a turn fails
/// with, starting with the agent's id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// Neither the turn, the agent nor the copapo file names a model.
    #[error(
        "{agent}: no model is configured; add \"model\" (as \"<provider>/<model>\") to {}",
        file.display()
    )]
    NoModel {
        /// The agent's id.
        agent: String,
        /// The copapo file a model would be added to.
        file: PathBuf,
    },
    /// The reference names a provider the configuration does not have.
    #[error("{agent}: {sentence}")]
    UnknownProvider {
        /// The agent's id.
        agent: String,
        /// What was named, what is configured, and what to write instead.
        sentence: String,
    },
}

/// Why the model client for an endpoint could not be made (an unusable proxy or certificate
/// setting); the message is the model client's own sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClientError(pub String);

/// Resolves a reference to an endpoint, or says why it cannot be.
/// `listed` holds the model ids of the providers whose catalogues were read, so a reference
/// naming no configured provider can be told which provider lists it.
pub fn resolve_connection(
    agent_id: &str,
    reference: Option<&str>,
    explicit_base: Option<&str>,
    copapo: &Copapo,
    listed: &[(&str, &[String])],
) -> Result<Connection, ConnectionError> {
    let no_model = || ConnectionError::NoModel {
        agent: agent_id.to_owned(),
        file: copapo.path.clone(),
    };
    let Some(reference) = reference.map(str::trim).filter(|r| !r.is_empty()) else {
        return Err(no_model());
    };
    let provider = |id: &str| copapo.providers.iter().find(|p| p.id == id).cloned();
    let on = |base: &str, model: &str, provider: Option<ProviderConfig>| Connection {
        base_url: base.to_owned(),
        model_id: model.to_owned(),
        provider,
    };
    if let Some((p, m)) = split_reference(reference) {
        if let Some(base) = explicit_base
            && p == agent_id
        {
            return Ok(on(base, m, None));
        }
        if let Some(config) = provider(p) {
            return Ok(on(&config.base_url.clone(), m, Some(config)));
        }
        if let Some(base) = explicit_base {
            return Ok(on(base, reference, None));
        }
        let configured: Vec<&str> = copapo.providers.iter().map(|p| p.id.as_str()).collect();
        let file = copapo.path.display().to_string();
        let sentence = UnknownProvider {
            reference,
            provider: p,
            file: &file,
            configured: &configured,
            listed,
        }
        .sentence();
        return Err(ConnectionError::UnknownProvider {
            agent: agent_id.to_owned(),
            sentence,
        });
    }
    if let Some(base) = explicit_base {
        return Ok(on(base, reference, None));
    }
    let chosen = provider("default").or_else(|| copapo.providers.first().cloned());
    match chosen {
        Some(config) => Ok(on(&config.base_url.clone(), reference, Some(config))),
        None => Err(no_model()),
    }
}

/// The compaction point: `min(tokens, floor(window × at))`, or the share alone.
pub fn auto_compact_point(window: u64, tokens: Option<u64>, at: f64) -> u64 {
    let share = (window as f64 * at).floor() as u64;
    match tokens {
        Some(t) => t.min(share),
        None => share,
    }
}

/// The origin of an https endpoint, else the engine's own resource.
pub fn resource_of(endpoint: Option<&str>) -> String {
    endpoint
        .and_then(|e| url::Url::parse(e).ok())
        .filter(|u| u.scheme() == "https")
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|| "https://ahpd.dev/agent-cofold".to_owned())
}

/// How a request finds its key.
#[derive(Clone)]
pub enum KeySource {
    /// No key.
    None,
    /// A fixed key.
    Fixed(String),
    /// Asked per HTTP request.
    Dynamic(crate::options::KeyFunction),
}

impl KeySource {
    fn cache_key(&self) -> String {
        match self {
            KeySource::None => String::new(),
            // The cache key holds a digest-like tag, never the key itself in any printable form
            // that leaves the process; it lives only in this map.
            KeySource::Fixed(k) => format!("fixed:{k}"),
            KeySource::Dynamic(f) => format!("dynamic:{:p}", Arc::as_ptr(f)),
        }
    }

    fn to_api_key(&self) -> Option<ApiKey> {
        match self {
            KeySource::None => None,
            KeySource::Fixed(k) => Some(ApiKey::Fixed(k.clone())),
            KeySource::Dynamic(f) => {
                let f = f.clone();
                Some(ApiKey::Dynamic(Arc::new(move || {
                    let key = f();
                    Box::pin(async move { Ok(key) })
                })))
            }
        }
    }
}

/// (endpoint, key tag): what one catalogue answer is kept under.
type EndpointKey = (String, String);

/// (endpoint, key tag, settings): what one transport is kept under. The settings are part of it
/// so two provider entries on one endpoint with different limits, proxies or quirks each get
/// their own transport.
type TransportKey = (String, String, String);

/// Transports and catalogue answers shared by every agent and session of the process.
#[derive(Default)]
pub struct Shared {
    providers: Mutex<HashMap<TransportKey, Arc<OpenAiProvider>>>,
    catalogue: Mutex<HashMap<EndpointKey, Arc<Vec<ModelInfo>>>>,
}

impl Shared {
    /// One provider per (endpoint, key, settings), built once, sending with the settings'
    /// limits, retries, network and dialect.
    pub fn provider(
        &self,
        base_url: &str,
        key: &KeySource,
        headers: Vec<(String, String)>,
        settings: &ProviderSettings,
    ) -> Result<Arc<OpenAiProvider>, ClientError> {
        // Like the key tag, the settings' form (which may hold a proxy's credentials) lives only
        // in this map.
        let id = (
            base_url.to_owned(),
            key.cache_key(),
            format!("{settings:?}"),
        );
        let mut map = self
            .providers
            .lock()
            .map_err(|_| ClientError("the provider cache is unavailable".to_owned()))?;
        if let Some(p) = map.get(&id) {
            return Ok(p.clone());
        }
        let provider = OpenAiProvider::new(
            ProviderOptions {
                base_url: base_url.to_owned(),
                api_key: key.to_api_key(),
                headers,
                // The host's hooks never read a reply's `raw`.
                skip_stream_raw: true,
                ..ProviderOptions::default()
            }
            .with_settings(settings),
        )
        .map_err(|e| ClientError(e.message.clone()))?;
        let provider = Arc::new(provider);
        map.insert(id, provider.clone());
        Ok(provider)
    }

    /// The cached model list of an endpoint, when one was read.
    pub fn cached(&self, base_url: &str, key: &KeySource) -> Option<Arc<Vec<ModelInfo>>> {
        let id = (base_url.to_owned(), key.cache_key());
        self.catalogue.lock().ok()?.get(&id).cloned()
    }

    /// Asks an endpoint for its models within `timeout`; a non-empty answer is cached.
    pub async fn list(
        &self,
        base_url: &str,
        key: &KeySource,
        headers: Vec<(String, String)>,
        settings: &ProviderSettings,
        timeout: Duration,
    ) -> Arc<Vec<ModelInfo>> {
        if let Some(hit) = self.cached(base_url, key) {
            return hit;
        }
        let Ok(provider) = self.provider(base_url, key, headers, settings) else {
            return Arc::new(Vec::new());
        };
        let options = ListOptions {
            timeout: Some(timeout),
            ..ListOptions::default()
        };
        let models = match tokio::time::timeout(timeout, provider.list_models(options)).await {
            Ok(Ok(models)) => models,
            _ => Vec::new(),
        };
        let models = Arc::new(models);
        if !models.is_empty()
            && let Ok(mut map) = self.catalogue.lock()
        {
            map.insert((base_url.to_owned(), key.cache_key()), models.clone());
        }
        models
    }
}

/// Thinking levels a model offers, in cofold's order.
pub fn thinking_levels(
    declared: Option<&serde_json::Value>,
    info: Option<&ModelInfo>,
) -> Vec<&'static str> {
    const LEVELS: [&str; 4] = ["off", "low", "medium", "high"];
    if let Some(list) = declared
        .and_then(|d| d.get("supportsReasoningEffort"))
        .and_then(serde_json::Value::as_array)
    {
        return LEVELS
            .into_iter()
            .filter(|l| list.iter().any(|v| v.as_str() == Some(l)))
            .collect();
    }
    if info.is_some_and(|i| i.features.reasoning) {
        return LEVELS.to_vec();
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copapo(ids: &[(&str, &str)]) -> Copapo {
        Copapo {
            providers: ids
                .iter()
                .map(|(id, base)| ProviderConfig {
                    id: (*id).to_owned(),
                    base_url: (*base).to_owned(),
                    api_key: None,
                    headers: None,
                })
                .collect(),
            path: PathBuf::from("/home/u/.config/copapo/config.json"),
            ..Copapo::default()
        }
    }

    #[test]
    fn case_025_references_split_at_the_first_slash_only() {
        assert_eq!(split_reference("a/b/c"), Some(("a", "b/c")));
        assert_eq!(split_reference("deepseek-chat"), None);
        assert_eq!(split_reference("/model"), None);
        assert_eq!(split_reference("provider/"), None);
    }

    #[test]
    fn connection_cases_follow_the_table() {
        let c = copapo(&[("open_router", "https://or/v1")]);
        let r = resolve_connection(
            "cofold",
            Some("cofold/qwen/qwen3-8b"),
            Some("http://b"),
            &c,
            &[],
        );
        assert_eq!(
            r.map(|c| (c.base_url, c.model_id)),
            Ok(("http://b".into(), "qwen/qwen3-8b".into()))
        );
        let r = resolve_connection("cofold", Some("open_router/x"), Some("http://b"), &c, &[]);
        assert_eq!(r.map(|c| c.base_url), Ok("https://or/v1".into()));
        let r = resolve_connection(
            "cofold",
            Some("deepseek/deepseek-chat"),
            Some("http://b"),
            &c,
            &[],
        );
        assert_eq!(r.map(|c| c.model_id), Ok("deepseek/deepseek-chat".into()));
        let r = resolve_connection("cofold", Some("absent/model"), None, &c, &[])
            .map_err(|e| e.to_string());
        assert_eq!(
            r,
            Err(
                "cofold: model \"absent/model\" names provider \"absent\", and \
                 /home/u/.config/copapo/config.json configures open_router; if \
                 \"absent/model\" is a model id of provider \"open_router\", write \
                 \"open_router/absent/model\""
                    .into()
            )
        );
        let ids = vec!["absent/model".to_owned()];
        let c2 = copapo(&[("open_router", "https://or/v1"), ("local", "http://l/v1")]);
        let r = resolve_connection(
            "cofold",
            Some("absent/model"),
            None,
            &c2,
            &[("local", &ids)],
        );
        assert!(
            r.as_ref().is_err_and(|e| e.to_string().ends_with(
                "provider \"local\" lists \"absent/model\", so write \"local/absent/model\""
            )),
            "{r:?}"
        );
        let r = resolve_connection("cofold", None, None, &c, &[]);
        assert!(r.is_err_and(|e| e.to_string().contains("no model is configured")));
        let r = resolve_connection("cofold", Some("m"), None, &copapo(&[]), &[]);
        assert!(r.is_err_and(|e| e.to_string().contains("no model is configured")));
        let r = resolve_connection("cofold", Some("m"), None, &c, &[]);
        assert_eq!(r.map(|c| c.base_url), Ok("https://or/v1".into()));
    }

    #[test]
    fn transports_are_kept_per_settings() {
        let shared = Shared::default();
        let base = "http://127.0.0.1:9/v1";
        let plain = ProviderSettings::default();
        let mut picky = ProviderSettings::default();
        picky
            .quirks
            .insert("streamOptions".into(), serde_json::json!(false));
        let a = shared
            .provider(base, &KeySource::None, Vec::new(), &plain)
            .expect("a loopback provider builds");
        let b = shared
            .provider(base, &KeySource::None, Vec::new(), &picky)
            .expect("a loopback provider builds");
        assert!(a.dialect().stream_options);
        assert!(!b.dialect().stream_options);
        let again = shared
            .provider(base, &KeySource::None, Vec::new(), &picky)
            .expect("a loopback provider builds");
        assert!(Arc::ptr_eq(&b, &again));
    }

    #[test]
    fn case_131_compaction_points_match_the_examples() {
        assert_eq!(auto_compact_point(10_000, None, 0.8), 8000);
        assert_eq!(auto_compact_point(10_000, Some(5000), 0.8), 5000);
        assert_eq!(auto_compact_point(10_000, Some(9000), 0.8), 8000);
        assert_eq!(auto_compact_point(10_000, None, 0.5), 5000);
        assert_eq!(auto_compact_point(DEFAULT_WINDOW, None, 0.8), 25_600);
    }

    #[test]
    fn case_002_026_resources_are_https_origins() {
        assert_eq!(
            resource_of(Some("https://api.deepseek.com/v1")),
            "https://api.deepseek.com"
        );
        assert_eq!(
            resource_of(Some("http://127.0.0.1:1234/v1")),
            "https://ahpd.dev/agent-cofold"
        );
        assert_eq!(resource_of(None), "https://ahpd.dev/agent-cofold");
    }
}
