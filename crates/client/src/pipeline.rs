//! Pipelines in cluster mode: queue GET/MGET/SET/DEL/INCRBY, send them all at once, get one
//! result per command, in order (what redis-py's `pipeline()` gives a Python caller).
//!
//! How it runs:
//!
//! ```text
//!  ops:   GET a  GET b  SET c  MGET [d e]  GET c  DEL a
//!         └──────── wave 1 ────────────┘  └─ wave 2 ─┘   (GET c reads a key SET c writes)
//!
//!  wave:  reads (GET, MGET keys) ──▶ one ClusterClient::mget: grouped by coordinator, one
//!                                    MGET frame per node (or per mget_batch_keys), all at once
//!         writes (SET, DEL, INCRBY) ──▶ one task each, all at once; a node's requests share its
//!                                    pipelined connections
//!         └─ reads and writes of a wave are in flight together: one round trip per node
//! ```
//!
//! Why waves: a node runs the requests of one connection concurrently and answers out of
//! order (crates/cluster/src/native.rs), so `SET k; GET k` sent together may read the old
//! value. A new wave starts when a command touches a key that an earlier command of the
//! current wave writes, or writes a key the wave already touches; waves run one after
//! another. Commands on distinct keys — the case pipelines are for — all go in one wave.
//! The trade: a pipeline that reads its own writes costs one more round trip per such
//! dependency, rather than a sequencing protocol on the node.
//!
//! Not a transaction: commands of a wave are not atomic together, and a failed command does
//! not stop the others (each gets its own result, as in a Redis pipeline).
//!
//! Errors per command: if the wave's batched MGET fails as a whole (e.g. a node is down), each
//! read of the wave is run again on its own, so every read gets its own value or error.

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;
use ringlet_types::limits;
use tokio::task::JoinSet;

use crate::client::{check_key, DelOutcome, SetOptions, SetOutcome};
use crate::cluster::ClusterClient;
use crate::error::Error;

/// Commands one pipeline holds. Far above the hundreds to thousands of commands that
/// amortise a round trip; it bounds what one `execute` queues and spawns (one task per write).
pub const PIPELINE_COMMANDS_MAX: usize = 65_536;

/// One queued command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineOp {
    /// GET key.
    Get(Vec<u8>),
    /// MGET keys (any slots; at most `limits::BATCH_KEYS_MAX`).
    Mget(Vec<Vec<u8>>),
    /// SET key value with options (cluster mode: memgest and TTL; see [`ClusterClient::set`]).
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        opts: SetOptions,
    },
    /// DEL key.
    Del(Vec<u8>),
    /// INCRBY key delta.
    IncrBy { key: Vec<u8>, delta: i64 },
}

/// The result of one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineReply {
    /// GET: the value, `None` if absent.
    Value(Option<Bytes>),
    /// MGET: one value per key, in order.
    Values(Vec<Option<Bytes>>),
    /// SET's outcome.
    Set(SetOutcome),
    /// DEL's outcome: whether the key existed.
    Del(DelOutcome),
    /// INCRBY's new value.
    Int(i64),
}

impl PipelineOp {
    fn is_write(&self) -> bool {
        matches!(
            self,
            PipelineOp::Set { .. } | PipelineOp::Del(_) | PipelineOp::IncrBy { .. }
        )
    }

    fn keys(&self) -> &[Vec<u8>] {
        match self {
            PipelineOp::Get(k) | PipelineOp::Del(k) => std::slice::from_ref(k),
            PipelineOp::Set { key, .. } | PipelineOp::IncrBy { key, .. } => {
                std::slice::from_ref(key)
            }
            PipelineOp::Mget(ks) => ks,
        }
    }

    /// Refuse what would be refused at send time anyway, before anything is queued.
    fn check(&self) -> Result<(), Error> {
        if let PipelineOp::Mget(ks) = self {
            if ks.len() > limits::BATCH_KEYS_MAX as usize {
                return Err(Error::Config(format!(
                    "an MGET in a pipeline takes at most {} keys, not {}",
                    limits::BATCH_KEYS_MAX,
                    ks.len()
                )));
            }
        }
        for k in self.keys() {
            check_key(k)?;
        }
        if let PipelineOp::Set { value, .. } = self {
            if value.len() > limits::VALUE_BYTES_MAX as usize {
                return Err(Error::ValueTooLarge(value.len()));
            }
        }
        Ok(())
    }
}

/// A queue of commands for [`Pipeline::execute`]. Not tied to a client: build it anywhere,
/// run it on any [`ClusterClient`].
#[derive(Clone, Debug, Default)]
pub struct Pipeline {
    ops: Vec<PipelineOp>,
}

impl Pipeline {
    /// An empty pipeline.
    pub fn new() -> Pipeline {
        Pipeline::default()
    }

