//! Keys, values and key choice: a seeded generator, uniform and Zipf distributions, and the
//! key format shared with redis-benchmark (`key:` + zero-padded index) so the two tools hit
//! the same keys.

use anyhow::{bail, Result};

/// splitmix64: small, fast, seeded; one per connection so runs are reproducible per seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

/// splitmix64's output function: a bijection of 64-bit words that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The generator of stream `stream` (a connection, a task) of the run seeded `seed`: its
    /// state is a mix of both, so streams start at unrelated points of the generator's cycle.
    ///
    /// Why not `Rng::new(seed ^ (stream + 1) * 0x9E37_79B9_7F4A_7C15)`, the form used before
    /// session 21: that constant is splitmix64's own increment, so those states are the
    /// states of one sequence `stream` steps apart (give or take the seed's low bit), and
    /// every connection drew the same keys as the others a few draws later. 50 connections
    /// "uniform over 1M keys" touched ~100,000 of them (two sequences in all, split by the
    /// low bit), which is a far more cache-friendly load than the one reported.
    pub fn for_stream(seed: u64, stream: u64) -> Rng {
        Rng(mix(mix(stream.wrapping_add(1)) ^ seed))
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift: unbiased enough for load generation, no division.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Zipf over [0, n) by Gray et al., "Quickly generating billion-record synthetic databases"
/// (the generator YCSB uses): O(n) set-up, O(1) per draw. Rank 0 is the hottest key.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// # Errors
    /// `theta` outside (0, 1) or `n` = 0.
    pub fn new(n: u64, theta: f64) -> Result<Zipf> {
        if n == 0 {
            bail!("zipf over an empty keyspace");
        }
        if !(theta > 0.0 && theta < 1.0) {
            bail!("--zipf-theta must be in (0, 1), got {theta}");
        }
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let nf = n as f64;
        Ok(Zipf {
            n: nf,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / nf).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        })
    }

    /// Draw a rank.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n as u64 - 1);
        }
        let r = (self.n * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n as u64 - 1)
    }
}

/// How keys are chosen.
#[derive(Clone, Debug)]
pub enum Chooser {
    /// Every key equally likely.
    Uniform(u64),
    /// Zipf-distributed ranks.
    Zipf(Zipf),
}

impl Chooser {
    /// A key index.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            Chooser::Uniform(n) => rng.below(*n),
            Chooser::Zipf(z) => z.sample(rng),
        }
    }
}

/// Formats key indexes as fixed-size keys: `key:` then the index zero-padded to fill
/// `key_size` bytes (redis-benchmark's `key:__rand_int__` with `-r` gives the same
/// `key:000000012345` for 16-byte keys).
#[derive(Clone, Debug)]
pub struct KeyFormat {
    digits: usize,
    prefix: &'static [u8],
}

impl KeyFormat {
    /// # Errors
    /// If `key_size` cannot hold every index of `keys`.
    pub fn new(keys: u64, key_size: usize) -> Result<KeyFormat> {
        let needed = keys.saturating_sub(1).max(1).to_string().len();
        let (prefix, digits): (&'static [u8], usize) = if key_size >= 4 + needed {
            (b"key:", key_size - 4)
        } else if key_size >= needed {
            (b"", key_size)
        } else {
            bail!("--key-size {key_size} cannot hold {keys} distinct keys (needs {needed} bytes)");
        };
        if key_size > ringlet_types::limits::KEY_BYTES_MAX as usize {
            bail!("--key-size exceeds the key limit");
        }
        Ok(KeyFormat { digits, prefix })
    }

    /// Bytes of every key.
    pub fn len(&self) -> usize {
        self.prefix.len() + self.digits
    }

    /// Whether keys are empty (never: at least one digit).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write key `i` into `out` (which must be `len()` bytes).
    pub fn write(&self, i: u64, out: &mut [u8]) {
        let (p, d) = out.split_at_mut(self.prefix.len());
        p.copy_from_slice(self.prefix);
        let mut v = i;
        for b in d.iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 connections drawing uniformly from 1M keys, 50,000 draws each, touch what
    /// independent draws touch: 1M × (1 − e^−2.5) ≈ 918,000 distinct keys. The seeding used
    /// before session 21 touched ~100,000 (`Rng::for_stream`).
    #[test]
    fn connections_draw_independent_keys() {
        let n = 1_000_000u64;
        let mut seen = vec![false; n as usize];
        for c in 0..50 {
            let mut rng = Rng::for_stream(1, c);
            for _ in 0..50_000 {
                seen[rng.below(n) as usize] = true;
            }
        }
        let distinct = seen.iter().filter(|&&s| s).count();
        assert!((900_000..=935_000).contains(&distinct), "{distinct}");
        // The old form, for the record of why it was replaced.
        let mut seen = vec![false; n as usize];
        for c in 0..50u64 {
            let mut rng = Rng::new(1 ^ (c + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for _ in 0..50_000 {
                seen[rng.below(n) as usize] = true;
            }
        }
        let old = seen.iter().filter(|&&s| s).count();
        assert!(old < 200_000, "{old}");
    }

    #[test]
    fn key_format_matches_redis_benchmark() {
        let f = KeyFormat::new(100_000, 16).unwrap();
        let mut k = vec![0; f.len()];
        f.write(12345, &mut k);
        assert_eq!(k, b"key:000000012345");
        assert!(KeyFormat::new(1_000_000, 3).is_err());
        let f = KeyFormat::new(1000, 3).unwrap();
        let mut k = vec![0; 3];
        f.write(999, &mut k);
        assert_eq!(k, b"999");
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let z = Zipf::new(1000, 0.99).unwrap();
        let mut rng = Rng::new(3);
        let mut hot = 0;
        for _ in 0..100_000 {
            let r = z.sample(&mut rng);
            assert!(r < 1000);
            if r < 10 {
                hot += 1;
            }
        }
        // With theta 0.99 over 1000 keys the top 1% of keys take roughly 38% of draws.
        assert!(hot > 30_000 && hot < 50_000, "{hot}");
        let mut u = 0;
        for _ in 0..100_000 {
            if rng.below(1000) < 10 {
                u += 1;
            }
        }
        assert!(u > 500 && u < 1500, "{u}");
    }
}
