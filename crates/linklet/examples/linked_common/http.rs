//! The smallest HTTP/1.1 that the linked-mode benchmark needs, shared by `linked_service`
//! (app servers and router) and `linked_load` (the load generator) through `#[path]`.
//!
//! Keep-alive only, `Content-Length` framing only (no chunked bodies), one request in flight
//! per connection. A message is read whole into one buffer (head and body) so the router can
//! forward it verbatim. Bounds: a head is at most `HEAD_BYTES_MAX`, a body `BODY_BYTES_MAX`;
//! anything larger closes the connection.

// Each example uses its own part (the server side or the client side).
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, Read};

/// Largest request or response head: our heads are under 200 bytes.
pub const HEAD_BYTES_MAX: usize = 8 * 1024;
/// Largest body: responses are summaries well under 1 KiB; requests carry none.
pub const BODY_BYTES_MAX: usize = 64 * 1024;

/// Read one whole message (head + body) into `buf`, replacing its contents.
///
/// Returns `Ok(false)` on a clean end of stream before the first byte.
///
/// # Errors
/// I/O errors; `InvalidData` for a head or body over its bound or a bad `Content-Length`;
/// `UnexpectedEof` for a stream that ends inside a message.
pub fn read_message<R: Read>(r: &mut BufReader<R>, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    let mut body_bytes = 0usize;
    // Bounded by HEAD_BYTES_MAX: every trip adds at least one byte.
    loop {
        let start = buf.len();
        let n = r.read_until(b'\n', buf)?;
        if n == 0 {
            if start == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if buf.len() > HEAD_BYTES_MAX {
            return Err(invalid("head too large"));
        }
        let line = &buf[start..];
        if line == b"\r\n" {
            break;
        }
        const CL: &[u8] = b"content-length:";
        if line.len() > CL.len() && line[..CL.len()].eq_ignore_ascii_case(CL) {
            let v = std::str::from_utf8(&line[CL.len()..]).map_err(|_| invalid("length"))?;
            body_bytes = v.trim().parse().map_err(|_| invalid("length"))?;
            if body_bytes > BODY_BYTES_MAX {
                return Err(invalid("body too large"));
            }
        }
    }
    let head = buf.len();
    buf.resize(head + body_bytes, 0);
    r.read_exact(&mut buf[head..])?;
    Ok(true)
}

/// The target of a request (`/view/17`), from its request line.
pub fn request_path(msg: &[u8]) -> Option<&str> {
    let line_end = msg.iter().position(|&b| b == b'\r')?;
    let line = std::str::from_utf8(&msg[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let _method = parts.next()?;
    parts.next()
}

/// Append a `200 OK` (or other `status`) response with `body` to `out`.
pub fn write_response(out: &mut Vec<u8>, status: &str, body: &[u8]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: application/json\r\nContent-Length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// The status code of a response (`200`), from its status line.
pub fn response_status(msg: &[u8]) -> Option<u16> {
    std::str::from_utf8(msg.get(9..12)?).ok()?.parse().ok()
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}
