#![allow(clippy::unwrap_used)]

mod catalogue;
mod complete;
mod config;
mod corpus;
mod dialects;
mod errors;
mod limits;
mod proxy;
mod request;
mod retries;
mod stream;
mod support;
mod truncation;
mod usage;
