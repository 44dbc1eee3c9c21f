//! Connection commands: PING ECHO HELLO AUTH QUIT SELECT CLIENT (Redis `networking.c`,
//! `acl.c`, `server.c` behaviour, error texts included).

use super::Ctx;
use crate::info;
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_codec::resp::Proto;
use std::sync::atomic::Ordering;

/// Redis version Ringlet answers as (HELLO `version`, INFO `redis_version`): clients gate
/// features on it, and ours is the 7.0 command set.
pub const REDIS_COMPAT_VERSION: &str = "7.0.15";

pub fn ping(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::ping(argv)
}

pub fn echo(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::echo(argv)
}

pub fn quit(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    ctx.session.quit = true;
    Reply::ok()
}

/// RESET (Redis 6.2): the connection as if new — a transaction discarded, RESP2, the name
/// cleared, and, when a password is set, no longer authenticated.
pub fn reset(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    ctx.session.multi = None;
    ctx.session.proto = ringlet_codec::resp::Proto::Resp2;
    ctx.session
        .state
        .resp
        .store(2, std::sync::atomic::Ordering::Relaxed);
    ctx.session.state.name.lock().clear();
    // Back to the default user, authenticated only if that needs no password (Redis's
    // `clearClientConnectionState`).
    let default = ctx.shared.acl.snapshot().default_user().clone();
    ctx.session.user.set(default, &ctx.shared.acl);
    *ctx.session.state.user.lock() = ctx.session.user.name().to_string();
    ctx.session.authenticated = !ctx.shared.auth_required();
    Reply::simple("RESET")
}

/// Only database 0 exists (Ringlet is cluster-shaped, like Redis Cluster).
pub fn select(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::select(argv, super::Mode::Single)
}

/// The user `user`/`password` authenticate (Redis `ACLCheckUserCredentials`: the user
/// exists, is on, and is `nopass` or has that password; hashes compared in constant time).
fn authenticate(
    ctx: &Ctx<'_>,
    user: &[u8],
    password: &[u8],
) -> Option<std::sync::Arc<ringlet_command::acl::User>> {
    ctx.shared.acl.snapshot().authenticate(user, password)
}

/// Compare without an early exit, so response time does not leak the matching prefix.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Run as `user` from now on.
fn log_in(ctx: &mut Ctx<'_>, user: std::sync::Arc<ringlet_command::acl::User>) {
    ctx.session.user.set(user, &ctx.shared.acl);
    *ctx.session.state.user.lock() = ctx.session.user.name().to_string();
    ctx.session.authenticated = true;
}

pub fn auth(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let nopass = ctx.shared.acl.snapshot().default_user().nopass;
    let (user, password) = match super::node::auth_args(argv, nopass) {
        Ok(p) => p,
        Err(e) => return e,
    };
    match authenticate(ctx, user, password) {
        Some(u) => {
            log_in(ctx, u);
            Reply::ok()
        }
        None => Reply::err(errors::WRONGPASS),
    }
}

pub fn hello(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let args = match super::node::hello_args(argv) {
        Ok(a) => a,
        Err(e) => return e,
    };
    if let Some((user, password)) = args.auth {
        match authenticate(ctx, user, password) {
            Some(u) => log_in(ctx, u),
            None => return Reply::err(errors::WRONGPASS),
        }
    }
    if !ctx.session.authenticated && ctx.shared.auth_required() {
        return Reply::err(super::node::HELLO_NOAUTH);
    }
    if let Some(n) = args.setname {
        if let Err(e) = set_name(ctx, n) {
            return e;
        }
    }
    match args.proto {
        Some(3) => ctx.session.proto = Proto::Resp3,
        Some(_) => ctx.session.proto = Proto::Resp2,
        None => {}
    }
    let proto = if ctx.session.proto == Proto::Resp3 {
        3
    } else {
        2
    };
    ctx.session.state.resp.store(proto, Ordering::Relaxed);
    super::node::hello_reply(proto, ctx.session.id, super::Mode::Single)
}

/// One CLIENT LIST / CLIENT INFO line in Redis 7.0's field order; fields Ringlet has no
/// notion of (pub/sub, MULTI, buffer sizes) carry Redis's idle values. Shared with the
/// cluster front (crates/cluster/src/resp/clients.rs).
#[allow(clippy::too_many_arguments)]
pub fn client_line_text(
    id: u64,
    addr: std::net::SocketAddr,
    laddr: std::net::SocketAddr,
    name: &[u8],
    age_s: u64,
    idle_s: u64,
    cmd: &str,
    resp: u8,
    buffers: &ConnBuffers,
    user: &str,
) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let (qbuf, qcap) = (buffers.qbuf.load(Relaxed), buffers.qbuf_cap.load(Relaxed));
    let (obuf, ocap) = (buffers.obuf.load(Relaxed), buffers.obuf_cap.load(Relaxed));
    let (multi, multi_mem) = (buffers.multi.load(Relaxed), buffers.multi_mem.load(Relaxed));
    let fd = buffers.fd.load(Relaxed);
    format!(
        "id={id} addr={addr} laddr={laddr} fd={fd} name={} age={age_s} idle={idle_s} flags=N db=0 \
         sub=0 psub=0 ssub=0 multi={multi} qbuf={qbuf} qbuf-free={} argv-mem=0 \
         multi-mem={multi_mem} rbs={qcap} rbp={qcap} obl={obuf} oll=0 omem=0 tot-mem={} \
         events=r cmd={cmd} user={user} redir=-1 resp={resp}",
        String::from_utf8_lossy(name),
        qcap.saturating_sub(qbuf),
        qcap + ocap + multi_mem,
    )
}

