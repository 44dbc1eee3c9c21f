//! Ring's appendix A Markov model: annual reliability and availability of a memgest.
//!
//! # The model (Ring appendix A; formulas in `docs/design/erasure-reliability.md`)
//!
//! A continuous-time Markov chain over "i nodes of the group are down" (i = 0..u) plus one
//! absorbing failure state FS (data lost). With n nodes in the group and per-node failure
//! rate λ:
//!
//! - from state i, a further failure happens at rate `λ_i = (n − i)·λ`; it leads to state
//!   i+1 with probability `p_i = T(i+1) / T(i)` and to FS otherwise, where `T(i)` is the
//!   fraction of i-node failure sets the layout survives (A.2: found by enumerating every
//!   failure set against [`Layout::survives`]);
//! - from state i ≥ 1, one node is rebuilt at a time, at rate `µ_i = Σ_j p_ij·µ_ij` with
//!   `p_ij` hypergeometric (j data nodes among the i failed, out of s data + m parity
//!   nodes) and `µ_ij = (j/i)·µ_D + ((i−j)/i)·µ_P`;
//! - reliability `R(t) = 1 − P_FS(t)`, availability is the interval average over the year of
//!   the probability of being in an *available* state (A.3): state 0 for erasure coding
//!   (a lost chunk must be decoded before it can be read), states `i ≤ ⌊(R−1)/2⌋` for
//!   quorum replication (Ring §3.1); replication loses data only past `⌊R/2⌋` failures
//!   (an acknowledged write is on a majority), which equals §3.1's bound for odd R.
//!
//! `µ_P = µ` (a parity node holds what an RS(K, M) node holds); a stretched data node holds
//! `K/s` of that, so it is rebuilt `s/K` times faster: `µ_D = (s/K)·µ`. (The appendix prints
//! `µ_D = (k/s)·µ`, which contradicts its own sentence — "stores s/k times less data", "less
//! data requiring recovery" means faster recovery — and §3.3's explanation of why SRS(3, 2, 6)
//! beats RS(3, 2); we follow the text. See the design note.)
//!
//! `none` over s nodes and `rep:R` over s partitions are modelled as s independent groups (1
//! or R nodes each) and combined as `1 − (1 − p)^s`; exact for `none`, an approximation for
//! `rep` since a PG's replica groups share nodes.
//!
//! # Numerics
//!
//! `exp(Q·t)` is computed by uniformisation on a short step (`Λ·dt ≤ 1`, series of
//! non-negative terms) followed by repeated squaring of that stochastic matrix, and the
//! integral `∫ exp(Q·s) ds` by the doubling rule `G(2t) = G(t) + F(t)·G(t)`. Every product
//! is of non-negative matrices, so tiny loss probabilities (1e−12) keep their relative
//! precision instead of drowning in cancellation as with Taylor/Padé on a generator.

use crate::bounds::MODEL_NODES_MAX;
use crate::error::Error;
use crate::layout::Layout;
use ringlet_types::MemgestKind;

/// Hours in a (365-day) year, the model's time unit.
pub const HOURS_PER_YEAR: f64 = 8760.0;

/// Inputs of the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelParams {
    /// Data nodes of the placement group (`s`).
    pub data_nodes: u32,
    /// Failure rate of one node, per year (λ = 1 / MTTF).
    pub node_failures_per_year: f64,
    /// Rebuild rate µ, per year, of one node holding an RS(K, M) node's share (a parity
    /// node, or one replica): `1 / T_reconst` (Ring Eqn. 6).
    pub rebuilds_per_year: f64,
    /// Length of the period, in years (1 for annual figures).
    pub years: f64,
}

impl ModelParams {
    /// Parameters from an MTTF and a rebuild time in hours, over one year.
    pub fn from_hours(data_nodes: u32, mttf_hours: f64, rebuild_hours: f64) -> ModelParams {
        ModelParams {
            data_nodes,
            node_failures_per_year: HOURS_PER_YEAR / mttf_hours,
            rebuilds_per_year: HOURS_PER_YEAR / rebuild_hours,
            years: 1.0,
        }
    }
}

/// Ring Eqn. (6): `T_reconst = C / B_N + T_comp(C)`, as a rate per year. `node_bytes` is the
/// data to move, `network_bytes_per_s` the bandwidth, `decode_bytes_per_s` the decoder speed
/// (e.g. from this crate's benchmark).
pub fn rebuilds_per_year(
    node_bytes: f64,
    network_bytes_per_s: f64,
    decode_bytes_per_s: f64,
) -> f64 {
    let seconds = node_bytes / network_bytes_per_s + node_bytes / decode_bytes_per_s;
    HOURS_PER_YEAR * 3600.0 / seconds
}

