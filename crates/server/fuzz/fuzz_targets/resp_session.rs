//! Arbitrary client bytes through the whole request path (decoder, dispatch, every command,
//! encoder), delivered in chunks whose size the first input byte picks. Checks: no panic, and
//! everything written back is a sequence of complete, valid RESP replies.
//! The same function runs under proptest in `tests/prop_requests.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringlet_server::fuzz_support::Harness;

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 64) + 1;
    let (out, _) = Harness::new(None).feed(input, chunk);
    let mut rest = &out[..];
    while !rest.is_empty() {
        let (_, used) = ringlet_codec::resp::scan_reply(rest)
            .expect("server wrote invalid RESP")
            .expect("server wrote an incomplete reply");
        rest = &rest[used..];
    }
});
