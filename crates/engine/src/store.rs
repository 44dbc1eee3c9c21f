//! Storage under the engine: PROVISIONAL map-backed implementation (first commit), to be
//! replaced by the index + data regions behind the same interface.

use crate::api::{EngineConfig, EngineStats, Entry, Error, ReadOutcome, TickReport};
use crate::hash::{digest_term, key_hash};
use ringlet_types::{key_slot, MemgestId, Version};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Metadata of a stored entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub version: Version,
    pub memgest: MemgestId,
    pub expire_at_ms: Option<u64>,
}

/// A staged entry's place.
pub struct StagedHandle(Entry);

struct Shared {
    map: RwLock<HashMap<Vec<u8>, Entry>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Lock-free reader (provisional: takes a read lock).
#[derive(Clone)]
pub struct Reader {
    shared: Arc<Shared>,
}

impl Reader {
    /// Read `key` into `out` (cleared first).
    pub fn get(&self, key: &[u8], now_ms: u64, out: &mut Vec<u8>) -> ReadOutcome {
        out.clear();
        let map = match self.shared.map.read() {
            Ok(m) => m,
            Err(_) => return ReadOutcome::Retry,
        };
        match map.get(key) {
            Some(e) if !matches!(e.expire_at_ms, Some(t) if t <= now_ms) => {
                out.extend_from_slice(&e.value);
                self.shared.hits.fetch_add(1, Ordering::Relaxed);
                ReadOutcome::Hit {
                    version: e.version,
                    memgest: e.memgest,
                    expire_at_ms: e.expire_at_ms,
                }
            }
            _ => {
                self.shared.misses.fetch_add(1, Ordering::Relaxed);
                ReadOutcome::Miss
            }
        }
    }
}

pub struct Store {
    shared: Arc<Shared>,
    memory_bytes_max: u64,
    used: u64,
    digests: Vec<u64>,
    evictions: u64,
    expire_cursor: u64,
}

fn entry_bytes(key: &[u8], e: &Entry) -> u64 {
    (32 + key.len() + e.value.len()) as u64
}

impl Store {
    pub fn new(cfg: &EngineConfig) -> Result<Store, Error> {
        Ok(Store {
            shared: Arc::new(Shared {
                map: RwLock::new(HashMap::new()),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            }),
            memory_bytes_max: cfg.memory_bytes_max,
            used: 0,
            digests: vec![0; usize::from(ringlet_types::SLOT_COUNT)],
            evictions: 0,
            expire_cursor: 0,
        })
    }

