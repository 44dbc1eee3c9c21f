//! Errors of the networked runtime. Small enums, one per side that acts on them.

/// A frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed mid-frame.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent something that is not a frame of this protocol (unknown kind, length over
    /// the kind's limit, a field that does not decode).
    #[error("bad frame: {0}")]
    Bad(&'static str),
    /// The peer took longer than the step's deadline.
    #[error("timed out")]
    Timeout,
}

/// Why a routed call failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RouteError {
    /// The application handler refused the request (its message).
    #[error("application error: {0}")]
    App(String),
    /// No member served the key within the router's attempt budget (moves that did not end,
    /// no owner in the map, members unreachable).
    #[error("no member served the request after {attempts} attempts")]
    Unavailable {
        /// Attempts made.
        attempts: u32,
    },
}

/// Why a member stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// Socket trouble (bind, connect).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The coordinator connection failed.
    #[error("coordinator: {0}")]
    Wire(#[from] WireError),
    /// The coordinator refused the join (its reason).
    #[error("join refused: {0}")]
    Refused(String),
    /// The coordinator declared this member dead (its lease expired); it serves nothing now.
    #[error("lease expired: the coordinator replaced this member")]
    Expired,
}
