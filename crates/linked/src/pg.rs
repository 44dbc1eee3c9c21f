//! Freshness from PostgreSQL (LInK §4.2 "Freshness"): a LISTEN/NOTIFY source that turns
//! change notifications from the system of record into `Linklet::invalidate_if_older`.
//!
//! The database announces changes with a trigger calling
//! `pg_notify('<channel>', <version>::text || ' ' || <key>)`: payload `"<version> <key>"`
//! (the version first, since a key may contain spaces). See the test `tests/pg.rs` for a
//! trigger. For every notification the source calls `invalidate_if_older(key, version)`:
//! - the held value is dropped if older (the application reloads on its next miss);
//! - the version is remembered in the Linklet's recent-invalidation table whatever the slot's
//!   state, so a racing load of the old row, or a move batch carrying it, is refused later —
//!   which is why every member of a service runs a source and sees every notification;
//! - `Moving`: queued and retried every `NOTIFY_RETRY_INTERVAL_MS` until the move ends (at
//!   most `NOTIFY_RETRY_ROUNDS_MAX` rounds; the target's own source covers the new copy);
//! - `NotOwner`: nothing else to do (remembered, in case the slot arrives later).
//!
//! **Staleness bound.** A value is stale from the commit of a change until its notification is
//! applied here: PostgreSQL delivers notifications at commit, so the bound is one delivery
//! (loopback: milliseconds) while the LISTEN connection is up. If it drops, notifications in
//! between are lost: the source ends with [`PgError`], every value may be stale, and the
//! application restarts the source and bounds staleness with `get_fresh` (or drops its cache).
//! Not done: a catch-up query after a reconnect (it needs a change log table to query).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use ringlet_linklet::{Error as LinkError, LinkKey, Linklet};
use tokio_postgres::AsyncMessage;

use crate::limits;

/// Why the source could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The connection failed or was lost.
    #[error("postgres: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The channel name is not a plain identifier (`[a-z_][a-z0-9_]*`, at most 63 bytes).
    #[error("invalid channel name")]
    Channel,
    /// The server closed the connection.
    #[error("the LISTEN connection ended")]
    Closed,
}

/// Counters of one source.
#[derive(Debug, Default)]
pub struct PgStats {
    /// Notifications received on the channel.
    pub received: AtomicU64,
    /// Entries dropped because they were older.
    pub dropped: AtomicU64,
    /// Notifications for slots not served here (remembered only).
    pub not_owner: AtomicU64,
    /// Retries of notifications for moving slots.
    pub retries: AtomicU64,
    /// Malformed payloads (ignored).
    pub malformed: AtomicU64,
    /// Notifications dropped: retry queue full, or still moving after the last round.
    pub gave_up: AtomicU64,
}

/// A running LISTEN source.
pub struct PgSource {
    /// Counters.
    pub stats: Arc<PgStats>,
    task: tokio::task::JoinHandle<PgError>,
}

impl PgSource {
    /// Wait for the source to end (it runs until the connection is lost).
    pub async fn ended(mut self) -> PgError {
        (&mut self.task).await.unwrap_or(PgError::Closed)
    }
}

impl Drop for PgSource {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn channel_ok(c: &str) -> bool {
    let mut b = c.bytes();
    c.len() <= 63
        && b.next()
            .is_some_and(|x| x.is_ascii_lowercase() || x == b'_')
        && b.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == b'_')
}

/// Connect with `conninfo` (libpq style: `host=… port=… user=… dbname=…`), `LISTEN channel`,
/// and apply every notification to `linklet` until the connection is lost.
///
/// # Errors
/// [`PgError`] if connecting or `LISTEN` fails.
pub async fn listen<K: LinkKey, V: Send + Sync + 'static>(
    conninfo: &str,
    channel: &str,
    linklet: Arc<Linklet<K, V>>,
) -> Result<PgSource, PgError> {
    if !channel_ok(channel) {
        return Err(PgError::Channel);
    }
    let (client, mut conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await?;
    let (msg_tx, mut msg_rx) = tokio::sync::mpsc::unbounded_channel();
    // The connection must be polled for the client to work: drive it on its own task and pass
    // the notifications on. (Unbounded only in form: PostgreSQL sends no faster than this
    // task's consumer drains, which runs the same cheap call per message.)
    let driver = tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = stream.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    if msg_tx.send(Ok(n)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = msg_tx.send(Err(e));
                    return;
                }
            }
        }
    });
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    let stats = Arc::new(PgStats::default());
    let st = Arc::clone(&stats);
    let task = tokio::spawn(async move {
        let _client = client;
        let mut retry: VecDeque<(K, u64, u32)> = VecDeque::new();
        let mut iv = tokio::time::interval(Duration::from_millis(limits::NOTIFY_RETRY_INTERVAL_MS));
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let err = loop {
            tokio::select! {
                m = msg_rx.recv() => match m {
                    Some(Ok(n)) => {
                        st.received.fetch_add(1, Ordering::Relaxed);
                        match parse::<K>(n.payload()) {
                            Some((key, version)) => {
                                if let Some(r) = apply(&linklet, &st, key, version, 0) {
                                    if retry.len() >= limits::NOTIFY_RETRY_QUEUE_MAX {
                                        st.gave_up.fetch_add(1, Ordering::Relaxed);
                                    } else {
                                        retry.push_back(r);
                                    }
                                }
                            }
                            None => {
                                st.malformed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Some(Err(e)) => break PgError::Postgres(e),
                    None => break PgError::Closed,
                },
                _ = iv.tick(), if !retry.is_empty() => {
                    // One pass over what was queued before this round.
                    for _ in 0..retry.len() {
                        let Some((key, version, rounds)) = retry.pop_front() else { break };
                        st.retries.fetch_add(1, Ordering::Relaxed);
                        if let Some(r) = apply(&linklet, &st, key, version, rounds + 1) {
                            retry.push_back(r);
                        }
                    }
                }
            }
        };
        driver.abort();
        err
    });
    Ok(PgSource { stats, task })
}

/// `"<version> <key>"`.
fn parse<K: LinkKey>(payload: &str) -> Option<(K, u64)> {
    if payload.len() > limits::NOTIFY_PAYLOAD_BYTES_MAX {
        return None;
    }
    let (v, k) = payload.split_once(' ')?;
    Some((K::from_key_bytes(k.as_bytes())?, v.parse().ok()?))
}

/// Apply one notification; returns it back if it must be retried.
fn apply<K: LinkKey, V: Send + Sync + 'static>(
    l: &Linklet<K, V>,
    st: &PgStats,
    key: K,
    version: u64,
    rounds: u32,
) -> Option<(K, u64, u32)> {
    match l.invalidate_if_older(&key, version) {
        Ok(true) => {
            st.dropped.fetch_add(1, Ordering::Relaxed);
            None
        }
        Ok(false) => None,
        Err(LinkError::NotOwner { .. }) => {
            st.not_owner.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(LinkError::Moving { .. }) if rounds < limits::NOTIFY_RETRY_ROUNDS_MAX => {
            Some((key, version, rounds))
        }
        Err(_) => {
            st.gave_up.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_and_channels_are_checked() {
        assert_eq!(parse::<String>("7 user 1"), Some(("user 1".into(), 7)));
        assert_eq!(parse::<String>("x user"), None);
        assert_eq!(parse::<String>("7"), None);
        assert!(channel_ok("ringlet_inval"));
        assert!(!channel_ok("Bad;DROP"));
        assert!(!channel_ok(""));
        assert!(!channel_ok(&"a".repeat(64)));
    }
}
