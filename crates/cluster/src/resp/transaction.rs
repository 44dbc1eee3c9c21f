//! MULTI / EXEC / DISCARD on the cluster front, with Redis Cluster's rule: a transaction's
//! keys are in one slot, which this node coordinates.
//!
//! The queue and its texts are the single node's (`ringlet_server::cmd::transaction`); what
//! differs is how commands are checked and run. While queueing, a command is checked against
//! the shared command table (unknown name, arity, NOAUTH) and its keys (from COMMAND INFO) against the
//! map: a key another node coordinates answers MOVED, and any refusal makes EXEC answer
//! EXECABORT. Keys in two slots are found at EXEC, which then answers CROSSSLOT and discards
//! the transaction (Redis Cluster does both the same way).
//!
//! EXEC holds the write side of `Front::exec` while it runs the queue through the normal
//! command path; every other RESP command of this node runs under the read side, so no other
//! client's command interleaves. The cost is that the node's other RESP clients wait for the
//! whole transaction, replication round trips included. Not held off: native-protocol
//! clients (they submit to the core directly) and the coordinator's expiry of due keys. A
//! coordinator that fails half-way through EXEC leaves the commands run so far applied (each
//! is replicated on its own; the replica core has no multi-key transactions, as MSETNX).
//! MEMGEST and the internal RECORDS call are refused inside a transaction.
//!
//! Between nodes: RECORDS (another node's CHASE) does not wait for EXEC, so a CHASE inside a
//! transaction can never wait on another node's transaction that chases back; it may read
//! records of a transaction half applied. A write inside EXEC whose outcome is ambiguous
//! asks the key's new coordinator with a GET, which waits for that node's EXEC if one runs;
//! that wait is bounded by `OP_DEADLINE`.

use super::{clients, err, Front};
use ringlet_codec::resp::{Proto, Reply};
use ringlet_server::cmd::transaction::{self as tx, Queue};
use ringlet_types::key_slot;

/// Ringlet's own commands refused inside a transaction: MEMGEST waits for the control plane,
/// RECORDS is another node's CHASE hop.
/// ACL likewise (SETUSER and DELUSER wait for the control plane).
const NOT_IN_MULTI: &[&str] = &["memgest", "records", "acl"];

impl Front {
    /// MULTI/EXEC/DISCARD, or queue `argv` inside a transaction. `None`: run it normally.
    pub(super) async fn transaction_step(
        &self,
        multi: &mut Option<Queue>,
        argv: &[Vec<u8>],
        proto: &mut Proto,
        authed: &mut bool,
        conn: &clients::Conn,
    ) -> Option<Reply> {
        let name = &argv[0][..];
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if !(is("multi") || is("exec") || is("discard")) {
            let q = multi.as_mut()?;
            if is("reset") {
                *multi = None; // RESET discards the transaction, then runs normally
                return None;
            }
            if tx::runs_at_once(name) {
                return None; // QUIT
            }
            return Some(self.queue(q, argv, *authed, conn));
        }
        if !*authed {
            return None; // the normal path answers NOAUTH
        }
        if argv.len() != 1 {
            let n = String::from_utf8_lossy(name).to_ascii_lowercase();
            let e = ringlet_command::table::arity_error(&n);
            return Some(super::convert(&tx::refuse_in(multi, name, e)));
        }
        conn.touch(
            if is("multi") {
                "multi"
            } else if is("discard") {
                "discard"
            } else {
                "exec"
            },
            std::time::Instant::now(),
        );
        Some(if is("multi") {
            super::convert(&tx::begin(multi))
        } else if is("discard") {
            super::convert(&tx::abandon(multi))
        } else {
            let slot = multi.as_ref().and_then(|q| q.slot);
            let cross_slot = multi.as_ref().is_some_and(|q| q.cross_slot);
            match tx::finish(multi) {
                Err(e) => super::convert(&e),
                Ok(_) if cross_slot => err("CROSSSLOT Keys in request don't hash to the same slot"),
                Ok(commands) => self.exec(commands, slot, proto, authed, conn).await,
            }
        })
    }

    /// Check `argv` as Redis does before queueing it, then queue it (`+QUEUED`).
    fn queue(&self, q: &mut Queue, argv: &[Vec<u8>], authed: bool, conn: &clients::Conn) -> Reply {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let refuse = |q: &mut Queue, r: Reply| {
            q.mark_dirty();
            r
        };
        // The shared table's checks (unknown name, arity, NOAUTH), as Redis runs them
        // before queueing.
        let (idx, spec) = match ringlet_command::lookup(&args) {
            Ok(i) => (i, ringlet_command::table().spec(i)),
            Err(e) => return refuse(q, super::convert(&e)),
        };
        if let Err(e) = spec.check(args.len(), !authed, ringlet_command::Mode::Cluster) {
            return refuse(q, super::convert(&e));
        }
        // ACL before queueing, as Redis (and again at EXEC: each command runs through
        // `Front::command`).
        if let Err(e) = self.acl_check(conn, idx, &args) {
            return refuse(q, e);
        }
        if NOT_IN_MULTI.contains(&spec.top_name()) {
            return refuse(q, err("ERR Command not allowed inside a transaction"));
        }
        for k in spec.keys(&args) {
            let slot = key_slot(k);
            if let Some(m) = self.moved(slot) {
                return refuse(q, m);
            }
            match q.slot {
                None => q.slot = Some(slot),
                Some(s) if s != slot => q.cross_slot = true,
                Some(_) => {}
            }
        }
        super::convert(&q.push(&args))
    }

    /// Run a transaction's commands in order with no other RESP command of this node in
    /// between; the array of their replies.
    async fn exec(
        &self,
        commands: Vec<Vec<Vec<u8>>>,
        slot: Option<ringlet_types::Slot>,
        proto: &mut Proto,
        authed: &mut bool,
        conn: &clients::Conn,
    ) -> Reply {
        let _exclusive = self.exec.write().await;
        // The slot may have moved since the commands were queued: Redis Cluster checks again
        // at EXEC and discards the transaction with the redirection.
        if let Some(m) = slot.and_then(|s| self.moved(s)) {
            return m;
        }
        let mut replies = Vec::with_capacity(commands.len());
        let _ = super::CONN_WRITES.try_with(|w| w.in_exec.set(true));
        for argv in &commands {
            replies.push(self.command(argv, proto, authed, conn).await);
        }
        let _ = super::CONN_WRITES.try_with(|w| w.in_exec.set(false));
        Reply::Array(replies)
    }
}
