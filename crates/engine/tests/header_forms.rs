//! The data-entry header forms of format 5 (layout.rs): the 20-byte short header (no TTL, key
//! <= 255 B, value < 64 KiB, memgest < 32) and the long 24/32-byte one, and the one-word index
//! entry's check (`[location 32 | tag 8 | check 24]`).
//!
//! - `word2_round_trips`: every field packed into word 2 comes back, in both forms, whatever
//!   the key bytes sharing a short header's word and whatever the live bit.
//! - `entries_round_trip_through_every_reader`: entries around the form boundaries (key 255/256,
//!   value 2^16 - 1 / 2^16, memgest 31 / 32, TTL or not, record or string) read back identically through the
//!   writer (`Engine::get`), the one-sided reader over a second mapping of the memfds, and a
//!   location-hint direct read; the entry's size is the one its form implies.
//! - `a_damaged_or_foreign_image_is_never_returned`: one flipped bit anywhere in a published
//!   entry (header, key, value, padding) makes the one-sided reader refuse it (`Retry`), the
//!   live bit excepted (not checksummed, by design); another key's image copied over an entry
//!   is refused too (the check binds image and location), and so is an index entry whose
//!   check was changed (`a_wrong_check_is_never_accepted`).

use proptest::prelude::*;
use ringlet_engine::layout::*;
use ringlet_engine::read::{
    locate_position, read_entry_bounded, read_entry_direct, read_entry_image,
};
use ringlet_engine::*;

