//! The process's etcd lease: its liveness for the whole cluster. The node key and (while
//! leading) the leader key are bound to it, so both vanish together when the process dies.
//!
//! What the rest of the process needs from it is one number, `ok_sent_ms`: the local
//! monotonic time at which the newest keepalive that etcd answered with a positive TTL was
//! *sent*. etcd received it later and set the lease's expiry to (arrival + TTL), so the lease
//! is certainly alive until `ok_sent_ms + ttl`. Heartbeat acks to the local node carry this
//! time (never a later one), which makes the node stop serving before etcd can expire its key.
//!
//! Losing the lease (etcd answers a keepalive with TTL ≤ 0) bumps the `generation`: the node
//! record is put again under a new lease (same incarnation). Fencing is the map's job: if the
//! leader saw the key vanish it failed the incarnation with a new epoch, and the node wipes
//! itself when it sees that map; if no leader noticed, nobody took the node's roles, and the
//! node (which stopped serving when its own lease ran out) may simply go on.

use super::{call, Backoff, EtcdError, RateLog};
use parking_lot::Mutex;
use ringlet_link::mono_ms;
use std::sync::Arc;
use std::time::Duration;

/// Shortest TTL accepted (etcd's own minimum is 1 s with a tuned election timeout, 2 s with
/// its defaults; it raises a smaller request silently).
pub const LEASE_TTL_S_MIN: u64 = 1;
/// Longest TTL accepted: the failover window grows with it.
pub const LEASE_TTL_S_MAX: u64 = 60;

/// A snapshot of the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseView {
    pub id: i64,
    /// Bumped on every new grant after a loss.
    pub generation: u64,
    /// Send time (this process's `mono_ms`) of the newest keepalive or grant etcd answered.
    pub ok_sent_ms: u64,
}

/// The lease and its keepalive state.
#[derive(Debug)]
pub struct NodeLease {
    ttl_s: u64,
    st: Mutex<LeaseView>,
}

impl NodeLease {
    /// Grant the first lease.
    ///
    /// # Errors
    /// A TTL out of range or the grant failing.
    pub async fn grant(
        client: &mut etcd_client::Client,
        ttl_s: u64,
    ) -> Result<Arc<NodeLease>, EtcdError> {
        if !(LEASE_TTL_S_MIN..=LEASE_TTL_S_MAX).contains(&ttl_s) {
            return Err(EtcdError::BadConfig(format!(
                "lease TTL {ttl_s} s outside {LEASE_TTL_S_MIN}..={LEASE_TTL_S_MAX}"
            )));
        }
        let t = mono_ms();
        let r = call("lease grant", client.lease_grant(ttl_s as i64, None)).await?;
        Ok(Arc::new(NodeLease {
            ttl_s,
            st: Mutex::new(LeaseView {
                id: r.id(),
                generation: 1,
                ok_sent_ms: t,
            }),
        }))
    }

    /// A lease that no task keeps alive (unit tests of its users).
    #[cfg(test)]
    pub(crate) fn detached(id: i64, ttl_s: u64, ok_sent_ms: u64) -> Arc<NodeLease> {
        Arc::new(NodeLease {
            ttl_s,
            st: Mutex::new(LeaseView {
                id,
                generation: 1,
                ok_sent_ms,
            }),
        })
    }

    /// As if the lease was lost and a new one granted.
    #[cfg(test)]
    pub(crate) fn replace(&self, id: i64, ok_sent_ms: u64) {
        let mut st = self.st.lock();
        *st = LeaseView {
            id,
            generation: st.generation + 1,
            ok_sent_ms,
        };
    }

    pub fn view(&self) -> LeaseView {
        *self.st.lock()
    }

    pub fn ttl_ms(&self) -> u64 {
        self.ttl_s * 1000
    }

