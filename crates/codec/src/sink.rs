//! [`Sink`]: where encoders write. Implemented for `Vec<u8>` and `bytes::BytesMut`, so the
//! server can encode straight into its connection's write buffer and tests into a `Vec`.

use bytes::BytesMut;

/// An append-only byte buffer that can also patch bytes it already holds (used to fill in a
/// length once a variable-size body is written). Growing is the sink's business; encoders
/// only append what they were given or what a checked length allowed.
pub trait Sink {
    /// Append `b`.
    fn put(&mut self, b: &[u8]);
    /// Append one byte.
    fn put_u8(&mut self, b: u8);
    /// Bytes held.
    fn len(&self) -> usize;
    /// Whether nothing is held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Overwrite `b.len()` bytes at `at`. Returns false (and writes nothing) if that range is
    /// not inside the buffer.
    fn patch(&mut self, at: usize, b: &[u8]) -> bool;
}

/// [`Sink::patch`] over any contiguous buffer: both sinks deref to `[u8]`.
fn patch_slice(buf: &mut [u8], at: usize, b: &[u8]) -> bool {
    match at.checked_add(b.len()).and_then(|end| buf.get_mut(at..end)) {
        Some(dst) => {
            dst.copy_from_slice(b);
            true
        }
        None => false,
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    #[inline]
    fn put_u8(&mut self, b: u8) {
        self.push(b);
    }
    #[inline]
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn patch(&mut self, at: usize, b: &[u8]) -> bool {
        patch_slice(self, at, b)
    }
}

impl Sink for BytesMut {
    #[inline]
    fn put(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    #[inline]
    fn put_u8(&mut self, b: u8) {
        self.extend_from_slice(&[b]);
    }
    #[inline]
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn patch(&mut self, at: usize, b: &[u8]) -> bool {
        patch_slice(self, at, b)
    }
}
