//! The linked-service protocol: length-prefixed frames over TCP.
//!
//! ```text
//!   frame = len: u32 BE (bytes after this field) | kind: u8 | body
//!   kind 0 Control   body = JSON of [`Control`]       (joins, heartbeats, maps, move steps)
//!   kind 1 Request   body = id u64 | key bytes | body bytes
//!   kind 2 Response  body = id u64 | tag u8 | fields of [`Reply`]
//!   kind 3 Batch     body = move_id u64 | first u16 | last u16 | seq u64 | done u8 |
//!                           n u32 | n × (slot u16 | key bytes | version u64 | age u64 | value bytes)
//!   kind 4 Repl      body = round u64 | n u32 | n × (slot u16 | key bytes | tag u8 |
//!                           tag 0 (put): version u64 | age u64 | value bytes; tag 1: delete)
//!   kind 5 ReplAck   body = round u64 | ignored u32
//!   bytes = len u32 BE | that many bytes
//! ```
//!
//! Control traffic is JSON (rare, small, easy to read in a capture); requests, responses and
//! move batches, which carry application bytes, are binary so a value is not inflated by an
//! encoding. Every length is checked against the frame kind's limit ([`crate::limits`]) before
//! anything is allocated, and every nested length against what is left of the frame.

use ringlet_linklet::{Batch, BatchItem, ReplItem};
use ringlet_types::{Slot, SLOT_COUNT};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::WireError;
use crate::limits;

const KIND_CONTROL: u8 = 0;
const KIND_REQUEST: u8 = 1;
const KIND_RESPONSE: u8 = 2;
const KIND_BATCH: u8 = 3;
const KIND_REPL: u8 = 4;
const KIND_REPL_ACK: u8 = 5;

/// An inclusive slot range, as it travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotRange {
    /// First slot.
    pub first: Slot,
    /// Last slot (inclusive).
    pub last: Slot,
}

impl SlotRange {
    /// `first..=last` if it is a valid range of slots.
    pub fn to_range(self) -> Option<std::ops::RangeInclusive<Slot>> {
        (self.first <= self.last && self.last < SLOT_COUNT).then_some(self.first..=self.last)
    }
}

/// One member's load report (LInK §4.1: several metrics, per unit where the member can tell).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemberLoad {
    /// Per owned unit: requests per second and bytes held.
    pub units: Vec<UnitLoad>,
    /// CPU the member process used, in cores (1.0 = one core busy), over the report window.
    pub cpu_cores: f64,
}

/// Load of one unit at its owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnitLoad {
    /// The unit's index.
    pub unit: u16,
    /// Requests per second routed to the unit.
    pub ops_per_s: f64,
    /// Bytes the Linklet charges for the unit's entries.
    pub bytes: u64,
}

/// Who owns a unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Member id (unique per coordinator run, never reused).
    pub member: u64,
    /// Where routers and peers reach it.
    pub addr: String,
}

/// The service's assignment of units to members, as routers and members see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceMap {
    /// Grows on every change.
    pub epoch: u64,
    /// Slots per unit (`16384 / units`).
    pub slots_per_unit: u16,
    /// Owner of each unit (`None`: nobody yet, or its owner crashed and nobody survived).
    pub owners: Vec<Option<Owner>>,
    /// Backup of each unit, for services with replicas (empty otherwise); routers ignore it.
    #[serde(default)]
    pub backups: Vec<Option<Backup>>,
}

/// A unit's backup member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// Member id.
    pub member: u64,
    /// Seeded: it holds every acknowledged write of the unit and would be promoted.
    pub ready: bool,
}

impl ServiceMap {
    /// The owner of `slot`, if any.
    pub fn owner_of(&self, slot: Slot) -> Option<&Owner> {
        if self.slots_per_unit == 0 {
            return None;
        }
        self.owners
            .get(usize::from(slot / self.slots_per_unit))?
            .as_ref()
    }
}

/// How a move ended, as the source reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveOutcome {
    /// The target committed; the source dropped its copy.
    Committed,
    /// The move failed before the commit; the source still owns and serves the range.
    Aborted,
    /// The commit was sent but not acknowledged: the target may or may not serve the range.
    /// The source dropped its copy (never two owners); the coordinator reports the range as
    /// possibly lost and makes the target adopt it.
    Ambiguous,
}

