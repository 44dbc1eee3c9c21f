//! Property tests of the whole request path without sockets (`fuzz_support::Harness`):
//!
//! 1. any bytes: no panic, and the output is a sequence of complete, valid RESP replies;
//! 2. well-framed random commands (every command and subcommand of the table, arguments from
//!    an alphabet of keys, numbers at the edges, options and random bytes), delivered in random
//!    chunk sizes: no panic, exactly one reply per command (until a QUIT), and the same
//!    replies whatever the chunking.

use proptest::prelude::*;
use ringlet_codec::resp::{encode_request, scan_reply};
use ringlet_server::fuzz_support::{run_resp_bytes, Harness};

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

fn names() -> Vec<Vec<Vec<u8>>> {
    let t = ringlet_server::cmd::table();
    let mut v = Vec::new();
    for c in &t.specs {
        match c.name.split_once('|') {
            Some((a, b)) => v.push(vec![a.as_bytes().to_vec(), b.as_bytes().to_vec()]),
            None => v.push(vec![c.name.as_bytes().to_vec()]),
        }
    }
    v.push(vec![b"nosuch".to_vec()]);
    v
}

fn arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "k",
            "",
            "0",
            "1",
            "-1",
            "10",
            "100",
            "-100",
            "1.5",
            "1e400",
            "nan",
            "inf",
            "9223372036854775807",
            "-9223372036854775808",
            "99999999999999999999",
            "EX",
            "PX",
            "EXAT",
            "PXAT",
            "NX",
            "XX",
            "GT",
            "LT",
            "GET",
            "KEEPTTL",
            "PERSIST",
            "MATCH",
            "COUNT",
            "TYPE",
            "string",
            "*",
            "a*",
            "[a-",
            "AUTH",
            "SETNAME",
            "default",
            "3",
            "2",
            "sync",
            "4102444800",
            "536870912",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 0..12),
    ]
}

fn command(names: Vec<Vec<Vec<u8>>>) -> impl Strategy<Value = Vec<Vec<u8>>> {
    (
        prop::sample::select(names),
        prop::collection::vec(arg(), 0..6),
    )
        .prop_map(|(mut n, args)| {
            n.extend(args);
            n
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_give_valid_resp(input in prop::collection::vec(any::<u8>(), 0..512)) {
        let out = run_resp_bytes(&input);
        count_replies(&out);
    }

    #[test]
    fn random_commands_one_reply_each(
        cmds in prop::collection::vec(command(names()), 1..40),
        chunk in 1usize..64,
    ) {
        let mut input = Vec::new();
        let mut expected = 0;
        for c in &cmds {
            let argv: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
            encode_request(&mut input, &argv);
            expected += 1;
            if c[0].eq_ignore_ascii_case(b"quit") {
                break;
            }
        }
        let (whole, _) = Harness::new(None).feed(&input, input.len());
        let (chunked, _) = Harness::new(None).feed(&input, chunk);
        prop_assert_eq!(count_replies(&whole), expected);
        // Replies that depend on time or identity (INFO, CLIENT LIST, RANDOMKEY, HELLO ids)
        // are equal too: both harnesses use the same fixed clock and client id.
        prop_assert_eq!(count_replies(&chunked), expected);
    }
}
