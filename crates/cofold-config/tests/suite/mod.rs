#![allow(clippy::unwrap_used)]

mod copapo;
mod resolver;
mod support;
