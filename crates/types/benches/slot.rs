//! `key_slot` (CRC16-XMODEM through the `crc` crate's slice-by-16 tables) against the
//! byte-at-a-time table walk it replaced (session 19), on redis-benchmark's 16-byte keys and
//! on 40-byte keys. `cargo bench -p ringlet-types --bench slot`.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ringlet_types::key_slot;

const fn table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        t[i] = crc;
        i += 1;
    }
    t
}
static TABLE: [u16; 256] = table();

/// The implementation before session 19 (Redis's `crc16.c` loop).
fn bytewise_slot(key: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in key {
        crc = (crc << 8) ^ TABLE[usize::from(((crc >> 8) as u8) ^ b)];
    }
    crc & 16383
}

fn bench(c: &mut Criterion) {
    for len in [16usize, 40] {
        let keys: Vec<Vec<u8>> = (0..4096u64)
            .map(|i| {
                let mut k = format!("key:{:012}", i.wrapping_mul(7919) % 1_000_000).into_bytes();
                k.resize(len, b'x');
                k
            })
            .collect();
        for k in &keys {
            assert_eq!(key_slot(k), bytewise_slot(k));
        }
        c.bench_function(&format!("key_slot {len} B (crc slice-by-16)"), |b| {
            b.iter(|| {
                keys.iter()
                    .map(|k| u64::from(key_slot(black_box(k))))
                    .sum::<u64>()
            })
        });
        c.bench_function(&format!("key_slot {len} B (byte-wise table)"), |b| {
            b.iter(|| {
                keys.iter()
                    .map(|k| u64::from(bytewise_slot(black_box(k))))
                    .sum::<u64>()
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
