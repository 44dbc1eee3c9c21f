//! The batched request path (`conn::RespProcessor`: pipelined `GET key` and `SET key value`
//! decoded ahead, prefetched and run under one engine lock) must answer exactly like the
//! one-request-at-a-time path, which every other request takes.
//!
//! How: the same random request sequence is run twice on fresh nodes without sockets
//! (`fuzz_support::Harness`): once as a single pipelined buffer (batches of up to 32 form,
//! broken by every other command) and once with batching turned off, each request in its own
//! `process` call through `cmd::dispatch` and the GET/SET handlers (the oracle). The reply
//! bytes must be equal, and so must the counters INFO reports (commands processed, hits,
//! misses). The alphabet mixes batchable forms with forms that
//! must not be batched (options, wrong arity, inline, MULTI queueing, AUTH, hash commands),
//! batched `RECORD SET`s (good and bad specs, WRONGTYPE, DEL) and commands that read what
//! a batched SET or RECORD SET wrote.

use proptest::prelude::*;
use ringlet_codec::resp::{encode_request, scan_reply};
use ringlet_server::fuzz_support::Harness;

fn count_replies(mut out: &[u8]) -> usize {
    let mut n = 0;
    while !out.is_empty() {
        let (_, used) = scan_reply(out)
            .expect("valid RESP")
            .expect("complete reply");
        out = &out[used..];
        n += 1;
    }
    n
}

/// One request of the alphabet, as argv (or raw bytes for the inline form).
fn request() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let key = prop::sample::select(vec!["a", "b", "c", "h", ""]);
    let val = prop::sample::select(vec!["1", "x", "", "hello world", "99"]);
    prop_oneof![
        6 => key.clone().prop_map(|k| vec![b"GET".to_vec(), k.into()]),
        6 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"SET".to_vec(), k.into(), v.into()]),
        1 => key.clone().prop_map(|k| vec![b"get".to_vec(), k.into()]),
        1 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"sEt".to_vec(), k.into(), v.into()]),
        1 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"SET".to_vec(), k.into(), v.into(), b"NX".to_vec()]),
        1 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"SET".to_vec(), k.into(), v.into(), b"GET".to_vec()]),
        1 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"GET".to_vec(), k.into(), v.into()]),
        1 => Just(vec![b"SET".to_vec(), b"a".to_vec()]),
        1 => key.clone().prop_map(|k| vec![b"DEL".to_vec(), k.into()]),
        1 => key.clone().prop_map(|k| vec![b"INCR".to_vec(), k.into()]),
        1 => (key.clone(), val.clone())
            .prop_map(|(k, v)| vec![b"APPEND".to_vec(), k.into(), v.into()]),
        1 => Just(vec![b"HSET".to_vec(), b"h".to_vec(), b"f".to_vec(), b"v".to_vec()]),
        // RECORD SET is batched too: fields, links (hinted to keys the batch wrote), DEL,
        // WRONGTYPE on a string key, a bad spec, a record emptied.
        3 => (key.clone(), val.clone()).prop_map(|(k, v)| {
            vec![b"RECORD".to_vec(), b"SET".to_vec(), k.into(), b"ATTR".to_vec(), b"f".to_vec(), v.into()]
        }),
        2 => key.clone().prop_map(|k| {
            vec![b"record".to_vec(), b"set".to_vec(), b"h".to_vec(), b"LINK".to_vec(), b"l".to_vec(), k.into(), b"DEL".to_vec(), b"f".to_vec()]
        }),
        1 => Just(vec![b"RECORD".to_vec(), b"SET".to_vec(), b"h".to_vec(), b"DEL".to_vec(), b"l".to_vec(), b"DEL".to_vec(), b"f".to_vec()]),
        1 => Just(vec![b"RECORD".to_vec(), b"SET".to_vec(), b"h".to_vec(), b"ATTR".to_vec(), b"f".to_vec()]),
        1 => Just(vec![b"RECORD".to_vec(), b"SET".to_vec(), b"h".to_vec(), b"NOPE".to_vec(), b"f".to_vec(), b"v".to_vec()]),
        1 => Just(vec![b"HGETALL".to_vec(), b"h".to_vec()]),
        1 => Just(vec![b"LINK".to_vec(), b"GET".to_vec(), b"h".to_vec(), b"l".to_vec()]),
        1 => Just(vec![b"MULTI".to_vec()]),
        1 => Just(vec![b"EXEC".to_vec()]),
        1 => Just(vec![b"DISCARD".to_vec()]),
        1 => Just(vec![b"MGET".to_vec(), b"a".to_vec(), b"b".to_vec(), b"h".to_vec()]),
        1 => Just(vec![b"STRLEN".to_vec(), b"a".to_vec()]),
        1 => Just(vec![b"CLIENT".to_vec(), b"INFO".to_vec()]),
        1 => Just(vec![b"inline".to_vec()]),
    ]
}