/// Output of the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reliability {
    /// Probability that data is lost within the period.
    pub annual_loss_probability: f64,
    /// `−log10(annual_loss_probability)` (`f64::INFINITY` if 0).
    pub nines: f64,
    /// Interval availability over the period (fraction of time all data is readable).
    pub availability: f64,
    /// `−log10(1 − availability)`.
    pub availability_nines: f64,
}

/// A birth–death chain with absorbing failure, as built from Ring's appendix.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// Nodes in the group (n).
    pub nodes: u32,
    /// `survive[i]` = T(i): fraction of i-failure sets survived, i = 0..=u (T(0) = 1).
    pub survive: Vec<f64>,
    /// `rebuild[i]` = µ_i for i = 1..=u (index 0 unused, 0.0).
    pub rebuild: Vec<f64>,
    /// Number of leading states that count as available (1 for erasure coding).
    pub available_states: usize,
}

impl Chain {
    /// Transition-rate (generator) matrix Q, rows = from, states `0..=u` then FS last; rows
    /// sum to 0 (Ring's `A` with `a_ii = −Σ_{j≠i} a_ij`).
    pub fn generator(&self, lambda: f64) -> Vec<Vec<f64>> {
        let u = self.survive.len().saturating_sub(1);
        let dim = u.saturating_add(2);
        let fs = u.saturating_add(1);
        let mut q = vec![vec![0.0; dim]; dim];
        for i in 0..=u {
            let alive = f64::from(self.nodes) - i as f64;
            let fail = alive.max(0.0) * lambda;
            let t_i = self.survive.get(i).copied().unwrap_or(0.0);
            let t_next = self
                .survive
                .get(i.saturating_add(1))
                .copied()
                .unwrap_or(0.0);
            let p = if t_i > 0.0 { t_next / t_i } else { 0.0 };
            if let Some(row) = q.get_mut(i) {
                if let Some(x) = row.get_mut(i.saturating_add(1)) {
                    if i < u {
                        *x += fail * p;
                    }
                }
                if let Some(x) = row.get_mut(fs) {
                    *x += if i < u { fail * (1.0 - p) } else { fail };
                }
                if i >= 1 {
                    let mu = self.rebuild.get(i).copied().unwrap_or(0.0);
                    if let Some(x) = row.get_mut(i.saturating_sub(1)) {
                        *x += mu;
                    }
                }
                let out: f64 = row
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, v)| *v)
                    .sum();
                if let Some(x) = row.get_mut(i) {
                    *x = -out;
                }
            }
        }
        q
    }

    /// Solves the chain from state 0 over `years`: (loss probability, interval availability).
    ///
    /// # Errors
    /// [`Error::ModelParam`] for non-finite or negative rates.
    pub fn solve(&self, lambda: f64, years: f64) -> Result<(f64, f64), Error> {
        if !(lambda.is_finite() && lambda >= 0.0 && years.is_finite() && years > 0.0) {
            return Err(Error::ModelParam {
                what: "failure rate and period must be finite, period > 0",
            });
        }
        if self.rebuild.iter().any(|m| !m.is_finite() || *m < 0.0) {
            return Err(Error::ModelParam {
                what: "rebuild rate must be finite and ≥ 0",
            });
        }
        let q = self.generator(lambda);
        let (f, g) = expm_and_integral(&q, years);
        let first_f = f.first().cloned().unwrap_or_default();
        let first_g = g.first().cloned().unwrap_or_default();
        let loss = first_f.last().copied().unwrap_or(0.0).clamp(0.0, 1.0);
        let up: f64 = first_g.iter().take(self.available_states).sum();
        let availability = (up / years).clamp(0.0, 1.0);
        Ok((loss, availability))
    }
}

type Mat = Vec<Vec<f64>>;

fn mat_mul(a: &Mat, b: &Mat) -> Mat {
    let n = a.len();
    let mut c = vec![vec![0.0; n]; n];
    for (ci, ai) in c.iter_mut().zip(a.iter()) {
        for (aik, bk) in ai.iter().zip(b.iter()) {
            if *aik == 0.0 {
                continue;
            }
            for (cij, bkj) in ci.iter_mut().zip(bk.iter()) {
                *cij += aik * bkj;
            }
        }
    }
    c
}

fn mat_add(a: &Mat, b: &Mat) -> Mat {
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| x.iter().zip(y.iter()).map(|(p, q)| p + q).collect())
        .collect()
}

