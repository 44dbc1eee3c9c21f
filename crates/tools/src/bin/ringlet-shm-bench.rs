//! `ringlet-shm-bench`: the shared-memory GET benchmark against a running node's socket
//! (the same code `ringlet bench --mode shm-get` runs). The last line of stdout is a JSON
//! object with at least `ops_per_sec`.
//!
//! ```text
//! ringlet-shm-bench --socket PATH [--load] [--keys N] [--value-size B] [--duration S]
//!                   [--threads T] [--batch K] [--zipf S] [--json]
//! ```

use ringlet_shm::benchkit::{shm_get_bench, ShmGetOptions};
use std::time::Duration;

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(socket) = arg::<String>(&args, "--socket") else {
        eprintln!("usage: ringlet-shm-bench --socket PATH [--load] [--keys N] [--value-size B] [--duration S] [--threads T] [--batch K] [--zipf S] [--json]");
        std::process::exit(2);
    };
    let o = ShmGetOptions {
        socket: socket.into(),
        load: args.iter().any(|a| a == "--load"),
        keys: arg(&args, "--keys").unwrap_or(1_000_000),
        value_size: arg(&args, "--value-size").unwrap_or(100),
        duration: Duration::from_secs_f64(arg(&args, "--duration").unwrap_or(5.0)),
        threads: arg(&args, "--threads").unwrap_or(1),
        batch: arg(&args, "--batch").unwrap_or(1),
        zipf: arg(&args, "--zipf"),
    };
    match shm_get_bench(&o) {
        Ok(r) => {
            if !args.iter().any(|a| a == "--json") {
                println!(
                    "shm-get: {:.0} ops/s ({:.0} ops per client CPU-second), {} ops, {} wrong, {} misses, {} fallbacks",
                    r.ops_per_sec, r.ops_per_cpu_sec, r.ops, r.wrong, r.misses, r.fallbacks
                );
            }
            println!("{}", r.to_json(&o));
            if r.wrong > 0 {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("shm-get: {e}");
            std::process::exit(1);
        }
    }
}