fn encode_all(reqs: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    reqs.iter()
        .map(|r| {
            if r.len() == 1 && r[0] == b"inline" {
                // An inline GET: never batched, must still see batched SETs before it.
                return b"GET a\r\n".to_vec();
            }
            let argv: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
            let mut b = Vec::new();
            encode_request(&mut b, &argv);
            b
        })
        .collect()
}

/// The INFO counters the batch path adds to itself: commands processed, hits, misses, and
/// per command `calls`, `rejected_calls`, `failed_calls` and the error codes (not `usec`:
/// time).
fn counters(h: &mut Harness) -> Vec<String> {
    let info = String::from_utf8(h.call(&[b"INFO", b"stats", b"commandstats", b"errorstats"]))
        .expect("utf8");
    info.lines()
        .filter(|l| {
            l.starts_with("total_commands_processed:")
                || l.starts_with("keyspace_hits:")
                || l.starts_with("keyspace_misses:")
                || l.starts_with("total_error_replies:")
                || l.starts_with("cmdstat_")
                || l.starts_with("errorstat_")
        })
        .map(|l| {
            l.split(',')
                .filter(|f| !f.starts_with("usec"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect()
}

/// The replies, each as text, with CLIENT INFO's input-buffer figures (`qbuf`, `qbuf-free`,
/// `rbs`, `rbp`, `tot-mem`) blanked: they show how many request bytes the connection holds
/// when the command runs, which differs, as in Redis, between a pipeline sent whole and the
/// same requests sent one by one.
fn replies(mut out: &[u8]) -> Vec<String> {
    let mut v = Vec::new();
    while !out.is_empty() {
        let (_, used) = scan_reply(out)
            .expect("valid RESP")
            .expect("complete reply");
        let text = String::from_utf8_lossy(&out[..used]).into_owned();
        out = &out[used..];
        if !text.contains(" qbuf=") {
            v.push(text);
            continue;
        }
        // Bulk lengths blanked too (a figure's digits change them): `$251\r\n` → `$_\r\n`.
        let mut body = String::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find('$') {
            body.push_str(&rest[..=i]);
            rest = &rest[i + 1..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && rest[digits..].starts_with("\r\n") {
                body.push('_');
                rest = &rest[digits..];
            }
        }
        body.push_str(rest);
        let fields: Vec<String> = body
            .split(' ')
            .map(|f| match f.split_once('=') {
                Some((k, _)) if ["qbuf", "qbuf-free", "rbs", "rbp", "tot-mem"].contains(&k) => {
                    format!("{k}=_")
                }
                _ => f.to_string(),
            })
            .collect();
        v.push(fields.join(" "));
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn batched_replies_equal_one_at_a_time(reqs in prop::collection::vec(request(), 1..80)) {
        let encoded = encode_all(&reqs);
        let whole: Vec<u8> = encoded.concat();

        let mut batched = Harness::new(None);
        let (out_batched, _) = batched.feed(&whole, whole.len());

        let mut single = Harness::new(None);
        single.set_batching(false);
        let mut out_single = Vec::new();
        for e in &encoded {
            out_single.extend(single.feed(e, e.len()).0);
        }
        prop_assert_eq!(count_replies(&out_batched), reqs.len());
        prop_assert_eq!(replies(&out_batched), replies(&out_single));
        prop_assert_eq!(counters(&mut batched), counters(&mut single));
    }
}

/// With a password set, an unauthenticated connection's GET and SET are refused (NOAUTH)
/// and never batched; after AUTH in the same pipeline they run, in order.
#[test]
fn no_batch_before_auth() {
    let reqs: Vec<Vec<Vec<u8>>> = vec![
        vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
        vec![b"GET".to_vec(), b"k".to_vec()],
        vec![b"AUTH".to_vec(), b"pw".to_vec()],
        vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
        vec![b"GET".to_vec(), b"k".to_vec()],
    ];
    let whole = encode_all(&reqs).concat();
    let (out, _) = Harness::new(Some("pw")).feed(&whole, whole.len());
    let text = String::from_utf8(out).expect("utf8");
    assert_eq!(
        text,
        "-NOAUTH Authentication required.\r\n-NOAUTH Authentication required.\r\n\
         +OK\r\n+OK\r\n$1\r\nv\r\n"
    );
}

/// A pipeline of large GETs stops at the write-buffer bound (256 KiB plus one reply) and
/// resumes where it stopped: every reply arrives, in order, none twice.
#[test]
fn batch_respects_the_write_buffer_bound() {
    let mut h = Harness::new(None);
    let big = vec![b'x'; 100 * 1024];
    h.call(&[b"SET", b"big", &big]);
    let mut input = Vec::new();
    for i in 0..40 {
        if i % 7 == 3 {
            encode_request(&mut input, &[b"SET", b"small", b"v"]);
        }
        encode_request(&mut input, &[b"GET", b"big"]);
    }
    let (out, largest) = h.feed_measured(&input);
    assert_eq!(count_replies(&out), 40 + 6);
    assert!(
        largest < 256 * 1024 + big.len() + 64,
        "write buffer reached {largest} bytes"
    );
    let mut expected = Vec::new();
    for i in 0..40 {
        if i % 7 == 3 {
            expected.extend_from_slice(b"+OK\r\n");
        }
        expected.extend_from_slice(format!("${}\r\n", big.len()).as_bytes());
        expected.extend_from_slice(&big);
        expected.extend_from_slice(b"\r\n");
    }
    assert!(out == expected, "replies differ from the expected sequence");
}

/// The counters a batch adds to, with exact values: two SETs, a hit, a miss, and the INFO
/// call itself (counted before it renders).
#[test]
fn batch_counts_commands_hits_and_misses() {
    let reqs: Vec<Vec<Vec<u8>>> = vec![
        vec![b"SET".to_vec(), b"a".to_vec(), b"1".to_vec()],
        vec![b"SET".to_vec(), b"b".to_vec(), b"2".to_vec()],
        vec![b"GET".to_vec(), b"a".to_vec()],
        vec![b"GET".to_vec(), b"zz".to_vec()],
    ];
    let whole = encode_all(&reqs).concat();
    let mut h = Harness::new(None);
    let (out, _) = h.feed(&whole, whole.len());
    assert_eq!(out, b"+OK\r\n+OK\r\n$1\r\n1\r\n$-1\r\n");
    let c = counters(&mut h);
    assert!(
        c.iter()
            .any(|l| l.trim_end() == "total_commands_processed:5"),
        "{c:?}"
    );
    assert!(c.iter().any(|l| l.trim_end() == "keyspace_hits:1"), "{c:?}");
    assert!(
        c.iter().any(|l| l.trim_end() == "keyspace_misses:1"),
        "{c:?}"
    );
}
