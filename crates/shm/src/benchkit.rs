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

/// Options of [`shm_get_bench`] (`ringlet bench --mode shm-get`).
#[derive(Clone, Debug)]
pub struct ShmGetOptions {
    pub socket: std::path::PathBuf,
    /// Fill keys `0..keys` with `bench_value(i, value_size)` over the socket first.
    pub load: bool,
    pub keys: u64,
    pub value_size: usize,
    pub duration: Duration,
    /// Client threads, each with its own `ShmReader` (connection and mappings).
    pub threads: usize,
    /// MGET batch size; 1 = one GET per key.
    pub batch: usize,
    /// Zipf exponent of the key choice; `None` = uniform.
    pub zipf: Option<f64>,
}

/// Outcome of [`shm_get_bench`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmGetReport {
    pub ops: u64,
    pub secs: f64,
    pub ops_per_sec: f64,
    /// Sum over threads of ops per CPU-second of each thread.
    pub ops_per_cpu_sec: f64,
    pub wrong: u64,
    pub misses: u64,
    pub fallbacks: u64,
    pub load_secs: f64,
    /// The client process's `ShmemPmdMapped` (KiB) while its readers' mappings were up:
    /// shared memory this side maps with 2 MiB page-table entries. 0 means every access
    /// walked 4 KiB pages whatever the node has (see `reader::map_ro_aligned`).
    pub client_pmd_kib: u64,
}

/// This process's `ShmemPmdMapped` from `/proc/self/smaps_rollup`, in KiB (0 if unknown).
pub fn shmem_pmd_mapped_kib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("ShmemPmdMapped:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

impl ShmGetReport {
    /// One JSON object (the last line `ringlet bench --json` prints).
    pub fn to_json(&self, o: &ShmGetOptions) -> String {
        format!(
            "{{\"mode\":\"shm-get\",\"ops_per_sec\":{:.0},\"ops_per_cpu_sec\":{:.0},\"ops\":{},\"secs\":{:.3},\"threads\":{},\"keys\":{},\"value_size\":{},\"batch\":{},\"distribution\":\"{}\",\"wrong\":{},\"misses\":{},\"fallbacks\":{},\"load_secs\":{:.3},\"client_pmd_kib\":{}}}",
            self.ops_per_sec,
            self.ops_per_cpu_sec,
            self.ops,
            self.secs,
            o.threads,
            o.keys,
            o.value_size,
            o.batch,
            o.zipf.map_or("uniform".to_string(), |s| format!("zipf-{s}")),
            self.wrong,
            self.misses,
            self.fallbacks,
            self.load_secs,
            self.client_pmd_kib
        )
    }
}

/// SETs pipelined per round trip while loading.
const LOAD_PIPELINE: usize = 256;

/// Run the shared-memory GET benchmark against a node's socket: optionally load the keys,
/// then `threads` readers GET (or MGET) for `duration`, checking every value against
/// `bench_value`. A value that differs counts in `wrong`; a missing key in `misses`.
///
/// # Errors
/// Connection, load or read errors; a `Server` error if the node refused a SET.
pub fn shm_get_bench(o: &ShmGetOptions) -> Result<ShmGetReport, ShmError> {
    let mut report = ShmGetReport::default();
    if o.load {
        let t = Instant::now();
        let mut r = ShmReader::connect(&o.socket)?;
        let mut keys = vec![[0u8; BENCH_KEY_BYTES]; LOAD_PIPELINE];
        let mut values = Vec::with_capacity(LOAD_PIPELINE);
        let mut i = 0u64;
        while i < o.keys {
            let n = (o.keys - i).min(LOAD_PIPELINE as u64) as usize;
            values.clear();
            for (j, k) in keys.iter_mut().enumerate().take(n) {
                bench_key(i + j as u64, k);
                values.push(bench_value(i + j as u64, o.value_size));
            }
            r.set_many(keys[..n].iter().zip(&values).map(|(k, v)| (&k[..], &v[..])))?;
            i += n as u64;
        }
        report.load_secs = t.elapsed().as_secs_f64();
    }
    let seq_len = (1usize << 22).min((o.keys as usize).saturating_mul(4).max(1 << 16));
    let threads = o.threads.max(1);
    let results: Vec<Result<(Run, u64, u64), ShmError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let seq = match o.zipf {
                        Some(z) => crate::testkit::zipf_indices(o.keys, z, seq_len, 17 + t as u64),
                        None => crate::testkit::uniform_indices(o.keys, seq_len, 17 + t as u64),
                    };
                    let mut r = ShmReader::connect(&o.socket)?;
                    let run = if o.batch > 1 {
                        run_mget(&mut r, &seq, o.value_size, o.batch, o.duration)?
                    } else {
                        run_get(&mut r, &seq, o.value_size, o.duration)?
                    };
                    // Read while this reader's mappings are still up.
                    Ok((run, r.stats().fallbacks, shmem_pmd_mapped_kib()))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(Err(ShmError::Disconnected)))
            .collect()
    });
    for res in results {
        let (run, fallbacks, pmd_kib) = res?;
        report.client_pmd_kib = report.client_pmd_kib.max(pmd_kib);
        report.ops += run.ops;
        report.secs = report.secs.max(run.secs);
        report.ops_per_sec += run.ops_per_sec();
        report.ops_per_cpu_sec += run.ops_per_cpu_sec();
        report.wrong += run.wrong;
        report.misses += run.misses;
        report.fallbacks += fallbacks;
    }
    Ok(report)
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
