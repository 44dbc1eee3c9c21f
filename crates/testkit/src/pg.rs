//! A throwaway PostgreSQL cluster from Debian's packages (`/usr/lib/postgresql/<v>/bin`):
//! initdb + pg_ctl in a temp dir, trust auth on loopback, stopped (and its data dir removed)
//! when dropped. Run as the `postgres` user when the test runs as root (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The bin directory of Debian's PostgreSQL (`/usr/lib/postgresql/<v>/bin`), if installed.
pub fn postgres_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// A throwaway PostgreSQL cluster in a temp dir (initdb + pg_ctl, trust auth on loopback),
/// run as the `postgres` user when the test runs as root (initdb refuses root).
pub struct Pg {
    bin: PathBuf,
    data: PathBuf,
    /// The TCP port it listens on (127.0.0.1).
    pub port: u16,
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

    /// initdb + pg_ctl start in `dir` (trust auth, loopback only, a free port). Panics if
    /// either fails.
    pub fn start(bin: PathBuf, dir: &Path) -> Pg {
        let root = running_as_root();
        let data = dir.join("pgdata");
        let user = root.then_some("postgres");
        if root {
            // The data dir's parents must be reachable by the postgres user.
            let _ = Command::new("chmod").arg("755").arg(dir).status();
            let _ = Command::new("chown").args(["postgres"]).arg(dir).status();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let pg = Pg {
            bin,
            data,
            port,
            user,
        };
        let st = pg
            .cmd("initdb")
            .args([
                "-D",
                pg.data.to_str().unwrap(),
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
            .args(["-D", pg.data.to_str().unwrap(), "-w", "-o", &opts])
            .args(["-l", dir.join("pg.log").to_str().unwrap(), "start"])
            .stdout(Stdio::null())
            .status()
            .expect("pg_ctl start");
        assert!(st.success(), "pg_ctl start failed");
        pg
    }

    /// Run `sql` through psql as `postgres`; panics if it fails.
    pub fn psql(&self, sql: &str) {
        let st = self
            .cmd("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
            .stdout(Stdio::null())
            .status()
            .expect("psql");
        assert!(st.success(), "psql failed: {sql}");
    }

    /// A libpq connection string for the `postgres` user and database.
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self
            .cmd("pg_ctl")
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
