//! The measured phase on one io_uring (`ringlet bench --client-io uring`, Linux).
//!
//! Why: at pipeline 1 on a 2-core machine the generator, not the server, is what saturates
//! first. redis-benchmark (~11 µs of CPU per request here) and the tokio generator (~8 µs)
//! cost about what a server does per request, so a P1 run measured the client. This phase
//! drives every connection from one thread and one ring: the batches of all connections that
//! are ready go out in one `io_uring_enter`, which also waits for the next replies, instead of
//! a `write`, a `read` and a readiness wake-up per connection and batch.
//!
//! Same model as the tokio phase (`measure` in lib.rs): closed loop, `--connections`
//! connections, each writing `--pipeline` requests and then reading every reply before its
//! next batch; same keys, operations, encoders, reply scanner and statistics. Per connection
//! one send and one receive in flight at most, each into the connection's own buffer, which
//! is neither moved nor written while its operation is in flight.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, BytesMut};
use io_uring::{opcode, types, IoUring};

use crate::keys::Rng;
use crate::wire::{self, Encoder, Op, Protocol};
use crate::{Plan, Stats, REPLY_GRACE};

/// Bytes one receive may bring (a connection's buffer; replies longer than this arrive in
/// several receives).
const RECV_BYTES: usize = 64 * 1024;

const SEND: u64 = 0;
const RECV: u64 = 1;

struct Conn {
    sock: TcpStream,
    enc: Encoder,
    rng: Rng,
    /// The batch being sent; not touched while `send_inflight`.
    out: Vec<u8>,
    sent: usize,
    send_inflight: bool,
    /// The receive target; not touched while `recv_inflight`.
    rbuf: Box<[u8]>,
    recv_inflight: bool,
    /// Received, not yet scanned.
    inbuf: BytesMut,
    ops: Vec<Op>,
    got: usize,
    base: u64,
    next_id: u64,
    start: Instant,
    done: bool,
}

impl Conn {
    /// Encode the next batch into `out`.
    fn next_batch(&mut self, plan: &Plan) {
        let total = plan.set_weight + plan.get_weight;
        self.out.clear();
        self.ops.clear();
        self.sent = 0;
        self.got = 0;
        self.base = self.next_id;
        for i in 0..plan.pipeline {
            let op = if self.rng.below(total) < plan.set_weight {
                Op::Set
            } else {
                Op::Get
            };
            let key = plan.chooser.next(&mut self.rng);
            self.enc
                .encode(&mut self.out, op, key, self.base + i as u64);
            self.ops.push(op);
        }
        self.next_id = self.base + plan.pipeline as u64;
        self.start = Instant::now();
    }

    /// Scan every complete reply in `inbuf`, recording each.
    fn scan(&mut self, proto: Protocol, stats: &mut Stats) -> Result<()> {
        // Bounded: each pass consumes one reply, at most `ops.len()` of them.
        while self.got < self.ops.len() {
            let in_order = self.ops[self.got];
            let Some((outcome, used, id)) = wire::parse_reply(proto, in_order, &self.inbuf)? else {
                break;
            };
            let (op, outcome) =
                crate::classify(proto, &self.ops, self.base, in_order, outcome, id)?;
            stats.record(op, outcome, self.start.elapsed());
            self.inbuf.advance(used);
            self.got += 1;
        }
        Ok(())
    }

    /// Queue the send of what is left of the batch (all of it after `next_batch`).
    fn arm_send(&mut self, i: usize, ring: &mut IoUring) -> Result<()> {
        let rest = &self.out[self.sent..];
        let e = opcode::Send::new(
            types::Fd(self.sock.as_raw_fd()),
            rest.as_ptr(),
            rest.len() as u32,
        )
        .build()
        .user_data(ud(i, SEND));
        push(ring, e)?;
        self.send_inflight = true;
        Ok(())
    }

    /// Queue a receive into the connection's buffer.
    fn arm_recv(&mut self, i: usize, ring: &mut IoUring) -> Result<()> {
        let fd = types::Fd(self.sock.as_raw_fd());
        let e = opcode::Recv::new(fd, self.rbuf.as_mut_ptr(), RECV_BYTES as u32)
            .build()
            .user_data(ud(i, RECV));
        push(ring, e)?;
        self.recv_inflight = true;
        Ok(())
    }
}

