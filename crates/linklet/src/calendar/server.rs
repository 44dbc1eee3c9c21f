//! The calendar's TCP front: one tokio task per connection, RESP decoded by `ringlet-codec`'s
//! [`RequestDecoder`] and replies encoded with [`Reply::encode`]. Requests are run in order per
//! connection (pipelining works); the store is shared by all connections.
//!
//! Bounds: connections above `CONNECTIONS_MAX` wait for a free permit before being served; a
//! connection whose unparsed input exceeds `CONN_READ_BUFFER_BYTES_MAX` is closed (the
//! decoder already refuses bulks and arrays over the global limits).

use std::io;
use std::sync::Arc;

use ringlet_codec::resp::{Proto, Reply, Request, RequestDecoder};
use ringlet_types::limits as global;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::command::{execute, CalendarStore};

/// Serve `store` on `listener` until accepting fails. The accept loop is the one loop without
/// a trip bound (it is the server's life); everything it starts is bounded.
///
/// # Errors
/// The listener's accept error.
pub async fn serve(listener: TcpListener, store: Arc<CalendarStore>) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(global::CONNECTIONS_MAX as usize));
    loop {
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .map_err(io::Error::other)?;
        let (stream, _) = listener.accept().await?;
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            // A connection error ends that connection only.
            let _ = serve_connection(stream, &store).await;
            drop(permit);
        });
    }
}

/// Serve one connection until the peer closes it or sends something malformed.
///
/// # Errors
/// I/O errors of the socket.
pub async fn serve_connection(mut stream: TcpStream, store: &CalendarStore) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    let mut decoder = RequestDecoder::new();
    let mut req = Request::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > global::CONN_READ_BUFFER_BYTES_MAX as usize {
            Reply::error("ERR request too large").encode(Proto::Resp2, &mut out);
            stream.write_all(&out).await?;
            return Ok(());
        }
        // Bounded by buf.len(): every decoded request consumes at least one byte.
        let mut consumed = 0;
        loop {
            match decoder.decode(&buf[consumed..], &mut req) {
                Ok(None) => break,
                Ok(Some(used)) => {
                    let window = &buf[consumed..];
                    if !req.is_empty() {
                        let argv: Vec<&[u8]> = req.args(window).collect();
                        execute(store, &argv).encode(Proto::Resp2, &mut out);
                    }
                    consumed += used;
                }
                Err(e) => {
                    // Malformed input closes this connection, and only this one.
                    Reply::error(format!("ERR Protocol error: {e}")).encode(Proto::Resp2, &mut out);
                    stream.write_all(&out).await?;
                    return Ok(());
                }
            }
        }
        buf.drain(..consumed);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
    }
}
