//! Concurrent writers and lock-free readers through the real server: GETs are answered by the
//! workers' engine readers without the lock while other connections overwrite the same keys
//! with values of changing length. Every value is self-describing (one repeated byte, length
//! derived from that byte), so a torn or mixed read is detected. Also checks INCR atomicity
//! across connections (the engine mutex serialises read-modify-write commands).

mod common;

use common::{start_ringlet, Raw};

/// Value number `n`: byte `b = n % 251`, repeated `64 + (b as usize) * 97` times.
fn value(n: u32) -> Vec<u8> {
    let b = (n % 251) as u8;
    vec![b; 64 + usize::from(b) * 97]
}

fn check(v: &[u8]) {
    let b = v[0];
    assert_eq!(
        v.len(),
        64 + usize::from(b) * 97,
        "length does not match content byte {b}"
    );
    assert!(v.iter().all(|&x| x == b), "mixed bytes in one value");
}

fn bulk(reply: &[u8]) -> Option<Vec<u8>> {
    if reply == b"$-1\r\n" {
        return None;
    }
    let nl = reply.iter().position(|&c| c == b'\n').unwrap();
    Some(reply[nl + 1..reply.len() - 2].to_vec())
}

#[test]
fn readers_never_see_torn_values() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    const KEYS: u32 = 8;
    const WRITES: u32 = 1500;
    let writers: Vec<_> = (0..2)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                for i in 0..WRITES {
                    let key = format!("k{}", i % KEYS);
                    let v = value(i * 2 + w);
                    assert_eq!(c.call(&[b"SET", key.as_bytes(), &v]), b"+OK\r\n");
                    if i % 50 == 0 {
                        c.call(&[b"DEL", key.as_bytes()]);
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                let mut seen = 0;
                for i in 0..WRITES {
                    let key = format!("k{}", i % KEYS);
                    if let Some(v) = bulk(&c.call(&[b"GET", key.as_bytes()])) {
                        check(&v);
                        seen += 1;
                    }
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let seen: u32 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(seen > 0, "readers saw no value at all");
}

#[test]
fn incr_is_atomic_across_connections() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    const PER: usize = 500;
    let ts: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                for _ in 0..PER {
                    c.call(&[b"INCR", b"counter"]);
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    let mut c = Raw::connect(port);
    assert_eq!(
        c.call(&[b"GET", b"counter"]),
        format!("$4\r\n{}\r\n", 4 * PER).into_bytes()
    );
}
