//! `ahpd`: the Agent Host Protocol daemon.

use clap::Parser;

/// Serve agent sessions on this machine over the Agent Host Protocol.
#[derive(Debug, Parser)]
#[command(name = "ahpd", version, about)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
    eprintln!("ahpd: the daemon is not served yet; see `ahpd --help`.");
    std::process::exit(1);
}
