//! Every size bound of Ringlet, in one place, each with the reason for its value.
//!
//! Decoders check wire lengths against these *before* allocating; the engine refuses entries
//! beyond them with a typed error. Relations between constants are checked at compile time.

/// Largest key. Redis allows 512 MiB keys, but a key is hashed, compared and copied on every
/// access and stored whole in every replica's index path; 64 KiB covers every real key we know
/// (memcached: 250 B) while keeping one key well inside a slab page.
pub const KEY_BYTES_MAX: u32 = 64 * 1024;

/// Largest value. Ringlet is a cache/store of objects, not of files: 64 MiB keeps one value's
/// copy, checksum and replication in the low milliseconds. (Redis: 512 MiB.)
pub const VALUE_BYTES_MAX: u32 = 64 * 1024 * 1024;

/// Largest data entry: header (≤ 64 B) + key + value, rounded up.
pub const ENTRY_BYTES_MAX: u32 = VALUE_BYTES_MAX + KEY_BYTES_MAX + 4096;

/// Largest native frame we decode: one max-size entry plus framing.
pub const FRAME_BYTES_MAX: u32 = ENTRY_BYTES_MAX + 4096;

/// Largest RESP bulk string (Redis `proto-max-bulk-len` is 512 MiB; ours is one value plus
/// slack so `SET k <max value>` fits).
pub const RESP_BULK_BYTES_MAX: u32 = VALUE_BYTES_MAX + 1024;

/// Most elements in one RESP array / native batch. Redis allows 2^31; 1M arguments is far
/// beyond any real MGET/MSET and bounds the memory a single request can pin before its bulk
/// strings arrive (1M × 16-byte argument headers = 16 MiB).
pub const ARRAY_ITEMS_MAX: u32 = 1024 * 1024;

/// Arguments of one native COMMAND frame (opcode 12), its name included: the same bound as a
/// RESP request's array ([`ARRAY_ITEMS_MAX`]), so any command RESP accepts travels natively.
pub const COMMAND_ARGS_MAX: u32 = ARRAY_ITEMS_MAX;
/// Bytes of one argument of a native COMMAND frame: a RESP bulk string's bound
/// ([`RESP_BULK_BYTES_MAX`]), so `HSET k f <max value>` fits as it does over RESP.
pub const COMMAND_ARG_BYTES_MAX: u32 = RESP_BULK_BYTES_MAX;
/// Bytes of the RESP3 reply a native COMMAND response carries: what fits in one frame after
/// the response's fixed fields (a larger reply is refused with `TOO_LARGE`, never cut).
pub const COMMAND_REPLY_BYTES_MAX: u32 = FRAME_BYTES_MAX - 64;
const _: () = assert!(COMMAND_ARGS_MAX <= ARRAY_ITEMS_MAX);
const _: () = assert!(COMMAND_ARG_BYTES_MAX < FRAME_BYTES_MAX);
const _: () = assert!(COMMAND_REPLY_BYTES_MAX >= VALUE_BYTES_MAX);

/// Bytes of one inline (telnet-style) RESP command line: Redis's PROTO_INLINE_MAX_SIZE.
pub const INLINE_BYTES_MAX: u32 = 64 * 1024;

/// Nesting depth of a RESP reply the client-side decoder accepts (arrays of maps of ...).
/// Redis replies nest at most 3-4 levels (CLUSTER SHARDS, XINFO); 64 is generous while the
/// recursive decoder's stack use stays a few KiB.
pub const RESP_DEPTH_MAX: u32 = 64;

/// Bytes a connection may have buffered but not yet parsed into a whole request: one
/// max-size frame. Past this the request cannot be legal, so the connection is closed.
pub const CONN_READ_BUFFER_BYTES_MAX: u32 = FRAME_BYTES_MAX + 64 * 1024;

/// Bytes of replies a connection may have queued before we stop reading from it
/// (back-pressure on a client that pipelines but does not read).
pub const CONN_WRITE_BUFFER_BYTES_MAX: u32 = 256 * 1024 * 1024;

/// Concurrent client connections per node (Redis `maxclients` default).
pub const CONNECTIONS_MAX: u32 = 10_000;

/// File descriptors a node keeps for itself beyond [`CONNECTIONS_MAX`] clients: peer and
/// control links, listeners, memfds, logs (Redis reserves 32; a node has more peers).
pub const FDS_RESERVED: u32 = 256;

/// Listen backlog of every listening port: Redis's default (511) rounded up. Linux's default of
/// 128 left a connect storm waiting for SYN retransmits (capped by `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 1024;

/// Keys in one MGET/MSET/DEL batch handled as one unit of work.
pub const BATCH_KEYS_MAX: u32 = ARRAY_ITEMS_MAX;

/// SCAN's COUNT hint is clamped to this: it bounds the index buckets one call visits while
/// holding the engine lock.
pub const SCAN_COUNT_MAX: u32 = 100_000;

