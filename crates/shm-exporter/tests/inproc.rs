//! Exporter and ShmReader in one process (the reader still maps the regions through the
//! socket and SCM_RIGHTS exactly as another process would).

use parking_lot::Mutex;
use ringlet_codec::native::SetRequest;
use ringlet_engine::{Engine, EngineConfig};
use ringlet_shm::testkit::{check_value, make_value};
use ringlet_shm::{ShmError, ShmReader};
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use ringlet_types::limits::ACCESS_RECORD_BATCH_MAX;
use ringlet_types::Epoch;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn node(name: &str) -> (Arc<Mutex<Engine>>, Exporter, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ringlet-shm-in-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let engine = Arc::new(Mutex::new(
        Engine::new(EngineConfig {
            memory_bytes_max: 16 << 20,
            ..EngineConfig::default()
        })
        .unwrap(),
    ));
    let x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path)).unwrap();
    (engine, x, path)
}

#[test]
fn get_mget_set_del_incr_round_trip() {
    let (_e, x, path) = node("basic");
    let mut r = ShmReader::connect(&path).unwrap();
    assert_eq!(r.hello().unwrap().generation, x.generation());
    let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("key{i}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 3 != 0) {
        r.set(k, &make_value(k, i as u64, 20 + i)).unwrap();
    }
    for (i, k) in keys.iter().enumerate() {
        let got = r.get(k).unwrap();
        if i % 3 == 0 {
            assert!(got.is_none());
        } else {
            let (_, v) = got.unwrap();
            assert_eq!(check_value(k, &v), Ok(i as u64));
            // The socket path agrees with the one-sided path.
            assert_eq!(r.get_rpc(k).unwrap().map(|(_, v)| v), Some(v));
        }
    }
    let many = r.mget(&keys).unwrap();
    for (i, (k, m)) in keys.iter().zip(&many).enumerate() {
        assert_eq!(
            m.as_ref().map(|(_, v)| v.clone()),
            r.get(k).unwrap().map(|(_, v)| v),
            "key {i}"
        );
    }
    assert!(r.del(&keys[1]).unwrap());
    assert!(!r.del(&keys[1]).unwrap());
    assert!(r.get(&keys[1]).unwrap().is_none());
    assert_eq!(r.incr_by(b"counter", 5).unwrap(), 5);
    assert_eq!(r.get(b"counter").unwrap().unwrap().1, b"5");
    assert_eq!(r.ping().unwrap(), Epoch(0));
    let st = r.stats();
    assert!(
        st.shm_hits > 0 && st.shm_misses > 0 && st.fallbacks == 0,
        "{st:?}"
    );
}

#[test]
fn expired_keys_read_as_missing_one_sided() {
    let (_e, _x, path) = node("ttl");
    let mut r = ShmReader::connect(&path).unwrap();
    let v = r
        .set_request(&SetRequest {
            key: b"t",
            value: b"v",
            ttl_ms: Some(100),
            ..SetRequest::default()
        })
        .unwrap();
    assert!(v.is_some());
    // No tick runs in this test: only the reader's own expiry check can hide the entry.
    std::thread::sleep(Duration::from_millis(250));
    assert!(r.get(b"t").unwrap().is_none());
    assert_eq!(r.stats().fallbacks, 0);
}

#[test]
fn a_config_word_the_reader_cannot_match_falls_back_to_the_socket() {
    let (e, _x, path) = node("fallback");
    let mut r = ShmReader::connect(&path).unwrap();
    r.set(b"k", b"value").unwrap();
    assert_eq!(r.get(b"k").unwrap().unwrap().1, b"value");
    // The node's role word changes without the exporter's epoch: one-sided reads are void,
    // a re-handshake does not help, so the reader must use the socket — and be right.
    e.lock().set_config_id(12345);
    assert_eq!(r.get(b"k").unwrap().unwrap().1, b"value");
    assert!(r.get(b"missing").unwrap().is_none());
    let st = r.stats();
    assert!(st.fallbacks >= 2, "{st:?}");
    assert_eq!(
        st.reconnects, 1,
        "one re-handshake, not one per GET: {st:?}"
    );
    let m = r.mget(&[b"k".as_slice(), b"missing"]).unwrap();
    assert_eq!(m[0].as_ref().unwrap().1, b"value");
    assert!(m[1].is_none());
    // Once the header carries the pinned epoch again, reads are one-sided again.
    e.lock().set_config_id(0);
    let before = r.stats().shm_hits;
    assert_eq!(r.get(b"k").unwrap().unwrap().1, b"value");
    assert_eq!(r.stats().shm_hits, before + 1);
}

#[test]
fn epoch_change_makes_readers_rehandshake() {
    let (_e, x, path) = node("epoch");
    let mut r = ShmReader::connect(&path).unwrap();
    r.set(b"k", b"v").unwrap();
    x.set_epoch(Epoch(3));
    assert_eq!(r.get(b"k").unwrap().unwrap().1, b"v");
    assert_eq!(r.hello().unwrap().epoch, Epoch(3));
    assert_eq!(r.stats().epoch_changes, 1);
    assert_eq!(r.stats().fallbacks, 0);
}

#[test]
fn access_records_reach_the_engine_in_bounded_batches() {
    let (_e, x, path) = node("access");
    let mut r = ShmReader::connect(&path).unwrap();
    let n = ACCESS_RECORD_BATCH_MAX as u64 + 1000;
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("a{i}").into_bytes()).collect();
    for k in &keys {
        r.set(k, b"v").unwrap();
    }
    // Each key twice in a row: the repeat is filtered out of the batch.
    for k in &keys {
        assert!(r.get(k).unwrap().is_some());
        assert!(r.get(k).unwrap().is_some());
    }
    r.flush_access();
    // The exporter handles messages on its own thread: wait (bounded) for them to land.
    let mut seen = 0;
    for _ in 0..200 {
        seen = x.stats().access_hashes;
        if seen > n {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every distinct key once; the key whose first read filled the batch is recorded again
    // by its second read (the filter is cleared with each sent batch).
    assert_eq!(seen, n + 1);
    assert_eq!(x.stats().access_batches, 2, "one full batch, one flushed");
    assert_eq!(r.stats().access_batches_sent, 2);
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let dir = std::env::temp_dir().join(format!("ringlet-shm-in-limit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let engine = Arc::new(Mutex::new(Engine::new(EngineConfig::default()).unwrap()));
    let mut cfg = ExporterConfig::new(&path);
    cfg.connections_max = 1;
    let _x = Exporter::spawn(engine, cfg).unwrap();
    let _a = ShmReader::connect(&path).unwrap();
    let mut c = ringlet_shm::ShmReaderConfig::new(&path);
    c.reconnect_attempts = 1;
    assert!(matches!(ShmReader::with_config(c), Err(ShmError::Io(_))));
}

#[test]
fn a_second_node_cannot_steal_a_live_socket() {
    let (_e, _x, path) = node("steal");
    let engine = Arc::new(Mutex::new(Engine::new(EngineConfig::default()).unwrap()));
    assert!(Exporter::spawn(engine, ExporterConfig::new(&path)).is_err());
    // The first node still serves.
    assert!(ShmReader::connect(&path).is_ok());
}
