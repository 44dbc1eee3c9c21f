//! Test support used by more than one crate's integration tests, so each does not keep its
//! own copy. Dev-dependency only; nothing here ships.
//!
//! - [`pg`]: a throwaway PostgreSQL from Debian's packages (the loader's PostgreSQL source in
//!   crates/cli, the LISTEN/NOTIFY freshness source in crates/linked);
//! - [`redis`]: a real Redis 7 on a free port (the differential tests of crates/server and
//!   the DUMP payload codec's in crates/rdb).

pub mod pg;
pub mod redis;
