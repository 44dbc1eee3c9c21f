//! Property tests of the native frame codec: every request and response round-trips, every
//! split point is "incomplete", re-encoding is canonical, and random or mutated bytes never
//! panic the decoders (the same stream function the `native_decode` fuzz target calls).

use proptest::prelude::*;
use ringlet_codec::fuzz_support;
use ringlet_codec::native::{
    self, MgetResponseWriter, NativeRequest, ResponseBody, SetCond, SetRequest, Status,
};
use ringlet_types::{Epoch, MemgestId, Version};

/// An owned description of a request, turned into a borrowed `NativeRequest` for encoding.
#[derive(Clone, Debug)]
enum Spec {
    Ping,
    Get(Vec<u8>),
    Mget(Vec<Vec<u8>>),
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        cond: u8,
        ttl: Option<u64>,
        version: Option<u128>,
        cas: Option<u128>,
        memgest: Option<u16>,
    },
    Del(Vec<u8>, Option<u128>),
    IncrBy(Vec<u8>, i64),
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..40)
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        Just(Spec::Ping),
        bytes().prop_map(Spec::Get),
        prop::collection::vec(bytes(), 0..10).prop_map(Spec::Mget),
        (
            bytes(),
            bytes(),
            0u8..3,
            any::<Option<u64>>(),
            any::<Option<u128>>(),
            any::<Option<u128>>(),
            any::<Option<u16>>()
        )
            .prop_map(|(key, value, cond, ttl, version, cas, memgest)| Spec::Set {
                key,
                value,
                cond,
                ttl,
                version,
                cas,
                memgest
            }),
        (bytes(), any::<Option<u128>>()).prop_map(|(k, c)| Spec::Del(k, c)),
        (bytes(), any::<i64>()).prop_map(|(k, d)| Spec::IncrBy(k, d)),
    ]
}

fn encode(spec: &Spec, id: u64, out: &mut Vec<u8>) {
    match spec {
        Spec::Ping => native::encode_ping(out, id),
        Spec::Get(k) => native::encode_get(out, id, k),
        Spec::Mget(keys) => native::encode_mget(out, id, keys),
        Spec::Set {
            key,
            value,
            cond,
            ttl,
            version,
            cas,
            memgest,
        } => native::encode_set(
            out,
            id,
            &SetRequest {
                key,
                value,
                cond: [SetCond::Always, SetCond::IfAbsent, SetCond::IfPresent][*cond as usize],
                ttl_ms: *ttl,
                version: version.map(Version),
                cas: cas.map(Version),
                memgest: memgest.map(MemgestId),
            },
        ),
        Spec::Del(k, cas) => native::encode_del(out, id, k, cas.map(Version)),
        Spec::IncrBy(k, d) => native::encode_incr_by(out, id, k, *d),
    }
}