struct Map {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Map {
    fn new(fd: i32, len: usize, writable: bool) -> Map {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping a memfd the engine handed us, shared; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Map { ptr, len }
    }
    /// The byte at `off` (only this test writes through this mapping, between reads).
    fn byte(&self, off: u64) -> *mut u8 {
        assert!((off as usize) < self.len);
        // SAFETY: in range of our own mapping.
        unsafe { self.ptr.cast::<u8>().add(off as usize) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

fn engine() -> Engine {
    Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn key_of(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn value_of(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn word2_round_trips(
        kl in prop_oneof![0u32..300, Just(255u32), Just(256u32), Just(65536u32)],
        vl in prop_oneof![0u32..300, Just((1 << 16) - 1), Just(1 << 16), Just(64 << 20)],
        memgest in prop_oneof![0u16..40, Just(31u16), Just(32u16), Just(u16::MAX)],
        ttl: bool,
        record: bool,
        live: bool,
        key_bytes: u32,
    ) {
        let kind = if record { ValueKind::Record } else { ValueKind::String };
        let mut w2 = de_w2(kl, vl, ttl, memgest) | de_kind_bits(kind);
        let short = de_is_short(kl as usize, vl as usize, ttl, memgest);
        prop_assert_eq!(short, !ttl && kl <= 255 && vl < 1 << 16 && memgest < 32);
        prop_assert_eq!(de_short(w2), short);
        if short {
            // The high half of a short header's word 2 is key bytes: any value.
            prop_assert_eq!(w2 >> 32, 0);
            w2 |= u64::from(key_bytes) << 32;
        }
        if live {
            w2 |= DE_LIVE_BIT;
        }
        prop_assert_eq!(de_key_len(w2), kl);
        prop_assert_eq!(de_value_len(w2), vl);
        prop_assert_eq!(de_has_ttl(w2), ttl);
        prop_assert_eq!(de_memgest(w2), memgest);
        prop_assert_eq!(de_kind(w2), kind);
        prop_assert_eq!(de_live(w2), live);
        let hdr = de_header_bytes(w2);
        prop_assert_eq!(hdr, header_bytes_for(kl as usize, vl as usize, ttl, memgest));
        prop_assert_eq!(
            hdr,
            if short { 20 } else if ttl { 32 } else { 24 }
        );
        prop_assert_eq!(
            entry_units(kl as usize, vl as usize, ttl, memgest),
            (hdr as u64 + u64::from(kl) + u64::from(vl)).div_ceil(8)
        );
        prop_assert_eq!(de_units(w2), entry_units(kl as usize, vl as usize, ttl, memgest));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn entries_round_trip_through_every_reader(
        entries in prop::collection::vec(
            (
                prop_oneof![0usize..40, 250usize..=256],
                prop_oneof![
                    4 => 0usize..300,
                    1 => ((1usize << 16) - 2)..=((1usize << 16) + 1),
                ],
                any::<bool>(),
                any::<bool>(),
                prop_oneof![Just(0u16), Just(31u16), Just(32u16), Just(700u16)],
            ),
            1..12,
        ),
    ) {
        let mut e = engine();
        let x = e.export();
        let index = Map::new(x.index_fd, x.index_len, false);
        let data = Map::new(x.data_fd, x.data_len, false);
        // SAFETY: both mappings outlive the view.
        let view = unsafe {
            RegionsView::new(index.ptr.cast(), index.len, data.ptr.cast(), data.len)
        };
        let mut want = Vec::new();
        for m in [31u16, 32, 700] {
            e.define_memgest(MemgestId(m), true);
        }
        for (i, &(kl, vl, ttl, record, m)) in entries.iter().enumerate() {
            // A distinct key per entry: its first byte is the entry's number.
            let mut key = key_of(kl.max(1), i as u8);
            key[0] = i as u8;
            let value = value_of(vl, i as u8);
            let opts = SetOptions {
                expiry: if ttl { Expiry::At(1_000_000) } else { Expiry::Persist },
                kind: if record { ValueKind::Record } else { ValueKind::String },
                memgest: MemgestId(m),
                ..SetOptions::default()
            };
            e.set(&key, &value, &opts, 1).unwrap();
            want.push((key, value, ttl, record, m));
        }
        // The measured workload's entry (16 B key, 100 B value, no TTL) takes 136 bytes.
        prop_assert_eq!(entry_units(16, 100, false, 0) * UNIT_BYTES, 136);
        let mut out = Vec::new();
        let mut image = Vec::new();
        for (key, value, ttl, record, m) in &want {
            let kind = if *record { ValueKind::Record } else { ValueKind::String };
            let w = e.get(key, 1).unwrap();
            prop_assert_eq!(&w.value, value);
            prop_assert_eq!(w.kind, kind);
            prop_assert_eq!(w.expire_at_ms, ttl.then_some(1_000_000));
            prop_assert_eq!(w.memgest, MemgestId(*m));
            let units = entry_units(key.len(), value.len(), *ttl, *m);
            let slot = e.footprint(key).unwrap() - INDEX_ENTRY_BYTES;
            // Small entries take a slab slot of exactly their units (classes step by 8 B),
            // from the smallest class up (32 B: a tiny key and value in the 20-byte short
            // header need only 24, and take 32).
            if units * UNIT_BYTES <= 256 {
                prop_assert_eq!(slot, units.max(4) * UNIT_BYTES);
            }
            match read_entry(&view, key, 1, &mut out) {
                ReadOutcome::Hit { version, expire_at_ms, kind: k, memgest } => {
                    prop_assert_eq!(&out, value);
                    prop_assert_eq!((version, expire_at_ms, k), (w.version, w.expire_at_ms, kind));
                    prop_assert_eq!(memgest, MemgestId(*m));
                }
                other => prop_assert!(false, "one-sided read: {:?}", other),
            }
            // The batched reader's form: the same outcome, the value in place in the image
            // (the buffer is reused across keys of every size, as the batched path does).
            let (r, span) = read_entry_image(&view, key, hash::key_hash(key), 1, None, &mut image);
            prop_assert_eq!(r, ReadOutcome::Hit {
                version: w.version,
                memgest: MemgestId(*m),
                expire_at_ms: w.expire_at_ms,
                kind,
            });
            prop_assert_eq!(&image[span], &value[..]);
            let pos = locate_position(&view, key, hash::key_hash(key)).expect("position");
            let d = pos.data.expect("direct");
            match read_entry_direct(&view, key, hash::key_hash(key), d, 1, None, &mut out) {
                Ok(ReadOutcome::Hit { version, memgest, .. }) => {
                    prop_assert_eq!(&out, value);
                    prop_assert_eq!(version, w.version);
                    prop_assert_eq!(memgest, MemgestId(*m));
                }
                other => prop_assert!(false, "direct read: {:?}", other),
            }
        }
    }

    #[test]
    fn a_damaged_or_foreign_image_is_never_returned(
        kl in 1usize..40,
        vl in 0usize..300,
        ttl: bool,
        pick: prop::sample::Index,
    ) {
        let mut e = engine();
        let x = e.export();
        let index = Map::new(x.index_fd, x.index_len, false);
        let data = Map::new(x.data_fd, x.data_len, true);
        // SAFETY: both mappings outlive the view.
        let view = unsafe {
            RegionsView::new(index.ptr.cast(), index.len, data.ptr.cast(), data.len)
        };
        let opts = SetOptions {
            expiry: if ttl { Expiry::At(1_000_000) } else { Expiry::Persist },
            ..SetOptions::default()
        };
        let key = key_of(kl, 1);
        let value = value_of(vl, 2);
        e.set(&key, &value, &opts, 1).unwrap();
        let h = hash::key_hash(&key);
        let d = locate_position(&view, &key, h).unwrap().data.unwrap();
        let base = u64::from(d.location) * UNIT_BYTES;
        let size = entry_units(kl, vl, ttl, 0) * UNIT_BYTES;
        let mut out = Vec::new();
        let bit = pick.index(size as usize * 8) as u64;
        let p = data.byte(base + bit / 8);
        // SAFETY: a byte of our own writable mapping; nothing else runs meanwhile.
        unsafe { *p ^= 1 << (bit % 8) };
        let r = read_entry(&view, &key, 1, &mut out);
        // The batched reader's form (image left in place, value located in it) validates
        // the same way: it must refuse the same images.
        let mut image = Vec::new();
        let (ri, span) = read_entry_image(&view, &key, h, 1, None, &mut image);
        // SAFETY: as above (restore).
        unsafe { *p ^= 1 << (bit % 8) };
        if bit == 16 * 8 + DE_LIVE_BIT.trailing_zeros() as u64 {
            let hit = matches!(r, ReadOutcome::Hit { .. });
            prop_assert!(hit && out == value, "live bit flipped: {:?}", r);
            prop_assert_eq!(ri, r);
            prop_assert_eq!(&image[span], &value[..]);
        } else {
            prop_assert_eq!(r, ReadOutcome::Retry, "bit {} of a {}-byte entry", bit, size);
            prop_assert_eq!(ri, ReadOutcome::Retry, "image read, bit {}", bit);
            prop_assert!(image.is_empty());
        }
        // Another key's entry of the same size copied over this one: the bytes are a valid
        // image, but not of this location, so the index entry's checksum refuses it.
        let mut key2 = key.clone();
        key2[0] ^= 0xff;
        let value2 = value_of(vl, 9);
        e.set(&key2, &value2, &opts, 1).unwrap();
        let d2 = locate_position(&view, &key2, hash::key_hash(&key2)).unwrap().data.unwrap();
        let base2 = u64::from(d2.location) * UNIT_BYTES;
        let saved: Vec<u8> = (0..size).map(|i| {
            // SAFETY: bytes of our own mapping.
            unsafe { *data.byte(base + i) }
        }).collect();
        for i in 0..size {
            // SAFETY: as above.
            unsafe { *data.byte(base + i) = *data.byte(base2 + i) };
        }
        prop_assert_eq!(read_entry(&view, &key, 1, &mut out), ReadOutcome::Retry);
        prop_assert_eq!(read_entry_image(&view, &key, h, 1, None, &mut out).0, ReadOutcome::Retry);
        prop_assert_eq!(read_entry(&view, &key2, 1, &mut out), ReadOutcome::Hit {
            version: e.get(&key2, 1).unwrap().version,
            memgest: opts.memgest,
            expire_at_ms: ttl.then_some(1_000_000),
            kind: ValueKind::String,
        });
        for (i, b) in saved.iter().enumerate() {
            // SAFETY: as above.
            unsafe { *data.byte(base + i as u64) = *b };
        }
        let restored = read_entry(&view, &key, 1, &mut out);
        let hit = matches!(restored, ReadOutcome::Hit { .. });
        prop_assert!(hit, "restored entry: {:?}", restored);
        prop_assert_eq!(&out, &value);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Format 5's one-word index entry: any single bit of it changed (location, tag, check)
    /// never yields a hit with wrong bytes. A changed check or location is refused (`Retry`:
    /// the 24-bit check binds the image to its location and tag); a changed tag can only make
    /// the key not found (`Miss`) or refused. A second key of the same lengths whose image is
    /// at the changed location is never returned for this key.
    #[test]
    fn a_wrong_check_is_never_accepted(
        kl in 1usize..40,
        vl in 0usize..300,
        ttl: bool,
    ) {
        let mut e = engine();
        let x = e.export();
        let index = Map::new(x.index_fd, x.index_len, true);
        let data = Map::new(x.data_fd, x.data_len, false);
        // SAFETY: both mappings outlive the view.
        let view = unsafe {
            RegionsView::new(index.ptr.cast(), index.len, data.ptr.cast(), data.len)
        };
        let opts = SetOptions {
            expiry: if ttl { Expiry::At(1_000_000) } else { Expiry::Persist },
            ..SetOptions::default()
        };
        let key = key_of(kl, 3);
        let value = value_of(vl, 4);
        e.set(&key, &value, &opts, 1).unwrap();
        // Neighbours, so a changed location can land on another live image.
        for i in 0..8u8 {
            let mut k2 = key.clone();
            k2[0] ^= 0x80 | i;
            e.set(&k2, &value_of(vl, i), &opts, 1).unwrap();
        }
        let h = hash::key_hash(&key);
        let pos = locate_position(&view, &key, h).unwrap();
        let mut out = Vec::new();
        for bit in 0..64u64 {
            let p = index.byte(pos.entry + bit / 8);
            // SAFETY: a byte of our own writable mapping; nothing else runs meanwhile.
            unsafe { *p ^= 1 << (bit % 8) };
            // A changed location may name the middle of another entry, whose "word 2" is
            // any bytes and may promise a copy of up to the entry limit: bounded here so the
            // test stays fast (a larger size is refused the same way, `Retry`).
            let r = read_entry_bounded(&view, &key, 1, 1 << 16, &mut out);
            // SAFETY: as above (restore).
            unsafe { *p ^= 1 << (bit % 8) };
            if (32..40).contains(&bit) {
                prop_assert!(
                    matches!(r, ReadOutcome::Miss | ReadOutcome::Retry),
                    "tag bit {}: {:?}", bit, r
                );
            } else {
                prop_assert_eq!(r, ReadOutcome::Retry, "index bit {}", bit);
            }
        }
        let r = read_entry(&view, &key, 1, &mut out);
        prop_assert!(matches!(r, ReadOutcome::Hit { .. }) && out == value, "restored: {:?}", r);
    }
}