    /// Until when (local `mono_ms`) the lease is certainly alive in etcd.
    pub fn alive_until_ms(&self) -> u64 {
        self.view().ok_sent_ms.saturating_add(self.ttl_ms())
    }

    /// Revoke the lease (clean shutdown: the cluster fails this node at once instead of
    /// after the TTL). Best effort, bounded by the call deadline.
    pub async fn revoke(&self, client: &mut etcd_client::Client) {
        let id = self.view().id;
        let _ = call("lease revoke", client.lease_revoke(id)).await;
    }

    /// Keep the lease alive forever (until the task is aborted); re-grant after a loss.
    ///
    /// Only etcd's word ends a lease (a keepalive answered with TTL ≤ 0): while etcd is
    /// unreachable the proof merely ages (the node stops serving when its own lease runs
    /// out) and the same lease is kept alive again once etcd answers, so an etcd outage
    /// shorter than the TTL changes nothing, and a longer one costs a re-registration, not
    /// a revocation.
    pub async fn run(self: Arc<Self>, mut client: etcd_client::Client) {
        // Four keepalives per TTL: one lost or slow answer still leaves half a TTL.
        let every = Duration::from_millis((self.ttl_ms() / 4).max(100));
        let mut backoff = Backoff::new();
        let mut log = RateLog::default();
        loop {
            let id = self.view().id;
            // Opening the stream sends the first keepalive and checks its answer.
            let t = mono_ms();
            let (mut keeper, mut stream) =
                match call("lease keepalive open", client.lease_keep_alive(id)).await {
                    Ok(s) => s,
                    Err(EtcdError::Etcd {
                        err: etcd_client::Error::LeaseKeepAliveError(m),
                        ..
                    }) if m.contains("not found") => {
                        log.log(0, || format!("lease {id:x} expired in etcd"));
                        self.regrant(&mut client, &mut log).await;
                        continue;
                    }
                    Err(e) => {
                        log.log(1000, || format!("keepalive stream: {e}"));
                        backoff.wait().await;
                        continue;
                    }
                };
            self.proven(id, t);
            backoff.reset();
            loop {
                let t = mono_ms();
                if call("lease keepalive", keeper.keep_alive()).await.is_err() {
                    break;
                }
                match call("lease keepalive answer", stream.message()).await {
                    Ok(Some(r)) if r.ttl() > 0 => self.proven(id, t),
                    Ok(Some(_)) => {
                        // TTL <= 0: etcd says the lease is gone (expired or revoked).
                        log.log(0, || format!("lease {id:x} expired in etcd"));
                        self.regrant(&mut client, &mut log).await;
                        break;
                    }
                    Ok(None) | Err(_) => {
                        log.log(1000, || format!("lease {id:x}: keepalive got no answer"));
                        break;
                    }
                }
                tokio::time::sleep(every).await;
            }
        }
    }

    /// etcd answered a keepalive of lease `id` sent at `t` with a positive TTL.
    fn proven(&self, id: i64, t: u64) {
        let mut st = self.st.lock();
        if st.id == id {
            st.ok_sent_ms = st.ok_sent_ms.max(t);
        }
    }

    async fn regrant(&self, client: &mut etcd_client::Client, log: &mut RateLog) {
        let mut backoff = Backoff::new();
        loop {
            let t = mono_ms();
            match call("lease grant", client.lease_grant(self.ttl_s as i64, None)).await {
                Ok(r) => {
                    let old = {
                        let mut st = self.st.lock();
                        let old = st.id;
                        *st = LeaseView {
                            id: r.id(),
                            generation: st.generation + 1,
                            ok_sent_ms: t,
                        };
                        old
                    };
                    tracing::warn!(
                        "ringlet-etcd: lease {old:x} lost; new lease {:x} (the node record is put again under it)",
                        r.id()
                    );
                    return;
                }
                Err(e) => {
                    log.log(1000, || format!("lease grant: {e}"));
                    backoff.wait().await;
                }
            }
        }
    }
}
