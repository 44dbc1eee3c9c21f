//! MULTI, EXEC, DISCARD: Redis transactions without WATCH.
//!
//! # How it works
//!
//! MULTI gives the session a [`Queue`]. From then on [`super::dispatch`] still checks each
//! command (unknown name, arity, NOAUTH) as Redis's `processCommand` does — a refused command
//! marks the transaction so EXEC answers `EXECABORT` — and queues it with `+QUEUED` instead
//! of running it; MULTI, EXEC, DISCARD and QUIT run at once, as in Redis. EXEC takes the
//! write side of `Shared::exec` (every other RESP command and native request runs under its
//! read side), runs the queue in order through the same handlers, and answers an array of
//! their replies: a command that fails at run time puts its error in the array and the
//! others still run (Redis has no rollback either).
//!
//! Not built: WATCH/UNWATCH (optimistic locking needs a per-key modification counter the
//! engine does not keep), so they stay unknown commands. One-sided shm readers take no lock
//! and can see a transaction half applied.

use super::{lookup, Ctx};
use crate::reply::Reply;
use ringlet_types::limits;

/// The commands of one open transaction. Shared with the cluster front, which keeps one per
/// connection too.
#[derive(Default)]
pub struct Queue {
    commands: Vec<Vec<Vec<u8>>>,
    /// Argument bytes queued, bounded by `limits::MULTI_QUEUE_BYTES_MAX`.
    bytes: u64,
    /// A command was refused while queueing: EXEC answers EXECABORT.
    dirty: bool,
    /// Cluster front: the slot of the first key queued, and whether a later command had a
    /// key in another slot (EXEC then answers CROSSSLOT, as Redis Cluster). Unused on the
    /// single node.
    pub slot: Option<ringlet_types::Slot>,
    pub cross_slot: bool,
}

/// Commands that run at once inside a transaction instead of being queued (Redis 7.0's
/// `processCommand` list, restricted to the commands Ringlet has).
pub fn runs_at_once(name: &[u8]) -> bool {
    [&b"multi"[..], b"exec", b"discard", b"quit", b"reset"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// `err` for the command `name` (`""` if unknown), refused before it ran. Inside MULTI it
/// also marks the transaction aborted, and a refused EXEC discards it at once (Redis's
/// `rejectCommand` → `flagTransaction`, `execCommandAbort`).
pub fn refuse(ctx: &mut Ctx<'_>, name: &str, err: Reply) -> Reply {
    refuse_in(&mut ctx.session.multi, name.as_bytes(), err)
}

/// [`refuse`] over a connection's transaction state (both fronts).
pub fn refuse_in(multi: &mut Option<Queue>, name: &[u8], err: Reply) -> Reply {
    let Some(q) = multi.as_mut() else {
        return err;
    };
    q.dirty = true;
    if !name.eq_ignore_ascii_case(b"exec") {
        return err;
    }
    *multi = None;
    let Reply::Error(text) = &err else {
        return err;
    };
    // Redis formats the refusal without its "ERR " code after the EXECABORT text.
    let text = text.strip_prefix(b"ERR ").unwrap_or(text);
    let mut msg = b"EXECABORT Transaction discarded because of: ".to_vec();
    msg.extend_from_slice(text);
    Reply::Error(msg.into())
}

impl Queue {
    /// Queue `argv` (`+QUEUED`), or refuse it when the queue would pass its byte bound.
    pub fn push(&mut self, argv: &[&[u8]]) -> Reply {
        let bytes: u64 = argv.iter().map(|a| a.len() as u64 + 16).sum();
        if self.bytes + bytes > limits::MULTI_QUEUE_BYTES_MAX {
            self.dirty = true;
            return Reply::err_owned(format!(
                "ERR transaction queue exceeds {} bytes",
                limits::MULTI_QUEUE_BYTES_MAX
            ));
        }
        self.bytes += bytes;
        self.commands
            .push(argv.iter().map(|a| a.to_vec()).collect());
        Reply::simple("QUEUED")
    }

    /// Mark the transaction aborted (a command was refused): EXEC answers EXECABORT.
    /// Commands queued, and the bytes of their arguments (CLIENT LIST's multi= and
    /// multi-mem=).
    pub fn queued(&self) -> (usize, u64) {
        (self.commands.len(), self.bytes)
    }

    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }
}

/// MULTI on a connection whose transaction state is `multi`.
pub fn begin(multi: &mut Option<Queue>) -> Reply {
    if multi.is_some() {
        return Reply::err("ERR MULTI calls can not be nested");
    }
    *multi = Some(Queue::default());
    Reply::ok()
}

/// DISCARD on a connection whose transaction state is `multi`.
pub fn abandon(multi: &mut Option<Queue>) -> Reply {
    match multi.take() {
        Some(_) => Reply::ok(),
        None => Reply::err("ERR DISCARD without MULTI"),
    }
}

/// EXEC's first step: end the transaction and hand back the commands to run, in order.
///
/// # Errors
/// Redis's reply when there is nothing to run: no MULTI, or a command was refused.
pub fn finish(multi: &mut Option<Queue>) -> Result<Vec<Vec<Vec<u8>>>, Reply> {
    let Some(q) = multi.take() else {
        return Err(Reply::err("ERR EXEC without MULTI"));
    };
    if q.dirty {
        return Err(Reply::err(
            "EXECABORT Transaction discarded because of previous errors.",
        ));
    }
    Ok(q.commands)
}

pub fn multi(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    begin(&mut ctx.session.multi)
}

pub fn discard(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    abandon(&mut ctx.session.multi)
}

/// EXEC. Called by dispatch without the read guard every other command holds: it takes
/// the write guard itself for the whole queue.
pub fn exec(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    let commands = match finish(&mut ctx.session.multi) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let shared = ctx.shared;
    let _exclusive = shared.exec.write();
    let mut replies = Vec::with_capacity(commands.len());
    for owned in &commands {
        let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        // Checked when queued; the table does not change, so this finds it again.
        let reply = match lookup(&argv) {
            Ok(idx) => super::run(ctx, idx, &argv),
            Err(e) => e,
        };
        replies.push(reply);
    }
    Reply::Array(replies)
}
