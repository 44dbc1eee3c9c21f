//! Stand-alone entry point for the load generator (the same code as `ringlet bench`):
//! `cargo run --release -p ringlet-bench --example bench -- --protocol resp --port 6379`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ringlet-bench",
    about = "Ringlet load generator (RESP, native, memcache)"
)]
struct Cli {
    #[command(flatten)]
    args: ringlet_bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    ringlet_bench::run(&Cli::parse().args)
}