/// Queue an operation; the queue has room for every connection's two (see `measure`'s
/// `entries`).
fn push(ring: &mut IoUring, e: io_uring::squeue::Entry) -> Result<()> {
    // SAFETY: every buffer an entry names (a connection's `out` or `rbuf`) lives in
    // `measure`'s `conns`, which outlives the ring's use, and is not touched until its
    // completion is handled (`send_inflight`, `recv_inflight`).
    unsafe { ring.submission().push(&e) }.map_err(|_| anyhow!("io_uring queue full"))
}

fn ud(conn: usize, kind: u64) -> u64 {
    ((conn as u64) << 1) | kind
}

/// Run the measured phase; the statistics of every connection together.
pub(crate) fn measure(plan: &Plan) -> Result<Stats> {
    let mut conns = Vec::with_capacity(plan.connections);
    for c in 0..plan.connections {
        let sock = TcpStream::connect(&plan.addr)
            .with_context(|| format!("connecting to {}", plan.addr))?;
        sock.set_nodelay(true)?;
        conns.push(Conn {
            sock,
            enc: Encoder::new(plan.protocol, plan.key_format.clone(), plan.value_size),
            rng: Rng::for_stream(plan.seed, c as u64),
            out: Vec::with_capacity(plan.pipeline * (plan.value_size + 64)),
            sent: 0,
            send_inflight: false,
            rbuf: vec![0u8; RECV_BYTES].into_boxed_slice(),
            recv_inflight: false,
            inbuf: BytesMut::with_capacity(RECV_BYTES),
            ops: Vec::with_capacity(plan.pipeline),
            got: 0,
            base: 1,
            next_id: 1,
            start: Instant::now(),
            done: false,
        });
    }
    // Two operations in flight per connection at most, so the queues never fill.
    let entries = (2 * plan.connections + 8).next_power_of_two() as u32;
    let mut ring = IoUring::builder()
        .setup_single_issuer()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
        .context("io_uring_setup (--client-io uring needs Linux 5.x with io_uring allowed)")?;
    let mut stats = Stats::new()?;
    let started = Instant::now();
    let deadline = started + plan.duration;
    let give_up = deadline + REPLY_GRACE;
    let mut active = plan.connections;
    for (i, c) in conns.iter_mut().enumerate() {
        c.next_batch(plan);
        c.arm_send(i, &mut ring)?;
        c.arm_recv(i, &mut ring)?;
    }
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(entries as usize * 2);
    // Bounded: every connection ends after the deadline's batch, and the whole run fails at
    // `give_up` if a server stops answering.
    while active > 0 {
        if Instant::now() > give_up {
            bail!("no reply in time from {}", plan.addr);
        }
        let ts = types::Timespec::from(Duration::from_millis(100));
        let args = types::SubmitArgs::new().timespec(&ts);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e).context("io_uring_enter"),
        }
        cqes.clear();
        cqes.extend(ring.completion().map(|e| (e.user_data(), e.result())));
        for &(u, res) in &cqes {
            let (i, kind) = ((u >> 1) as usize, u & 1);
            let c = &mut conns[i];
            if kind == SEND {
                c.send_inflight = false;
                if res < 0 {
                    bail!("send: {}", std::io::Error::from_raw_os_error(-res));
                }
                c.sent += res as usize;
                if c.sent < c.out.len() {
                    c.arm_send(i, &mut ring)?;
                }
            } else {
                c.recv_inflight = false;
                if res < 0 {
                    bail!("recv: {}", std::io::Error::from_raw_os_error(-res));
                }
                if res == 0 {
                    bail!("the server closed the connection");
                }
                c.inbuf.extend_from_slice(&c.rbuf[..res as usize]);
                c.scan(plan.protocol, &mut stats)?;
            }
            // The batch is answered (its send is then complete too: nothing is answered
            // before it is sent): the next one, or this connection is done.
            if c.got == c.ops.len() && !c.send_inflight && !c.done {
                if Instant::now() >= deadline {
                    c.done = true;
                    active -= 1;
                    continue;
                }
                c.next_batch(plan);
                c.arm_send(i, &mut ring)?;
            }
            if !c.done && !c.recv_inflight && c.got < c.ops.len() {
                c.arm_recv(i, &mut ring)?;
            }
        }
    }
    // Every operation has completed (each connection ended with none in flight), so the
    // buffers may go with the ring.
    drop(ring);
    stats.elapsed = started.elapsed();
    Ok(stats)
}
