//! CLIENT on a cluster node: each node keeps a registry of its RESP connections, so CLIENT
//! ID / SETNAME / GETNAME / INFO / LIST / SETINFO answer as Redis does, per node (as in a
//! Redis Cluster, where every node lists its own clients). Before, every CLIENT subcommand
//! answered OK, so CLIENT GETNAME or CLIENT ID returned a wrong type and nothing was listed.
//! Subcommands Ringlet does not have (KILL, PAUSE, REPLY, TRACKING, ...) are refused by the
//! shared command table (ringlet-command) with Redis's "unknown subcommand", as on a single
//! node, never accepted and ignored. The line format is the single node's
//! (`ringlet_server::cmd::connection::client_line_text`).

use super::err;
use parking_lot::Mutex;
use ringlet_codec::resp::Reply;
use ringlet_command::args::client_name_ok;
use ringlet_server::cmd::connection::client_line_text;
use ringlet_server::cmd::node;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One RESP connection of this node.
pub(super) struct Conn {
    pub id: u64,
    addr: SocketAddr,
    laddr: SocketAddr,
    created: Instant,
    /// ms since `created` at the last command (for `idle=`).
    last_ms: AtomicU64,
    /// Full name of the last command from the command table (for `cmd=`).
    last_cmd: Mutex<&'static str>,
    name: Mutex<Vec<u8>>,
    pub resp: AtomicU8,
    /// Buffer figures for CLIENT LIST, stored by the connection's loop.
    pub buffers: ringlet_server::cmd::connection::ConnBuffers,
    /// The ACL user this connection runs as (the default user until AUTH). A lock only
    /// this connection's task takes (so never contended).
    pub user: Mutex<ringlet_command::acl::ConnUser>,
}

impl Conn {
    /// The node address this client connected to.
    pub fn laddr(&self) -> SocketAddr {
        self.laddr
    }

    /// Note a command about to run (CLIENT LIST shows the last one and the idle time):
    /// `name` is the table's full name (`client|list`, as Redis 7 shows containers).
    /// `now` is the command's start, which the caller has read already.
    pub fn touch(&self, name: &'static str, now: Instant) {
        self.last_ms.store(
            now.saturating_duration_since(self.created).as_millis() as u64,
            Ordering::Relaxed,
        );
        *self.last_cmd.lock() = name;
    }

    pub fn set_name(&self, name: &[u8]) -> Result<(), Reply> {
        if !client_name_ok(name) {
            return Err(err(
                "ERR Client names cannot contain spaces, newlines or special characters.",
            ));
        }
        *self.name.lock() = name.to_vec();
        Ok(())
    }

    /// SLOWLOG's client fields: `ip:port` and the name.
    pub fn slowlog_client(&self) -> (String, Vec<u8>) {
        (self.addr.to_string(), self.name.lock().clone())
    }

    fn line(&self) -> String {
        let age = self.created.elapsed();
        let idle_ms = (age.as_millis() as u64).saturating_sub(self.last_ms.load(Ordering::Relaxed));
        let cmd = *self.last_cmd.lock();
        let user = self.user.lock().name().to_string();
        client_line_text(
            self.id,
            self.addr,
            self.laddr,
            &self.name.lock(),
            age.as_secs(),
            idle_ms / 1000,
            if cmd.is_empty() { "NULL" } else { cmd },
            self.resp.load(Ordering::Relaxed),
            &self.buffers,
            &user,
        )
    }
}

/// The node's connections.
#[derive(Default)]
pub(super) struct Clients {
    map: Mutex<BTreeMap<u64, Arc<Conn>>>,
    next: AtomicU64,
}

/// Removes its connection from the registry when the connection ends.
pub(super) struct Registered<'a> {
    clients: &'a Clients,
    pub conn: Arc<Conn>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.clients.map.lock().remove(&self.conn.id);
    }
}

