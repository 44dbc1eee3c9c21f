//! Checked reads over a frame body: every read is bounds-checked and every length is checked
//! against `limits` before the bytes it announces are touched.

use ringlet_types::limits;

use crate::error::DecodeError;

pub(crate) struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Cursor<'a> {
        Cursor { b, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.b.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(u8::from_be_bytes(self.array()?))
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    pub(crate) fn u128(&mut self) -> Result<u128, DecodeError> {
        Ok(u128::from_be_bytes(self.array()?))
    }

    /// A `u32`-length-prefixed key, at most `limits::KEY_BYTES_MAX` bytes.
    pub(crate) fn key(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()?;
        if n > limits::KEY_BYTES_MAX {
            return Err(DecodeError::KeyTooLarge(n));
        }
        self.take(n as usize)
    }

    /// A `u32`-length-prefixed value, at most `limits::VALUE_BYTES_MAX` bytes.
    pub(crate) fn value(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()?;
        if n > limits::VALUE_BYTES_MAX {
            return Err(DecodeError::ValueTooLarge(n));
        }
        self.take(n as usize)
    }

    /// A `u32`-length-prefixed COMMAND argument, at most `limits::COMMAND_ARG_BYTES_MAX`.
    pub(crate) fn arg(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()?;
        if n > limits::COMMAND_ARG_BYTES_MAX {
            return Err(DecodeError::ValueTooLarge(n));
        }
        self.take(n as usize)
    }

    /// A `u32`-length-prefixed COMMAND reply (RESP3 bytes), at most
    /// `limits::COMMAND_REPLY_BYTES_MAX`.
    pub(crate) fn command_reply(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()?;
        if n > limits::COMMAND_REPLY_BYTES_MAX {
            return Err(DecodeError::ValueTooLarge(n));
        }
        self.take(n as usize)
    }

    /// A COMMAND argument count: at least 1 (the name), at most `limits::COMMAND_ARGS_MAX`,
    /// and at most what the remaining body could hold at 4 bytes (a length) per argument.
    pub(crate) fn arg_count(&mut self) -> Result<u32, DecodeError> {
        let n = self.u32()?;
        if n > limits::COMMAND_ARGS_MAX {
            return Err(DecodeError::BatchTooLarge(n));
        }
        if n == 0 {
            return Err(DecodeError::InvalidField("COMMAND without a command name"));
        }
        if (n as usize).saturating_mul(4) > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }

    /// A READ_REPLICA payload (`len u32 | memgest u16 | flags u8 | value`): its length is at
    /// most `limits::VALUE_BYTES_MAX` plus the 3 fixed bytes, so a largest value still fits.
    pub(crate) fn replica_blob(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()?;
        if n > limits::VALUE_BYTES_MAX.saturating_add(3) {
            return Err(DecodeError::ValueTooLarge(n));
        }
        self.take(n as usize)
    }

    /// A batch count, at most `limits::BATCH_KEYS_MAX`, and at most what the remaining body
    /// could hold at `min_item_bytes` per item (so no count can make a caller over-reserve).
    pub(crate) fn count(&mut self, min_item_bytes: usize) -> Result<u32, DecodeError> {
        let n = self.u32()?;
        if n > limits::BATCH_KEYS_MAX {
            return Err(DecodeError::BatchTooLarge(n));
        }
        if (n as usize).saturating_mul(min_item_bytes) > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }

    pub(crate) fn remaining(&self) -> usize {
        self.b.len().saturating_sub(self.pos)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let r = self.b.get(self.pos..).unwrap_or(&[]);
        self.pos = self.b.len();
        r
    }

    /// Every byte of the body must have been read.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(DecodeError::TrailingBytes);
        }
        Ok(())
    }
}
