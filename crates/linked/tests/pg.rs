//! The PostgreSQL LISTEN/NOTIFY freshness source against a real PostgreSQL (Debian's
//! packages, started in a temp dir by `ringlet_testkit::pg`, as the loader's test does).
//! Skipped when PostgreSQL is not installed, unless RINGLET_REQUIRE_POSTGRES is set.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringlet_linked::pg;
use ringlet_linklet::{Config, Error, Linklet};
use ringlet_testkit::pg::{postgres_bin, Pg};
use ringlet_types::key_slot;

/// Wait (bounded, to fail rather than hang) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < end, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_invalidate_older_values_and_refuse_racing_stale_loads() {
    let Some(bin) = postgres_bin() else {
        assert!(
            std::env::var_os("RINGLET_REQUIRE_POSTGRES").is_none(),
            "PostgreSQL is not installed and RINGLET_REQUIRE_POSTGRES is set"
        );
        eprintln!("SKIPPED: no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("ringlet-linked-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pg = Pg::start(bin, &dir);
    let (db, conn) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db.batch_execute(
        "CREATE TABLE accounts(id text PRIMARY KEY, version bigint NOT NULL, balance bigint);
         CREATE FUNCTION accounts_notify() RETURNS trigger AS $$
         BEGIN
           PERFORM pg_notify('ringlet_inval', NEW.version::text || ' ' || NEW.id);
           RETURN NEW;
         END $$ LANGUAGE plpgsql;
         CREATE TRIGGER accounts_notify AFTER INSERT OR UPDATE ON accounts
           FOR EACH ROW EXECUTE FUNCTION accounts_notify();
         INSERT INTO accounts VALUES ('alice', 1, 10), ('bob', 1, 20);",
    )
    .await
    .unwrap();

    let l: Arc<Linklet<String, i64>> = Arc::new(Linklet::new(Config::default()).unwrap());
    // The application loads from the system of record with the row's version.
    let load = |id: &'static str| {
        let db = &db;
        async move {
            let row = db
                .query_one(
                    "SELECT version, balance FROM accounts WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (row.get::<_, i64>(0) as u64, row.get::<_, i64>(1))
        }
    };
    for id in ["alice", "bob"] {
        let (v, b) = load(id).await;
        l.insert(id.to_owned(), b, v).unwrap();
    }
    let src = pg::listen(&pg.conninfo(), "ringlet_inval", Arc::clone(&l))
        .await
        .unwrap();
    let st = Arc::clone(&src.stats);

    // 1. A change drops the older cached value; other keys stay.
    db.execute(
        "UPDATE accounts SET version = 2, balance = 11 WHERE id = 'alice'",
        &[],
    )
    .await
    .unwrap();
    until("alice invalidated", || {
        st.dropped.load(Ordering::Relaxed) == 1
    })
    .await;
    assert!(l.get(&"alice".to_owned()).unwrap().is_none());
    assert_eq!(*l.get(&"bob".to_owned()).unwrap().unwrap(), 20);

    // 2. The race the recent-invalidation table closes: a load reads v2, the row changes to
    //    v3 (notification applied, nothing cached to drop), then the load installs v2.
    let (v, b) = load("alice").await;
    assert_eq!(v, 2);
    db.execute(
        "UPDATE accounts SET version = 3, balance = 12 WHERE id = 'alice'",
        &[],
    )
    .await
    .unwrap();
    until("v3 notification", || {
        st.received.load(Ordering::Relaxed) == 2
    })
    .await;
    let slot = key_slot(b"alice");
    assert_eq!(
        l.insert("alice".to_owned(), b, v),
        Err(Error::Stale { slot })
    );
    let (v, b) = load("alice").await;
    l.insert("alice".to_owned(), b, v).unwrap();
    assert_eq!(*l.get(&"alice".to_owned()).unwrap().unwrap(), 12);

    // 3. A notification for a moving slot is retried until the move ends (here: aborted).
    let bob_slot = key_slot(b"bob");
    let export = l.export_range(bob_slot..=bob_slot).unwrap();
    db.execute("UPDATE accounts SET version = 2 WHERE id = 'bob'", &[])
        .await
        .unwrap();
    until("a retry of bob's notification", || {
        st.retries.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert!(l.get(&"bob".to_owned()).unwrap().is_some(), "still moving");
    drop(export);
    l.abort_export(bob_slot..=bob_slot).unwrap();
    until("bob invalidated after the move ended", || {
        st.dropped.load(Ordering::Relaxed) == 2
    })
    .await;
    assert!(l.get(&"bob".to_owned()).unwrap().is_none());
    // Duplicate or reordered notifications change nothing.
    db.execute("UPDATE accounts SET version = 1 WHERE id = 'bob'", &[])
        .await
        .unwrap();
    l.insert("bob".to_owned(), 20, 2).unwrap();
    until("the reordered notification", || {
        st.received.load(Ordering::Relaxed) == 4
    })
    .await;
    assert!(l.get(&"bob".to_owned()).unwrap().is_some());
    assert_eq!(st.malformed.load(Ordering::Relaxed), 0);
    assert_eq!(st.gave_up.load(Ordering::Relaxed), 0);
    drop(src);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}