/// Control frames (JSON). Direction noted per variant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Control {
    /// member → coordinator: join `service`, reachable at `addr`.
    Join {
        /// Linked service name.
        service: String,
        /// Address routers and peers use.
        addr: String,
    },
    /// coordinator → member: joined as `member`; heartbeat every `heartbeat_ms`; the lease
    /// lasts `lease_ms` from the *send* time of an acknowledged heartbeat.
    Welcome {
        /// The member's id.
        member: u64,
        /// Lease length.
        lease_ms: u64,
        /// Heartbeat interval.
        heartbeat_ms: u64,
        /// Units of the service.
        units: u16,
        /// Copies of each unit (1: none; 2: one backup member per unit).
        #[serde(default = "one")]
        replicas: u8,
    },
    /// member → coordinator, first frame of a new session after a broken one (or to a
    /// restarted coordinator): I was `member`, I serve `owned`, the last map I saw was `epoch`.
    /// Answered with `Welcome` (same id) or `Expired`.
    Rejoin {
        /// Linked service name.
        service: String,
        /// Address routers and peers use.
        addr: String,
        /// The id it had.
        member: u64,
        /// The ranges it serves.
        owned: Vec<SlotRange>,
        /// The last map epoch it saw.
        epoch: u64,
    },
    /// coordinator → member: stop serving `range` and drop it (another member owns it).
    Disown {
        /// The range.
        range: SlotRange,
    },
    /// coordinator → member: the join was refused.
    Refused {
        /// Why.
        reason: String,
    },
    /// member → coordinator: still alive; `load` every few heartbeats.
    Heartbeat {
        /// Sequence number, echoed by the ack.
        seq: u64,
        /// Load report, if this heartbeat carries one.
        load: Option<MemberLoad>,
    },
    /// coordinator → member: heartbeat `seq` renewed the lease.
    HeartbeatAck {
        /// The heartbeat's sequence number.
        seq: u64,
    },
    /// coordinator → member: your lease expired; you are no longer a member.
    Expired,
    /// member → coordinator: move my units away, then let me go.
    Leave,
    /// coordinator → member: you own nothing now and are no longer a member.
    Drained,
    /// coordinator → member: serve `range` from now on, starting empty (a unit nobody owned,
    /// or one whose owner crashed).
    Adopt {
        /// The range.
        range: SlotRange,
    },
    /// coordinator → source member: move `range` to member `to` at `to_addr`.
    MoveOut {
        /// Move id, echoed by `MoveDone`.
        move_id: u64,
        /// The range.
        range: SlotRange,
        /// Target member.
        to: u64,
        /// Target address.
        to_addr: String,
        /// The unit's seeded backup, which the target replicates to once it serves the unit.
        #[serde(default)]
        backup_addr: Option<String>,
        /// The target is the unit's ready backup: no batches; after the `Moving` mark and a
        /// replication flush, `Handover` makes it serve its staged copy.
        #[serde(default)]
        handover: bool,
    },
    /// source member → coordinator: how move `move_id` ended.
    MoveDone {
        /// The move.
        move_id: u64,
        /// Outcome.
        outcome: MoveOutcome,
    },
    /// coordinator → every member and watcher: `member` died; the state of `ranges` is gone.
    StateLost {
        /// The dead member.
        member: u64,
        /// What it owned.
        ranges: Vec<SlotRange>,
    },
    /// router → coordinator: send me `service`'s map, now and on every change.
    Watch {
        /// Linked service name.
        service: String,
    },
    /// coordinator → members and watchers: the current map.
    Map(ServiceMap),
    /// source → target: stage `range` (`begin_import`).
    BeginImport {
        /// Move id.
        move_id: u64,
        /// The range.
        range: SlotRange,
        /// Where the target replicates `range` to once it serves it (the unit's backup).
        #[serde(default)]
        backup_addr: Option<String>,
    },
    /// coordinator → owner: seed a backup of `range` at member `to` (`to_addr`): snapshot
    /// plus dirty keys, then replicate every write there before answering it.
    Seed {
        /// Seed id, echoed by `SeedDone`.
        seed_id: u64,
        /// The unit's range.
        range: SlotRange,
        /// The backup member.
        to: u64,
        /// Its address.
        to_addr: String,
    },
    /// owner → coordinator: the snapshot of seed `seed_id` is applied at the backup (`ok`),
    /// or the seed failed.
    SeedDone {
        /// The seed.
        seed_id: u64,
        /// Whether the backup now holds every acknowledged write.
        ok: bool,
    },
    /// coordinator → owner: stop replicating `range` (its backup died or is being dropped).
    Unbackup {
        /// The range.
        range: SlotRange,
    },
    /// coordinator → backup: drop the staged copy of `range` (no state-loss event).
    DropBackup {
        /// The range.
        range: SlotRange,
    },
    /// coordinator → backup: the owner of `range` died; serve the staged copy from now on.
    Promote {
        /// The range.
        range: SlotRange,
    },
    /// source → target (its backup), instead of `BeginImport`/batches/`CommitImport`: serve
    /// your staged copy of `range` (every write is in it: the source flushed after marking
    /// the range moving). Acked like a commit.
    Handover {
        /// Move id.
        move_id: u64,
        /// The range.
        range: SlotRange,
    },
    /// owner → backup (replication connection): stage `range` as a backup, replacing any
    /// staged copy; acked with `Ack { move_id: seed_id }`.
    BeginBackup {
        /// Seed id.
        seed_id: u64,
        /// The range.
        range: SlotRange,
    },
    /// source → target: serve what was staged (`commit_import`).
    CommitImport {
        /// Move id.
        move_id: u64,
    },
    /// source → target: drop what was staged (`abort_import`).
    AbortImport {
        /// Move id.
        move_id: u64,
    },
    /// target → source: the last step of `move_id` was applied.
    Ack {
        /// Move id.
        move_id: u64,
    },
    /// target → source: the last step of `move_id` was refused.
    Nack {
        /// Move id.
        move_id: u64,
        /// Why.
        reason: String,
    },
}

