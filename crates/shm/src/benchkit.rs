//! Shared pieces of the shared-memory GET benchmark (the `shm_bench` example and the
//! criterion bench): fixed-width keys made from an index without allocating, values whose
//! every byte can be checked against what was written in a few instructions, and the timed
//! loops for one-sided GET, one-sided MGET and the in-process hash-map floor.

use crate::{ShmError, ShmReader};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Bytes of a benchmark key: `key:` and 12 decimal digits.
pub const BENCH_KEY_BYTES: usize = 16;

/// The key of index `i`, written into `out`.
#[inline]
pub fn bench_key(i: u64, out: &mut [u8; BENCH_KEY_BYTES]) {
    out[..4].copy_from_slice(b"key:");
    let mut n = i;
    for d in (4..BENCH_KEY_BYTES).rev() {
        out[d] = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

#[inline]
fn word_of(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^ (z >> 31)
}

/// The value written for key `i`: `len` bytes repeating one 64-bit word derived from `i`.
pub fn bench_value(i: u64, len: usize) -> Vec<u8> {
    let w = word_of(i).to_le_bytes();
    (0..len).map(|j| w[j % 8]).collect()
}

/// Whether `v` is exactly `bench_value(i, len)`: every byte compared.
#[inline]
pub fn bench_value_ok(i: u64, v: &[u8], len: usize) -> bool {
    if v.len() != len {
        return false;
    }
    let w = word_of(i).to_le_bytes();
    let mut chunks = v.chunks_exact(8);
    let whole = chunks.by_ref().all(|c| c == w);
    let rest = chunks.remainder();
    whole && rest == &w[..rest.len()]
}

/// CPU time of the calling thread, in seconds. On a shared machine the wall clock also
/// counts the time other processes held the core; ops per CPU-second does not.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Result of one timed run.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub ops: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// CPU seconds of the measuring thread.
    pub cpu_secs: f64,
    /// Values that did not match what was written (must be 0), and misses.
    pub wrong: u64,
    pub misses: u64,
}

impl Run {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    /// Operations per CPU-second of the client thread.
    pub fn ops_per_cpu_sec(&self) -> f64 {
        self.ops as f64 / self.cpu_secs
    }
}

/// Check the clock every this many operations (a clock read per GET would be measured).
const CLOCK_EVERY: usize = 4096;

/// One-sided GETs of `seq` (key indices, cycled) for `dur`.
///
/// # Errors
/// The reader's error.
pub fn run_get(
    r: &mut ShmReader,
    seq: &[u32],
    value_len: usize,
    dur: Duration,
) -> Result<Run, ShmError> {
    let mut key = [0u8; BENCH_KEY_BYTES];
    let mut out = Vec::with_capacity(value_len + 64);
    let (mut ops, mut wrong, mut misses) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let cpu0 = thread_cpu_secs();
    let mut pos = 0usize;
    loop {
        for _ in 0..CLOCK_EVERY {
            let i = u64::from(seq[pos]);
            pos += 1;
            if pos == seq.len() {
                pos = 0;
            }
            bench_key(i, &mut key);
            match r.get_into(&key, &mut out)? {
                Some(_) => wrong += u64::from(!bench_value_ok(i, &out, value_len)),
                None => misses += 1,
            }
        }
        ops += CLOCK_EVERY as u64;
        if start.elapsed() >= dur {
            break;
        }
    }
    Ok(Run {
        ops,
        secs: start.elapsed().as_secs_f64(),
        cpu_secs: thread_cpu_secs() - cpu0,
        wrong,
        misses,
    })
}

/// One-sided MGETs of `batch` keys at a time.
///
/// # Errors
/// The reader's error.
pub fn run_mget(
    r: &mut ShmReader,
    seq: &[u32],
    value_len: usize,
    batch: usize,
    dur: Duration,
) -> Result<Run, ShmError> {
    let batch = batch.clamp(1, 1024);
    let mut keys = vec![[0u8; BENCH_KEY_BYTES]; batch];
    let mut idx = vec![0u64; batch];
    let (mut ops, mut wrong, mut misses) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let cpu0 = thread_cpu_secs();
    let mut pos = 0usize;
    loop {
        let mut done = 0;
        while done < CLOCK_EVERY {
            for j in 0..batch {
                idx[j] = u64::from(seq[pos]);
                pos += 1;
                if pos == seq.len() {
                    pos = 0;
                }
                bench_key(idx[j], &mut keys[j]);
            }
            r.mget_with(&keys, |j, item| match item {
                Some((_, v)) => wrong += u64::from(!bench_value_ok(idx[j], v, value_len)),
                None => misses += 1,
            })?;
            done += batch;
        }
        ops += done as u64;
        if start.elapsed() >= dur {
            break;
        }
    }
    Ok(Run {
        ops,
        secs: start.elapsed().as_secs_f64(),
        cpu_secs: thread_cpu_secs() - cpu0,
        wrong,
        misses,
    })
}

/// The floor: lookups of the same keys in an in-process `HashMap<[u8; 16], Vec<u8>>`
/// (hasher `S`), with the same value check.
pub fn run_map<S: std::hash::BuildHasher>(
    map: &HashMap<[u8; BENCH_KEY_BYTES], Vec<u8>, S>,
    seq: &[u32],
    value_len: usize,
    dur: Duration,
) -> Run {
    let mut key = [0u8; BENCH_KEY_BYTES];
    let (mut ops, mut wrong, mut misses) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let cpu0 = thread_cpu_secs();
    let mut pos = 0usize;
    loop {
        for _ in 0..CLOCK_EVERY {
            let i = u64::from(seq[pos]);
            pos += 1;
            if pos == seq.len() {
                pos = 0;
            }
            bench_key(i, &mut key);
            match map.get(&key) {
                Some(v) => wrong += u64::from(!bench_value_ok(i, v, value_len)),
                None => misses += 1,
            }
        }
        ops += CLOCK_EVERY as u64;
        if start.elapsed() >= dur {
            break;
        }
    }
    Run {
        ops,
        secs: start.elapsed().as_secs_f64(),
        cpu_secs: thread_cpu_secs() - cpu0,
        wrong,
        misses,
    }
}

/// Median of a non-empty list.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_check() {
        let mut k = [0u8; BENCH_KEY_BYTES];
        bench_key(123, &mut k);
        assert_eq!(&k, b"key:000000000123");
        let v = bench_value(5, 100);
        assert!(bench_value_ok(5, &v, 100));
        assert!(!bench_value_ok(6, &v, 100));
        assert!(!bench_value_ok(5, &v[..99], 100));
        let mut t = v.clone();
        t[99] ^= 1;
        assert!(!bench_value_ok(5, &t, 100));
    }
}
