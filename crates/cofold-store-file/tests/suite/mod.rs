mod bad_input;
mod conformance;
mod kill;
mod layout;
mod locking;
mod logs;
mod support;
mod with_runs;
