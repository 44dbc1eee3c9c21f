//! The io_uring worker loop (`Config::io = IoMode::Uring`) specifically, whatever
//! `RINGLET_IO` says: malformed input closes only its connection, a pipelining client that
//! does not read is served completely once it reads (replies held back, not lost), QUIT and
//! peer disconnects free the connection. The full suites run on this loop with
//! `RINGLET_IO=uring cargo test -p ringlet-server`.

#![cfg(target_os = "linux")]

mod common;

use common::{healthy_roundtrip, Raw};
use ringlet_server::{Config, IoMode, Server, ServerHandle};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A node on the io_uring loop, or `None` (with a loud SKIP) where this kernel or sandbox
/// refuses io_uring (sysctl `kernel.io_uring_disabled`, a seccomp profile): the server itself
/// refuses `--io uring` there at start. `RINGLET_REQUIRE_URING` makes that a failure.
fn start_uring(threads: usize) -> Option<ServerHandle> {
    let cfg = Config {
        port: 0,
        threads,
        memory_mb: 64,
        io: IoMode::Uring,
        ..Config::default()
    };
    match Server::start(cfg) {
        Ok(h) => Some(h),
        Err(e) if std::env::var_os("RINGLET_REQUIRE_URING").is_none() => {
            eprintln!("SKIP: io_uring is not available here ({e}); the loop is not tested");
            None
        }
        Err(e) => panic!("start ringlet on io_uring: {e}"),
    }
}

/// Poll until the node counts `want` open connections (closing is asynchronous), at most 10 s.
fn wait_connected(node: &ServerHandle, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    // Bounded by the deadline.
    loop {
        let n = node.connected_clients();
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10)); // poll interval
    }
}

#[test]
fn malformed_input_on_uring_closes_only_its_connection() {
    let Some(node) = start_uring(2) else { return };
    let port = node.local_addr().port();
    let mut good = Raw::connect(port);
    healthy_roundtrip(&mut good, 0);
    let garbage: &[&[u8]] = &[
        b"*abc\r\n",
        b"*1\r\n$-7\r\n",
        b"*99999999999\r\n",
        b"SET \"unterminated\r\n",
        // Good requests before the bad one are answered first.
        b"*1\r\n$4\r\nPING\r\n*x\r\n",
        &[0xA5, 0x09, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0], // native, bad version
    ];
    for (i, g) in garbage.iter().enumerate() {
        let mut bad = Raw::connect(port);
        bad.send(g);
        let out = bad.read_to_close();
        if g[0] == 0xA5 {
            assert!(!out.is_empty(), "native input {i}: no error frame");
        } else {
            let text = String::from_utf8_lossy(&out);
            let text = text.strip_prefix("+PONG\r\n").unwrap_or(&text);
            assert!(
                text.starts_with("-ERR Protocol error: "),
                "input {i}: {text:?}"
            );
        }
        healthy_roundtrip(&mut good, i + 1);
    }
    // Every bad connection was closed and uncounted; the good one is still there.
    assert_eq!(wait_connected(&node, 1), 1);
    healthy_roundtrip(&mut good, 99);
}

/// 600 pipelined GETs of a 64 KiB value (~38 MiB of replies) sent before reading anything:
/// the loop stops producing replies at its bound and pauses the connection's receive, then
/// resumes as the client reads; every reply arrives, in order, none lost or repeated.
#[test]
fn pipelined_large_replies_to_a_late_reader_all_arrive() {
    let Some(node) = start_uring(1) else { return };
    let port = node.local_addr().port();
    let mut c = Raw::connect(port);
    let value = vec![b'q'; 64 * 1024];
    assert_eq!(c.call(&[b"SET", b"big", &value]), b"+OK\r\n");
    const N: usize = 600;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = Vec::new();
    for i in 0..N {
        // A marker between the GETs shows order: ECHO i after each.
        req.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
        let m = i.to_string();
        req.extend_from_slice(format!("*2\r\n$4\r\nECHO\r\n${}\r\n{m}\r\n", m.len()).as_bytes());
    }
    // Write from a thread: the server stops reading while its replies are not read.
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&req).is_ok())
    };
    std::thread::sleep(Duration::from_millis(300)); // let the server hit its bound first
    let bulk = format!("${}\r\n", value.len());
    let mut expect = Vec::new();
    for i in 0..N {
        expect.extend_from_slice(bulk.as_bytes());
        expect.extend_from_slice(&value);
        expect.extend_from_slice(b"\r\n");
        let m = i.to_string();
        expect.extend_from_slice(format!("${}\r\n{m}\r\n", m.len()).as_bytes());
    }
    let mut got = vec![0u8; expect.len()];
    s.read_exact(&mut got).expect("all replies");
    assert!(writer.join().unwrap());
    assert!(got == expect, "replies differ from the expected sequence");
    healthy_roundtrip(&mut c, 0);
}

#[test]
fn quit_and_disconnects_free_their_connections() {
    let Some(node) = start_uring(2) else { return };
    let port = node.local_addr().port();
    let mut conns = Vec::new();
    for i in 0..20 {
        let mut c = Raw::connect(port);
        healthy_roundtrip(&mut c, i);
        conns.push(c);
    }
    assert_eq!(wait_connected(&node, 20), 20);
    for (i, mut c) in conns.drain(..).enumerate() {
        if i % 2 == 0 {
            c.send(b"*1\r\n$4\r\nQUIT\r\n");
            assert_eq!(c.read_to_close(), b"+OK\r\n");
        } else {
            drop(c); // peer closes mid-connection
        }
    }
    assert_eq!(wait_connected(&node, 0), 0);
    let mut c = Raw::connect(port);
    healthy_roundtrip(&mut c, 100);
}

/// INFO's `multiplexing_api` of a node started with `io`.
fn multiplexing_api(io: IoMode) -> String {
    let node = Server::start(Config {
        port: 0,
        threads: 1,
        memory_mb: 64,
        io,
        ..Config::default()
    })
    .expect("start ringlet");
    let mut c = Raw::connect(node.local_addr().port());
    let info = String::from_utf8(c.call(&[b"INFO", b"server"])).expect("utf-8 INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("multiplexing_api:"))
        .unwrap_or_else(|| panic!("no multiplexing_api in {info:?}"))
        .trim()
        .to_owned()
}

/// The default (`auto`) runs io_uring wherever `--io uring` can start, and epoll where it
/// cannot; INFO names the loop that runs, never the one asked for.
#[test]
fn auto_takes_uring_where_it_starts_and_info_names_the_loop() {
    assert_eq!(Config::default().io, IoMode::Auto);
    assert_eq!(multiplexing_api(IoMode::Epoll), "epoll");
    let uring_starts = start_uring(1).is_some();
    let want = if uring_starts { "io_uring" } else { "epoll" };
    assert_eq!(multiplexing_api(IoMode::Auto), want);
    if uring_starts {
        assert_eq!(multiplexing_api(IoMode::Uring), "io_uring");
    }
}
