//! 128-bit versions and the hybrid logical clock (HLC) that assigns them.
//!
//! ```text
//!  127            80 79        64 63          32 31           0
//! +----------------+------------+--------------+--------------+
//! | hlc ms (48)    | logical(16)| origin id(32)| sequence (32)|
//! +----------------+------------+--------------+--------------+
//! ```
//!
//! Why this shape: comparing two versions as plain `u128` orders them by wall-clock time first
//! (so a version says roughly *when* a write happened, which repair and TTL debugging want),
//! then by the HLC's logical counter (several writes in one millisecond), then by origin (two
//! coordinators that somehow issued the same HLC value — e.g. across a failover — still give a
//! total order), then by a per-origin sequence (request order within one origin). 48 bits of
//! milliseconds last until the year 10889.
//!
//! The HLC never goes backwards: a wall clock that jumps back leaves `ms` where it was and the
//! logical counter advances; observing a remote version pulls the clock forward.

/// A per-mutation version, totally ordered. `Version::ZERO` is "never written".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u128);

impl Version {
    /// Older than every real version: what a key that was never written has.
    pub const ZERO: Version = Version(0);
    /// Largest millisecond value that fits in 48 bits.
    pub const MS_MAX: u64 = (1 << 48) - 1;

    /// Assemble a version from its fields. `ms` is truncated to 48 bits.
    pub fn new(ms: u64, logical: u16, origin: u32, seq: u32) -> Version {
        Version(
            (u128::from(ms & Self::MS_MAX) << 80)
                | (u128::from(logical) << 64)
                | (u128::from(origin) << 32)
                | u128::from(seq),
        )
    }

    /// The HLC milliseconds.
    pub fn ms(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The HLC logical counter.
    pub fn logical(self) -> u16 {
        (self.0 >> 64) as u16
    }

    /// The node (or client) that issued this version.
    pub fn origin(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Per-origin sequence number.
    pub fn seq(self) -> u32 {
        self.0 as u32
    }

    /// Big-endian bytes: the wire and in-memory form (byte order preserves ordering).
    pub fn to_be_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// Inverse of [`Version::to_be_bytes`].
    pub fn from_be_bytes(b: [u8; 16]) -> Version {
        Version(u128::from_be_bytes(b))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}@{}#{}",
            self.ms(),
            self.logical(),
            self.origin(),
            self.seq()
        )
    }
}

/// Hybrid logical clock of one origin. Sans-I/O: the caller passes the wall-clock time.
#[derive(Clone, Debug)]
pub struct Hlc {
    origin: u32,
    ms: u64,
    logical: u16,
    seq: u32,
}

impl Hlc {
    /// A clock for `origin` that has issued nothing yet.
    pub fn new(origin: u32) -> Hlc {
        Hlc {
            origin,
            ms: 0,
            logical: 0,
            seq: 0,
        }
    }

    /// Issue a version strictly greater than every version this clock issued or observed.
    /// `now_ms` is the caller's wall clock; if it went backwards the clock does not.
    pub fn next(&mut self, now_ms: u64) -> Version {
        let now_ms = now_ms.min(Version::MS_MAX);
        if now_ms > self.ms {
            self.ms = now_ms;
            self.logical = 0;
        } else if self.logical == u16::MAX {
            // 65,536 versions in one millisecond: borrow the next millisecond rather than wrap.
            self.ms += 1;
            self.logical = 0;
        } else {
            self.logical += 1;
        }
        self.seq = self.seq.wrapping_add(1);
        Version::new(self.ms, self.logical, self.origin, self.seq)
    }

    /// Pull the clock forward past a version seen from elsewhere (a replica's reply, a
    /// client-nominated version), so the next version issued here is greater than it.
    pub fn observe(&mut self, seen: Version) {
        let (ms, logical) = (seen.ms(), seen.logical());
        if (ms, logical) > (self.ms, self.logical) {
            self.ms = ms;
            self.logical = logical;
        }
    }

    /// The last (ms, logical) pair issued or observed.
    pub fn peek(&self) -> (u64, u16) {
        (self.ms, self.logical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let v = Version::new(1_700_000_000_000, 7, 42, 99);
        assert_eq!(v.ms(), 1_700_000_000_000);
        assert_eq!(v.logical(), 7);
        assert_eq!(v.origin(), 42);
        assert_eq!(v.seq(), 99);
        assert_eq!(Version::from_be_bytes(v.to_be_bytes()), v);
    }

    #[test]
    fn order_is_ms_then_logical_then_origin() {
        assert!(Version::new(2, 0, 0, 0) > Version::new(1, 9, 9, 9));
        assert!(Version::new(1, 2, 0, 0) > Version::new(1, 1, 9, 9));
        assert!(Version::new(1, 1, 2, 0) > Version::new(1, 1, 1, 9));
    }

    #[test]
    fn hlc_never_goes_backwards() {
        let mut c = Hlc::new(1);
        let a = c.next(1000);
        let b = c.next(500); // clock jumped back
        let d = c.next(1000);
        assert!(b > a && d > b);
        c.observe(Version::new(5000, 3, 2, 0));
        assert!(c.next(1000) > Version::new(5000, 3, u32::MAX, u32::MAX));
    }

    #[test]
    fn hlc_logical_overflow_borrows_a_millisecond() {
        let mut c = Hlc::new(1);
        let mut last = c.next(10);
        for _ in 0..70_000 {
            let v = c.next(10);
            assert!(v > last);
            last = v;
        }
        assert_eq!(last.ms(), 11);
    }
}
