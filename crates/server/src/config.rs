//! Node configuration, checked once at startup by [`Config::validate`].

use std::net::IpAddr;

/// Everything a node needs to start. Built by the CLI from flags; tests build it directly.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address of the client port. Loopback by default: a node refuses any other address
    /// unless `requirepass` is set (DESIGN "Security and limits").
    pub bind: IpAddr,
    /// Client port (RESP2/RESP3 and native frames on the same port). 0 picks a free port;
    /// [`crate::ServerHandle::local_addr`] tells which.
    pub port: u16,
    /// Network worker threads, one tokio `current_thread` runtime each. 0 = one per core.
    pub threads: usize,
    /// Memory budget of the engine's data region, in MiB.
    pub memory_mb: u64,
    /// Password of the `default` user; `None` means no AUTH needed (loopback only).
    pub requirepass: Option<String>,
    /// Port of the admin HTTP listener (Prometheus `/metrics`). `None` = off; 0 = free port.
    pub admin_port: Option<u16>,
    /// Address the admin listener binds. Loopback by default; another address needs
    /// `admin_token`.
    pub admin_bind: IpAddr,
    /// Bearer token every admin page requires (`--admin-token`); `None`: no check.
    pub admin_token: Option<String>,
    /// Period of the engine tick (active expiry, incremental upsize), in ms.
    pub tick_interval_ms: u64,
    /// Unix socket through which same-host clients map the engine's regions read-only and
    /// read one-sided (`ringlet_shm_exporter::Exporter`; docs/design/shm-reads.md). `None` = off.
    pub shm_socket: Option<std::path::PathBuf>,
    /// Keys the index is sized for at startup (`--index-keys`; `CONFIG SET index-keys` grows
    /// it later). `None`: the engine's default, grown 1.5× at a time as keys arrive.
    pub index_keys: Option<u64>,
    /// How the workers drive their sockets (`--io`): one io_uring per worker where the kernel
    /// offers it (`crate::uring`, Linux), tokio's epoll loop otherwise
    /// (docs/design/request-path.md, "io_uring request loop" and "Session 21").
    pub io: IoMode,
}

/// The worker loop's I/O interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoMode {
    /// The default: [`IoMode::Uring`] if a probe ring and buffer ring can be set up at start,
    /// else [`IoMode::Epoll`] (io_uring disabled by sysctl or seccomp, an old kernel, not
    /// Linux), saying why in the log. `Server::start` resolves it; INFO's `multiplexing_api`
    /// names the loop that runs.
    #[default]
    Auto,
    /// tokio `current_thread` runtime per worker: readiness (epoll), then `read`/`write`.
    Epoll,
    /// One io_uring per worker: multishot accept, multishot receive into a provided-buffer
    /// ring, the replies of a loop iteration submitted together. Refused at start, with the
    /// reason, where the kernel does not offer it.
    Uring,
}

impl IoMode {
    /// Parse `auto`, `epoll` or `uring` (the `--io` flag, `RINGLET_IO`).
    pub fn parse(s: &str) -> Option<IoMode> {
        match s {
            "auto" => Some(IoMode::Auto),
            "epoll" => Some(IoMode::Epoll),
            "uring" | "io_uring" => Some(IoMode::Uring),
            _ => None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: IpAddr::from([127, 0, 0, 1]),
            port: DEFAULT_PORT,
            threads: 0,
            memory_mb: 1024,
            requirepass: None,
            admin_port: None,
            admin_bind: IpAddr::from([127, 0, 0, 1]),
            admin_token: None,
            tick_interval_ms: 100,
            shm_socket: None,
            index_keys: None,
            io: IoMode::Auto,
        }
    }
}

/// Default client port of a node and of `ringlet up` (Redis's 6379 + 1000, so both can run
/// side by side on one machine).
pub const DEFAULT_PORT: u16 = 7379;