/// `(exp(Q·t), ∫_0^t exp(Q·s) ds)` for a generator Q (see module docs).
fn expm_and_integral(q: &Mat, t: f64) -> (Mat, Mat) {
    let n = q.len();
    // Uniformisation rate Λ ≥ max exit rate.
    let big_lambda = q
        .iter()
        .enumerate()
        .map(|(i, r)| -r.get(i).copied().unwrap_or(0.0))
        .fold(0.0_f64, f64::max);
    let identity: Mat = (0..n)
        .map(|i| (0..n).map(|j| if i == j { 1.0 } else { 0.0 }).collect())
        .collect();
    if big_lambda <= 0.0 {
        let g = identity
            .iter()
            .map(|r| r.iter().map(|v| v * t).collect())
            .collect();
        return (identity, g);
    }
    // Halve t until Λ·dt ≤ 1; at most ~1100 halvings for any finite f64, bounded anyway.
    let mut squarings = 0u32;
    let mut dt = t;
    while big_lambda * dt > 1.0 && squarings < 2000 {
        dt /= 2.0;
        squarings = squarings.saturating_add(1);
    }
    // P = I + Q/Λ is stochastic and non-negative.
    let p: Mat = q
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.iter()
                .enumerate()
                .map(|(j, v)| (if i == j { 1.0 } else { 0.0 }) + v / big_lambda)
                .map(|v| v.max(0.0))
                .collect()
        })
        .collect();
    let x = big_lambda * dt; // ≤ 1
                             // exp(Q dt) = Σ_k pois(k; x) P^k ; ∫_0^dt exp(Q s) ds = (1/Λ) Σ_k P(N > k) P^k
                             // where N ~ Poisson(x). With x ≤ 1, 30 terms leave < 1e-30 of mass.
    let mut f = vec![vec![0.0; n]; n];
    let mut g = vec![vec![0.0; n]; n];
    let mut pk = identity;
    let mut pois = (-x).exp();
    let mut cdf = 0.0;
    for k in 0..30u32 {
        cdf += pois;
        let tail = (1.0 - cdf).max(0.0);
        for ((fr, gr), pr) in f.iter_mut().zip(g.iter_mut()).zip(pk.iter()) {
            for ((fv, gv), pv) in fr.iter_mut().zip(gr.iter_mut()).zip(pr.iter()) {
                *fv += pois * pv;
                *gv += tail / big_lambda * pv;
            }
        }
        pk = mat_mul(&pk, &p);
        pois *= x / f64::from(k.saturating_add(1));
    }
    for _ in 0..squarings {
        let fg = mat_mul(&f, &g);
        g = mat_add(&g, &fg);
        f = mat_mul(&f, &f);
    }
    (f, g)
}

fn binomial(n: u32, k: u32) -> f64 {
    if k > n {
        return 0.0;
    }
    let mut r = 1.0;
    for i in 0..k {
        r = r * f64::from(n.saturating_sub(i)) / f64::from(i.saturating_add(1));
    }
    r
}

/// The chain of SRS(k, m, s) (Ring A.2), with `T(i)` found by enumerating failure sets.
///
/// # Errors
/// [`Error::Shape`] for a bad shape; [`Error::ModelParam`] if `s + m > MODEL_NODES_MAX`.
pub fn srs_chain(k: u32, m: u32, s: u32, mu: f64) -> Result<Chain, Error> {
    let layout = Layout::with_any_stretch(k, m, s, crate::bounds::CHUNK_BYTES_MIN)?;
    let n = s.saturating_add(m);
    if n > MODEL_NODES_MAX {
        return Err(Error::ModelParam {
            what: "too many nodes to enumerate failure sets",
        });
    }
    let nu = usize::try_from(n).unwrap_or(0);
    let su = usize::try_from(s).unwrap_or(0);
    let mut survived = vec![0u64; nu.saturating_add(1)];
    let mut total = vec![0u64; nu.saturating_add(1)];
    let mut failed_data = vec![false; su];
    let mut failed_parity = vec![false; usize::try_from(m).unwrap_or(0)];
    // 2^n ≤ 2^20 sets.
    for set in 0u32..(1u32 << n) {
        for (b, f) in failed_data.iter_mut().enumerate() {
            *f = (set >> b) & 1 == 1;
        }
        for (b, f) in failed_parity.iter_mut().enumerate() {
            *f = (set >> b.saturating_add(su)) & 1 == 1;
        }
        let i = usize::try_from(set.count_ones()).unwrap_or(0);
        if let Some(t) = total.get_mut(i) {
            *t = t.saturating_add(1);
        }
        if layout.survives(&failed_data, &failed_parity) {
            if let Some(v) = survived.get_mut(i) {
                *v = v.saturating_add(1);
            }
        }
    }
    let mut survive = Vec::new();
    for (sv, t) in survived.iter().zip(total.iter()) {
        if *sv == 0 {
            break;
        }
        survive.push(*sv as f64 / *t as f64);
    }
    let u = survive.len().saturating_sub(1);
    let mu_p = mu;
    let mu_d = mu * f64::from(s) / f64::from(k);
    let mut rebuild = vec![0.0];
    for i in 1..=u {
        let iu = u32::try_from(i).unwrap_or(u32::MAX);
        let denom = binomial(n, iu);
        let mut rate = 0.0;
        for j in 0..=iu {
            let parity_failed = iu.saturating_sub(j);
            if parity_failed > m || j > s {
                continue;
            }
            let pij = binomial(s, j) * binomial(m, parity_failed) / denom;
            let muij = f64::from(j) / f64::from(iu) * mu_d
                + f64::from(parity_failed) / f64::from(iu) * mu_p;
            rate += pij * muij;
        }
        rebuild.push(rate);
    }
    Ok(Chain {
        nodes: n,
        survive,
        rebuild,
        available_states: 1,
    })
}