/// A member's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The handler's response body.
    Ok(Vec<u8>),
    /// The key's slot is moving away from this member: retry after a short backoff.
    Moving {
        /// The slot.
        slot: Slot,
    },
    /// This member does not serve the slot; `hint` is who it believes does.
    NotOwner {
        /// The slot.
        slot: Slot,
        /// Address of the owner this member knows of.
        hint: Option<String>,
    },
    /// The application refused the request.
    Failed(String),
}

/// One frame.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// Kind 0.
    Control(Control),
    /// Kind 1.
    Request {
        /// Correlates the response.
        id: u64,
        /// The routing key.
        key: Vec<u8>,
        /// Application bytes.
        body: Vec<u8>,
    },
    /// Kind 2.
    Response {
        /// The request's id.
        id: u64,
        /// The answer.
        reply: Reply,
    },
    /// Kind 3.
    Batch {
        /// The move.
        move_id: u64,
        /// The batch.
        batch: Batch,
    },
    /// Kind 4: replicated changes (snapshot puts, or a dirty-log drain), owner → backup.
    Repl {
        /// Round number, echoed by the ack.
        round: u64,
        /// The changes, applied in order.
        items: Vec<ReplItem>,
    },
    /// Kind 5: the backup applied round `round`; `ignored` items were for ranges it does not
    /// back (dropped or promoted meanwhile).
    ReplAck {
        /// The round.
        round: u64,
        /// Items not applied.
        ignored: u32,
    },
}

fn one() -> u8 {
    1
}

