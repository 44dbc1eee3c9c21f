//! The demo linked service used by the `ringlet-linked member` subcommand, the multi-process
//! tests and the HTTP front example: per-user accounts (a balance and its recent changes)
//! held as native objects in each member's Linklet.
//!
//! Requests (body, UTF-8): `get` → the balance (or `none`); `add <n>` → the new balance.

use std::sync::Arc;

use ringlet_linklet::{Config, Linklet};
use serde::{Deserialize, Serialize};

use crate::member::HandleError;

/// Changes an account remembers.
pub const RECENT_MAX: usize = 16;

/// One user's object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Balance.
    pub balance: i64,
    /// The last changes, newest last.
    pub recent: Vec<i64>,
}

/// A Linklet for the demo that owns no slot (the coordinator assigns them).
pub fn linklet() -> Arc<Linklet<String, Account>> {
    let cfg = Config {
        slots_owned: Vec::new(),
        ..Config::default()
    };
    Arc::new(
        Linklet::new(cfg)
            .expect("static config")
            .with_sizer(|a: &Account| 16 + a.recent.capacity() * 8),
    )
}

/// The demo's request handler.
///
/// # Errors
/// Linklet refusals (`Moving`, `NotOwner`) and malformed requests.
pub fn handle(
    l: &Linklet<String, Account>,
    key: String,
    body: &[u8],
) -> Result<Vec<u8>, HandleError> {
    let text = std::str::from_utf8(body).map_err(|_| HandleError::App("not utf-8".into()))?;
    let mut words = text.split_ascii_whitespace();
    match (words.next(), words.next()) {
        (Some("get"), None) => Ok(match l.read(&key, |a| a.balance)? {
            Some(b) => b.to_string().into_bytes(),
            None => b"none".to_vec(),
        }),
        (Some("add"), Some(n)) => {
            let n: i64 = n
                .parse()
                .map_err(|_| HandleError::App("add: not a number".into()))?;
            let add = |a: &mut Account| {
                a.balance = a.balance.wrapping_add(n);
                if a.recent.len() == RECENT_MAX {
                    a.recent.remove(0);
                }
                a.recent.push(n);
                a.balance
            };
            // Two rounds at most: a miss inserts; losing that race to another insert means
            // the key is there now and the update finds it.
            for _ in 0..2 {
                if let Some(b) = l.update(&key, add)? {
                    return Ok(b.to_string().into_bytes());
                }
                let fresh = Account {
                    balance: n,
                    recent: vec![n],
                };
                if l.insert_if_absent(key.clone(), fresh, 0)? {
                    return Ok(n.to_string().into_bytes());
                }
            }
            Err(HandleError::App("add: key churned, retry".into()))
        }
        _ => Err(HandleError::App("expected `get` or `add <n>`".into())),
    }
}
