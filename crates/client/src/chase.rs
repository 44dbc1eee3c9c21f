//! CHASE from the client: [`ChaseOptions`] (RESP CHASE's DEPTH, LIMIT and FIELDS) and
//! [`ChaseResult`] (the entries in BFS order and why the walk stopped), shared by
//! [`crate::Client::chase`] and [`crate::ClusterClient::chase`].
//!
//! The node walks the links (one round trip; in cluster mode it forwards hops to other
//! nodes itself). Arguments are checked here against the bounds the node enforces
//! (`ringlet_record`'s), so a bad call fails before anything is sent.

use bytes::Bytes;
use ringlet_codec::native::{self, ChaseItems, ChaseStop};
use ringlet_types::limits;

use crate::conn::{Body, Response};
use crate::error::Error;

pub use ringlet_record::chase::Stop;
pub use ringlet_record::{CHASE_DEPTH_MAX, CHASE_LIMIT_DEFAULT, CHASE_LIMIT_MAX};

/// DEPTH, LIMIT and FIELDS of a CHASE. `ChaseOptions::default()` is RESP CHASE without
/// options: depth 1, limit [`CHASE_LIMIT_DEFAULT`], every attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChaseOptions {
    /// Hops from the key (0: the key alone), at most [`CHASE_DEPTH_MAX`].
    pub depth: u32,
    /// Most entries, 1..=[`CHASE_LIMIT_MAX`].
    pub limit: u32,
    /// Attributes to return (in this order); `None`: all of each item's.
    pub fields: Option<Vec<Vec<u8>>>,
}

impl Default for ChaseOptions {
    fn default() -> Self {
        ChaseOptions {
            depth: 1,
            limit: CHASE_LIMIT_DEFAULT,
            fields: None,
        }
    }
}

impl ChaseOptions {
    /// Follow links up to `depth` hops.
    pub fn depth(mut self, depth: u32) -> Self {
        self.depth = depth;
        self
    }
    /// At most `limit` entries.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
    /// Return only these attributes.
    pub fn fields<F: AsRef<[u8]>>(mut self, fields: &[F]) -> Self {
        self.fields = Some(fields.iter().map(|f| f.as_ref().to_vec()).collect());
        self
    }
}

/// One visited item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChaseEntry {
    /// The item's key.
    pub key: Bytes,
    /// Hops from the CHASE's key.
    pub depth: u32,
    /// `(attribute, value)` pairs; a link shows its target key, a link list its targets
    /// joined by one space (as HGETALL shows them).
    pub attrs: Vec<(Bytes, Bytes)>,
}

impl ChaseEntry {
    /// The value of attribute `name`, if the entry has it.
    pub fn attr(&self, name: &[u8]) -> Option<&Bytes> {
        self.attrs
            .iter()
            .find(|(n, _)| n.as_ref() == name)
            .map(|(_, v)| v)
    }
}

/// A finished CHASE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChaseResult {
    /// Visited items in BFS order (each key once).
    pub entries: Vec<ChaseEntry>,
    /// Why the walk stopped: [`Stop::Complete`], or the bound that cut it short
    /// ([`Stop::Limit`], [`Stop::Bytes`], [`Stop::Time`]), as RESP CHASE's last element.
    pub stop: Stop,
}

/// Check a CHASE's arguments against the node's bounds before sending.
pub(crate) fn check<L: AsRef<[u8]>>(
    key: &[u8],
    links: &[L],
    opts: &ChaseOptions,
) -> Result<u8, Error> {
    crate::client::check_key(key)?;
    // The node's own answer to these arguments (status and RESP CHASE's text), given
    // without the round trip.
    let invalid = |m: String| {
        Err(Error::Server {
            status: ringlet_codec::native::Status::BAD_REQUEST,
            message: m,
        })
    };
    if links.is_empty() {
        return invalid("ERR syntax error (CHASE needs a link field)".into());
    }
    let fields = opts.fields.as_deref().unwrap_or(&[]);
    if opts.fields.as_ref().is_some_and(Vec::is_empty) {
        return invalid("ERR syntax error (FIELDS needs an attribute)".into());
    }
    if links.len() > limits::BATCH_KEYS_MAX as usize
        || fields.len() > limits::BATCH_KEYS_MAX as usize
    {
        return invalid("ERR too many CHASE link fields or attributes".into());
    }
    let long = |n: &[u8]| n.len() > limits::KEY_BYTES_MAX as usize;
    if links.iter().any(|l| long(l.as_ref())) || fields.iter().any(|f| long(f)) {
        return invalid("ERR a CHASE field name exceeds the key limit".into());
    }
    if opts.depth > CHASE_DEPTH_MAX {
        return invalid(format!("ERR DEPTH must be between 0 and {CHASE_DEPTH_MAX}"));
    }
    if !(1..=CHASE_LIMIT_MAX).contains(&opts.limit) {
        return invalid(format!("ERR LIMIT must be between 1 and {CHASE_LIMIT_MAX}"));
    }
    // CHASE_DEPTH_MAX fits a byte (checked at compile time below).
    Ok(opts.depth as u8)
}

const _: () = assert!(CHASE_DEPTH_MAX <= u8::MAX as u32);

/// Encode a CHASE frame (arguments already [`check`]ed).
pub(crate) fn encode<L: AsRef<[u8]>>(
    out: &mut bytes::BytesMut,
    id: u64,
    key: &[u8],
    links: &[L],
    depth: u8,
    opts: &ChaseOptions,
) {
    native::encode_chase(
        out,
        id,
        key,
        links,
        depth,
        opts.limit,
        opts.fields.as_deref(),
    );
}

/// A walk's reply (one-sided CHASE) as a [`ChaseResult`].
pub(crate) fn from_reply(r: ringlet_record::chase::ChaseReply) -> ChaseResult {
    ChaseResult {
        entries: r
            .entries
            .into_iter()
            .map(|e| ChaseEntry {
                key: Bytes::from(e.key),
                depth: e.depth,
                attrs: e
                    .attrs
                    .into_iter()
                    .map(|(a, v)| (Bytes::from(a), Bytes::from(v)))
                    .collect(),
            })
            .collect(),
        stop: r.stop,
    }
}

/// An OK CHASE response as a [`ChaseResult`] (validated by the codec at decode; the entries
/// share the frame's buffer).
pub(crate) fn result(r: &Response) -> Result<ChaseResult, Error> {
    let blob = match (&r.status, &r.body) {
        (&ringlet_codec::native::Status::OK, Body::Value(v)) => v,
        (s, b) => return Err(crate::client::unexpected("CHASE", *s, b)),
    };
    let items = ChaseItems::parse(blob).map_err(Error::Protocol)?;
    let entries = items
        .iter()
        .map(|it| ChaseEntry {
            key: blob.slice_ref(it.key),
            depth: it.depth,
            attrs: it
                .attrs()
                .map(|(a, v)| (blob.slice_ref(a), blob.slice_ref(v)))
                .collect(),
        })
        .collect();
    let stop = match items.stop {
        ChaseStop::Complete => Stop::Complete,
        ChaseStop::Limit => Stop::Limit,
        ChaseStop::Bytes => Stop::Bytes,
        ChaseStop::Time => Stop::Time,
    };
    Ok(ChaseResult { entries, stop })
}
