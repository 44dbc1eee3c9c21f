//! Entry points for fuzzing and property tests: run arbitrary client bytes through the real
//! request path (codec decoder → dispatch → every command → codec encoder) without sockets.
//!
//! `cargo test` runs them with proptest (`tests/prop_requests.rs`); a cargo-fuzz target can
//! wrap [`run_resp_bytes`] the same way.

use crate::cmd::Session;
use crate::config::Config;
use crate::conn::RespProcessor;
use crate::db::Db;
use crate::shared::{ClientState, Shared};
use bytes::BytesMut;
use parking_lot::Mutex;
use ringlet_codec::resp::Proto;
use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::Arc;
use std::time::Instant;

/// A node without sockets: shared state, a reader, one session.
pub struct Harness {
    shared: Arc<Shared>,
    reader: ringlet_engine::Reader,
    session: Session,
    processor: RespProcessor,
    /// Clock of this harness (ms); advance it to exercise expiry.
    pub now_ms: u64,
}

impl Harness {
    /// A fresh node with a small data region (optionally with a password).
    ///
    /// # Panics
    /// If the engine cannot reserve 16 MiB (a test environment problem, not input).
    pub fn new(requirepass: Option<&str>) -> Harness {
        Harness::sized(requirepass, 16, None)
    }

    /// [`Harness::new`] with a data region of `memory_mb` and the index sized for
    /// `index_keys` from the start (`ringlet server --memory-mb --index-keys`): what a
    /// benchmark of a bulk load needs (`benches/record_load.rs`).
    ///
    /// # Panics
    /// If the engine cannot reserve the region.
    pub fn sized(requirepass: Option<&str>, memory_mb: u64, index_keys: Option<u64>) -> Harness {
        let config = Config {
            memory_mb,
            requirepass: requirepass.map(str::to_owned),
            ..Config::default()
        };
        let db = Db::with_index(memory_mb << 20, index_keys).expect("engine");
        let shared = Arc::new(Shared::new(config, db, 0));
        let reader = shared.db.reader();
        let state = Arc::new(ClientState {
            id: 1,
            addr: ([127, 0, 0, 1], 1).into(),
            laddr: ([127, 0, 0, 1], 2).into(),
            created: Instant::now(),
            last_cmd_at_ms: AtomicU64::new(0),
            last_cmd: AtomicU64::new(u64::MAX),
            resp: AtomicU8::new(2),
            name: Mutex::new(Vec::new()),
            buffers: Default::default(),
            user: Mutex::new("default".to_string()),
        });
        let session = Session {
            id: 1,
            proto: Proto::Resp2,
            authenticated: requirepass.is_none(),
            quit: false,
            multi: None,
            state,
            user: ringlet_command::acl::ConnUser::new(&shared.acl),
        };
        Harness {
            shared,
            reader,
            session,
            processor: RespProcessor::new(),
            now_ms: 1_700_000_000_000,
        }
    }

    /// Run one engine tick at the harness clock (what the server's timer does every
    /// `tick_interval_ms`); returns how many keys active expiry removed.
    pub fn tick(&mut self) -> u32 {
        self.shared.db.lock().tick(self.now_ms).expired
    }

    /// Send one command (as RESP) and return its reply bytes.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut input = Vec::new();
        ringlet_codec::resp::encode_request(&mut input, args);
        self.feed(&input, input.len()).0
    }

    /// Feed `input` in chunks of `chunk` bytes (as reads would deliver it) and return every
    /// reply byte written, and whether the connection asked to close.
    pub fn feed(&mut self, input: &[u8], chunk: usize) -> (Vec<u8>, bool) {
        let mut rbuf = BytesMut::new();
        let mut wbuf = BytesMut::new();
        let mut out = Vec::new();
        for piece in input.chunks(chunk.max(1)) {
            rbuf.extend_from_slice(piece);
            // Bounded: each round consumes bytes or stops.
            loop {
                let p = self.processor.process(
                    &rbuf,
                    &self.shared,
                    &self.reader,
                    &mut self.session,
                    self.now_ms,
                    &mut wbuf,
                );
                bytes::Buf::advance(&mut rbuf, p.consumed);
                out.extend_from_slice(&wbuf);
                wbuf.clear();
                if p.close {
                    return (out, true);
                }
                if p.consumed == 0 {
                    break;
                }
            }
        }
        (out, false)
    }
}

impl Harness {
    /// Turn the batched GET/SET path off (every request through `cmd::dispatch`) or on.
    pub fn set_batching(&mut self, on: bool) {
        self.processor.set_batching(on);
    }

    /// Run `input` (complete requests) through the processor in one buffer, as one pipelined
    /// read, and return the replies and the largest write buffer any `process` call left
    /// (what the connection would hold before a flush).
    pub fn feed_measured(&mut self, input: &[u8]) -> (Vec<u8>, usize) {
        let mut rbuf = BytesMut::from(input);
        let mut wbuf = BytesMut::new();
        let mut out = Vec::new();
        let mut largest = 0;
        // Bounded: each round consumes bytes or stops.
        loop {
            let p = self.processor.process(
                &rbuf,
                &self.shared,
                &self.reader,
                &mut self.session,
                self.now_ms,
                &mut wbuf,
            );
            bytes::Buf::advance(&mut rbuf, p.consumed);
            largest = largest.max(wbuf.len());
            out.extend_from_slice(&wbuf);
            wbuf.clear();
            if p.close || p.consumed == 0 {
                return (out, largest);
            }
        }
    }
}

/// Run `input` through a fresh node in one chunk; returns the reply bytes. Never panics on
/// any input (that is what fuzzing checks).
pub fn run_resp_bytes(input: &[u8]) -> Vec<u8> {
    Harness::new(None).feed(input, input.len().max(1)).0
}
