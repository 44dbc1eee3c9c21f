//! The calendar custom store (LInK §3.2, `find-free-slots`) end to end: the example's server on
//! a free loopback port, driven by the `redis` crate as any Redis client would. The listener is
//! bound before the server starts, so the client connects without waiting or sleeping.

use std::sync::Arc;

use ringlet_linklet::calendar::{command::CalendarStore, server, Calendar};
use ringlet_linklet::{Config, Linklet};

fn start_server() -> (String, Arc<CalendarStore>) {
    let store: CalendarStore = Linklet::new(Config::default())
        .unwrap()
        .with_sizer(|c: &Calendar| c.size_bytes());
    let store = Arc::new(store);
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let served = Arc::clone(&store);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            let _ = server::serve(listener, served).await;
        });
    });
    (format!("redis://{addr}/"), store)
}

#[test]
fn add_and_find_free_slots_over_resp() {
    let (url, _store) = start_server();
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();

    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");

    let id: i64 = redis::cmd("CAL.ADD")
        .arg(&["ann", "2026-11-25", "09:00", "10:30", "standup"])
        .query(&mut con)
        .unwrap();
    assert_eq!(id, 0);
    let id: i64 = redis::cmd("CAL.ADD")
        .arg(&["ann", "2026-11-25", "12:00", "13:00", "lunch with bob"])
        .query(&mut con)
        .unwrap();
    assert_eq!(id, 1);

    let free: Vec<String> = redis::cmd("CAL.FREE")
        .arg(&["ann", "2026-11-25", "WITHIN", "08:00", "17:00", "MIN", "60"])
        .query(&mut con)
        .unwrap();
    assert_eq!(free, vec!["08:00-09:00", "10:30-12:00", "13:00-17:00"]);

    // Other days and other users are free.
    let free: Vec<String> = redis::cmd("CAL.FREE")
        .arg(&["ann", "2026-11-26"])
        .query(&mut con)
        .unwrap();
    assert_eq!(free, vec!["00:00-24:00"]);

    let listed: Vec<String> = redis::cmd("CAL.LIST")
        .arg(&["ann", "2026-11-25"])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        listed,
        vec!["0 09:00-10:30 standup", "1 12:00-13:00 lunch with bob"]
    );

    let removed: i64 = redis::cmd("CAL.DEL")
        .arg(&["ann", "0"])
        .query(&mut con)
        .unwrap();
    assert_eq!(removed, 1);
    let free: Vec<String> = redis::cmd("CAL.FREE")
        .arg(&["ann", "2026-11-25", "WITHIN", "08:00", "17:00"])
        .query(&mut con)
        .unwrap();
    assert_eq!(free, vec!["08:00-12:00", "13:00-17:00"]);

    // Pipelined requests are answered in order.
    let (a, b): (i64, Vec<String>) = redis::pipe()
        .cmd("CAL.ADD")
        .arg(&["cy", "2026-11-25", "00:00", "23:00", "marathon"])
        .cmd("CAL.FREE")
        .arg(&["cy", "2026-11-25"])
        .query(&mut con)
        .unwrap();
    assert_eq!((a, b), (0, vec!["23:00-24:00".to_owned()]));
}

#[test]
fn bad_input_gets_error_replies_and_the_connection_survives() {
    let (url, _store) = start_server();
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let bad: &[&[&str]] = &[
        &["CAL.ADD", "ann", "2026-11-25", "09:00"], // arity
        &["CAL.ADD", "ann", "25/11/2026", "09:00", "10:00", "x"], // date
        &["CAL.ADD", "ann", "2026-11-25", "9am", "10:00", "x"], // time
        &["CAL.ADD", "ann", "2026-11-25", "10:00", "09:00", "x"], // backwards
        &["CAL.FREE", "ann", "2026-11-25", "MIN", "-5"], // MIN
        &["CAL.FREE", "ann", "2026-11-25", "WITHIN", "17:00", "08:00"], // window
        &["CAL.DEL", "ann", "not-a-number"],
        &["CAL.NOPE"],
    ];
    for argv in bad {
        let (name, args) = argv.split_first().unwrap();
        let r: redis::RedisResult<redis::Value> = redis::cmd(name).arg(args).query(&mut con);
        let err = r.expect_err(&format!("{argv:?} should fail"));
        assert!(
            err.to_string().contains("ERR") || err.code() == Some("ERR"),
            "{argv:?}: {err}"
        );
    }
    // Still usable after all the errors.
    let id: i64 = redis::cmd("CAL.ADD")
        .arg(&["ann", "2026-11-25", "09:00", "10:00", "ok"])
        .query(&mut con)
        .unwrap();
    assert_eq!(id, 0);
}

#[test]
fn moving_slot_is_refused_with_tryagain() {
    let (url, store) = start_server();
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: i64 = redis::cmd("CAL.ADD")
        .arg(&["ann", "2026-11-25", "09:00", "10:00", "x"])
        .query(&mut con)
        .unwrap();
    let slot = CalendarStore::slot_of(&"ann".to_owned());
    let export = store.export_range(slot..=slot).unwrap();
    let r: redis::RedisResult<i64> = redis::cmd("CAL.ADD")
        .arg(&["ann", "2026-11-25", "11:00", "12:00", "y"])
        .query(&mut con);
    let err = r.unwrap_err();
    assert!(
        err.to_string().contains("TRYAGAIN") || err.code() == Some("TRYAGAIN"),
        "{err:?}"
    );
    // Reads are still served while the slot moves.
    let free: Vec<String> = redis::cmd("CAL.FREE")
        .arg(&["ann", "2026-11-25", "WITHIN", "08:00", "12:00"])
        .query(&mut con)
        .unwrap();
    assert_eq!(free, vec!["08:00-09:00", "10:00-12:00"]);
    drop(export);
    store.abort_export(slot..=slot).unwrap();
}
