//! Backoff with full jitter and a retry budget (token bucket), after the AWS architecture
//! blog's "exponential backoff and jitter" and Finagle's `RetryBudget`.
//!
//! Why a budget on top of a per-call retry count: a per-call count alone lets every call of a
//! busy client retry `retries_max` times when the server struggles, multiplying its load by
//! `retries_max + 1` exactly when it can least take it. The budget caps retries to a fraction
//! of successful calls (plus a small reserve), so retries help with blips and fade out during
//! an outage.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Milli-tokens per retry.
const TOKEN: i64 = 1000;

/// A shared token bucket of retries.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    milli: AtomicI64,
    earn_milli: i64,
    cap_milli: i64,
}

impl RetryBudget {
    pub(crate) fn new(ratio: f64, cap: u32) -> RetryBudget {
        let cap_milli = i64::from(cap) * TOKEN;
        RetryBudget {
            milli: AtomicI64::new(cap_milli),
            earn_milli: (ratio * TOKEN as f64).round() as i64,
            cap_milli,
        }
    }

    /// A call succeeded: earn a fraction of a retry.
    pub(crate) fn deposit(&self) {
        let _ = self
            .milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                Some((m + self.earn_milli).min(self.cap_milli))
            });
    }

    /// Take one retry if the budget has it.
    pub(crate) fn withdraw(&self) -> bool {
        self.milli
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                (m >= TOKEN).then_some(m - TOKEN)
            })
            .is_ok()
    }
}

/// xorshift64*: a tiny seeded generator for jitter (no dependency, deterministic per seed).
#[derive(Debug)]
pub(crate) struct Jitter {
    state: AtomicU64,
}

impl Jitter {
    pub(crate) fn new(seed: u64) -> Jitter {
        Jitter {
            state: AtomicU64::new(seed | 1),
        }
    }

    fn next(&self) -> u64 {
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Full jitter: uniform in `[0, min(max, base * 2^attempt)]`.
    pub(crate) fn backoff(&self, attempt: u32, base: Duration, max: Duration) -> Duration {
        let cap = base
            .checked_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
            .unwrap_or(max)
            .min(max);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next() % (nanos + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_caps_retries_and_refills_from_successes() {
        let b = RetryBudget::new(0.5, 2);
        assert!(b.withdraw() && b.withdraw());
        assert!(!b.withdraw());
        b.deposit();
        assert!(!b.withdraw(), "half a token is not a retry");
        b.deposit();
        assert!(b.withdraw());
        for _ in 0..100 {
            b.deposit();
        }
        assert!(b.withdraw() && b.withdraw() && !b.withdraw(), "capped at 2");
    }

    #[test]
    fn backoff_is_bounded_and_seeded() {
        let (a, b) = (Jitter::new(7), Jitter::new(7));
        for attempt in 0..40 {
            let d = a.backoff(
                attempt,
                Duration::from_millis(5),
                Duration::from_millis(100),
            );
            assert!(d <= Duration::from_millis(100));
            assert_eq!(
                d,
                b.backoff(
                    attempt,
                    Duration::from_millis(5),
                    Duration::from_millis(100)
                )
            );
        }
        assert!(
            a.backoff(0, Duration::from_millis(5), Duration::from_secs(1))
                <= Duration::from_millis(5)
        );
    }
}