    /// Queue `op`.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`] / [`Error::ValueTooLarge`] past the limits, [`Error::Config`]
    /// if the pipeline already holds [`PIPELINE_COMMANDS_MAX`] commands or an MGET has more
    /// than `limits::BATCH_KEYS_MAX` keys. Nothing is queued then.
    pub fn push(&mut self, op: PipelineOp) -> Result<(), Error> {
        if self.ops.len() >= PIPELINE_COMMANDS_MAX {
            return Err(Error::Config(format!(
                "a pipeline holds at most {PIPELINE_COMMANDS_MAX} commands: execute it first"
            )));
        }
        op.check()?;
        self.ops.push(op);
        Ok(())
    }

    /// Commands queued.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Drop every queued command.
    pub fn clear(&mut self) {
        self.ops.clear();
    }

    /// Take the queued commands out (the pipeline is empty after).
    pub fn take(&mut self) -> Vec<PipelineOp> {
        std::mem::take(&mut self.ops)
    }

    /// Run the queued commands on `client` (the pipeline is empty after): one result per
    /// command, in order. See the module docs for how they are sent.
    pub async fn execute(&mut self, client: &ClusterClient) -> Vec<Result<PipelineReply, Error>> {
        execute(client, self.take()).await
    }
}

/// Run `ops` on `client`: one result per command, in order.
///
/// Must run inside a tokio runtime (writes are spawned as tasks).
///
/// # Panics
/// Only if a command's task panicked (a bug): the panic is resumed here.
pub async fn execute(
    client: &ClusterClient,
    ops: Vec<PipelineOp>,
) -> Vec<Result<PipelineReply, Error>> {
    let waves = waves(&ops);
    let mut out: Vec<Option<Result<PipelineReply, Error>>> = vec![None; ops.len()];
    let mut ops: Vec<Option<PipelineOp>> = ops.into_iter().map(Some).collect();
    for wave in waves {
        run_wave(client, &mut ops, wave, &mut out).await;
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| Err(Error::UnexpectedResponse("pipeline lost a command".into())))
        })
        .collect()
}

/// Split `ops` into consecutive waves in which no key written by one command is touched by
/// another (module docs). Bounded: one pass over the commands and their keys.
fn waves(ops: &[PipelineOp]) -> Vec<Range<usize>> {
    let mut waves = Vec::new();
    let mut start = 0;
    // key -> whether a command of the current wave writes it
    let mut touched: HashMap<&[u8], bool> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let w = op.is_write();
        let conflict = op.keys().iter().any(|k| {
            touched
                .get(k.as_slice())
                .is_some_and(|&written| w || written)
        });
        if conflict {
            waves.push(start..i);
            start = i;
            touched.clear();
        }
        for k in op.keys() {
            *touched.entry(k.as_slice()).or_insert(false) |= w;
        }
    }
    if start < ops.len() {
        waves.push(start..ops.len());
    }
    waves
}

async fn run_write(client: &ClusterClient, op: PipelineOp) -> Result<PipelineReply, Error> {
    match op {
        PipelineOp::Set { key, value, opts } => client
            .set(&key, &value, opts)
            .await
            .map(|v| PipelineReply::Set(v.value)),
        PipelineOp::Del(key) => client.del(&key).await.map(|r| PipelineReply::Del(r.value)),
        PipelineOp::IncrBy { key, delta } => client
            .incr_by(&key, delta)
            .await
            .map(|v| PipelineReply::Int(v.value)),
        PipelineOp::Get(_) | PipelineOp::Mget(_) => {
            unreachable!("reads are batched, never run as writes")
        }
    }
}

/// A read on its own (after the wave's batched MGET failed as a whole).
async fn run_read(client: &ClusterClient, op: PipelineOp) -> Result<PipelineReply, Error> {
    match op {
        PipelineOp::Get(key) => client
            .get(&key)
            .await
            .map(|v| PipelineReply::Value(v.value)),
        PipelineOp::Mget(keys) => client
            .mget(&keys)
            .await
            .map(|vs| PipelineReply::Values(vs.into_iter().map(|v| v.value).collect())),
        _ => unreachable!("writes are never run as reads"),
    }
}

/// Collect every task of `set` into `out` at its command's index.
async fn join_into(
    set: &mut JoinSet<(usize, Result<PipelineReply, Error>)>,
    out: &mut [Option<Result<PipelineReply, Error>>],
) {
    // Bounded: one iteration per spawned task.
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, r)) => {
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(r);
                }
            }
            // Nothing aborts these tasks, so a join error is a panic: a bug, surfaced.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

