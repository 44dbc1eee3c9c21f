//! The two messages of the shared-memory socket that are not native frames: the server's
//! HELLO (sent once, with the region memfds attached) and the client's ACCESS batches.
//!
//! Everything else on the socket is a native frame of `docs/protocol.md` (GET, MGET, SET,
//! DEL, INCRBY, PING and their responses). A message's first byte tells them apart:
//! `0xA5` native frame, `0xAE` ACCESS. HELLO is always the first thing the server sends.
//! All integers are big-endian, as in the native protocol. Layouts: `docs/design/shm-protocol.md`.

use ringlet_engine::layout::{
    BUCKET_BYTES, BUCKET_ENTRIES, ENTRY_HEADER_SHORT_BYTES, FORMAT_VERSION, INDEX_HEADER_BYTES,
    PAGE_BYTES, PROBE_BUCKETS_MAX, TABLE_ALIGN_BYTES, UNIT_BYTES,
};
use ringlet_types::limits::ACCESS_RECORD_BATCH_MAX;
use ringlet_types::Epoch;

/// "RINGLSHM": first 8 bytes of HELLO.
pub const HELLO_MAGIC: [u8; 8] = *b"RINGLSHM";
/// Version of this socket protocol (HELLO and ACCESS). A client refuses any other.
pub const HELLO_VERSION: u32 = 1;
/// Bytes of HELLO.
pub const HELLO_BYTES: usize = 80;
/// Number of fds attached to HELLO: index region, data region.
pub const HELLO_FDS: usize = 2;
/// HELLO flag: a third fd follows, the node's validity region (a cluster node;
/// `crate::validity`).
pub const HELLO_FLAG_VALIDITY: u32 = 1;
/// Most fds a HELLO carries (with the validity region).
pub const HELLO_FDS_MAX: usize = 3;

/// First byte of an ACCESS message (not 0xA5, so never a native frame).
pub const ACCESS_MAGIC: u8 = 0xAE;
/// Bytes of the ACCESS header.
pub const ACCESS_HEADER_BYTES: usize = 8;

/// Largest index region a HELLO may announce: 64 GiB, past anything the engine reserves for
/// its largest index (2^26 buckets of 128 B, a few tables at once), so a hostile or corrupt
/// HELLO cannot make the client map an absurd range.
pub const INDEX_LEN_MAX: u64 = 1 << 36;
/// Regions are mapped whole pages at a time.
const REGION_ALIGN_BYTES: u64 = 4096;
/// Largest data region a HELLO may announce (the 32 GiB a 32-bit location in 8-byte units spans).
pub const DATA_LEN_MAX: u64 = ringlet_types::limits::ENGINE_MEMORY_BYTES_MAX;

/// Everything a reader needs besides the fds: the layout parameters it must agree with, the
/// region sizes, and who it is talking to (epoch, generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The engine's region format (`layout::FORMAT_VERSION`).
    pub format_version: u64,
    pub index_len: u64,
    pub data_len: u64,
    /// The node's cluster-map epoch; also the index header's config id while it holds.
    pub epoch: Epoch,
    /// Random per node incarnation: a restarted node has a new one.
    pub generation: u64,
    /// [`HELLO_FLAG_VALIDITY`]: a cluster node; reads must pass its validity region.
    pub flags: u32,
    pub bucket_bytes: u32,
    pub bucket_entries: u32,
    pub unit_bytes: u32,
    pub probe_buckets_max: u32,
    pub entry_header_bytes: u32,
    pub table_align_bytes: u32,
}

/// Why a HELLO or ACCESS message was refused.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    #[error("message truncated")]
    Truncated,
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported shm protocol version {0}")]
    Version(u32),
    #[error("region format {0} differs from this client's")]
    Format(u64),
    #[error("layout parameter {0} differs from this client's")]
    Layout(&'static str),
    #[error("region length {0} out of range or unaligned")]
    RegionLen(u64),
    #[error("access batch of {0} hashes exceeds the limit")]
    BatchTooLarge(u32),
    #[error("reserved field not zero")]
    Reserved,
}

impl Hello {
    /// A HELLO for regions of these sizes, with this crate's layout parameters.
    pub fn new(index_len: u64, data_len: u64, epoch: Epoch, generation: u64) -> Hello {
        Hello {
            format_version: FORMAT_VERSION,
            index_len,
            data_len,
            epoch,
            generation,
            flags: 0,
            bucket_bytes: BUCKET_BYTES as u32,
            bucket_entries: BUCKET_ENTRIES as u32,
            unit_bytes: UNIT_BYTES as u32,
            probe_buckets_max: PROBE_BUCKETS_MAX as u32,
            entry_header_bytes: ENTRY_HEADER_SHORT_BYTES as u32,
            table_align_bytes: TABLE_ALIGN_BYTES as u32,
        }
    }

