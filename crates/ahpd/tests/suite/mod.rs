#![allow(clippy::unwrap_used)]

mod cli;
mod config;
mod crash;
mod daemon;
mod machines_docker;
mod machines_docker_bed;
mod machines_docker_cases;
mod machines_docker_life;
mod machines_nested;
mod mcp;
mod plugins;
mod process;
mod records;
mod security;
mod sessions;
mod shutdown;
mod support;
mod term_chat;
mod term_run;
mod term_sessions;
mod term_support;
mod vault;
