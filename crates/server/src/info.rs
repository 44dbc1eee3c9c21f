//! INFO text and CLIENT LIST lines, with Redis's field names so dashboards, redis-cli and
//! client libraries that parse them keep working.

use crate::cmd::connection::REDIS_COMPAT_VERSION;
use crate::cmd::table;
use crate::shared::{ClientState, Shared, Stats};
use std::fmt::Write;
use std::sync::atomic::Ordering;

/// One CLIENT LIST / CLIENT INFO line (Redis 7.0 field order; fields Ringlet has no notion
/// of — pub/sub, MULTI, buffer sizes — carry Redis's idle values).
pub fn client_line(c: &ClientState, now_ms: u64) -> String {
    let age = c.created.elapsed().as_secs();
    let last = c.last_cmd_at_ms.load(Ordering::Relaxed);
    let idle = if last == 0 {
        age
    } else {
        now_ms.saturating_sub(last) / 1000
    };
    let cmd = match c.last_cmd.load(Ordering::Relaxed) {
        u64::MAX => "NULL",
        i => table().specs.get(i as usize).map_or("NULL", |c| c.name),
    };
    let name = c.name.lock();
    let user = c.user.lock().clone();
    crate::cmd::connection::client_line_text(
        c.id,
        c.addr,
        c.laddr,
        &name,
        age,
        idle,
        cmd,
        c.resp.load(Ordering::Relaxed),
        &c.buffers,
        &user,
    )
}

/// INFO [section ...] of the single node (`cmd::node::info_text`: the section order and
/// selection shared with a cluster node).
pub fn render(shared: &Shared, sections: &[String], _now_ms: u64) -> String {
    crate::cmd::node::info_text(shared, sections)
}

/// The single node's sections that `cmd::node` does not write itself.
pub fn section(shared: &Shared, name: &str) -> String {
    let mut out = String::new();
    match name {
        "server" => server(shared, &mut out),
        "stats" => stats(shared, &mut out),
        "keyspace" => keyspace(shared, &mut out),
        // A single node is a master without replicas (cluster nodes write their own).
        "replication" => out.push_str(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n\
             master_failover_state:no-failover\r\nmaster_repl_offset:0\r\n\
             repl_backlog_active:0\r\n",
        ),
        "commandstats" => out.push_str(&shared.cmdstats.commandstats_text()),
        "errorstats" => out.push_str(&shared.cmdstats.errorstats_text()),
        "latencystats" => out.push_str(&shared.cmdstats.latencystats_text()),
        _ => {}
    }
    out
}

fn server(shared: &Shared, out: &mut String) {
    let uptime = shared.started.elapsed().as_secs();
    let _ = write!(
        out,
        "# Server\r\nredis_version:{}\r\nringlet_version:{}\r\nredis_mode:standalone\r\n\
         os:{} {}\r\narch_bits:64\r\nmultiplexing_api:{}\r\nprocess_id:{}\r\n\
         tcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nio_threads_active:{}\r\n\
         executable:ringlet\r\n",
        REDIS_COMPAT_VERSION,
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        // Resolved at start (`Server::start`): never `Auto` here.
        match shared.config.io {
            crate::config::IoMode::Uring => "io_uring",
            _ => "epoll",
        },
        std::process::id(),
        shared.port,
        uptime,
        uptime / 86_400,
        shared.config.threads_effective(),
    );
}

/// Redis's `bytesToHuman`: `1.50M`.
pub fn human(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.2}{}", UNITS[u])
    }
}

/// The process's resident set (`/proc/self/statm`), 0 where it cannot be read.
pub fn rss_bytes() -> u64 {
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// INFO's CPU section: seconds of system and user CPU of this process and its reaped
/// children (`getrusage`), as Redis prints them.
pub fn cpu(out: &mut String) {
    let usage = |who| {
        // SAFETY: getrusage writes one rusage struct into memory we own.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut r) } != 0 {
            return (0.0, 0.0);
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (secs(r.ru_stime), secs(r.ru_utime))
    };
    let (sys, user) = usage(libc::RUSAGE_SELF);
    let (csys, cuser) = usage(libc::RUSAGE_CHILDREN);
    let _ = write!(
        out,
        "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\n\
         used_cpu_sys_children:{csys:.6}\r\nused_cpu_user_children:{cuser:.6}\r\n"
    );
}

/// `migrate_cached_sockets` is always 0: Redis counts the connections MIGRATE keeps open to
/// its targets; a single node serves no MIGRATE (and a cluster node's moves a whole slot over
/// the cluster's own links), so there are none, and tools read the field.
fn stats(shared: &Shared, out: &mut String) {
    let st = &shared.stats;
    let e = shared.db.lock().stats();
    let _ = write!(
        out,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
         total_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\n\
         expired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\n\
         total_error_replies:{}\r\nmigrate_cached_sockets:0\r\nringlet_protocol_errors:{}\r\n\
         ringlet_reader_retries:{}\r\n",
        Stats::get(&st.connections_received),
        Stats::get(&st.commands_processed),
        Stats::get(&st.net_input_bytes),
        Stats::get(&st.net_output_bytes),
        Stats::get(&st.connections_rejected),
        (e.expirations + Stats::get(&st.expired_keys))
            .saturating_sub(Stats::get(&st.engine_expired_base)),
        e.evictions
            .saturating_sub(Stats::get(&st.engine_evicted_base)),
        Stats::get(&st.keyspace_hits),
        Stats::get(&st.keyspace_misses),
        shared.cmdstats.totals().1,
        Stats::get(&st.protocol_errors),
        Stats::get(&st.reader_retries),
    );
}

fn keyspace(shared: &Shared, out: &mut String) {
    out.push_str("# Keyspace\r\n");
    let (keys, expires) = {
        let engine = shared.db.lock();
        (engine.len(), engine.stats().keys_with_ttl)
    };
    if keys > 0 {
        let _ = write!(out, "db0:keys={keys},expires={expires},avg_ttl=0\r\n");
    }
}
