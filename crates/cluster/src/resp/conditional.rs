//! SET NX / XX for the native front (crates/cluster/src/native.rs): the same steps as RESP's
//! `SET ... NX|XX` — under the key's mutation lock, read whether the key exists, then write or
//! not — so a native conditional SET and every RESP write of the key (and native INCRBY, run
//! by the RESP front) are serialised by one lock on the key's coordinator.
//!
//! What the lock does not cover, exactly as for RESP's SET NX: a *plain* native SET or DEL
//! (the blind-write fast path, which takes no lock) of the same key at the same moment may
//! land between the read and the write. A new coordinator after a failover has its own
//! locks, but the old one is fenced before it (its in-flight write answers Ambiguous).
//!
//! Why CAS by version is not served here: CAS exists to detect *any* intervening write.
//! Under this lock it would miss the blind writes above and overwrite them while reporting
//! success: a lost update the caller chose CAS to rule out. Making every native write take
//! the lock would close the gap but puts a lock-table insert (and its `KEY_LOCKS_MAX` bound)
//! on the pipelined write path. CAS is instead a version-conditional write decided by the
//! replica core on the coordinator's single thread (`ClientOp::SetIf`, served by the native
//! front's `CasWrite`), where no write of the key can come between the check and the write.

use super::{err, Front};
use ringlet_codec::native::SetCond;
use ringlet_codec::resp::Reply;
use ringlet_replica::{ClientOp, ClientReply};
use ringlet_types::{key_slot, MemgestId, ValueKind, Version};

/// What a conditional SET did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CondOutcome {
    /// Written at this version.
    Stored(Version),
    /// The condition did not hold: nothing was written.
    NotStored,
}

impl Front {
    /// SET `key` = `value` if `cond` holds (NX: the key is absent; XX: present), under the
    /// key's lock. `expiry_ms` is absolute (unix ms); `memgest` as for a plain SET.
    ///
    /// # Errors
    /// MOVED, TRYAGAIN, OOM, ... as RESP's SET (the caller maps them to native statuses).
    pub(crate) async fn set_conditional(
        &self,
        key: &[u8],
        value: Vec<u8>,
        memgest: Option<MemgestId>,
        expiry_ms: Option<u64>,
        cond: SetCond,
    ) -> Result<CondOutcome, Reply> {
        if let Some(m) = self.moved(key_slot(key)) {
            return Err(m);
        }
        let _g = self.lock(key).await?;
        // Any kind counts as present (Redis: SET NX on a hash key is not stored).
        let exists = self.get_any(key).await?.is_some();
        let holds = match cond {
            SetCond::Always => true,
            SetCond::IfAbsent => !exists,
            SetCond::IfPresent => exists,
        };
        if !holds {
            return Ok(CondOutcome::NotStored);
        }
        let op = ClientOp::Set {
            key: key.to_vec(),
            value,
            memgest,
            expiry_ms,
            kind: ValueKind::String,
        };
        match self.run(op).await? {
            ClientReply::Written { version } => Ok(CondOutcome::Stored(version)),
            other => Err(err(format!("ERR unexpected reply {other:?}"))),
        }
    }
}
