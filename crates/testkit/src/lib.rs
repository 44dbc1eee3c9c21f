//! Test support used by more than one crate's integration tests, so each does not keep its
//! own copy. Dev-dependency only; nothing here ships.
//!
//! - [`pg`]: a throwaway PostgreSQL from Debian's packages (the loader's PostgreSQL source in
//!   crates/cli, the LISTEN/NOTIFY freshness source in crates/linked).

pub mod pg;
