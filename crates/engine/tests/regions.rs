//! The regions as other processes see them, and memory going back to the OS.
//!
//! - `exported_regions_read_at_another_address`: maps the exported memfds a second time,
//!   read-only, at addresses chosen by the kernel (as the shared-memory client will), and reads
//!   through `read_entry` on that view: offsets only, no pointers, so it must see the same
//!   values — including across an index upsize and after the config id changes.
//! - `shrinking_corpus_gives_memory_back`: fill, delete most keys, tick: compaction empties
//!   slabs and released pages leave the committed total.

use ringlet_engine::*;

struct RoMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl RoMap {
    fn new(fd: i32, len: usize) -> RoMap {
        // SAFETY: mapping a memfd we were handed, read-only, shared; checked for failure.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        RoMap { ptr, len }
    }
}

impl Drop for RoMap {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
    }
}

#[test]
fn exported_regions_read_at_another_address() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 8 << 20,
        index_buckets_initial: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    let x = e.export();
    let index = RoMap::new(x.index_fd, x.index_len);
    let data = RoMap::new(x.data_fd, x.data_len);
    // SAFETY: both mappings outlive the view (dropped at the end of the test).
    let view = unsafe { RegionsView::new(index.ptr.cast(), index.len, data.ptr.cast(), data.len) };
    assert!(view.is_valid());
    let mut out = Vec::new();
    assert_eq!(read_entry(&view, b"nope", 1, &mut out), ReadOutcome::Miss);
    // Enough keys to force several upsizes of a 4-bucket index.
    for i in 0..2000u32 {
        let opts = SetOptions {
            expiry: if i % 10 == 0 {
                Expiry::At(500)
            } else {
                Expiry::Persist
            },
            ..SetOptions::default()
        };
        e.set(
            format!("k{i}").as_bytes(),
            format!("value-{i}").as_bytes(),
            &opts,
            1,
        )
        .unwrap();
        e.tick(1);
    }
    assert!(e.stats().upsizes > 0);
    for i in 0..2000u32 {
        match read_entry(&view, format!("k{i}").as_bytes(), 1, &mut out) {
            ReadOutcome::Hit {
                version,
                expire_at_ms,
                ..
            } => {
                assert_eq!(out, format!("value-{i}").as_bytes());
                let w = e.get(format!("k{i}").as_bytes(), 1).unwrap();
                assert_eq!((version, expire_at_ms), (w.version, w.expire_at_ms));
            }
            other => panic!("k{i}: {other:?}"),
        }
    }
    // Expired keys read as misses through the view too.
    assert_eq!(read_entry(&view, b"k10", 600, &mut out), ReadOutcome::Miss);
    // A pinned config id: a mismatch means "refresh your map and retry".
    e.set_config_id(42);
    let h = hash::key_hash(b"k1");
    assert!(matches!(
        read_entry_with(&view, b"k1", h, 1, Some(42), &mut out).0,
        ReadOutcome::Hit { .. }
    ));
    assert_eq!(
        read_entry_with(&view, b"k1", h, 1, Some(41), &mut out).0,
        ReadOutcome::Retry
    );
    // After a flush the view sees an empty store.
    e.flush_all(2);
    assert_eq!(read_entry(&view, b"k1", 2, &mut out), ReadOutcome::Miss);
}

#[test]
fn shrinking_corpus_gives_memory_back() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: Engine::index_buckets_for(8_000),
        ..EngineConfig::default()
    })
    .unwrap();
    let v = vec![1u8; 200];
    for i in 0..8_000u32 {
        e.set(format!("key{i}").as_bytes(), &v, &SetOptions::default(), 1)
            .unwrap();
    }
    let full = e.stats().committed_bytes;
    // Keep one key in 16: every slab stays partly used until compaction moves entries.
    for i in 0..8_000u32 {
        if i % 16 != 0 {
            e.delete(format!("key{i}").as_bytes(), None, 1).unwrap();
        }
    }
    let mut released = 0;
    let mut moved = 0;
    for _ in 0..200 {
        let r = e.tick(1);
        released += r.bytes_released;
        moved += r.entries_moved;
    }
    let after = e.stats().committed_bytes;
    assert!(moved > 0, "compaction must move entries");
    assert!(released > 0, "pages must be punched");
    assert!(
        after * 4 < full,
        "committed {after} should be far below {full} after keeping 1/16 of the keys"
    );
    e.check_invariants().unwrap();
    for i in (0..8_000u32).step_by(16) {
        assert_eq!(e.get(format!("key{i}").as_bytes(), 1).unwrap().value, v);
    }
}

/// `read_entry_bounded` copies nothing larger than its bound: a large entry answers `Retry`
/// (the caller takes the writer path), a small one reads as with `read_entry`.
#[test]
fn bounded_reads_refuse_large_entries() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 8 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let opts = SetOptions::default();
    e.set(b"small", b"abc", &opts, 1).unwrap();
    e.set(b"large", &vec![7u8; 100_000], &opts, 1).unwrap();
    let r = e.reader();
    let mut out = Vec::new();
    assert!(matches!(
        read_entry_bounded(&r.view(), b"small", 1, 4096, &mut out),
        ReadOutcome::Hit { .. }
    ));
    assert_eq!(out, b"abc");
    assert_eq!(
        read_entry_bounded(&r.view(), b"large", 1, 4096, &mut out),
        ReadOutcome::Retry
    );
    assert!(out.is_empty());
    assert!(matches!(
        read_entry_bounded(&r.view(), b"large", 1, 200_000, &mut out),
        ReadOutcome::Hit { .. }
    ));
    assert_eq!(out.len(), 100_000);
    assert_eq!(
        read_entry_bounded(&r.view(), b"missing", 1, 4096, &mut out),
        ReadOutcome::Miss
    );
}