impl Frame {
    /// Encode into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&[0; 4]);
        match self {
            Frame::Control(c) => {
                out.push(KIND_CONTROL);
                // Serializing these plain data types cannot fail.
                serde_json::to_writer(&mut *out, c).expect("control frames serialize");
            }
            Frame::Request { id, key, body } => {
                encode_request_body(out, *id, key, body);
            }
            Frame::Response { id, reply } => {
                out.push(KIND_RESPONSE);
                out.extend_from_slice(&id.to_be_bytes());
                match reply {
                    Reply::Ok(b) => {
                        out.push(0);
                        put_bytes(out, b);
                    }
                    Reply::Moving { slot } => {
                        out.push(1);
                        out.extend_from_slice(&slot.to_be_bytes());
                    }
                    Reply::NotOwner { slot, hint } => {
                        out.push(2);
                        out.extend_from_slice(&slot.to_be_bytes());
                        put_bytes(out, hint.as_deref().unwrap_or("").as_bytes());
                    }
                    Reply::Failed(m) => {
                        out.push(3);
                        put_bytes(out, m.as_bytes());
                    }
                }
            }
            Frame::Batch { move_id, batch } => {
                out.push(KIND_BATCH);
                out.extend_from_slice(&move_id.to_be_bytes());
                out.extend_from_slice(&batch.first.to_be_bytes());
                out.extend_from_slice(&batch.last.to_be_bytes());
                out.extend_from_slice(&batch.seq.to_be_bytes());
                out.push(u8::from(batch.done));
                out.extend_from_slice(&(batch.items.len() as u32).to_be_bytes());
                for it in &batch.items {
                    out.extend_from_slice(&it.slot.to_be_bytes());
                    put_bytes(out, &it.key);
                    out.extend_from_slice(&it.source_version.to_be_bytes());
                    out.extend_from_slice(&it.age_ms.to_be_bytes());
                    put_bytes(out, &it.value);
                }
            }
            Frame::Repl { round, items } => {
                out.push(KIND_REPL);
                out.extend_from_slice(&round.to_be_bytes());
                out.extend_from_slice(&(items.len() as u32).to_be_bytes());
                for it in items {
                    match it {
                        ReplItem::Put(b) => {
                            out.extend_from_slice(&b.slot.to_be_bytes());
                            put_bytes(out, &b.key);
                            out.push(0);
                            out.extend_from_slice(&b.source_version.to_be_bytes());
                            out.extend_from_slice(&b.age_ms.to_be_bytes());
                            put_bytes(out, &b.value);
                        }
                        ReplItem::Del { slot, key } => {
                            out.extend_from_slice(&slot.to_be_bytes());
                            put_bytes(out, key);
                            out.push(1);
                        }
                    }
                }
            }
            Frame::ReplAck { round, ignored } => {
                out.push(KIND_REPL_ACK);
                out.extend_from_slice(&round.to_be_bytes());
                out.extend_from_slice(&ignored.to_be_bytes());
            }
        }
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
    }

    /// Decode one frame body of `kind`.
    ///
    /// # Errors
    /// [`WireError::Bad`] on anything malformed.
    pub fn decode(kind: u8, body: &[u8]) -> Result<Frame, WireError> {
        let mut d = Dec { b: body };
        let f = match kind {
            KIND_CONTROL => Frame::Control(
                serde_json::from_slice(body).map_err(|_| WireError::Bad("control json"))?,
            ),
            KIND_REQUEST => Frame::Request {
                id: d.u64()?,
                key: d.bytes()?.to_vec(),
                body: d.bytes()?.to_vec(),
            },
            KIND_RESPONSE => {
                let id = d.u64()?;
                let reply = match d.u8()? {
                    0 => Reply::Ok(d.bytes()?.to_vec()),
                    1 => Reply::Moving { slot: d.u16()? },
                    2 => {
                        let slot = d.u16()?;
                        let hint = d.text()?;
                        Reply::NotOwner {
                            slot,
                            hint: (!hint.is_empty()).then_some(hint),
                        }
                    }
                    3 => Reply::Failed(d.text()?),
                    _ => return Err(WireError::Bad("reply tag")),
                };
                Frame::Response { id, reply }
            }
            KIND_BATCH => {
                let move_id = d.u64()?;
                let first = d.u16()?;
                let last = d.u16()?;
                let seq = d.u64()?;
                let done = d.u8()? != 0;
                let n = d.u32()? as usize;
                // Each item takes at least 28 bytes, so `n` is also bounded by what is left.
                if n > ringlet_linklet::limits::IMPORT_BATCH_ITEMS_MAX || n > d.b.len() / 28 {
                    return Err(WireError::Bad("batch item count"));
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(BatchItem {
                        slot: d.u16()?,
                        key: d.bytes()?.to_vec(),
                        source_version: d.u64()?,
                        age_ms: d.u64()?,
                        value: d.bytes()?.to_vec(),
                    });
                }
                Frame::Batch {
                    move_id,
                    batch: Batch {
                        first,
                        last,
                        seq,
                        done,
                        items,
                    },
                }
            }
            KIND_REPL => {
                let round = d.u64()?;
                let n = d.u32()? as usize;
                // Each item takes at least 7 bytes (slot, key length, tag).
                if n > ringlet_linklet::limits::IMPORT_BATCH_ITEMS_MAX || n > d.b.len() / 7 {
                    return Err(WireError::Bad("repl item count"));
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    let slot = d.u16()?;
                    let key = d.bytes()?.to_vec();
                    items.push(match d.u8()? {
                        0 => ReplItem::Put(BatchItem {
                            slot,
                            key,
                            source_version: d.u64()?,
                            age_ms: d.u64()?,
                            value: d.bytes()?.to_vec(),
                        }),
                        1 => ReplItem::Del { slot, key },
                        _ => return Err(WireError::Bad("repl item tag")),
                    });
                }
                Frame::Repl { round, items }
            }
            KIND_REPL_ACK => Frame::ReplAck {
                round: d.u64()?,
                ignored: d.u32()?,
            },
            _ => return Err(WireError::Bad("frame kind")),
        };
        if !d.b.is_empty() && kind != KIND_CONTROL {
            return Err(WireError::Bad("trailing bytes"));
        }
        Ok(f)
    }
}