/// Entries examined per engine tick by active expiry: Redis samples 20 keys per loop and stops
/// at 25% CPU; 1,000 entries bound one tick to tens of microseconds.
pub const EXPIRE_WORK_PER_TICK_MAX: u32 = 1_000;

/// Buckets migrated per step of an incremental index upsize, so one write can't stall the
/// event loop for a whole rehash (Redis `dictRehash` does n×10 empty buckets per step).
pub const REHASH_BUCKETS_PER_STEP_MAX: u32 = 64;

/// Entries the evictor may look at to free space for one write before it gives up with
/// `NoSpace`: bounds the worst case of a write on a node full of pinned data.
pub const EVICTION_SCAN_PER_WRITE_MAX: u32 = 4_096;

/// Tombstones kept per node before the oldest are folded into the summary version.
pub const TOMBSTONES_MAX: u32 = 1 << 20;

/// Writes a coordinator remembers the acknowledged copies of after it stopped tracking them
/// short of every copy (abandoned on losing the slot, or a copy refused): WAIT on such a
/// write answers what was acknowledged, not every holder (~40 bytes each).
pub const PARTIAL_WRITES_REMEMBERED_MAX: u32 = 4_096;

/// Keys a replica remembers the retiring version of after a memgest move took its copy
/// away (a late older Replicate is then not applied): ~64 bytes each, ~4 MiB at most.
pub const RETIRED_FLOORS_MAX: u32 = 65_536;

/// Key hashes in one access-record batch from a one-sided reader (CliqueMap §4.2).
pub const ACCESS_RECORD_BATCH_MAX: u32 = 4_096;

/// Client and peer retries of one operation.
pub const RETRY_COUNT_MAX: u32 = 8;

/// Retries of a one-sided read that saw a torn entry before it falls back to RPC.
pub const SHM_READ_RETRY_COUNT_MAX: u32 = 16;

/// Replication messages in flight to one peer, and their bytes (raft `Inflights`).
pub const REPLICATION_INFLIGHT_MAX: u32 = 4_096;
/// See [`REPLICATION_INFLIGHT_MAX`]: bytes, so a few huge values can't hog a peer link.
pub const REPLICATION_INFLIGHT_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// Largest piece of one peer frame on the wire: frames above it (a large value's Replicate,
/// a full pull page) go out in chunks of this size, and the link writes every small frame
/// queued behind a chunk before the next chunk, so acks and small writes to the same peer
/// wait for at most one chunk (~0.1 ms on loopback), not for a 512 MiB value (issue 10,
/// case 5). Small enough for that; large enough that the 6-byte chunk header is noise.
pub const PEER_CHUNK_BYTES: u32 = 256 * 1024;
/// Largest entry a cluster front reads from the engine on its own thread (the fast path):
/// the lock-free copy is word by word plus a checksum, a few µs for KiB values; a 64 MiB one
/// held a front worker for seconds in a debug build and slowed the node's other traffic.
/// Larger entries are read by the driver (memcpy under the engine lock), as before.
pub const FAST_READ_BYTES_MAX: u32 = 256 * 1024;

/// Argument bytes one connection may queue between MULTI and EXEC (each argument counts its
/// length plus 16 bytes of bookkeeping). The queue lives in the connection until EXEC, so
/// without a bound one client could hold any amount of memory; four max-size frames fit any
/// transaction a cache runs (Redis bounds it only by the client's memory).
pub const MULTI_QUEUE_BYTES_MAX: u64 = 4 * FRAME_BYTES_MAX as u64;

/// Requests queued to one handler/peer before the sender is told to back off.
pub const QUEUE_CAPACITY: u32 = 65_536;

const _: () = assert!(ENTRY_BYTES_MAX > VALUE_BYTES_MAX + KEY_BYTES_MAX);
const _: () = assert!(FRAME_BYTES_MAX > ENTRY_BYTES_MAX);
const _: () = assert!(RESP_BULK_BYTES_MAX >= VALUE_BYTES_MAX);
const _: () = assert!(CONN_READ_BUFFER_BYTES_MAX > FRAME_BYTES_MAX);
const _: () = assert!(BATCH_KEYS_MAX <= ARRAY_ITEMS_MAX);
const _: () = assert!(MULTI_QUEUE_BYTES_MAX > FRAME_BYTES_MAX as u64);

/// Shared-memory client connections per node. Each is a same-host process whose writes,
/// fallback reads and access records hold one node thread; 1,024 is far above the cores of a
/// host, so only a runaway client hits it.
pub const SHM_CONNECTIONS_MAX: u32 = 1_024;

/// Smallest engine data-region budget: one slab page of every small size class would not fit
/// below it.
pub const ENGINE_MEMORY_BYTES_MIN: u64 = 1 << 20;

/// Largest engine data-region budget: index entries locate data in 8-byte units with 32 bits,
/// so the data region can span 2^32 × 8 B = 32 GiB. Also bounds the data-region length a
/// shared-memory client accepts from a node's handshake.
pub const ENGINE_MEMORY_BYTES_MAX: u64 = (1 << 32) * 8;

