//! RS(K, M) over GF(2^8): encode, parity coefficients, parity deltas, reconstruct.
//!
//! # Why one library for everything
//!
//! A parity holder folds `coef · (new ⊕ old)` into its chunk, so the coefficients used for
//! deltas must be exactly those of the encoder that made the parity; otherwise parity after
//! an update differs from a fresh encode and a later reconstruct returns garbage.
//! `reed-solomon-simd` is faster for bulk work but encodes with an FFT over GF(2^16) whose
//! generator coefficients are not exposed, so it cannot be mixed with per-byte deltas.
//! We use `reed-solomon-erasure` 6 (systematic Vandermonde-derived matrix over GF(2^8)) for
//! encode, delta and reconstruct alike, and read its coefficients off the encoder itself
//! (encode the unit vectors `e_p`; parity q of `e_p` is `G[q][p]`), so they agree by
//! construction and cannot drift if the library changes its matrix. See
//! `docs/design/erasure-srs.md`.
//!
//! GF(2^8) works byte-wise: byte `i` of a parity chunk depends only on byte `i` of the K
//! data chunks. That is what makes deltas of arbitrary byte ranges and reconstruction of a
//! sub-range of a chunk possible.

use crate::error::Error;
use reed_solomon_erasure::galois_8;
use reed_solomon_erasure::galois_8::ReedSolomon;

/// An RS(K, M) encoder/decoder plus its parity coefficient table.
#[derive(Debug)]
pub struct Codec {
    k: u32,
    m: u32,
    rs: ReedSolomon,
    /// `coef[q · K + p]` = coefficient of data position p in parity q.
    coef: Vec<u8>,
}

impl Codec {
    /// Builds RS(k, m).
    ///
    /// # Errors
    /// [`Error::Shape`] if `k` or `m` is 0 or out of `ringlet_types` bounds.
    pub fn new(k: u32, m: u32) -> Result<Codec, Error> {
        let shape = Error::Shape { k, m, s: 0 };
        if k == 0
            || m == 0
            || k > u32::from(ringlet_types::memgest::EC_K_MAX)
            || m > u32::from(ringlet_types::memgest::EC_M_MAX)
        {
            return Err(shape);
        }
        let ku = usize::try_from(k).map_err(|_| shape)?;
        let mu = usize::try_from(m).map_err(|_| shape)?;
        let rs = ReedSolomon::new(ku, mu)?;
        let mut coef = vec![0u8; ku.checked_mul(mu).ok_or(shape)?];
        // Read the generator off the encoder: parity of the unit vector e_p.
        for p in 0..ku {
            let data: Vec<[u8; 1]> = (0..ku).map(|i| [u8::from(i == p)]).collect();
            let mut parity = vec![[0u8; 1]; mu];
            rs.encode_sep(&data, &mut parity)?;
            for (q, par) in parity.iter().enumerate() {
                let idx = q
                    .checked_mul(ku)
                    .and_then(|x| x.checked_add(p))
                    .ok_or(shape)?;
                if let Some(c) = coef.get_mut(idx) {
                    *c = par[0];
                }
            }
        }
        Ok(Codec { k, m, rs, coef })
    }

    /// K.
    pub fn k(&self) -> u32 {
        self.k
    }
    /// M.
    pub fn m(&self) -> u32 {
        self.m
    }

    /// Coefficient of data position `position` in parity `parity_index`.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if either index is out of range.
    pub fn coefficient(&self, parity_index: u32, position: u32) -> Result<u8, Error> {
        if parity_index >= self.m {
            return Err(Error::NodeIndex {
                index: parity_index,
                count: self.m,
            });
        }
        if position >= self.k {
            return Err(Error::NodeIndex {
                index: position,
                count: self.k,
            });
        }
        let idx = parity_index
            .checked_mul(self.k)
            .and_then(|x| x.checked_add(position))
            .and_then(|x| usize::try_from(x).ok());
        idx.and_then(|i| self.coef.get(i).copied())
            .ok_or(Error::NodeIndex {
                index: position,
                count: self.k,
            })
    }

