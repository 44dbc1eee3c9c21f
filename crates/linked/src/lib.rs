//! `ringlet-linked`: linked mode over the network (issue 14). The in-process [`Linklet`]
//! (`ringlet-linklet`) stays free of I/O; this crate runs it as a member of a *linked
//! service*:
//!
//! - [`member`]: an application process joins a service at the coordinator, serves requests for
//!   the slot units it owns through the application's [`member::Handler`], and carries the
//!   Linklet's move batches to other members over TCP (begin, batches, commit/abort);
//! - [`sharder`]: the auto-sharder, a sans-I/O state machine that assigns units by load
//!   (requests/s, bytes, CPU) with hysteresis and a move budget, and detects dead members by
//!   lease expiry and reports their ranges as lost;
//! - [`coordinator`]: the TCP host of the sharders (`ringlet-linked coordinator`);
//! - [`router`]: the frontend library — watches the map, routes by slot, retries on `Moving`,
//!   follows `NotOwner` hints, all bounded;
//! - `replicate` (private): a backup member per unit for services with `replicas: 2` — dirty
//!   keys shipped to the backup and acked before a write is answered, backups seeded by
//!   snapshot, promoted when their owner dies;
//! - [`pg`]: freshness from PostgreSQL LISTEN/NOTIFY into `Linklet::invalidate_if_older`;
//! - [`wire`]: the frames; [`limits`]; [`error`].
//!
//! Design notes: `docs/design/linked-service.md`.
//!
//! [`Linklet`]: ringlet_linklet::Linklet

pub mod cli;
pub mod coordinator;
pub mod demo;
pub mod error;
pub mod limits;
pub mod member;
pub mod pg;
mod replicate;
pub mod router;
pub mod sharder;
pub mod wire;

pub use error::{MemberError, RouteError, WireError};
pub use member::{HandleError, Handler, Member, MemberConfig};
pub use router::{BlockingRouter, Router};
pub use sharder::{Sharder, SharderConfig};
