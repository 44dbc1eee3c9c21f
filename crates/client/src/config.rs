//! Client configuration, validated once.

use std::time::Duration;

use ringlet_types::limits;

use crate::error::Error;

/// How a [`crate::Client`] connects, bounds its work and retries.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Connections per server address. Calls are spread over them round-robin; each one
    /// pipelines up to `in_flight_per_connection_max` requests.
    pub connections: usize,
    /// Requests outstanding on one connection before callers wait (back-pressure: this is the
    /// bound on the per-connection pending table and write buffer).
    pub in_flight_per_connection_max: usize,
    /// Deadline of one call, retries and backoff included.
    pub timeout: Duration,
    /// Deadline of establishing one TCP connection (also bounded by the call's deadline).
    pub connect_timeout: Duration,
    /// Retries of one call (≤ `limits::RETRY_COUNT_MAX`).
    pub retries_max: u32,
    /// First backoff; doubles per retry up to `backoff_max`, with full jitter.
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Retry budget: each successful call earns this fraction of a retry (0.1 = at most ~10%
    /// extra load from retries once the initial allowance is spent), so a struggling server
    /// is not hit by a retry storm.
    pub retry_budget_ratio: f64,
    /// Retries the budget holds when full (and starts with).
    pub retry_budget_cap: u32,
    /// Keys per MGET frame: larger MGETs are split into batches sent concurrently.
    pub mget_batch_keys: usize,
    /// Seed of the backoff jitter (deterministic tests); `None` picks one from the clock.
    pub seed: Option<u64>,
    /// Speak TLS to every server (a cluster started with `--tls-*` files); `None`: TCP.
    pub tls: Option<crate::ClientTls>,
    /// Log every connection in as this user (`ringlet server --requirepass`, ACL users:
    /// docs/design/acl.md) before its first request; `None`: run as the default user.
    pub auth: Option<Credentials>,
}

/// A user and password for AUTH (RESP's `AUTH [user] password`).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user; empty for `default` (a `--requirepass` password).
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    // The password stays out of logs and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connections: 2,
            in_flight_per_connection_max: 1024,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            retries_max: 3,
            backoff_base: Duration::from_millis(5),
            backoff_max: Duration::from_millis(500),
            retry_budget_ratio: 0.1,
            retry_budget_cap: 10,
            mget_batch_keys: 256,
            seed: None,
            tls: None,
            auth: None,
        }
    }
}

impl ClientConfig {
    /// Check every field; the message names the field.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: &str| Err(Error::Config(m.to_string()));
        if let Some(c) = &self.auth {
            let max = limits::KEY_BYTES_MAX as usize;
            if c.user.len() > max || c.password.len() > max {
                return bad("auth: user and password must be at most KEY_BYTES_MAX bytes");
            }
        }
        if self.connections == 0 || self.connections > limits::CONNECTIONS_MAX as usize {
            return bad("connections must be 1..=CONNECTIONS_MAX");
        }
        if self.in_flight_per_connection_max == 0
            || self.in_flight_per_connection_max > limits::QUEUE_CAPACITY as usize
        {
            return bad("in_flight_per_connection_max must be 1..=QUEUE_CAPACITY");
        }
        if self.timeout.is_zero() || self.connect_timeout.is_zero() {
            return bad("timeout and connect_timeout must be > 0");
        }
        if self.retries_max > limits::RETRY_COUNT_MAX {
            return bad("retries_max must be <= RETRY_COUNT_MAX");
        }
        if self.backoff_base > self.backoff_max {
            return bad("backoff_base must be <= backoff_max");
        }
        if !(0.0..=1.0).contains(&self.retry_budget_ratio) {
            return bad("retry_budget_ratio must be within 0..=1");
        }
        if self.mget_batch_keys == 0 || self.mget_batch_keys > limits::BATCH_KEYS_MAX as usize {
            return bad("mget_batch_keys must be 1..=BATCH_KEYS_MAX");
        }
        Ok(())
    }
}