/// Most engine index buckets: 2^26 buckets × 8 entries ≈ 540 M keys, and an 8 GiB index;
/// beyond that a node should be split, not grown.
pub const INDEX_BUCKETS_MAX: u32 = 1 << 26;

/// Records one `ringlet load` run may write. The loader remembers a 64-bit hash of every key
/// of pass 1 (about 16 bytes each in its set) so that pass 2 writes only links whose target
/// it loaded: 50 M records is ~800 MiB of loader memory, the most a loader beside a node on
/// a 24 GiB host should take. Larger data sets are split into several loads.
pub const LOAD_RECORDS_MAX: u64 = 50_000_000;

/// Distinct (owner, list field) pairs of link lists one load may hold counters for (the
/// loader counts each list's targets to place them in chunks; ~16 bytes each, as above).
pub const LOAD_LIST_OWNERS_MAX: u64 = LOAD_RECORDS_MAX;

/// Commands the loader sends to one connection before it flushes them as one write: 1,024
/// amortises the syscall and the node's read over many commands while a batch stays far
/// below the node's read buffer.
pub const LOAD_BATCH_COMMANDS_MAX: u32 = 1_024;

/// Batches written to one connection whose replies have not all arrived yet: the loader's
/// only unbounded-by-source buffer is this queue (≤ 16 × 1,024 commands per connection),
/// enough to keep the node busy across the round trip without piling up replies.
pub const LOAD_BATCHES_INFLIGHT_MAX: u32 = 16;

const _: () = assert!(LOAD_BATCH_COMMANDS_MAX <= BATCH_KEYS_MAX);
const _: () = assert!(LOAD_LIST_OWNERS_MAX <= LOAD_RECORDS_MAX);

/// Most ACL users (`ACL SETUSER`). In a cluster the user table travels in every map
/// (etcd values are limited to ~1.5 MiB): 1,024 users of a few hundred bytes each stay far
/// below that, and no deployment we know of has more distinct service identities per store.
pub const ACL_USERS_MAX: u32 = 1_024;
/// Most passwords, key patterns or channel patterns one ACL user holds (Redis has no bound;
/// one keeps `ACL SETUSER` from growing a user, and so every map, without limit).
pub const ACL_USER_ITEMS_MAX: u32 = 256;
/// Longest user name or key/channel pattern in an ACL rule.
pub const ACL_NAME_BYTES_MAX: u32 = 1_024;
/// Most bytes of every user's described rules together (the cluster map's user table).
pub const ACL_TABLE_BYTES_MAX: u32 = 512 * 1024;
const _: () = assert!(
    (ACL_USER_ITEMS_MAX as u64) * (ACL_NAME_BYTES_MAX as u64) <= ACL_TABLE_BYTES_MAX as u64
);

/// Longest a `WAIT numreplicas 0` blocks its connection (Redis: forever). The copies a
/// cluster write waits for arrive within the replication retransmit and failover times, so
/// a WAIT still short after this is waiting on a node that is gone; the connection gets the
/// count then instead of hanging.
pub const WAIT_BLOCK_MS_MAX: u64 = 300_000;

/// Most entries `SLOWLOG` keeps per node (`CONFIG SET slowlog-max-len` is capped here;
/// Redis's default is 128 and it has no cap). Each entry holds at most
/// [`SLOWLOG_ARGS_MAX`] arguments of at most [`SLOWLOG_ARG_BYTES_MAX`] bytes, so the ring
/// stays under ~4.5 MiB whatever clients send.
pub const SLOWLOG_LEN_MAX: u32 = 1_024;
/// Arguments of a command a slow-log entry keeps (Redis's `SLOWLOG_ENTRY_MAX_ARGC`): the
/// last one kept says how many more there were.
pub const SLOWLOG_ARGS_MAX: usize = 32;
/// Bytes of one argument a slow-log entry keeps (Redis's `SLOWLOG_ENTRY_MAX_STRING`).
pub const SLOWLOG_ARG_BYTES_MAX: usize = 128;
/// Samples `LATENCY HISTORY` keeps per event (Redis's `LATENCY_TS_LEN`).
pub const LATENCY_SAMPLES_MAX: usize = 160;
const _: () =
    assert!(SLOWLOG_LEN_MAX as usize * SLOWLOG_ARGS_MAX * (SLOWLOG_ARG_BYTES_MAX + 32) < 8 << 20);

/// Submission queue entries per io_uring worker ring (`ringlet server --io uring`; the
/// completion queue is 4x). A loop iteration queues at most one send per connection plus a
/// few accepts and cancels; a full queue is submitted early, so this bounds batching, not
/// connections.
pub const URING_RING_ENTRIES: u32 = 1024;
/// Provided receive buffers per io_uring worker, and their size: 4 MiB per worker. A buffer
/// holds one recv completion's bytes only until that completion is handled (the same
/// iteration); a multishot recv that finds the ring dry ends with `ENOBUFS` and is re-armed.
pub const URING_RECV_BUFFERS: u16 = 256;
pub const URING_RECV_BUFFER_BYTES: usize = 16 * 1024;
