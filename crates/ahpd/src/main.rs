//! The `ahpd` binary: everything lives in the library (`src/lib.rs`), so the crate's tests can
//! depend on it with the `test-plugins` feature (see `Cargo.toml`).

fn main() {
    std::process::exit(ahpd::run_command_line());
}