    /// Computes the M parity chunks of one codeword from its K data chunks (all the same
    /// length, non-zero).
    ///
    /// # Errors
    /// [`Error::Length`] if counts or lengths disagree.
    pub fn encode<D: AsRef<[u8]>, P: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        data: &[D],
        parity: &mut [P],
    ) -> Result<(), Error> {
        self.check_counts(data.len(), parity.len())?;
        let len = data.first().map(|d| d.as_ref().len()).unwrap_or(0);
        for d in data {
            check_len(len, d.as_ref().len())?;
        }
        for p in parity.iter() {
            check_len(len, p.as_ref().len())?;
        }
        if len == 0 {
            return Ok(());
        }
        self.rs.encode_sep(data, parity)?;
        Ok(())
    }

    fn check_counts(&self, data: usize, parity: usize) -> Result<(), Error> {
        let k = usize::try_from(self.k).unwrap_or(usize::MAX);
        let m = usize::try_from(self.m).unwrap_or(usize::MAX);
        if data != k {
            return Err(Error::Length {
                expected: u64::from(self.k),
                got: data as u64,
            });
        }
        if parity != m {
            return Err(Error::Length {
                expected: u64::from(self.m),
                got: parity as u64,
            });
        }
        Ok(())
    }

    /// Rebuilds the missing chunks of one codeword in place. `shards` holds K data then M
    /// parity chunks; `None` marks a missing one, which is filled on success. Present chunks
    /// must all have the same length.
    ///
    /// # Errors
    /// [`Error::NotEnoughShards`] if more than M are missing (nothing is modified);
    /// [`Error::Length`] if the count is not K + M or lengths disagree.
    pub fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), Error> {
        self.reconstruct_inner(shards, false)
    }

    /// As [`Codec::reconstruct`], but fills only missing *data* chunks; missing parity chunks
    /// stay `None`. Decoding a lost data node needs no parity re-encode, which for M ≥ 2
    /// would double the work.
    ///
    /// # Errors
    /// As [`Codec::reconstruct`].
    pub fn reconstruct_data(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), Error> {
        self.reconstruct_inner(shards, true)
    }

    fn reconstruct_inner(
        &self,
        shards: &mut [Option<Vec<u8>>],
        data_only: bool,
    ) -> Result<(), Error> {
        let total = self.k.saturating_add(self.m);
        if shards.len() != usize::try_from(total).unwrap_or(usize::MAX) {
            return Err(Error::Length {
                expected: u64::from(total),
                got: shards.len() as u64,
            });
        }
        let missing = shards.iter().filter(|s| s.is_none()).count();
        let missing = u32::try_from(missing).unwrap_or(u32::MAX);
        if missing > self.m {
            return Err(Error::NotEnoughShards {
                missing,
                tolerated: self.m,
            });
        }
        let mut len = None;
        for s in shards.iter().flatten() {
            match len {
                None => len = Some(s.len()),
                Some(l) => check_len(l, s.len())?,
            }
        }
        if missing == 0 {
            return Ok(());
        }
        if len == Some(0) {
            let k = usize::try_from(self.k).unwrap_or(usize::MAX);
            for (i, s) in shards.iter_mut().enumerate() {
                if s.is_none() && (!data_only || i < k) {
                    *s = Some(Vec::new());
                }
            }
            return Ok(());
        }
        if data_only {
            self.rs.reconstruct_data(shards)?;
        } else {
            self.rs.reconstruct(shards)?;
        }
        Ok(())
    }
}

fn check_len(expected: usize, got: usize) -> Result<(), Error> {
    if expected != got {
        return Err(Error::Length {
            expected: expected as u64,
            got: got as u64,
        });
    }
    Ok(())
}

/// `new ⊕ old`: what an update of a byte range sends to the parity holders.
///
/// If the lengths differ, the shorter side is taken as zero-extended (a fresh arena range is
/// all zeros), so the result has the longer length.
pub fn delta(old: &[u8], new: &[u8]) -> Vec<u8> {
    let len = old.len().max(new.len());
    let mut out = Vec::with_capacity(len);
    let mut o = old.iter();
    let mut n = new.iter();
    for _ in 0..len {
        let a = o.next().copied().unwrap_or(0);
        let b = n.next().copied().unwrap_or(0);
        out.push(a ^ b);
    }
    out
}