/// The chain of one group of `r` nodes that survives any `t` failures and none beyond
/// (Ring A.1 for RS: `r = k + m`, `t = m`; §3.1 for quorum replication: `t = ⌊(r−1)/2⌋`).
pub fn threshold_chain(r: u32, t: u32, mu: f64, available_states: usize) -> Chain {
    let t = t.min(r);
    Chain {
        nodes: r,
        survive: vec![1.0; usize::try_from(t).unwrap_or(0).saturating_add(1)],
        rebuild: std::iter::once(0.0)
            .chain(std::iter::repeat_n(mu, usize::try_from(t).unwrap_or(0)))
            .collect(),
        available_states,
    }
}

fn check(p: &ModelParams) -> Result<(), Error> {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    if !ok(p.node_failures_per_year) || !ok(p.rebuilds_per_year) || !ok(p.years) {
        return Err(Error::ModelParam {
            what: "rates and period must be finite and > 0",
        });
    }
    if p.data_nodes == 0 || p.data_nodes > crate::bounds::DATA_NODES_MAX {
        return Err(Error::ModelParam {
            what: "data_nodes out of range",
        });
    }
    Ok(())
}

fn nines(p: f64) -> f64 {
    if p <= 0.0 {
        f64::INFINITY
    } else {
        -p.log10()
    }
}