    /// ```text
    ///  0        8         12      16        24         32        40      48          56
    ///  +--------+---------+-------+---------+----------+---------+-------+-----------+
    ///  | magic  | version | flags | format  | index len| data len| epoch | generation|
    ///  +--------+---------+-------+---------+----------+---------+-------+-----------+
    ///  56: bucket bytes u32 | bucket entries u32 | unit bytes u32 | probe buckets u32
    ///  72: entry header bytes u32 | table align bytes u32                     (80 bytes)
    /// ```
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..8].copy_from_slice(&HELLO_MAGIC);
        b[8..12].copy_from_slice(&HELLO_VERSION.to_be_bytes());
        b[12..16].copy_from_slice(&self.flags.to_be_bytes());
        b[16..24].copy_from_slice(&self.format_version.to_be_bytes());
        b[24..32].copy_from_slice(&self.index_len.to_be_bytes());
        b[32..40].copy_from_slice(&self.data_len.to_be_bytes());
        b[40..48].copy_from_slice(&self.epoch.0.to_be_bytes());
        b[48..56].copy_from_slice(&self.generation.to_be_bytes());
        let u32s = [
            self.bucket_bytes,
            self.bucket_entries,
            self.unit_bytes,
            self.probe_buckets_max,
            self.entry_header_bytes,
            self.table_align_bytes,
        ];
        for (i, v) in u32s.iter().enumerate() {
            b[56 + 4 * i..60 + 4 * i].copy_from_slice(&v.to_be_bytes());
        }
        b
    }

    /// Decode and check a HELLO against this build's layout: a client must never interpret
    /// regions whose layout it does not know.
    ///
    /// # Errors
    /// A [`ProtoError`] naming the first field that is wrong.
    pub fn decode(b: &[u8]) -> Result<Hello, ProtoError> {
        if b.len() < HELLO_BYTES {
            return Err(ProtoError::Truncated);
        }
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_be_bytes(w)
        };
        let u32_at = |o: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[o..o + 4]);
            u32::from_be_bytes(w)
        };
        if b[0..8] != HELLO_MAGIC {
            return Err(ProtoError::BadMagic);
        }
        let v = u32_at(8);
        if v != HELLO_VERSION {
            return Err(ProtoError::Version(v));
        }
        let flags = u32_at(12);
        if flags & !HELLO_FLAG_VALIDITY != 0 {
            return Err(ProtoError::Reserved);
        }
        let h = Hello {
            format_version: u64_at(16),
            index_len: u64_at(24),
            data_len: u64_at(32),
            epoch: Epoch(u64_at(40)),
            generation: u64_at(48),
            flags,
            bucket_bytes: u32_at(56),
            bucket_entries: u32_at(60),
            unit_bytes: u32_at(64),
            probe_buckets_max: u32_at(68),
            entry_header_bytes: u32_at(72),
            table_align_bytes: u32_at(76),
        };
        if h.format_version != FORMAT_VERSION {
            return Err(ProtoError::Format(h.format_version));
        }
        let mine = Hello::new(0, 0, Epoch(0), 0);
        let checks = [
            (h.bucket_bytes == mine.bucket_bytes, "bucket_bytes"),
            (h.bucket_entries == mine.bucket_entries, "bucket_entries"),
            (h.unit_bytes == mine.unit_bytes, "unit_bytes"),
            (
                h.probe_buckets_max == mine.probe_buckets_max,
                "probe_buckets_max",
            ),
            (
                h.entry_header_bytes == mine.entry_header_bytes,
                "entry_header_bytes",
            ),
            (
                h.table_align_bytes == mine.table_align_bytes,
                "table_align_bytes",
            ),
        ];
        if let Some((_, name)) = checks.iter().find(|(ok, _)| !ok) {
            return Err(ProtoError::Layout(name));
        }
        if h.index_len < INDEX_HEADER_BYTES
            || h.index_len > INDEX_LEN_MAX
            || h.index_len & (REGION_ALIGN_BYTES - 1) != 0
        {
            return Err(ProtoError::RegionLen(h.index_len));
        }
        if h.data_len < PAGE_BYTES
            || h.data_len > DATA_LEN_MAX
            || h.data_len & (REGION_ALIGN_BYTES - 1) != 0
        {
            return Err(ProtoError::RegionLen(h.data_len));
        }
        Ok(h)
    }
}

