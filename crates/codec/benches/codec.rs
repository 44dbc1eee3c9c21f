//! Codec micro-benchmarks: parse RESP GET/SET, encode a bulk reply, native GET round trip.
//! Run: `cargo bench -p ringlet-codec`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ringlet_codec::native;
use ringlet_codec::resp::{self, Request, RequestDecoder};
use ringlet_types::{Epoch, Version};

fn resp_parse(c: &mut Criterion) {
    let get = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000012345\r\n".to_vec();
    let mut set = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000012345\r\n$100\r\n".to_vec();
    set.extend_from_slice(&[b'x'; 100]);
    set.extend_from_slice(b"\r\n");
    let mut g = c.benchmark_group("resp_parse");
    g.throughput(Throughput::Elements(1));
    let mut dec = RequestDecoder::new();
    let mut req = Request::new();
    g.bench_function("get", |b| {
        b.iter(|| dec.decode(black_box(&get), &mut req).ok().flatten())
    });
    g.bench_function("set_100B", |b| {
        b.iter(|| dec.decode(black_box(&set), &mut req).ok().flatten())
    });
    g.bench_function("get_fresh_request", |b| {
        b.iter(|| {
            resp::decode_request(black_box(&get))
                .ok()
                .flatten()
                .map(|(_, n)| n)
        })
    });
    g.finish();
}

fn resp_encode(c: &mut Criterion) {
    let value = vec![b'v'; 100];
    let mut out = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("resp_encode");
    g.throughput(Throughput::Elements(1));
    g.bench_function("bulk_100B", |b| {
        b.iter(|| {
            out.clear();
            resp::encode_bulk(&mut out, black_box(&value));
            out.len()
        })
    });
    g.bench_function("int", |b| {
        b.iter(|| {
            out.clear();
            resp::encode_int(&mut out, black_box(1234567));
            out.len()
        })
    });
    g.finish();
}

fn native_codec(c: &mut Criterion) {
    let mut get = Vec::new();
    native::encode_get(&mut get, 1, b"key:000000012345");
    let value = vec![b'v'; 100];
    let mut resp_frame = Vec::new();
    native::encode_get_response(&mut resp_frame, 1, Epoch(1), Version(7), Some(&value));
    let mut out = Vec::with_capacity(4096);
    let mut g = c.benchmark_group("native");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_get", |b| {
        b.iter(|| {
            native::decode_request_frame(black_box(&get))
                .ok()
                .flatten()
                .map(|(_, n)| n)
        })
    });
    g.bench_function("encode_get_response_100B", |b| {
        b.iter(|| {
            out.clear();
            native::encode_get_response(&mut out, 1, Epoch(1), Version(7), Some(black_box(&value)));
            out.len()
        })
    });
    g.bench_function("decode_get_response_100B", |b| {
        b.iter(|| {
            native::decode_response_frame(black_box(&resp_frame))
                .ok()
                .flatten()
                .map(|(_, n)| n)
        })
    });
    g.finish();
}

criterion_group!(benches, resp_parse, resp_encode, native_codec);
criterion_main!(benches);
