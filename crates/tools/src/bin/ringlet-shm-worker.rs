//! Client processes for the multi-process tests. Each prints one JSON summary line at exit.
//!
//! ```text
//! ringlet-shm-worker writer --socket P --id W --keys N [--ops M] [--until-file F]
//!                           [--sizes 64,1500,...] [--phase-ops K] [--delete-pct D] [--seed S]
//! ringlet-shm-worker reader --socket P --writers W --keys N [--mget B] [--until-file F]
//!                           [--max-ms T] [--seed S]
//! ringlet-shm-worker probe-write --socket P
//! ```
//!
//! A writer is the only writer of its keys (`w<W>:k<i>`) and stores version `n` of a key as
//! `make_value(key, n, size)`, `n` strictly increasing per key for the writer's whole life
//! (node restarts included). A reader checks every value it is given with `check_value` and
//! that `n` never goes backwards for a key: a torn, stale-after-newer, foreign or truncated
//! value counts as `wrong`.

use ringlet_shm::testkit::{check_value, key_of, make_value, Rng};
use ringlet_shm::{ShmError, ShmReader, ShmReaderConfig};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn connect(path: &str) -> ShmReader {
    let mut cfg = ShmReaderConfig::new(path);
    cfg.reconnect_attempts = 12;
    // Bounded: the node may be restarting when a worker starts.
    for _ in 0..100 {
        if let Ok(r) = ShmReader::with_config(cfg.clone()) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cannot connect to {path}");
    std::process::exit(3);
}

fn stop_requested(until: &Option<String>) -> bool {
    until.as_deref().is_some_and(|f| Path::new(f).exists())
}

fn writer(args: &[String]) {
    let path: String = arg(args, "--socket").expect("--socket");
    let id: u32 = arg(args, "--id").unwrap_or(0);
    let keys: u64 = arg(args, "--keys").unwrap_or(1000);
    let ops: u64 = arg(args, "--ops").unwrap_or(u64::MAX);
    let until: Option<String> = arg(args, "--until-file");
    let sizes: Vec<usize> = arg::<String>(args, "--sizes")
        .unwrap_or_else(|| "100".into())
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let phase_ops: u64 = arg(args, "--phase-ops").unwrap_or(u64::MAX);
    let delete_pct: u64 = arg(args, "--delete-pct").unwrap_or(0);
    let mut rng = Rng(arg(args, "--seed").unwrap_or(1) ^ u64::from(id) << 32);
    let mut r = connect(&path);
    let mut counters = vec![0u64; keys as usize];
    let (mut sets, mut dels, mut errors, mut no_space) = (0u64, 0u64, 0u64, 0u64);
    let mut op = 0u64;
    let (mut max_ms, mut max_op) = (0u64, 0u64);
    // Bounded by --ops (and the stop file).
    while op < ops {
        if op & 255 == 0 && stop_requested(&until) {
            break;
        }
        let i = rng.below(keys);
        let key = key_of(id, i);
        counters[i as usize] += 1;
        let n = counters[i as usize];
        let size = sizes[((op / phase_ops.max(1)) as usize) % sizes.len().max(1)];
        let t0 = Instant::now();
        let res = if rng.below(100) < delete_pct {
            r.del(&key).map(|_| dels += 1)
        } else {
            r.set(&key, &make_value(&key, n, size)).map(|_| sets += 1)
        };
        let took = t0.elapsed().as_millis() as u64;
        if took > max_ms {
            max_ms = took;
            max_op = op;
        }
        match res {
            Ok(()) => {}
            Err(ShmError::Server { status: 0x17, .. }) => no_space += 1,
            Err(_) => {
                errors += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        op += 1;
    }
    println!(
        "{{\"role\":\"writer\",\"id\":{id},\"ops\":{op},\"sets\":{sets},\"dels\":{dels},\"no_space\":{no_space},\"errors\":{errors},\"max_op_ms\":{max_ms},\"max_op_index\":{max_op}}}"
    );
}

fn reader(args: &[String]) {
    let path: String = arg(args, "--socket").expect("--socket");
    let writers: u32 = arg(args, "--writers").unwrap_or(1);
    let keys: u64 = arg(args, "--keys").unwrap_or(1000);
    let batch: usize = arg(args, "--mget").unwrap_or(1).max(1);
    let until: Option<String> = arg(args, "--until-file");
    let max_ms: u64 = arg(args, "--max-ms").unwrap_or(60_000);
    let mut rng = Rng(arg(args, "--seed").unwrap_or(7));
    let mut r = connect(&path);
    let start = Instant::now();
    let mut last: HashMap<Vec<u8>, u64> = HashMap::new();
    let (mut reads, mut hits, mut misses, mut wrong, mut errors) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut first_errors: Vec<String> = Vec::new();
    let mut generations: Vec<u64> = Vec::new();
    let mut gens_with_hits: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    let mut batch_keys: Vec<Vec<u8>> = Vec::with_capacity(batch);
    let mut iter = 0u64;
    // Bounded by --max-ms.
    loop {
        if iter & 63 == 0
            && (stop_requested(&until) || start.elapsed() > Duration::from_millis(max_ms))
        {
            break;
        }
        iter += 1;
        batch_keys.clear();
        for _ in 0..batch {
            batch_keys.push(key_of(
                rng.below(u64::from(writers)) as u32,
                rng.below(keys),
            ));
        }
        let mut results: Vec<Option<Vec<u8>>> = Vec::with_capacity(batch);
        let res = if batch == 1 {
            r.get_into(&batch_keys[0], &mut out)
                .map(|v| results.push(v.map(|_| out.clone())))
        } else {
            let mut tmp = vec![None; batch];
            let res = r.mget_with(&batch_keys, |i, item| {
                tmp[i] = item.map(|(_, v)| v.to_vec());
            });
            results = tmp;
            res
        };
        if let Err(e) = res {
            errors += 1;
            if first_errors.len() < 5 {
                first_errors.push(format!("error: {e}"));
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let gen = r.hello().map_or(0, |h| h.generation);
        if !generations.contains(&gen) {
            generations.push(gen);
        }
        for (key, v) in batch_keys.iter().zip(&results) {
            reads += 1;
            let Some(v) = v else {
                misses += 1;
                continue;
            };
            hits += 1;
            if !gens_with_hits.contains(&gen) {
                gens_with_hits.push(gen);
            }
            match check_value(key, v) {
                Ok(n) => {
                    let l = last.entry(key.clone()).or_insert(0);
                    if n < *l {
                        wrong += 1;
                        if first_errors.len() < 5 {
                            first_errors.push(format!(
                                "{}: counter went back from {} to {n}",
                                String::from_utf8_lossy(key),
                                *l
                            ));
                        }
                    } else {
                        *l = n;
                    }
                }
                Err(e) => {
                    wrong += 1;
                    if first_errors.len() < 5 {
                        first_errors.push(format!("{}: {e}", String::from_utf8_lossy(key)));
                    }
                }
            }
        }
    }
    r.flush_access();
    let s = r.stats();
    let errs: Vec<String> = first_errors
        .iter()
        .map(|e| format!("\"{}\"", e.replace('"', "'")))
        .collect();
    println!(
        "{{\"role\":\"reader\",\"reads\":{reads},\"hits\":{hits},\"misses\":{misses},\"wrong\":{wrong},\"errors\":{errors},\"shm_hits\":{},\"shm_misses\":{},\"fallbacks\":{},\"reconnects\":{},\"generation_changes\":{},\"epoch_changes\":{},\"generations_with_hits\":{},\"access_batches_sent\":{},\"epoch\":{},\"first_errors\":[{}]}}",
        s.shm_hits,
        s.shm_misses,
        s.fallbacks,
        s.reconnects,
        s.generation_changes,
        s.epoch_changes,
        gens_with_hits.len(),
        s.access_batches_sent,
        r.hello().map_or(0, |h| h.epoch.0),
        errs.join(",")
    );
}

/// Map the regions, then try to write through the mapping: must die with SIGSEGV.
fn probe_write(args: &[String]) {
    let path: String = arg(args, "--socket").expect("--socket");
    let r = connect(&path);
    let Some((ptr, _len)) = r.index_mapping() else {
        std::process::exit(4);
    };
    // SAFETY: deliberately probing protections of our own read-only mapping.
    let rc = unsafe {
        libc::mprotect(
            ptr as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    println!("mprotect rc={rc} errno={errno}");
    let _ = std::io::stdout().flush();
    // SAFETY: this write is expected to fault; the test checks that it does.
    unsafe { std::ptr::write_volatile(ptr as *mut u8, 0x42) };
    println!("write succeeded");
    std::process::exit(0);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("writer") => writer(&args),
        Some("reader") => reader(&args),
        Some("probe-write") => probe_write(&args),
        _ => {
            eprintln!("usage: ringlet-shm-worker writer|reader|probe-write --socket PATH ...");
            std::process::exit(2);
        }
    }
}
