//! The node's side of a bulk load of KELI's chunked graph (`ringlet load`,
//! docs/design/loader.md), without sockets or the loader: the exact commands the loader sends
//! — pass 1 `RECORD SET v:i ATTR name ni`, pass 2 one `RECORD SET item LINKSPACKED follows
//! <chunk> [LINK follows.next next]` per item of each list, the last item first — run
//! through the real request path (`fuzz_support::Harness`: decoder, batching, handlers,
//! engine, reply encoding) as one pipelined stream.
//!
//! Why: a whole load's node CPU is a few hundred ms read from `/proc` in 10 ms ticks, beside
//! a loader on the other core, so a change worth 2-3 % of the node cannot be told from the
//! noise there (`bench/keli_load.py`); here the node's path is timed alone, repeatedly.
//!
//! Run: `cargo bench -p ringlet-server --bench record_load`. The graph is seeded and
//! synthetic (uniform targets, ~21 links a vertex on average, 1 % hubs of 300-1,000 links);
//! `bench/keli_load.py` remains the end-to-end figure against Redis.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ringlet_bench::keys::Rng;
use ringlet_codec::resp::encode_request;
use ringlet_server::fuzz_support::Harness;

const VERTICES: u64 = 50_000;
const CHUNK: usize = 100;

/// Pass 1's and pass 2's request streams, and pass 2's link count.
fn graph() -> (Vec<u8>, Vec<u8>, u64) {
    // `ringlet bench`'s seeded generator: the graph is the same on every run.
    let mut rng = Rng::new(7);
    let mut pass1 = Vec::new();
    let mut pass2 = Vec::new();
    let mut links = 0;
    for v in 0..VERTICES {
        let key = format!("v:{v}");
        let name = format!("n{v}");
        encode_request(
            &mut pass1,
            &[
                b"RECORD",
                b"SET",
                key.as_bytes(),
                b"ATTR",
                b"name",
                name.as_bytes(),
            ],
        );
        let x = rng.next_u64();
        let degree = if x.is_multiple_of(100) {
            300 + x % 700
        } else {
            x % 30
        } as usize;
        if degree == 0 {
            continue;
        }
        links += degree as u64;
        let targets: Vec<String> = (0..degree)
            .map(|_| format!("v:{}", rng.below(VERTICES)))
            .collect();
        let last = (degree - 1) / CHUNK;
        let item = |k: usize| {
            if k == 0 {
                key.clone()
            } else {
                format!("{key}#follows#{k}")
            }
        };
        for k in (0..=last).rev() {
            let mut blob = Vec::new();
            let chunk = &targets[k * CHUNK..((k + 1) * CHUNK).min(degree)];
            ringlet_record::Packed::encode(chunk.iter().map(String::as_bytes), &mut blob);
            let (this, next) = (item(k), item(k + 1));
            let mut argv: Vec<&[u8]> = vec![
                b"RECORD",
                b"SET",
                this.as_bytes(),
                b"LINKSPACKED",
                b"follows",
                &blob,
            ];
            if k < last {
                argv.extend([&b"LINK"[..], b"follows.next", next.as_bytes()]);
            }
            encode_request(&mut pass2, &argv);
        }
    }
    (pass1, pass2, links)
}

/// A node sized as `ringlet load` sizes one (the index for twice the records), pass 1 run.
fn loaded(pass1: &[u8]) -> Harness {
    let mut h = Harness::sized(None, 1024, Some(2 * VERTICES));
    let (out, _) = h.feed_measured(pass1);
    assert!(!out.windows(4).any(|w| w == b"-ERR"), "pass 1 failed");
    h
}

fn record_load(c: &mut Criterion) {
    let (pass1, pass2, links) = graph();
    let mut g = c.benchmark_group("record_load");
    g.sample_size(10);
    g.throughput(Throughput::Elements(VERTICES));
    g.bench_function("pass1_records", |b| {
        b.iter_batched(
            || Harness::sized(None, 1024, Some(2 * VERTICES)),
            |mut h| h.feed_measured(&pass1).0.len(),
            BatchSize::PerIteration,
        )
    });
    g.throughput(Throughput::Elements(links));
    g.bench_function("pass2_links", |b| {
        b.iter_batched(
            || loaded(&pass1),
            |mut h| {
                let (out, _) = h.feed_measured(&pass2);
                assert!(!out.windows(4).any(|w| w == b"-ERR"), "pass 2 failed");
                out.len()
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, record_load);
criterion_main!(benches);
