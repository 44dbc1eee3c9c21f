//! `ringlet-linked`: the linked-service coordinator, a demo member and an HTTP front (the
//! same commands as `ringlet linked`; see [`ringlet_linked::cli`]).

use clap::Parser;
use ringlet_linked::cli::LinkedCmd;

#[derive(Parser)]
#[command(about = "Ringlet linked services: coordinator, demo member, HTTP front")]
struct Cli {
    #[command(subcommand)]
    cmd: LinkedCmd,
}

fn main() {
    if let Err(e) = ringlet_linked::cli::run(Cli::parse().cmd) {
        eprintln!("ringlet-linked: {e}");
        std::process::exit(1);
    }
}
