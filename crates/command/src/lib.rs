//! `ringlet-command`: the one command layer every front shares (issue 11, item 1).
//!
//! - [`table`]: every command Ringlet serves — Redis 7's name, arity, flags and key positions
//!   (generated from a real Redis, `tools/gen_command_table.py`) and Ringlet's own (LINK,
//!   CHASE, MEMGEST, RECORDS) — with the mode each is served in, and [`table::lookup`] /
//!   [`table::Spec::check`], which resolve a request with Redis's exact errors;
//! - [`introspect`]: COMMAND and its subcommands answered from the table;
//! - [`args`]: typed arguments of the commands whose options both fronts parse (SET, GETEX);
//! - [`reply`]: the protocol-neutral reply value; [`glob`]: Redis's `stringmatchlen`;
//! - [`acl`]: ACL users, the rule parser and the permission check every front and the
//!   control plane share (docs/design/acl.md).
//!
//! A front (the single node's `crates/server`, a cluster node's `crates/cluster`) resolves a
//! request here and runs its own handler for the spec: the handlers differ (the engine under
//! a lock, or the replica core), the names, arity, errors, key positions and option parsing
//! do not. No I/O here.

pub mod acl;
pub mod args;
pub mod glob;
pub mod introspect;
mod own;
pub mod reply;
pub mod table;
mod table_data;
pub use table_data::SOURCE_REDIS_VERSION;
mod table_data_helpers;

pub use table::{lookup, table, Mode, Spec, Table};