impl Clients {
    /// Connections open now.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Connections accepted since start (ids are handed out in order from 1).
    pub fn total_received(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Register a connection (bounded by the connection limit: the accept loop refuses past
    /// `limits::CONNECTIONS_MAX`).
    pub fn register(
        &self,
        addr: SocketAddr,
        laddr: SocketAddr,
        fd: i32,
        user: ringlet_command::acl::ConnUser,
    ) -> Registered<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let conn = Arc::new(Conn {
            id,
            addr,
            laddr,
            created: Instant::now(),
            last_ms: AtomicU64::new(0),
            last_cmd: Mutex::new(""),
            name: Mutex::new(Vec::new()),
            resp: AtomicU8::new(2),
            buffers: ringlet_server::cmd::connection::ConnBuffers::with_fd(fd),
            user: Mutex::new(user),
        });
        self.map.lock().insert(id, conn.clone());
        Registered {
            clients: self,
            conn,
        }
    }
}

/// `CLIENT <subcommand> ...` for `conn`.
pub(super) fn client(clients: &Clients, conn: &Conn, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
    // The command table (ringlet-command) resolved the subcommand and checked its arity.
    let sub = &argv[1];
    // RESP3 gets a verbatim string (`=`), RESP2 a bulk string, as from Redis.
    let verbatim = |s: String| Reply::Verbatim {
        format: *b"txt",
        text: s.into_bytes(),
    };
    match String::from_utf8_lossy(sub).to_ascii_lowercase().as_str() {
        "id" => Ok(Reply::Integer(conn.id as i64)),
        "getname" => {
            let name = conn.name.lock();
            Ok(if name.is_empty() {
                Reply::Null
            } else {
                Reply::Bulk(name.clone())
            })
        }
        "setname" => {
            conn.set_name(&argv[2])?;
            Ok(Reply::ok())
        }
        "setinfo" => {
            let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            ringlet_command::args::client_setinfo(&args).map_err(|e| super::convert(&e))?;
            Ok(Reply::ok())
        }
        "info" => {
            let mut line = conn.line();
            line.push('\n');
            Ok(verbatim(line))
        }
        "list" => {
            let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            let filter = node::client_list_filter(&args).map_err(|e| super::convert(&e))?;
            let mut out = String::new();
            // Copy the list first: formatting a line locks that connection's fields.
            let conns: Vec<Arc<Conn>> = clients.map.lock().values().cloned().collect();
            for c in conns {
                if node::ClientFilter::keeps(&filter, c.id) {
                    out.push_str(&c.line());
                    out.push('\n');
                }
            }
            Ok(verbatim(out))
        }
        "help" => Ok(super::convert(&node::client_help())),
        // The table has the subcommand but this front has no arm for it: a bug that
        // `every_table_command_has_a_cluster_handler` catches.
        other => Err(err(format!(
            "ERR 'client|{other}' has no handler on a cluster node"
        ))),
    }
}

/// A native-protocol connection's login (crate::native): the same users, AUTH and ACL checks
/// as a RESP connection's, so the native front never bypasses `requirepass` or an ACL user's
/// limits.
pub(crate) struct NativeLogin {
    /// The connection as the RESP front's commands see it (COMMAND frames run through
    /// `Front::command`): its `user` is the login's user. Not in the CLIENT LIST registry
    /// (it has no RESP state to show).
    conn: Arc<Conn>,
    authenticated: bool,
}

/// What a native COMMAND frame runs with: the connection's login as of its frame.
pub(crate) struct NativeSession {
    conn: Arc<Conn>,
    authenticated: bool,
}

impl super::Front {
    /// A new native connection's login: the default user, logged in only if that needs no
    /// password.
    pub(crate) fn native_login(&self) -> NativeLogin {
        self.sync_users();
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        let conn = Arc::new(Conn {
            id: 0,
            addr: unspecified,
            laddr: unspecified,
            created: Instant::now(),
            last_ms: AtomicU64::new(0),
            last_cmd: Mutex::new(""),
            name: Mutex::new(Vec::new()),
            resp: AtomicU8::new(3),
            buffers: Default::default(),
            user: Mutex::new(ringlet_command::acl::ConnUser::new(&self.acl)),
        });
        NativeLogin {
            conn,
            authenticated: !self.auth_required(),
        }
    }

    /// AUTH on a native connection (an empty `user` is `default`): whether it logged in.
    pub(crate) fn native_auth(
        &self,
        login: &mut NativeLogin,
        user: &[u8],
        password: &[u8],
    ) -> bool {
        let name: &[u8] = if user.is_empty() { b"default" } else { user };
        match self.authenticate(name, password) {
            Some(u) => {
                login.conn.user.lock().set(u, &self.acl);
                login.authenticated = true;
                true
            }
            None => false,
        }
    }

    /// Whether `login` may run the request `argv` stands for (ringlet_server::native::
    /// acl_argv), against the users as of the connection's last `sync_users` (once per read
    /// batch, as on RESP): `Err` is the refusal's message (`NOAUTH ...`, `NOPERM ...`) and whether the
    /// connection must close (its user was deleted).
    pub(crate) fn native_gate(
        &self,
        login: &mut NativeLogin,
        argv: &[&[u8]],
    ) -> Result<(), (String, bool)> {
        if !login.authenticated && self.auth_required() {
            return Err((ringlet_server::native::NOAUTH.into(), false));
        }
        let mut user = login.conn.user.lock();
        if user.generation_is(self.acl.generation()) && user.unrestricted() {
            return Ok(());
        }
        ringlet_server::native::acl_check(&mut user, &self.acl, argv)
    }

    /// The login a COMMAND frame of `login`'s connection runs with (moved into its task).
    pub(crate) fn native_session(&self, login: &NativeLogin) -> NativeSession {
        NativeSession {
            conn: login.conn.clone(),
            authenticated: login.authenticated,
        }
    }

    /// Run a COMMAND frame's `argv` as the RESP front runs a request (`Front::command`: the
    /// table, arity, ACL check and handler), with RESP3 replies, under the read side of the
    /// EXEC lock as RESP commands (RECORDS excepted, as on RESP).
    pub(crate) async fn native_command(&self, session: &NativeSession, argv: &[Vec<u8>]) -> Reply {
        let mut proto = ringlet_codec::resp::Proto::Resp3;
        let mut authed = session.authenticated;
        let records = argv
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"records"));
        let _exec = if records {
            None
        } else {
            Some(self.exec.read().await)
        };
        self.command(argv, &mut proto, &mut authed, &session.conn)
            .await
    }
}