/// Annual reliability and availability of a memgest (see the module docs).
///
/// # Errors
/// [`Error::ModelParam`] for bad rates or too many nodes, [`Error::Shape`] for a bad
/// `ec` shape.
pub fn reliability(kind: MemgestKind, p: &ModelParams) -> Result<Reliability, Error> {
    check(p)?;
    let (loss, avail) = match kind {
        MemgestKind::Ec { k, m } => {
            let chain = srs_chain(
                u32::from(k),
                u32::from(m),
                p.data_nodes,
                p.rebuilds_per_year,
            )?;
            chain.solve(p.node_failures_per_year, p.years)?
        }
        MemgestKind::None | MemgestKind::Rep { .. } => {
            let r = match kind {
                MemgestKind::Rep { r } => u32::from(r).max(1),
                _ => 1,
            };
            // Availability needs a live majority (Ring §3.1: ⌊(R−1)/2⌋ failures). Data is
            // lost only when every node of some acknowledged majority is gone, so durability
            // tolerates ⌊R/2⌋ — the same as §3.1 for odd R, one more for even R (rep:2 keeps
            // acknowledged data after one failure: both copies had it).
            let t_avail = u32::from(kind.failures_tolerated());
            let t_dur = r.checked_div(2).unwrap_or(0);
            let avail_states = usize::try_from(t_avail).unwrap_or(0).saturating_add(1);
            let chain = threshold_chain(r, t_dur, p.rebuilds_per_year, avail_states);
            let (gl, ga) = chain.solve(p.node_failures_per_year, p.years)?;
            let groups = f64::from(p.data_nodes);
            // ln1p/exp_m1 keep precision for tiny per-group loss.
            let loss = -((groups * (-gl).ln_1p()).exp_m1());
            let unavail = -((groups * (-(1.0 - ga)).ln_1p()).exp_m1());
            (loss, 1.0 - unavail)
        }
    };
    Ok(Reliability {
        annual_loss_probability: loss,
        nines: nines(loss),
        availability: avail,
        availability_nines: nines(1.0 - avail),
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    /// Ring A.1: "for RS(3, 2) ... the transition matrix has the following form
    /// A = [−5λ 5λ 0 0; µ −4λ−µ 4λ 0; 0 µ −3λ−µ 3λ; 0 0 0 0]".
    #[test]
    fn rs_3_2_generator_is_the_papers() {
        let (l, mu) = (0.25, 1000.0);
        let q = srs_chain(3, 2, 3, mu).unwrap().generator(l);
        let want = [
            [-5.0 * l, 5.0 * l, 0.0, 0.0],
            [mu, -4.0 * l - mu, 4.0 * l, 0.0],
            [0.0, mu, -3.0 * l - mu, 3.0 * l],
            [0.0, 0.0, 0.0, 0.0],
        ];
        for (r, w) in q.iter().zip(want.iter()) {
            for (a, b) in r.iter().zip(w.iter()) {
                assert!((a - b).abs() < 1e-9, "{q:?}");
            }
        }
    }

    /// Ring A.2: SRS(2, 1, 4) "can always tolerate a single failure and with probability 2/5
    /// overtake the second failure. Thus, the Markov model ... is comprised of 4 states".
    /// (The printed matrix uses 6λ/5λ/4λ, which contradicts its own λ_i = (s + m − i)λ with
    /// s + m = 5; we follow the formula: 5λ, 4λ, 3λ.)
    #[test]
    fn srs_2_1_4_chain_is_the_papers() {
        let c = srs_chain(2, 1, 4, 100.0).unwrap();
        assert_eq!(c.survive.len(), 3); // states 0, 1, 2 (+ FS)
        assert!(close(c.survive[2], 0.4, 1e-12));
        let l = 1.0;
        let q = c.generator(l);
        assert!(close(q[0][1], 5.0 * l, 1e-12));
        assert!(close(q[1][2], 4.0 * l * 2.0 / 5.0, 1e-12));
        assert!(close(q[1][3], 4.0 * l * 3.0 / 5.0, 1e-12));
        assert!(close(q[2][3], 3.0 * l, 1e-12));
        // µ_1: one failed node, data with prob 4/5 (rebuilt 2× faster: s/k = 2), parity 1/5.
        assert!(close(q[1][0], 0.8 * 200.0 + 0.2 * 100.0, 1e-12));
    }

    #[test]
    fn single_node_matches_closed_form() {
        // One node, no redundancy: P(loss in t) = 1 − e^{−λt}; availability = (1 − e^{−λt})/(λt).
        let c = threshold_chain(1, 0, 0.0, 1);
        let (loss, avail) = c.solve(0.3, 1.0).unwrap();
        assert!(close(loss, 1.0 - (-0.3f64).exp(), 1e-9));
        assert!(close(avail, (1.0 - (-0.3f64).exp()) / 0.3, 1e-9));
    }

    #[test]
    fn two_state_repairable_matches_closed_form() {
        // RS(1,1)-like: 2 nodes, tolerate 1. Absorption probability for a stiff chain,
        // checked against an independent eigenvalue solution of the 2×2 transient block.
        let (l, mu) = (0.2, 1000.0);
        let c = threshold_chain(2, 1, mu, 1);
        let (loss, _) = c.solve(l, 1.0).unwrap();
        // Transient block B = [[-2l, 2l], [mu, -(l+mu)]]; survival = e0^T exp(Bt) 1.
        let (a, b, cc, d) = (-2.0 * l, 2.0 * l, mu, -(l + mu));
        let tr = a + d;
        let det = a * d - b * cc;
        let disc = (tr * tr / 4.0 - det).sqrt();
        let (r1, r2) = (tr / 2.0 + disc, tr / 2.0 - disc);
        // exp(Bt) = (e^{r1 t}(B − r2 I) − e^{r2 t}(B − r1 I)) / (r1 − r2); row 0 summed.
        let row0 = |r: f64| (a - r) + b;
        let surv = ((r1).exp() * row0(r2) - (r2).exp() * row0(r1)) / (r1 - r2);
        assert!(close(loss, 1.0 - surv, 1e-6), "{loss} vs {}", 1.0 - surv);
    }

    #[test]
    fn rejects_bad_params() {
        let mut p = ModelParams::from_hours(3, 43800.0, 2.0);
        p.node_failures_per_year = f64::NAN;
        assert!(reliability(MemgestKind::None, &p).is_err());
        let p = ModelParams::from_hours(0, 43800.0, 2.0);
        assert!(reliability(MemgestKind::None, &p).is_err());
        let p = ModelParams::from_hours(19, 43800.0, 2.0);
        assert!(reliability(MemgestKind::Ec { k: 3, m: 2 }, &p).is_err());
    }
}