/// Encode a request frame from borrowed key and body (no `Frame` to build: the router's
/// hot path). `out` is cleared first.
pub fn encode_request(out: &mut Vec<u8>, id: u64, key: &[u8], body: &[u8]) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    encode_request_body(out, id, key, body);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
}

fn encode_request_body(out: &mut Vec<u8>, id: u64, key: &[u8], body: &[u8]) {
    out.push(KIND_REQUEST);
    out.extend_from_slice(&id.to_be_bytes());
    put_bytes(out, key);
    put_bytes(out, body);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

struct Dec<'a> {
    b: &'a [u8],
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Bad("truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// A length-prefixed field; the length is checked against what is left of the frame
    /// (which the frame reader already bounded), so nothing is allocated on a lie.
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn text(&mut self) -> Result<String, WireError> {
        let b = self.bytes()?;
        if b.len() > limits::TEXT_BYTES_MAX {
            return Err(WireError::Bad("text too long"));
        }
        String::from_utf8(b.to_vec()).map_err(|_| WireError::Bad("text not utf-8"))
    }
}

fn kind_limit(kind: u8) -> Option<u32> {
    match kind {
        KIND_CONTROL => Some(limits::CONTROL_FRAME_BYTES_MAX),
        KIND_REQUEST | KIND_RESPONSE => Some(limits::REQUEST_FRAME_BYTES_MAX),
        KIND_BATCH | KIND_REPL => Some(limits::BATCH_FRAME_BYTES_MAX),
        KIND_REPL_ACK => Some(16),
        _ => None,
    }
}

/// Read one frame; `Ok(None)` on a clean end of stream before a frame starts.
///
/// # Errors
/// [`WireError::Io`] (including an end of stream inside a frame), [`WireError::Bad`].
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Frame>, WireError> {
    let mut head = [0u8; 5];
    // The first byte separately: EOF there is a clean close, anywhere else it is an error.
    match r.read(&mut head[..1]).await? {
        0 => return Ok(None),
        _ => r.read_exact(&mut head[1..]).await?,
    };
    let len = u32::from_be_bytes(head[..4].try_into().expect("4"));
    let kind = head[4];
    let max = kind_limit(kind).ok_or(WireError::Bad("frame kind"))?;
    if len == 0 || len > max {
        return Err(WireError::Bad("frame length over the kind's limit"));
    }
    buf.clear();
    buf.resize(len as usize - 1, 0);
    r.read_exact(buf).await?;
    Frame::decode(kind, buf).map(Some)
}

/// Write one frame (`scratch` is reused for the encoding) and flush.
///
/// # Errors
/// [`WireError::Io`].
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &Frame,
    scratch: &mut Vec<u8>,
) -> Result<(), WireError> {
    frame.encode(scratch);
    w.write_all(scratch).await?;
    w.flush().await?;
    Ok(())
}

/// [`read_frame`] for a blocking reader (thread-per-connection code: members' request
/// connections, the blocking router). Same checks, same bounds.
///
/// # Errors
/// As [`read_frame`].
pub fn read_frame_sync<R: std::io::Read>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<Frame>, WireError> {
    let mut head = [0u8; 5];
    // Bounded: each round reads at least one byte or ends.
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(head[..4].try_into().expect("4"));
    let kind = head[4];
    let max = kind_limit(kind).ok_or(WireError::Bad("frame kind"))?;
    if len == 0 || len > max {
        return Err(WireError::Bad("frame length over the kind's limit"));
    }
    buf.clear();
    buf.resize(len as usize - 1, 0);
    r.read_exact(buf)?;
    Frame::decode(kind, buf).map(Some)
}