/// Append an ACCESS message for `hashes` (at most [`ACCESS_RECORD_BATCH_MAX`]; extra ones are
/// dropped: access records are hints, and the bound keeps one message small).
///
/// ```text
///  0      1         2          4             8
///  +------+---------+----------+-------------+---------------------------+
///  | 0xAE | version | reserved | count u32   | count × key hash u64      |
///  +------+---------+----------+-------------+---------------------------+
/// ```
pub fn encode_access(out: &mut Vec<u8>, hashes: &[u64]) {
    let n = hashes.len().min(ACCESS_RECORD_BATCH_MAX as usize);
    out.reserve(ACCESS_HEADER_BYTES + 8 * n);
    out.push(ACCESS_MAGIC);
    out.push(HELLO_VERSION as u8);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for h in &hashes[..n] {
        out.extend_from_slice(&h.to_be_bytes());
    }
}

/// Decode an ACCESS message at the start of `buf` into `hashes` (cleared first).
/// `Ok(None)` until the whole message is in; else the bytes it used.
///
/// # Errors
/// A [`ProtoError`]: the connection that sent it is closed.
pub fn decode_access(buf: &[u8], hashes: &mut Vec<u64>) -> Result<Option<usize>, ProtoError> {
    if let Some(&m) = buf.first() {
        if m != ACCESS_MAGIC {
            return Err(ProtoError::BadMagic);
        }
    }
    if let Some(&v) = buf.get(1) {
        if u32::from(v) != HELLO_VERSION {
            return Err(ProtoError::Version(u32::from(v)));
        }
    }
    if buf.len() < ACCESS_HEADER_BYTES {
        return Ok(None);
    }
    if buf[2] != 0 || buf[3] != 0 {
        return Err(ProtoError::Reserved);
    }
    let count = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    // Checked before anything is reserved or awaited.
    if count > ACCESS_RECORD_BATCH_MAX {
        return Err(ProtoError::BatchTooLarge(count));
    }
    let len = ACCESS_HEADER_BYTES + 8 * count as usize;
    let Some(body) = buf.get(ACCESS_HEADER_BYTES..len) else {
        return Ok(None);
    };
    hashes.clear();
    hashes.extend(body.chunks_exact(8).map(|c| {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        u64::from_be_bytes(w)
    }));
    Ok(Some(len))
}

/// One message a client sends on the shared-memory socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    /// An ACCESS batch (its hashes were decoded into the caller's vector).
    Access,
    /// A native request frame (`docs/protocol.md`).
    Request(ringlet_codec::native::RequestFrame<'a>),
}

/// Why a client's byte stream was refused (the connection closes).
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    #[error("{0}")]
    Access(#[from] ProtoError),
    #[error("{0}")]
    Frame(#[from] ringlet_codec::DecodeError),
}

/// Decode the client message at the start of `buf`: ACCESS if it starts with
/// [`ACCESS_MAGIC`], else a native request frame. `Ok(None)` until it has fully arrived.
///
/// # Errors
/// A [`StreamError`]: the stream cannot be resynchronised.
pub fn decode_client_message<'a>(
    buf: &'a [u8],
    hashes: &mut Vec<u64>,
) -> Result<Option<(ClientMessage<'a>, usize)>, StreamError> {
    match buf.first() {
        None => Ok(None),
        Some(&ACCESS_MAGIC) => Ok(decode_access(buf, hashes)?.map(|n| (ClientMessage::Access, n))),
        Some(_) => Ok(ringlet_codec::native::decode_request_frame(buf)?
            .map(|(f, n)| (ClientMessage::Request(f), n))),
    }
}

/// Fuzzing entry points (thin `fuzz/` targets call these; proptests call them too).
pub mod fuzz_support {
    use super::*;

