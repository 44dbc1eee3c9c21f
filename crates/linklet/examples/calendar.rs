//! The LInK paper's custom in-memory store: a calendar service with a `find-free-slots`
//! operation, served over RESP (LInK §3.2). Run it and talk to it with any Redis client:
//!
//! ```text
//! cargo run -p ringlet-linklet --example calendar -- 127.0.0.1:7390
//! redis-cli -p 7390 CAL.ADD ann 2026-11-25 09:00 10:30 standup
//! redis-cli -p 7390 CAL.FREE ann 2026-11-25 WITHIN 08:00 17:00 MIN 30
//! ```
//!
//! The server code is `ringlet_linklet::calendar` (a library module, so the integration test
//! drives exactly this server); this file only binds and runs it.

use std::sync::Arc;

use ringlet_linklet::calendar::{command::CalendarStore, server, Calendar};
use ringlet_linklet::{Config, Linklet};

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7390".to_owned());
    let store: CalendarStore = Linklet::new(Config::default())
        .map_err(std::io::Error::other)?
        .with_sizer(|c: &Calendar| c.size_bytes());
    let store = Arc::new(store);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        eprintln!("calendar store listening on {}", listener.local_addr()?);
        server::serve(listener, store).await
    })
}
