//! Configuration resolution for cofold.
//!
//! Reads the copapo configuration (the user file, the nearest `.copapo.json`, the file
//! `$COPAPO_CONFIG` names), overlays `COPAPO_*` and `COFOLD_*` variables, and resolves providers and
//! model ids. The environment and the home folder are injectable, so nothing here has to read the
//! real user's files.
//!
//! ```no_run
//! use cofold_config::{LoadOptions, Mode, load_copapo};
//!
//! # fn demo() -> Result<(), cofold_config::ConfigError> {
//! let config = load_copapo(LoadOptions { mode: Mode::Lenient, ..LoadOptions::new("/work/project") })?;
//! if let Some(model) = &config.model {
//!     let source = config.resolved.source_of("model");
//!     println!("model {model} from {source:?}");
//! }
//! # Ok(()) }
//! ```

mod advice;
mod check;
mod copapo;
mod error;
mod resolve;

pub use advice::UnknownProvider;
pub use check::Mode;
pub use cofold_agents::provider::{ModelRef, PROVIDER_SCHEMA, ProviderConfig, split_model};
pub use copapo::{
    APP_NAME, AppConfig, ContextConfig, LimitsConfig, LoadOptions, PROJECT_FILE, RulesConfig,
    apply_environment, copapo_defaults, load_copapo,
};
pub use error::ConfigError;
pub use resolve::{
    EnvFile, Layer, LayerKind, ResolveOptions, Resolved, environment_name_of, merge, resolve_config,
};