async fn run_wave(
    client: &ClusterClient,
    ops: &mut [Option<PipelineOp>],
    wave: Range<usize>,
    out: &mut [Option<Result<PipelineReply, Error>>],
) {
    let mut writes: JoinSet<(usize, Result<PipelineReply, Error>)> = JoinSet::new();
    // (command index, its first key's position in `keys`, key count) of each read
    let mut reads: Vec<(usize, usize, usize)> = Vec::new();
    let mut keys: Vec<&[u8]> = Vec::new();
    // Writes are moved into their tasks; reads stay in `ops` (their keys are borrowed).
    for i in wave.clone() {
        let is_write = ops
            .get(i)
            .and_then(Option::as_ref)
            .is_some_and(PipelineOp::is_write);
        if is_write {
            if let Some(op) = ops.get_mut(i).and_then(Option::take) {
                let c = client.clone();
                writes.spawn(async move { (i, run_write(&c, op).await) });
            }
        }
    }
    for i in wave {
        if let Some(Some(op @ (PipelineOp::Get(_) | PipelineOp::Mget(_)))) = ops.get(i) {
            reads.push((i, keys.len(), op.keys().len()));
            keys.extend(op.keys().iter().map(Vec::as_slice));
        }
    }
    let (batched, ()) = tokio::join!(
        async {
            if keys.is_empty() {
                Ok(Vec::new())
            } else {
                client.mget(&keys).await
            }
        },
        join_into(&mut writes, out)
    );
    match batched {
        Ok(values) if values.len() == keys.len() => {
            let mut values: Vec<Option<Bytes>> = values.into_iter().map(|v| v.value).collect();
            for &(i, first, n) in &reads {
                let is_get = matches!(ops.get(i), Some(Some(PipelineOp::Get(_))));
                let vs: Vec<Option<Bytes>> = values
                    .get_mut(first..first + n)
                    .map(|s| s.iter_mut().map(Option::take).collect())
                    .unwrap_or_default();
                let reply = if is_get {
                    PipelineReply::Value(vs.into_iter().next().flatten())
                } else {
                    PipelineReply::Values(vs)
                };
                if let Some(slot) = out.get_mut(i) {
                    *slot = Some(Ok(reply));
                }
            }
        }
        // The batch failed as a whole, or (a bug) lost keys: each read on its own.
        _ => {
            let mut single: JoinSet<(usize, Result<PipelineReply, Error>)> = JoinSet::new();
            for &(i, _, _) in &reads {
                if let Some(op) = ops.get(i).cloned().flatten() {
                    let c = client.clone();
                    single.spawn(async move { (i, run_read(&c, op).await) });
                }
            }
            join_into(&mut single, out).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(k: &str) -> PipelineOp {
        PipelineOp::Get(k.into())
    }
    fn set(k: &str) -> PipelineOp {
        PipelineOp::Set {
            key: k.into(),
            value: b"v".to_vec(),
            opts: SetOptions::default(),
        }
    }

    #[test]
    fn distinct_keys_are_one_wave() {
        let ops = vec![get("a"), set("b"), get("c"), PipelineOp::Del("d".into())];
        assert_eq!(waves(&ops), vec![0..4]);
        assert_eq!(waves(&[]), Vec::<Range<usize>>::new());
    }

    #[test]
    fn reads_of_one_key_share_a_wave() {
        let ops = vec![
            get("a"),
            get("a"),
            PipelineOp::Mget(vec!["a".into(), "a".into()]),
        ];
        assert_eq!(waves(&ops), vec![0..3]);
    }

    #[test]
    fn a_key_written_then_touched_starts_a_wave() {
        // SET a; GET a -> GET a waits for the SET.
        assert_eq!(waves(&[set("a"), get("a")]), vec![0..1, 1..2]);
        // GET a; SET a -> the SET must not overtake the GET.
        assert_eq!(waves(&[get("a"), set("a")]), vec![0..1, 1..2]);
        // Two writes of one key keep their order.
        let incr = PipelineOp::IncrBy {
            key: "n".into(),
            delta: 1,
        };
        assert_eq!(waves(&[incr.clone(), get("x"), incr]), vec![0..2, 2..3]);
        // An MGET naming a written key.
        let mget = PipelineOp::Mget(vec!["x".into(), "a".into()]);
        assert_eq!(
            waves(&[set("a"), get("b"), mget, set("c")]),
            vec![0..2, 2..4]
        );
    }

    #[test]
    fn push_checks_limits() {
        let mut p = Pipeline::new();
        let big = vec![0u8; limits::KEY_BYTES_MAX as usize + 1];
        assert!(matches!(
            p.push(PipelineOp::Get(big.clone())),
            Err(Error::KeyTooLarge(_))
        ));
        assert!(matches!(
            p.push(PipelineOp::Mget(vec![b"ok".to_vec(), big])),
            Err(Error::KeyTooLarge(_))
        ));
        assert!(p.is_empty());
        p.push(get("a")).unwrap();
        assert_eq!(p.len(), 1);
        p.clear();
        assert!(p.is_empty());
    }
}