fn matches(spec: &Spec, req: &NativeRequest<'_>) -> bool {
    match (spec, req) {
        (Spec::Ping, NativeRequest::Ping) => true,
        (Spec::Get(k), NativeRequest::Get { key }) => k.as_slice() == *key,
        (Spec::Mget(ks), NativeRequest::Mget { keys }) => {
            keys.len() == ks.len() && keys.iter().zip(ks).all(|(a, b)| a == b.as_slice())
        }
        (
            Spec::Set {
                key,
                value,
                cond,
                ttl,
                version,
                cas,
                memgest,
            },
            NativeRequest::Set(s),
        ) => {
            s.key == key.as_slice()
                && s.value == value.as_slice()
                && s.cond
                    == [SetCond::Always, SetCond::IfAbsent, SetCond::IfPresent][*cond as usize]
                && s.ttl_ms == *ttl
                && s.version == version.map(Version)
                && s.cas == cas.map(Version)
                && s.memgest == memgest.map(MemgestId)
        }
        (Spec::Del(k, c), NativeRequest::Del { key, cas }) => {
            k.as_slice() == *key && *cas == c.map(Version)
        }
        (Spec::IncrBy(k, d), NativeRequest::IncrBy { key, delta }) => {
            k.as_slice() == *key && d == delta
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn requests_round_trip_and_split(specs in prop::collection::vec(spec(), 1..5), id in any::<u64>()) {
        let mut buf = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            encode(s, id.wrapping_add(i as u64), &mut buf);
        }
        let mut rest = &buf[..];
        for (i, s) in specs.iter().enumerate() {
            let (f, n) = native::decode_request_frame(rest).unwrap().unwrap();
            prop_assert_eq!(f.request_id, id.wrapping_add(i as u64));
            prop_assert!(matches(s, &f.request), "{:?} vs {:?}", s, f.request);
            for cut in 0..n {
                prop_assert!(native::decode_request_frame(&rest[..cut]).unwrap().is_none());
            }
            rest = &rest[n..];
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn responses_round_trip(
        id in any::<u64>(), epoch in any::<u64>(), version in any::<u128>(),
        value in prop::option::of(bytes()), n in any::<i64>(),
        items in prop::collection::vec((0u8..2, any::<u128>(), bytes()), 0..8),
        msg in "[ -~]{0,40}",
    ) {
        let (epoch, version) = (Epoch(epoch), Version(version));
        let mut buf = Vec::new();
        native::encode_get_response(&mut buf, id, epoch, version, value.as_deref());
        native::encode_int_response(&mut buf, id, epoch, version, n);
        native::encode_error_response(&mut buf, id, native::Opcode::Set, Status::MOVED, epoch, &msg);
        let mut w = MgetResponseWriter::begin(&mut buf, id, epoch);
        for (st, v, val) in &items {
            let status = if *st == 0 { Status::OK } else { Status::NOT_FOUND };
            w.push(&mut buf, status, Version(*v), if *st == 0 { val } else { &[] });
        }
        prop_assert!(w.finish(&mut buf));

        let mut rest = &buf[..];
        let mut next = || {
            let (f, n) = native::decode_response_frame(rest).unwrap().unwrap();
            for cut in 0..n {
                assert!(native::decode_response_frame(&rest[..cut]).unwrap().is_none());
            }
            let mut again = Vec::new();
            native::encode_response_frame(&mut again, &f);
            assert_eq!(again.as_slice(), &rest[..n], "canonical encoding");
            rest = &rest[n..];
            f
        };
        let g = next();
        prop_assert_eq!(g.request_id, id);
        prop_assert_eq!(g.epoch, epoch);
        match &value {
            Some(v) => prop_assert_eq!(g.body, ResponseBody::Value(v.as_slice())),
            None => prop_assert_eq!(g.status, Status::NOT_FOUND),
        }
        prop_assert_eq!(next().body, ResponseBody::Int(n));
        prop_assert_eq!(next().body, ResponseBody::Message(msg.as_bytes()));
        let m = next();
        let ResponseBody::Values(got) = m.body else { panic!("not values") };
        prop_assert_eq!(got.len(), items.len());
        for (item, (st, v, val)) in got.iter().zip(&items) {
            prop_assert_eq!(item.version, Version(*v));
            if *st == 0 { prop_assert_eq!(item.value, val.as_slice()); }
        }
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzz_support::native_decode_stream(&data);
    }

    #[test]
    fn mutated_frames_never_panic(s in spec(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut buf = Vec::new();
        encode(&s, 1, &mut buf);
        for (at, b) in flips {
            let i = at.index(buf.len());
            buf[i] = b;
        }
        fuzz_support::native_decode_stream(&buf);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// COMMAND bodies: any argument list round-trips; any truncation is "incomplete" (never
    /// an error, never a panic); any body of random bytes behind a COMMAND header, or any
    /// mutation of a good one, decodes to an error or to a request whose counts and lengths
    /// are within limits, never a panic.
    #[test]
    fn command_body_decoder_is_total(
        args in prop::collection::vec(bytes(), 1..8),
        garbage in prop::collection::vec(any::<u8>(), 0..256),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = Vec::new();
        native::encode_command(&mut buf, 3, &args);
        let (f, n) = native::decode_request_frame(&buf).unwrap().unwrap();
        prop_assert_eq!(n, buf.len());
        let NativeRequest::Command { args: got } = f.request else {
            panic!("not COMMAND")
        };
        prop_assert_eq!(got.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), args.clone());
        let at = cut.index(buf.len());
        prop_assert_eq!(native::decode_request_frame(&buf[..at]), Ok(None));
        // Random body behind a valid COMMAND header.
        let mut g = buf[..12].to_vec();
        g.extend_from_slice(&(garbage.len() as u32).to_be_bytes());
        g.extend_from_slice(&garbage);
        let _ = native::decode_request_frame(&g);
        fuzz_support::native_decode_stream(&g);
        // Mutations of the good frame.
        let mut m = buf.clone();
        for (i, b) in flips {
            let i = i.index(m.len());
            m[i] = b;
        }
        fuzz_support::native_decode_stream(&m);
    }
}