/// [`write_frame`] for a blocking writer: one `write_all` of the encoded frame (unbuffered
/// writers: one syscall).
///
/// # Errors
/// [`WireError::Io`].
pub fn write_frame_sync<W: std::io::Write>(
    w: &mut W,
    frame: &Frame,
    scratch: &mut Vec<u8>,
) -> Result<(), WireError> {
    frame.encode(scratch);
    w.write_all(scratch)?;
    w.flush()?;
    Ok(())
}

/// Check a text field of a control frame against [`limits::TEXT_BYTES_MAX`].
pub fn text_ok(s: &str) -> bool {
    s.len() <= limits::TEXT_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: Frame) {
        let mut out = Vec::new();
        f.encode(&mut out);
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(len, out.len() - 4);
        assert_eq!(Frame::decode(out[4], &out[5..]).unwrap(), f);
    }

    #[test]
    fn frames_roundtrip() {
        roundtrip(Frame::Control(Control::Heartbeat {
            seq: 7,
            load: Some(MemberLoad {
                units: vec![UnitLoad {
                    unit: 3,
                    ops_per_s: 1.5,
                    bytes: 10,
                }],
                cpu_cores: 0.25,
            }),
        }));
        roundtrip(Frame::Request {
            id: 1,
            key: b"k".to_vec(),
            body: vec![0, 1, 2],
        });
        for reply in [
            Reply::Ok(b"x".to_vec()),
            Reply::Moving { slot: 9 },
            Reply::NotOwner {
                slot: 9,
                hint: Some("127.0.0.1:1".into()),
            },
            Reply::NotOwner {
                slot: 9,
                hint: None,
            },
            Reply::Failed("no".into()),
        ] {
            roundtrip(Frame::Response { id: 2, reply });
        }
        roundtrip(Frame::Batch {
            move_id: 4,
            batch: Batch {
                first: 0,
                last: 255,
                seq: 1,
                done: true,
                items: vec![BatchItem {
                    slot: 12,
                    key: b"key".to_vec(),
                    source_version: 5,
                    age_ms: 6,
                    value: b"[1]".to_vec(),
                }],
            },
        });
    }

    #[test]
    fn repl_frames_roundtrip() {
        roundtrip(Frame::Repl {
            round: 3,
            items: vec![
                ReplItem::Put(BatchItem {
                    slot: 12,
                    key: b"key".to_vec(),
                    source_version: 5,
                    age_ms: 6,
                    value: b"[1]".to_vec(),
                }),
                ReplItem::Del {
                    slot: 13,
                    key: b"k2".to_vec(),
                },
            ],
        });
        roundtrip(Frame::ReplAck {
            round: 3,
            ignored: 1,
        });
        roundtrip(Frame::Control(Control::Seed {
            seed_id: 1,
            range: SlotRange { first: 0, last: 9 },
            to: 2,
            to_addr: "a".into(),
        }));
        // A repl frame claiming more items than its bytes can hold.
        let mut b = vec![0u8; 8];
        b.extend_from_slice(&1000u32.to_be_bytes());
        assert!(Frame::decode(KIND_REPL, &b).is_err());
        // An old peer's Welcome (no replicas field) reads as 1.
        let w: Control = serde_json::from_str(
            r#"{"Welcome":{"member":1,"lease_ms":2000,"heartbeat_ms":250,"units":64}}"#,
        )
        .unwrap();
        assert!(matches!(w, Control::Welcome { replicas: 1, .. }));
    }

    #[tokio::test]
    async fn lengths_are_checked_before_allocation() {
        // A request frame claiming 4 GiB: refused from the header alone.
        let mut data: &[u8] = &[0xff, 0xff, 0xff, 0xff, KIND_REQUEST];
        let mut buf = Vec::new();
        assert!(matches!(
            read_frame(&mut data, &mut buf).await,
            Err(WireError::Bad(_))
        ));
        assert_eq!(buf.capacity(), 0);
        // A field claiming more than the frame holds.
        let body = [0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
        assert!(Frame::decode(KIND_REQUEST, &body).is_err());
        // A batch claiming more items than its bytes can hold.
        let mut b = vec![0u8; 8 + 2 + 2 + 8 + 1];
        b.extend_from_slice(&1000u32.to_be_bytes());
        assert!(Frame::decode(KIND_BATCH, &b).is_err());
        // Clean EOF before a frame.
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty, &mut buf).await.unwrap().is_none());
    }
}