/// A connection's buffer figures for CLIENT LIST, stored by its own loop after each batch
/// and read by any connection's CLIENT LIST (relaxed: a snapshot, not a transaction).
#[derive(Debug)]
pub struct ConnBuffers {
    /// Bytes received and not yet run (`qbuf`), and the read buffer's capacity (`rbs`).
    pub qbuf: std::sync::atomic::AtomicU64,
    pub qbuf_cap: std::sync::atomic::AtomicU64,
    /// Reply bytes not yet written (`obl`), and the write buffer's capacity.
    pub obuf: std::sync::atomic::AtomicU64,
    pub obuf_cap: std::sync::atomic::AtomicU64,
    /// Commands queued in MULTI (-1 outside a transaction) and their argument bytes.
    pub multi: std::sync::atomic::AtomicI64,
    pub multi_mem: std::sync::atomic::AtomicU64,
    /// The connection's socket descriptor (`fd`; -1 where there is none, as Redis shows for
    /// its internal clients), set once when the connection is registered.
    pub fd: std::sync::atomic::AtomicI32,
}

impl Default for ConnBuffers {
    fn default() -> Self {
        ConnBuffers {
            qbuf: Default::default(),
            qbuf_cap: Default::default(),
            obuf: Default::default(),
            obuf_cap: Default::default(),
            multi: std::sync::atomic::AtomicI64::new(-1),
            multi_mem: Default::default(),
            fd: std::sync::atomic::AtomicI32::new(-1),
        }
    }
}

impl ConnBuffers {
    /// Buffers of a connection on socket `fd`.
    pub fn with_fd(fd: i32) -> Self {
        let b = Self::default();
        b.fd.store(fd, std::sync::atomic::Ordering::Relaxed);
        b
    }

    /// Record the buffers' lengths and capacities and the transaction's queue.
    pub fn record(
        &self,
        (qbuf, qcap): (usize, usize),
        (obuf, ocap): (usize, usize),
        multi: Option<&super::transaction::Queue>,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        self.qbuf.store(qbuf as u64, Relaxed);
        self.qbuf_cap.store(qcap as u64, Relaxed);
        self.obuf.store(obuf as u64, Relaxed);
        self.obuf_cap.store(ocap as u64, Relaxed);
        let (n, mem) = multi.map_or((-1, 0), |q| {
            let (n, b) = q.queued();
            (n as i64, b)
        });
        self.multi.store(n, Relaxed);
        self.multi_mem.store(mem, Relaxed);
    }

    /// Before a request runs: `unrun` bytes of input from it on (Redis counts the request
    /// being run in `qbuf`, so a connection listing itself sees its own request) out of `seen`
    /// bytes in the read buffer, which is at least that large.
    pub fn note_query(&self, unrun: usize, seen: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.qbuf.store(unrun as u64, Relaxed);
        self.qbuf_cap.fetch_max(seen as u64, Relaxed);
    }
}

/// Whether `name` is a legal client name (Redis: printable, no spaces).
pub use ringlet_command::args::client_name_ok;

/// CLIENT SETINFO (Redis 7.2): checked as Redis does; a single node keeps neither value.
pub fn client_setinfo(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match ringlet_command::args::client_setinfo(argv) {
        Ok(()) => Reply::ok(),
        Err(e) => e,
    }
}

fn set_name(ctx: &mut Ctx<'_>, name: &[u8]) -> Result<(), Reply> {
    if !client_name_ok(name) {
        return Err(Reply::err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    *ctx.session.state.name.lock() = name.to_vec();
    Ok(())
}

pub fn client_setname(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match set_name(ctx, argv[2]) {
        Ok(()) => Reply::ok(),
        Err(e) => e,
    }
}

pub fn client_getname(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    let name = ctx.session.state.name.lock();
    if name.is_empty() {
        Reply::Nil
    } else {
        Reply::bulk(&name)
    }
}

pub fn client_id(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    Reply::Int(ctx.session.id as i64)
}

pub fn client_info(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    let mut line = info::client_line(&ctx.session.state, ctx.now_ms);
    line.push('\n');
    Reply::Verbatim(Bytes::from(line))
}

/// CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id [id ...]].
pub fn client_list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let filter = match super::node::client_list_filter(argv) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let mut out = String::new();
    let clients = ctx.shared.clients.lock();
    for (id, c) in clients.iter() {
        if super::node::ClientFilter::keeps(&filter, *id) {
            out.push_str(&info::client_line(c, ctx.now_ms));
            out.push('\n');
        }
    }
    Reply::Verbatim(Bytes::from(out))
}

pub fn client_help(_ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    super::node::client_help()
}

pub use ringlet_command::introspect::help;