/// Largest memory budget accepted (32 GiB): the most the engine addresses (32-bit locations in
/// 8-byte units).
pub const MEMORY_MB_MAX: u64 = 32 * 1024;

/// Most worker threads: more than cores only adds context switches.
pub const THREADS_MAX: usize = 1024;

/// A configuration a node refuses to start with; each message names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "bind: refusing to listen on non-loopback address {0} without authentication; \
         set --requirepass (or bind 127.0.0.1)"
    )]
    NonLoopbackWithoutAuth(IpAddr),
    #[error(
        "admin_bind: refusing to serve /metrics on non-loopback address {0} without --admin-token"
    )]
    AdminNonLoopbackWithoutAuth(IpAddr),
    #[error("memory_mb: must be between 1 and {max}, got {got}")]
    Memory { got: u64, max: u64 },
    #[error("threads: must be at most {max}, got {got}")]
    Threads { got: usize, max: usize },
    #[error("requirepass: must not be empty")]
    EmptyPassword,
    #[error("requirepass: must not contain spaces or control characters")]
    BadPassword,
    #[error("tick_interval_ms: must be between 1 and 10000, got {0}")]
    TickInterval(u64),
    #[error("admin_port: must differ from port {0}")]
    AdminPortClash(u16),
    #[error("admin_token: must be 1 to 256 visible characters (no spaces or control characters)")]
    BadAdminToken,
}

/// An admin token travels in an HTTP header: 1..=256 visible ASCII characters.
pub fn admin_token_ok(t: &str) -> bool {
    (1..=256).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic())
}

impl Config {
    /// Checks every field once, before anything binds.
    ///
    /// # Errors
    /// The first invalid field, as a [`ConfigError`] whose message names it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(p) = &self.requirepass {
            if p.is_empty() {
                return Err(ConfigError::EmptyPassword);
            }
            if p.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(ConfigError::BadPassword);
            }
        }
        if !self.bind.is_loopback() && self.requirepass.is_none() {
            return Err(ConfigError::NonLoopbackWithoutAuth(self.bind));
        }
        if let Some(t) = &self.admin_token {
            if !admin_token_ok(t) {
                return Err(ConfigError::BadAdminToken);
            }
        }
        if self.admin_port.is_some() && !self.admin_bind.is_loopback() && self.admin_token.is_none()
        {
            return Err(ConfigError::AdminNonLoopbackWithoutAuth(self.admin_bind));
        }
        if self.memory_mb == 0 || self.memory_mb > MEMORY_MB_MAX {
            return Err(ConfigError::Memory {
                got: self.memory_mb,
                max: MEMORY_MB_MAX,
            });
        }
        if self.threads > THREADS_MAX {
            return Err(ConfigError::Threads {
                got: self.threads,
                max: THREADS_MAX,
            });
        }
        if self.tick_interval_ms == 0 || self.tick_interval_ms > 10_000 {
            return Err(ConfigError::TickInterval(self.tick_interval_ms));
        }
        if let Some(a) = self.admin_port {
            if a != 0 && a == self.port {
                return Err(ConfigError::AdminPortClash(self.port));
            }
        }
        Ok(())
    }

    /// Worker threads to start: `threads`, or the number of cores when 0.
    pub fn threads_effective(&self) -> usize {
        if self.threads > 0 {
            self.threads
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_loopback() {
        let c = Config::default();
        assert!(c.validate().is_ok());
        assert!(c.bind.is_loopback());
    }

    #[test]
    fn non_loopback_needs_password() {
        let mut c = Config {
            bind: "0.0.0.0".parse().unwrap(),
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.to_string().contains("--requirepass"), "{e}");
        c.requirepass = Some("secret".into());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_fields_are_named() {
        let c = Config {
            memory_mb: 0,
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("memory_mb"));
        let c = Config {
            requirepass: Some(String::new()),
            ..Config::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::EmptyPassword));
        let c = Config {
            admin_port: Some(7379),
            port: 7379,
            ..Config::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::AdminPortClash(7379)));
    }
}
