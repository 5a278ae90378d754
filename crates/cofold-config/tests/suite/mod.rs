#![allow(clippy::unwrap_used)]

mod copapo;
mod provider_settings;
mod resolver;
mod support;
