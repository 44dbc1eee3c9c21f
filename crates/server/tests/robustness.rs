//! Bad input hurts only the connection that sent it.
//!
//! Each test opens a healthy connection first, then sends garbage, oversized or truncated
//! frames on other connections (RESP and native), and checks that (1) the bad connection gets
//! a clear `-ERR Protocol error: ...` (or a native error frame) and is closed, and (2) the
//! healthy connection keeps answering, with the data it wrote intact.

mod common;

use common::{healthy_roundtrip, start_ringlet, Raw};
use ringlet_types::limits;
use std::io::Write;

#[test]
fn garbage_closes_only_its_connection() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let mut good = Raw::connect(port);
    healthy_roundtrip(&mut good, 0);

    let garbage: &[&[u8]] = &[
        b"*abc\r\n",
        b"*1\r\n$-7\r\n",
        b"*3\r\n$3\r\nSET\r\n+k\r\n",
        b"*99999999999\r\n",
        b"*1\r\n$99999999999\r\n",
        b"SET \"unterminated\r\n",
        &[0xA5, 0x09, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], // native, bad version
        &[
            0xA5, 0x01, 0x02, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff,
        ], // huge body
    ];
    for (i, g) in garbage.iter().enumerate() {
        let mut bad = Raw::connect(port);
        bad.send(g);
        let out = bad.read_to_close();
        if g[0] != 0xA5 {
            let text = String::from_utf8_lossy(&out);
            assert!(
                text.starts_with("-ERR Protocol error: "),
                "input {i}: {text:?}"
            );
        } else {
            assert!(
                !out.is_empty(),
                "native input {i}: expected an error frame before close"
            );
        }
        healthy_roundtrip(&mut good, i + 1);
    }
}

#[test]
fn oversized_inline_line_is_refused() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let mut good = Raw::connect(port);
    let mut bad = Raw::connect(port);
    // An inline command longer than INLINE_BYTES_MAX with no newline.
    bad.send(&vec![b'a'; limits::INLINE_BYTES_MAX as usize + 1024]);
    let out = String::from_utf8_lossy(&bad.read_to_close()).into_owned();
    assert_eq!(out, "-ERR Protocol error: too big inline request\r\n");
    healthy_roundtrip(&mut good, 0);
}

/// A request whose bytes exceed the connection read-buffer bound (many large bulk strings,
/// each individually legal) is refused once the buffer passes the bound, while another
/// connection is served concurrently.
#[test]
fn request_over_read_buffer_bound_is_refused() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let mut good = Raw::connect(port);
    let bulk = limits::VALUE_BYTES_MAX as usize;
    let args = (limits::CONN_READ_BUFFER_BYTES_MAX as usize / bulk) + 2;
    let sender = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let head = format!("*{}\r\n$3\r\nSET\r\n", args + 1);
        let _ = s.write_all(head.as_bytes());
        let chunk = vec![b'x'; bulk];
        for _ in 0..args {
            if s.write_all(format!("${bulk}\r\n").as_bytes()).is_err()
                || s.write_all(&chunk).is_err()
                || s.write_all(b"\r\n").is_err()
            {
                break; // the server closed on us: expected
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut out);
        out
    });
    // The healthy connection works while the big request streams in.
    for i in 0..20 {
        healthy_roundtrip(&mut good, i);
    }
    let out = sender.join().unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.is_empty()
            || text.starts_with(
                "-ERR Protocol error: request exceeds the connection read buffer limit"
            ),
        "{text:?}"
    );
    healthy_roundtrip(&mut good, 99);
}

/// A client that disconnects in the middle of a request leaves nothing behind.
#[test]
fn truncated_request_then_disconnect() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let mut good = Raw::connect(port);
    for _ in 0..10 {
        let mut bad = Raw::connect(port);
        bad.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\nonly-a-part");
        drop(bad);
    }
    assert_eq!(good.call(&[b"EXISTS", b"k"]), b":0\r\n");
    healthy_roundtrip(&mut good, 0);
}

/// CLIENT LIST shows real buffer figures: a connection with a transaction of two queued
/// commands and half a request received shows `multi=2`, a non-zero `multi-mem`, and its
/// unrun bytes as `qbuf` (Redis's fields; before, every one was a constant 0 or -1).
#[test]
fn client_list_shows_queued_commands_and_unrun_input() {
    let node = common::start_ringlet(None);
    let port = node.local_addr().port();
    let mut a = common::Raw::connect(port);
    let mut b = common::Raw::connect(port);
    let id = String::from_utf8(a.call(&[b"CLIENT", b"ID"])).unwrap();
    let id = id.trim_start_matches(':').trim().to_string();
    a.call(&[b"MULTI"]);
    a.call(&[b"SET", b"x", b"1"]);
    a.call(&[b"SET", b"y", b"22"]);
    let partial = b"*3\r\n$3\r\nSET\r\n$1\r\nz\r\n";
    a.send(partial);
    // Poll (bounded) until A's loop has run and recorded its buffers.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        let r = b.call(&[b"CLIENT", b"LIST", b"ID", id.as_bytes()]);
        let line = String::from_utf8_lossy(&r).into_owned();
        if line.contains(&format!(" qbuf={} ", partial.len())) {
            break line;
        }
        assert!(std::time::Instant::now() < deadline, "{line}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(line.contains(" multi=2 "), "{line}");
    assert!(!line.contains(" multi-mem=0 "), "{line}");
    assert!(!line.contains(" tot-mem=0 "), "{line}");
    // B itself is not in a transaction.
    let own = String::from_utf8_lossy(&b.call(&[b"CLIENT", b"INFO"])).into_owned();
    assert!(own.contains(" multi=-1 "), "{own}");
    // Each line names its connection's own socket (Redis's `fd`; it was a constant 0).
    let fd_of = |l: &str| -> i64 {
        let f = l
            .split(' ')
            .find_map(|f| f.strip_prefix("fd="))
            .expect("an fd field");
        f.parse().unwrap_or_else(|_| panic!("fd {f:?} in {l}"))
    };
    let (fa, fb) = (fd_of(&line), fd_of(&own));
    assert!(fa > 2 && fb > 2 && fa != fb, "{line}\n{own}");
}
