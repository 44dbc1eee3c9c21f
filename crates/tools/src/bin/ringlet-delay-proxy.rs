//! `ringlet-delay-proxy`: forward TCP from `--listen` to `--target`, delaying each direction
//! (userspace stand-in for `tc netem`, which this kernel lacks). See
//! `ringlet_bench::delay_proxy` and docs/design/client-cluster.md.
//!
//! ```text
//! ringlet-delay-proxy --listen 127.0.0.1:7100 --target 127.0.0.1:7000 --delay fixed:1
//! ringlet-delay-proxy --listen 127.0.0.1:7100 --target 127.0.0.1:7000 --up exp:0.5:1 --down fixed:0
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use ringlet_bench::delay_proxy::{serve, Delay, ProxyStats};

#[derive(Parser)]
#[command(
    name = "ringlet-delay-proxy",
    about = "TCP forwarder that delays bytes in each direction"
)]
struct Cli {
    /// Address to accept on.
    #[arg(long)]
    listen: SocketAddr,
    /// Address to forward to.
    #[arg(long)]
    target: SocketAddr,
    /// Delay of both directions: fixed:MS | uniform:LO:HI | exp:BASE:MEAN (milliseconds).
    #[arg(long, default_value = "fixed:1")]
    delay: String,
    /// Delay of client → target only (overrides --delay for that direction).
    #[arg(long)]
    up: Option<String>,
    /// Delay of target → client only (overrides --delay for that direction).
    #[arg(long)]
    down: Option<String>,
    /// Seed of the random delays.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let both = Delay::parse(&cli.delay)?;
    let up = cli
        .up
        .as_deref()
        .map(Delay::parse)
        .transpose()?
        .unwrap_or(both);
    let down = cli
        .down
        .as_deref()
        .map(Delay::parse)
        .transpose()?
        .unwrap_or(both);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(cli.listen)
            .await
            .with_context(|| format!("bind {}", cli.listen))?;
        println!(
            "ringlet-delay-proxy ready {} -> {} up {:?} down {:?}",
            listener.local_addr()?,
            cli.target,
            up,
            down
        );
        serve(
            listener,
            cli.target,
            up,
            down,
            cli.seed,
            Arc::new(ProxyStats::default()),
        )
        .await;
        Ok(())
    })
}
