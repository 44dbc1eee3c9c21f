//! [`BlockingClient`]: the async client behind a private tokio runtime, for synchronous code
//! (the CLI, scripts, Python bindings).

use bytes::Bytes;
use ringlet_types::{Epoch, Version};

use crate::client::{Client, DelOutcome, MgetValue, SetOptions, SetOutcome, Versioned};
use crate::config::ClientConfig;
use crate::error::Error;

/// A synchronous client. Each call blocks the calling thread until the async call completes.
///
/// It owns a one-worker multi-thread runtime, so its connections keep being served between
/// calls (a current-thread runtime would only run them inside a call).
///
/// # Panics
/// Calling its methods from inside an async context panics (tokio refuses to block a runtime
/// thread): that is a caller bug; use [`Client`] there.
pub struct BlockingClient {
    rt: tokio::runtime::Runtime,
    client: Client,
}

impl std::fmt::Debug for BlockingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingClient")
            .field("client", &self.client)
            .finish()
    }
}

impl BlockingClient {
    /// Connect to `addr` (`host:port`).
    ///
    /// # Errors
    /// As [`Client::connect`]; also [`Error::Config`] if the runtime cannot start.
    pub fn connect(addr: &str, cfg: ClientConfig) -> Result<BlockingClient, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ringlet-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("cannot start the client runtime: {e}")))?;
        let client = rt.block_on(Client::connect(addr, cfg))?;
        Ok(BlockingClient { rt, client })
    }

    /// The async client inside (to share its pool with async code on another runtime, use
    /// its methods only from within `self`'s calls or clone it onto that runtime's tasks).
    pub fn async_client(&self) -> &Client {
        &self.client
    }

    /// See [`Client::ping`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn ping(&self) -> Result<Epoch, Error> {
        self.rt.block_on(self.client.ping())
    }

    /// See [`Client::get`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn get(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        self.rt.block_on(self.client.get(key))
    }

    /// See [`Client::set`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<Versioned<SetOutcome>, Error> {
        self.rt.block_on(self.client.set(key, value, opts))
    }

    /// See [`Client::del`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn del(&self, key: &[u8], cas: Option<Version>) -> Result<Versioned<DelOutcome>, Error> {
        self.rt.block_on(self.client.del(key, cas))
    }

    /// See [`Client::incr_by`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<Versioned<i64>, Error> {
        self.rt.block_on(self.client.incr_by(key, delta))
    }

    /// See [`Client::chase`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn chase<L: AsRef<[u8]>>(
        &self,
        key: &[u8],
        links: &[L],
        opts: &crate::ChaseOptions,
    ) -> Result<Versioned<crate::ChaseResult>, Error> {
        self.rt.block_on(self.client.chase(key, links, opts))
    }

    /// See [`Client::mget`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Versioned<Vec<MgetValue>>, Error> {
        self.rt.block_on(self.client.mget(keys))
    }

    crate::command::typed_helpers_blocking!();

    /// The highest epoch seen.
    pub fn epoch(&self) -> Epoch {
        self.client.epoch()
    }
}
