//! Expiry with a controlled clock (the `fuzz_support::Harness` passes its own `now_ms` to the
//! engine, as the server passes the wall clock): lazy expiry hides a key the moment its time
//! passes; the engine tick the server drives from a timer reclaims it (DBSIZE drops).

use ringlet_server::fuzz_support::Harness;

#[test]
fn keys_expire_lazily_and_are_reclaimed_by_tick() {
    let mut h = Harness::new(None);
    assert_eq!(h.call(&[b"SET", b"a", b"1", b"PX", b"100"]), b"+OK\r\n");
    assert_eq!(h.call(&[b"SET", b"b", b"2", b"EX", b"10"]), b"+OK\r\n");
    assert_eq!(h.call(&[b"SET", b"c", b"3"]), b"+OK\r\n");
    assert_eq!(h.call(&[b"PTTL", b"a"]), b":100\r\n");
    h.now_ms += 99;
    assert_eq!(h.call(&[b"GET", b"a"]), b"$1\r\n1\r\n");
    assert_eq!(h.call(&[b"PTTL", b"a"]), b":1\r\n");
    h.now_ms += 1;
    // At the expiry instant the key is gone for every read path.
    assert_eq!(h.call(&[b"GET", b"a"]), b"$-1\r\n");
    assert_eq!(h.call(&[b"EXISTS", b"a"]), b":0\r\n");
    assert_eq!(h.call(&[b"TTL", b"a"]), b":-2\r\n");
    assert_eq!(h.call(&[b"MGET", b"a", b"c"]), b"*2\r\n$-1\r\n$1\r\n3\r\n");
    // TTL rounds like Redis: (ms + 500) / 1000.
    assert_eq!(h.call(&[b"TTL", b"b"]), b":10\r\n");
    h.now_ms += 9_400;
    assert_eq!(h.call(&[b"TTL", b"b"]), b":1\r\n");
    h.now_ms += 700;
    let mut expired = 0;
    for _ in 0..10 {
        expired += h.tick();
    }
    assert_eq!(expired, 2, "active expiry reclaims both expired keys");
    assert_eq!(h.call(&[b"DBSIZE"]), b":1\r\n");
}

#[test]
fn expire_in_the_past_deletes_and_incr_keeps_ttl() {
    let mut h = Harness::new(None);
    h.call(&[b"SET", b"k", b"1"]);
    assert_eq!(h.call(&[b"PEXPIREAT", b"k", b"1"]), b":1\r\n");
    assert_eq!(h.call(&[b"EXISTS", b"k"]), b":0\r\n");
    h.call(&[b"SET", b"n", b"1", b"EX", b"100"]);
    assert_eq!(h.call(&[b"INCR", b"n"]), b":2\r\n");
    assert_eq!(h.call(&[b"TTL", b"n"]), b":100\r\n");
    h.call(&[b"SET", b"n", b"5"]);
    assert_eq!(
        h.call(&[b"TTL", b"n"]),
        b":-1\r\n",
        "a plain SET clears the TTL"
    );
}