    fn map(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.shared.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn map_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Vec<u8>, Entry>> {
        self.shared.map.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reader(&self) -> Reader {
        Reader {
            shared: self.shared.clone(),
        }
    }

    pub fn get_entry(&self, key: &[u8], _h: u64) -> Option<Entry> {
        self.map().get(key).cloned()
    }

    pub fn get_meta(&self, key: &[u8], _h: u64) -> Option<Meta> {
        self.map().get(key).map(|e| Meta {
            version: e.version,
            memgest: e.memgest,
            expire_at_ms: e.expire_at_ms,
        })
    }

    fn account(&mut self, key: &[u8], e: &Entry, add: bool) {
        let slot = usize::from(key_slot(key));
        let t = digest_term(key_hash(key), e.version);
        if let Some(d) = self.digests.get_mut(slot) {
            *d = if add {
                d.wrapping_add(t)
            } else {
                d.wrapping_sub(t)
            };
        }
        let b = entry_bytes(key, e);
        self.used = if add { self.used + b } else { self.used - b };
    }

    pub fn remove(&mut self, key: &[u8], _h: u64) -> Option<Meta> {
        let e = self.map_mut().remove(key);
        let e = e?;
        self.account(key, &e, false);
        Some(Meta {
            version: e.version,
            memgest: e.memgest,
            expire_at_ms: e.expire_at_ms,
        })
    }

    pub fn stage(
        &mut self,
        _key: &[u8],
        _h: u64,
        value: &[u8],
        meta: Meta,
    ) -> Result<StagedHandle, Error> {
        Ok(StagedHandle(Entry {
            value: value.to_vec(),
            version: meta.version,
            memgest: meta.memgest,
            expire_at_ms: meta.expire_at_ms,
        }))
    }

    pub fn discard(&mut self, _handle: StagedHandle) {}

    pub fn publish(
        &mut self,
        key: &[u8],
        h: u64,
        handle: StagedHandle,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let e = handle.0;
        self.put(
            key,
            h,
            &e.value,
            Meta {
                version: e.version,
                memgest: e.memgest,
                expire_at_ms: e.expire_at_ms,
            },
            evictable,
        )
    }

    pub fn put(
        &mut self,
        key: &[u8],
        _h: u64,
        value: &[u8],
        meta: Meta,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let e = Entry {
            value: value.to_vec(),
            version: meta.version,
            memgest: meta.memgest,
            expire_at_ms: meta.expire_at_ms,
        };
        let old_bytes = self.map().get(key).map_or(0, |o| entry_bytes(key, o));
        let need = entry_bytes(key, &e);
        let mut evicted = Vec::new();
        if self.used - old_bytes + need > self.memory_bytes_max {
            let victims: Vec<Vec<u8>> = self
                .map()
                .iter()
                .filter(|(k, v)| evictable(v.memgest) && k.as_slice() != key)
                .map(|(k, _)| k.clone())
                .take(ringlet_types::limits::EVICTION_SCAN_PER_WRITE_MAX as usize)
                .collect();
            for k in victims {
                if self.used - old_bytes + need <= self.memory_bytes_max {
                    break;
                }
                if let Some(m) = self.remove(&k, 0) {
                    evicted.push(m.version);
                    self.evictions += 1;
                }
            }
            if self.used - old_bytes + need > self.memory_bytes_max {
                return Err(Error::NoSpace);
            }
        }
        let old = self.map_mut().remove(key);
        if let Some(old) = old {
            self.account(key, &old, false);
        }
        self.account(key, &e, true);
        self.map_mut().insert(key.to_vec(), e);
        Ok(evicted)
    }

    pub fn len(&self) -> u64 {
        self.map().len() as u64
    }

    pub fn clear(&mut self) {
        self.map_mut().clear();
        self.used = 0;
        self.digests.iter_mut().for_each(|d| *d = 0);
    }

    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        slot: Option<u16>,
        now_ms: Option<u64>,
        out: &mut Vec<Vec<u8>>,
    ) -> u64 {
        let map = self.map();
        let mut keys: Vec<(u64, &Vec<u8>)> = map
            .iter()
            .filter(|(k, e)| {
                slot.is_none_or(|s| key_slot(k) == s)
                    && now_ms.is_none_or(|n| !matches!(e.expire_at_ms, Some(t) if t <= n))
            })
            .map(|(k, _)| (key_hash(k) >> 1, k))
            .filter(|(h, _)| *h >= cursor)
            .collect();
        keys.sort();
        let count = count.max(1);
        for (_, k) in keys.iter().take(count) {
            out.push((*k).clone());
        }
        if keys.len() <= count {
            0
        } else {
            keys.get(count).map_or(0, |(h, _)| *h)
        }
    }

    pub fn random_key(&self, seed: u64, now_ms: u64) -> Option<Vec<u8>> {
        let map = self.map();
        let live: Vec<&Vec<u8>> = map
            .iter()
            .filter(|(_, e)| !matches!(e.expire_at_ms, Some(t) if t <= now_ms))
            .map(|(k, _)| k)
            .collect();
        if live.is_empty() {
            return None;
        }
        live.get((seed % live.len() as u64) as usize)
            .map(|k| (*k).clone())
    }

    pub fn slot_digest(&self, slot: u16) -> u64 {
        self.digests.get(usize::from(slot)).copied().unwrap_or(0)
    }

    pub fn expire_step(&mut self, now_ms: u64, report: &mut TickReport) -> Vec<(Vec<u8>, Version)> {
        let _ = self.expire_cursor;
        let expired: Vec<Vec<u8>> = self
            .map()
            .iter()
            .take(ringlet_types::limits::EXPIRE_WORK_PER_TICK_MAX as usize * 100)
            .filter(|(_, e)| matches!(e.expire_at_ms, Some(t) if t <= now_ms))
            .map(|(k, _)| k.clone())
            .take(ringlet_types::limits::EXPIRE_WORK_PER_TICK_MAX as usize)
            .collect();
        report.expiry_scanned = expired.len() as u32;
        let mut out = Vec::new();
        for k in expired {
            if let Some(m) = self.remove(&k, 0) {
                out.push((k, m.version));
            }
        }
        out
    }

    pub fn maintenance_step(&mut self, _report: &mut TickReport) {}

    pub fn touch(&mut self, _h: u64) {}

    pub fn reader_hits(&self) -> u64 {
        self.shared.hits.load(Ordering::Relaxed)
    }

    pub fn reader_misses(&self) -> u64 {
        self.shared.misses.load(Ordering::Relaxed)
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = EngineStats {
            keys: self.len(),
            used_bytes: self.used,
            committed_bytes: self.used,
            memory_bytes_max: self.memory_bytes_max,
            evictions: self.evictions,
            ..EngineStats::default()
        };
        for (k, e) in self.map().iter() {
            let b = entry_bytes(k, e);
            let u = s.per_memgest.entry(e.memgest).or_default();
            u.keys += 1;
            u.bytes += b;
            let u = s.per_slot.entry(key_slot(k)).or_default();
            u.keys += 1;
            u.bytes += b;
        }
        s
    }
}