/// Coefficient of data position `data_position` in parity `parity_index` of RS(k, m) as
/// encoded by [`Codec`] (hot paths should keep a [`Codec`] and call
/// [`Codec::coefficient`]; this builds one).
///
/// # Errors
/// [`Error::Shape`] / [`Error::NodeIndex`] on out-of-range arguments.
pub fn parity_coefficient(
    k: u32,
    m: u32,
    parity_index: u32,
    data_position: u32,
) -> Result<u8, Error> {
    Codec::new(k, m)?.coefficient(parity_index, data_position)
}

/// Folds a delta into a parity chunk: `parity[offset..offset+len] ^= coef · delta`.
///
/// # Errors
/// [`Error::Range`] if the delta does not fit in the chunk at `offset`.
pub fn apply_delta(
    parity_chunk: &mut [u8],
    coef: u8,
    delta: &[u8],
    offset: usize,
) -> Result<(), Error> {
    let range = Error::Range {
        offset: offset as u64,
        len: delta.len() as u64,
    };
    let end = offset.checked_add(delta.len()).ok_or(range)?;
    let target = parity_chunk.get_mut(offset..end).ok_or(range)?;
    if coef == 0 {
        return Ok(());
    }
    galois_8::mul_slice_xor(coef, delta, target);
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    #[test]
    fn coefficients_match_encoder() {
        // Linearity check: parity = Σ coef[q][p] · data[p] for random bytes.
        let c = Codec::new(3, 2).unwrap();
        let data = [vec![7u8, 200, 3], vec![1u8, 2, 99], vec![250u8, 0, 17]];
        let mut parity = vec![vec![0u8; 3]; 2];
        c.encode(&data, &mut parity).unwrap();
        for q in 0..2u32 {
            let mut acc = vec![0u8; 3];
            for p in 0..3u32 {
                galois_8::mul_slice_xor(c.coefficient(q, p).unwrap(), &data[p as usize], &mut acc);
            }
            assert_eq!(acc, parity[q as usize]);
        }
        // MDS needs every coefficient non-zero (a zero would make a data chunk invisible to
        // that parity). Note reed-solomon-erasure's RS(2, 1) is not plain XOR as in Ring's
        // Eqn. (5): its systematic Vandermonde matrix gives other coefficients.
        for (k, m) in [(2, 1), (3, 1), (3, 2), (16, 4)] {
            for q in 0..m {
                for p in 0..k {
                    assert_ne!(parity_coefficient(k, m, q, p).unwrap(), 0);
                }
            }
        }
        assert!(parity_coefficient(2, 1, 1, 0).is_err());
        assert!(parity_coefficient(2, 1, 0, 2).is_err());
    }

    #[test]
    fn delta_update_equals_fresh_encode() {
        let c = Codec::new(2, 2).unwrap();
        let mut data = [vec![1u8; 16], vec![9u8; 16]];
        let mut parity = vec![vec![0u8; 16]; 2];
        c.encode(&data, &mut parity).unwrap();
        let new = [5u8, 6, 7, 8];
        let d = delta(&data[1][4..8], &new);
        data[1][4..8].copy_from_slice(&new);
        for (q, par) in parity.iter_mut().enumerate() {
            apply_delta(par, c.coefficient(q as u32, 1).unwrap(), &d, 4).unwrap();
        }
        let mut fresh = vec![vec![0u8; 16]; 2];
        c.encode(&data, &mut fresh).unwrap();
        assert_eq!(parity, fresh);
        assert!(apply_delta(&mut parity[0], 3, &d, 13).is_err());
        assert!(apply_delta(&mut parity[0], 3, &d, usize::MAX).is_err());
    }

    #[test]
    fn delta_zero_extends() {
        assert_eq!(delta(&[1, 2], &[1, 2, 3]), vec![0, 0, 3]);
        assert_eq!(delta(&[], &[]), Vec::<u8>::new());
    }

    #[test]
    fn reconstruct_refuses_too_many_missing() {
        let c = Codec::new(2, 1).unwrap();
        let mut s = vec![None, None, Some(vec![1u8])];
        assert!(matches!(
            c.reconstruct(&mut s),
            Err(Error::NotEnoughShards {
                missing: 2,
                tolerated: 1
            })
        ));
        let mut s = vec![Some(vec![1u8]), Some(vec![1u8, 2])];
        assert!(c.reconstruct(&mut s).is_err());
        let mut s = vec![Some(vec![1u8]), None, Some(vec![1u8, 2])];
        assert!(c.reconstruct(&mut s).is_err());
    }
}
