#![allow(clippy::unwrap_used)]

mod catalogue;
mod complete;
mod config;
mod dialects;
mod errors;
mod request;
mod stream;
mod support;
mod usage;
