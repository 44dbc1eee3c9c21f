//! Deterministic workloads for tests, the test binaries and benchmarks: values that are a
//! function of (key, version counter, length) so any reader can check any value it is given
//! without knowing what was written, a small PRNG and key-index sequences (uniform, Zipf).

/// Bytes of the self-describing value header: `n:<16 hex>:l:<8 hex>:`.
pub const VALUE_HEADER_BYTES: usize = 2 + 16 + 3 + 8 + 1;

/// SplitMix64: tiny, fast, good enough for workloads (not for anything secret).
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The value a writer stores as version `n` of `key`, `len` bytes long (at least
/// [`VALUE_HEADER_BYTES`]; shorter requests are padded up to it).
pub fn make_value(key: &[u8], n: u64, len: usize) -> Vec<u8> {
    let len = len.max(VALUE_HEADER_BYTES);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(format!("n:{n:016x}:l:{len:08x}:").as_bytes());
    fill(&mut v, key, n, len);
    v
}

fn fill(v: &mut Vec<u8>, key: &[u8], n: u64, len: usize) {
    let mut r = Rng(fnv(key) ^ n.rotate_left(32));
    while v.len() < len {
        let w = r.next_u64().to_le_bytes();
        let take = (len - v.len()).min(8);
        v.extend_from_slice(&w[..take]);
    }
}

fn hex(b: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?;
    u64::from_str_radix(s, 16).ok()
}

/// Check that `value` is exactly what [`make_value`] makes for `key` at the counter and
/// length it claims; returns the counter. Any torn, truncated, mixed or foreign value fails.
///
/// # Errors
/// What is wrong, for the failure report.
pub fn check_value(key: &[u8], value: &[u8]) -> Result<u64, String> {
    if value.len() < VALUE_HEADER_BYTES {
        return Err(format!("value too short: {} bytes", value.len()));
    }
    let h = &value[..VALUE_HEADER_BYTES];
    if &h[0..2] != b"n:" || &h[18..21] != b":l:" || h[29] != b':' {
        return Err("bad header".into());
    }
    let n = hex(&h[2..18]).ok_or("bad counter")?;
    let len = hex(&h[21..29]).ok_or("bad length")? as usize;
    if len != value.len() {
        return Err(format!("length {} but header says {len}", value.len()));
    }
    let mut want = Vec::with_capacity(len);
    want.extend_from_slice(h);
    fill(&mut want, key, n, len);
    if want != value {
        return Err(format!("payload differs from make_value(key, {n}, {len})"));
    }
    Ok(n)
}

/// The key of writer `w`'s key number `i`.
pub fn key_of(w: u32, i: u64) -> Vec<u8> {
    format!("w{w}:k{i}").into_bytes()
}

/// `count` key indices in `0..n`, uniform.
pub fn uniform_indices(n: u64, count: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng(seed);
    (0..count).map(|_| r.below(n) as u32).collect()
}

/// `count` key indices in `0..n` drawn from Zipf(`s`) (rank 0 most popular), with ranks
/// scattered over the key space by a fixed permutation so hot keys are not neighbours.
pub fn zipf_indices(n: u64, s: f64, count: usize, seed: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut acc = 0.0f64;
    for k in 1..=n {
        acc += 1.0 / (k as f64).powf(s);
        cdf.push(acc);
    }
    let total = acc;
    let mut r = Rng(seed);
    (0..count)
        .map(|_| {
            let u = r.unit() * total;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            // Multiplicative scatter: odd multiplier mod 2^k is a bijection; fold into n.
            (rank.min(n - 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) % n) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_check_and_tears_fail() {
        let v = make_value(b"k1", 42, 100);
        assert_eq!(v.len(), 100);
        assert_eq!(check_value(b"k1", &v), Ok(42));
        assert!(check_value(b"k2", &v).is_err(), "foreign key");
        assert!(check_value(b"k1", &v[..60]).is_err(), "truncated");
        let mut t = v.clone();
        t[70] ^= 1;
        assert!(check_value(b"k1", &t).is_err(), "flipped byte");
        let w = make_value(b"k1", 43, 100);
        let mut mixed = v[..50].to_vec();
        mixed.extend_from_slice(&w[50..]);
        assert!(check_value(b"k1", &mixed).is_err(), "mixed versions");
        assert_eq!(make_value(b"k", 1, 3).len(), VALUE_HEADER_BYTES);
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let idx = zipf_indices(1000, 0.99, 20_000, 1);
        assert!(idx.iter().all(|&i| i < 1000));
        let mut counts = vec![0u32; 1000];
        for &i in &idx {
            counts[i as usize] += 1;
        }
        counts.sort_unstable();
        // The hottest key of Zipf(0.99) over 1000 keys draws ~13% of the samples.
        assert!(counts[999] > 1500, "hottest {}", counts[999]);
    }
}
