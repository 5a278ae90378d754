//! The per-call helper of `cofold_tools::shell::reaper` as a program of its own, for programs
//! that embed the tools without a binary of their own to re-run (and for this crate's tests):
//! `cofold-contain [--report] -- PROGRAM ARGS…`.

fn main() {
    std::process::exit(cofold_tools::shell::reaper::run(
        &[],
        std::env::args_os().skip(1).collect(),
    ));
}
