//! A userspace TCP delay proxy: forwards connections from a listen address to a target and
//! holds each direction's bytes back for a fixed or randomly distributed delay. This kernel
//! has no `netem`; the Fig. 11 benchmark (`bench/fig11.py`) slows one replica of a cluster by
//! putting this in front of its client port.
//!
//! ```text
//!  client ──▶ [read chunk, stamp due = now + delay] ─bounded queue─▶ [sleep until due, write] ──▶ target
//!  client ◀── [sleep until due, write] ◀─bounded queue─ [read chunk, stamp due = now + delay] ◀── target
//! ```
//!
//! Each chunk is delayed from the moment it was read, so the proxy adds latency without
//! limiting throughput (pipelined requests are not serialised behind each other's delay).
//! Chunks keep their order: a chunk is never due before the one ahead of it. The queue of each
//! direction holds at most [`QUEUE_CHUNKS_MAX`] chunks of at most [`CHUNK_BYTES`]; a full
//! queue stops reading from that side (TCP back-pressure), so memory is bounded.
//!
//! Timer granularity: tokio's timer has millisecond resolution, so delays are rounded up to
//! the next millisecond tick; use delays of a millisecond or more.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::keys::Rng;

/// Chunks queued per direction before the proxy stops reading that side.
pub const QUEUE_CHUNKS_MAX: usize = 1024;
/// Largest chunk read at once.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Connections proxied at once.
pub const CONNECTIONS_MAX: usize = ringlet_types::limits::CONNECTIONS_MAX as usize;

/// How long each chunk is held.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delay {
    /// Always this long.
    Fixed(Duration),
    /// Uniform in `[lo, hi]`.
    Uniform(Duration, Duration),
    /// `base` plus an exponentially distributed extra with mean `mean` (a long tail).
    Exp { base: Duration, mean: Duration },
}

impl Delay {
    /// Parse `fixed:MS`, `uniform:LO_MS:HI_MS` or `exp:BASE_MS:MEAN_MS` (milliseconds, may be
    /// fractional).
    ///
    /// # Errors
    /// Anything else, or delays above 60 s.
    pub fn parse(s: &str) -> Result<Delay> {
        let ms = |x: &str| -> Result<Duration> {
            let v: f64 = x.trim().parse()?;
            if !(0.0..=60_000.0).contains(&v) {
                bail!("delay {v} ms out of 0..=60000");
            }
            Ok(Duration::from_secs_f64(v / 1000.0))
        };
        let parts: Vec<&str> = s.split(':').collect();
        Ok(match parts.as_slice() {
            ["fixed", a] => Delay::Fixed(ms(a)?),
            [a] => Delay::Fixed(ms(a)?),
            ["uniform", a, b] => {
                let (lo, hi) = (ms(a)?, ms(b)?);
                if lo > hi {
                    bail!("uniform: low above high");
                }
                Delay::Uniform(lo, hi)
            }
            ["exp", a, b] => Delay::Exp {
                base: ms(a)?,
                mean: ms(b)?,
            },
            _ => bail!("delay must be fixed:MS, uniform:LO:HI or exp:BASE:MEAN"),
        })
    }

    fn sample(&self, rng: &mut Rng) -> Duration {
        match *self {
            Delay::Fixed(d) => d,
            Delay::Uniform(lo, hi) => lo + (hi - lo).mul_f64(rng.next_f64()),
            Delay::Exp { base, mean } => {
                // Inverse CDF; capped at 20 means so one sample cannot stall a connection.
                let u = rng.next_f64().max(1e-12);
                base + mean.mul_f64((-u.ln()).min(20.0))
            }
        }
    }
}

/// Counters of a running proxy.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Bytes forwarded, both directions.
    pub bytes: AtomicU64,
}

/// Accept on `listener` and forward every connection to `target`, delaying each direction
/// by `up` (client → target) and `down` (target → client). Runs until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    target: SocketAddr,
    up: Delay,
    down: Delay,
    seed: u64,
    stats: Arc<ProxyStats>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    let mut n: u64 = 0;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue; // over the limit: drop the connection
        };
        n += 1;
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let stats = stats.clone();
        // One delay sequence per connection (`Rng::for_stream`: the former `seed ^ n * γ`
        // gave every connection the same sequence a few draws apart).
        let seed = Rng::for_stream(seed, n).next_u64();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let a = pipe(cr, sw, up, seed, stats.clone());
            let b = pipe(sr, cw, down, seed ^ 1, stats);
            let _ = tokio::join!(a, b);
            drop(permit);
        });
    }
}

/// One direction: read, stamp, queue; a writer task sleeps until each chunk is due.
async fn pipe(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    delay: Delay,
    seed: u64,
    stats: Arc<ProxyStats>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Bytes)>(QUEUE_CHUNKS_MAX);
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if wr.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    let mut rng = Rng::new(seed);
    let mut last_due = Instant::now();
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        stats.bytes.fetch_add(n as u64, Ordering::Relaxed);
        let due = (Instant::now() + delay.sample(&mut rng)).max(last_due);
        last_due = due;
        if tx
            .send((due, Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        assert_eq!(
            Delay::parse("2").unwrap(),
            Delay::Fixed(Duration::from_millis(2))
        );
        assert_eq!(
            Delay::parse("fixed:0.5").unwrap(),
            Delay::Fixed(Duration::from_micros(500))
        );
        assert!(matches!(
            Delay::parse("uniform:1:3").unwrap(),
            Delay::Uniform(..)
        ));
        assert!(Delay::parse("uniform:3:1").is_err());
        assert!(Delay::parse("exp:1:2").is_ok());
        assert!(Delay::parse("gauss:1").is_err());
        assert!(Delay::parse("-1").is_err());
    }

    #[test]
    fn samples_stay_in_range() {
        let mut rng = Rng::new(3);
        let u = Delay::Uniform(Duration::from_millis(1), Duration::from_millis(3));
        let e = Delay::Exp {
            base: Duration::from_millis(1),
            mean: Duration::from_millis(1),
        };
        for _ in 0..10_000 {
            let d = u.sample(&mut rng);
            assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(3));
            let d = e.sample(&mut rng);
            assert!(d >= Duration::from_millis(1) && d <= Duration::from_millis(21));
        }
    }

    /// Bytes arrive intact and in order through the proxy, in both directions.
    #[tokio::test]
    async fn forwards_in_order_both_ways() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let paddr = proxy.local_addr().unwrap();
        let stats = Arc::new(ProxyStats::default());
        tokio::spawn(serve(
            proxy,
            echo_addr,
            Delay::Uniform(Duration::ZERO, Duration::from_millis(2)),
            Delay::Fixed(Duration::from_millis(1)),
            9,
            stats.clone(),
        ));
        let mut c = TcpStream::connect(paddr).await.unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = c.split();
        let send = async {
            for chunk in data.chunks(7_001) {
                w.write_all(chunk).await.unwrap();
            }
        };
        let mut got = vec![0u8; data.len()];
        let recv = r.read_exact(&mut got);
        let (_, res) = tokio::join!(send, recv);
        res.unwrap();
        assert_eq!(got, data);
        assert_eq!(stats.connections.load(Ordering::Relaxed), 1);
        assert_eq!(stats.bytes.load(Ordering::Relaxed), 2 * data.len() as u64);
    }
}