    /// Walk `bytes` as a client stream the way the exporter does, and decode it as HELLO.
    /// Returns the number of whole messages decoded. Never panics, whatever the input.
    pub fn decode_client_stream(bytes: &[u8]) -> usize {
        let _ = Hello::decode(bytes);
        let mut hashes = Vec::new();
        let (mut pos, mut n) = (0usize, 0usize);
        // Bounded: every decoded message consumes at least one byte.
        while pos < bytes.len() {
            match decode_client_message(&bytes[pos..], &mut hashes) {
                Ok(Some((_, used))) => {
                    assert!(used > 0 && pos + used <= bytes.len());
                    pos += used;
                    n += 1;
                }
                Ok(None) | Err(_) => break,
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_round_trips() {
        let h = Hello::new(1 << 20, 1 << 24, Epoch(7), 0xfeed);
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn hello_refuses_foreign_layouts_and_sizes() {
        let h = Hello::new(1 << 20, 1 << 24, Epoch(7), 1);
        let mut b = h.encode();
        b[63] ^= 1; // bucket_entries (bytes 60..64)
        assert_eq!(Hello::decode(&b), Err(ProtoError::Layout("bucket_entries")));
        let big = Hello::new(INDEX_LEN_MAX + 4096, 1 << 24, Epoch(0), 1);
        assert!(matches!(
            Hello::decode(&big.encode()),
            Err(ProtoError::RegionLen(_))
        ));
        let odd = Hello::new(1 << 20, (1 << 24) + 8, Epoch(0), 1);
        assert!(matches!(
            Hello::decode(&odd.encode()),
            Err(ProtoError::RegionLen(_))
        ));
        assert_eq!(Hello::decode(&b[..10]), Err(ProtoError::Truncated));
    }

    /// A node of the previous region formats (4: two-word index entries, eight per bucket;
    /// 3: every data entry had a 24-byte header) is refused by name before anything is
    /// mapped, as a format-4 client refuses a format-5 node (it compares the same field
    /// against its own constant, before any layout field): neither side misreads the other's
    /// entries.
    #[test]
    fn hello_refuses_the_previous_entry_format() {
        assert_eq!(FORMAT_VERSION, 6);
        // Format 5: the same sizes, the tag from other hash bits (a format-5 reader would
        // filter on the wrong bits and miss every key): refused by the version alone.
        let mut five = Hello::new(1 << 20, 1 << 24, Epoch(7), 1);
        five.format_version = 5;
        assert_eq!(Hello::decode(&five.encode()), Err(ProtoError::Format(5)));
        let mut old = Hello::new(1 << 20, 1 << 24, Epoch(7), 1);
        old.format_version = 4;
        old.bucket_entries = 8;
        assert_eq!(Hello::decode(&old.encode()), Err(ProtoError::Format(4)));
        assert_eq!(
            ProtoError::Format(4).to_string(),
            "region format 4 differs from this client's"
        );
        old.format_version = 3;
        old.entry_header_bytes = 24;
        assert_eq!(Hello::decode(&old.encode()), Err(ProtoError::Format(3)));
        // What a format-4 client says to this node: the field it checks first is ours.
        let new = Hello::new(1 << 20, 1 << 24, Epoch(7), 1);
        assert_eq!(new.format_version, 6);
        assert_eq!(new.bucket_entries, 16);
        // Same format, another header size: refused as a layout difference.
        let mut odd = Hello::new(1 << 20, 1 << 24, Epoch(7), 1);
        odd.entry_header_bytes = 24;
        assert_eq!(
            Hello::decode(&odd.encode()),
            Err(ProtoError::Layout("entry_header_bytes"))
        );
    }

    #[test]
    fn access_round_trips_and_bounds() {
        let hashes: Vec<u64> = (0..100).map(|i| i * 0x9e37_79b9).collect();
        let mut buf = Vec::new();
        encode_access(&mut buf, &hashes);
        let mut out = Vec::new();
        for cut in 0..buf.len() {
            assert_eq!(decode_access(&buf[..cut], &mut out), Ok(None));
        }
        assert_eq!(decode_access(&buf, &mut out), Ok(Some(buf.len())));
        assert_eq!(out, hashes);
        let mut bad = vec![ACCESS_MAGIC, 1, 0, 0];
        bad.extend_from_slice(&(ACCESS_RECORD_BATCH_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_access(&bad, &mut out),
            Err(ProtoError::BatchTooLarge(ACCESS_RECORD_BATCH_MAX + 1))
        );
        let many = vec![1u64; ACCESS_RECORD_BATCH_MAX as usize + 10];
        buf.clear();
        encode_access(&mut buf, &many);
        assert_eq!(decode_access(&buf, &mut out), Ok(Some(buf.len())));
        assert_eq!(out.len(), ACCESS_RECORD_BATCH_MAX as usize);
    }

    #[test]
    fn client_streams_mix_access_and_native_frames() {
        let mut buf = Vec::new();
        encode_access(&mut buf, &[1, 2, 3]);
        ringlet_codec::native::encode_get(&mut buf, 9, b"key");
        encode_access(&mut buf, &[]);
        assert_eq!(fuzz_support::decode_client_stream(&buf), 3);
        let mut hashes = Vec::new();
        let (m, n) = decode_client_message(&buf, &mut hashes).unwrap().unwrap();
        assert_eq!(
            (m, n, hashes.as_slice()),
            (ClientMessage::Access, 32, &[1u64, 2, 3][..])
        );
        assert!(
            decode_client_message(b"*1\r\n", &mut hashes).is_err(),
            "RESP is refused"
        );
    }

    proptest! {
        #[test]
        fn client_stream_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let n = fuzz_support::decode_client_stream(&bytes);
            prop_assert!(n <= bytes.len());
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Hello::decode(&bytes);
            let mut out = Vec::new();
            if let Ok(Some(n)) = decode_access(&bytes, &mut out) {
                prop_assert!(n <= bytes.len());
            }
        }
    }
}
