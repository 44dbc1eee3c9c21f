//! The PostgreSQL LISTEN/NOTIFY freshness source against a real PostgreSQL (Debian's
//! packages, started in a temp dir with initdb + pg_ctl as in crates/cli/tests/load.rs).
//! Skipped when PostgreSQL is not installed, unless RINGLET_REQUIRE_POSTGRES is set.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringlet_linked::pg;
use ringlet_linklet::{Config, Error, Linklet};
use ringlet_types::key_slot;

fn postgres_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

struct Pg {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    user: Option<&'static str>,
}

impl Pg {
    fn cmd(&self, prog: &str) -> Command {
        let exe = self.bin.join(prog);
        match self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn start(bin: PathBuf, dir: &Path) -> Pg {
        let root = running_as_root();
        if root {
            // initdb refuses root; the data dir must belong to the postgres user.
            let _ = Command::new("chmod").arg("755").arg(dir).status();
            let _ = Command::new("chown").arg("postgres").arg(dir).status();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = Pg {
            bin,
            dir: dir.to_owned(),
            port,
            user: root.then_some("postgres"),
        };
        let data = dir.join("pgdata");
        let st = pg
            .cmd("initdb")
            .args([
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
            ])
            .stdout(Stdio::null())
            .status()
            .expect("initdb");
        assert!(st.success(), "initdb failed");
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={}",
            dir.display()
        );
        let st = pg
            .cmd("pg_ctl")
            .args(["-D", data.to_str().unwrap(), "-w", "-o", &opts])
            .args(["-l", dir.join("pg.log").to_str().unwrap(), "start"])
            .stdout(Stdio::null())
            .status()
            .expect("pg_ctl start");
        assert!(st.success(), "pg_ctl start failed");
        pg
    }

    fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let data = self.dir.join("pgdata");
        let _ = self
            .cmd("pg_ctl")
            .args(["-D", data.to_str().unwrap(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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
}
