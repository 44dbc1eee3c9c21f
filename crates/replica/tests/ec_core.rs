//! `ec:K+M` in the replica core, driven deterministically without faults: 5 nodes with PGs
//! of s = 3 data + d = 2 redundant nodes, memgests `rep:3`, `ec:3+2`, `ec:2+1`.
//!
//! * Sets and Deletes under ec commit and read back byte-identical; the engine-side store
//!   keeps a 16-byte pointer per ec key, never a second copy of the value.
//! * A Set of an existing key under another memgest (what `MEMGEST MOVE` does) works across
//!   none / rep / ec in both directions: the value reads back, and the old memgest's copies
//!   are retired — arena bytes freed, parity metadata dropped, rep replicas retired.
//! * Memory: arena + parity bytes per payload byte for ec:3+2 (printed; bounded by a
//!   generous ceiling, since the figure depends on fragmentation, not timing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use ringlet_control::{Action, ControlConfig, ControlPlane, Input as CpInput};
use ringlet_replica::{
    ClientOp, ClientReply, ClientRequest, Input, MemStore, Output, Replica, ReplicaConfig,
    ReplicaStore, ReqId,
};
use ringlet_types::{key_slot, MemgestId, MemgestKind, NodeId};
use std::collections::{BTreeMap, VecDeque};

struct World {
    now: u64,
    cp: ControlPlane,
    nodes: BTreeMap<NodeId, Replica<MemStore>>,
    queue: VecDeque<(NodeId, Input)>,
    replies: Vec<(u64, ClientReply)>,
    seq: u64,
    possible_loss: u64,
    /// ec updates sent to parity holders, and the delta bytes they carried.
    ec_updates: u64,
    ec_delta_bytes: u64,
    /// Drop every `Retire` this node sends (a move's second phase that never arrives).
    drop_retires_from: Option<NodeId>,
}

impl World {
    fn new() -> World {
        let cp = ControlPlane::new(ControlConfig {
            s: 3,
            d: 2,
            lease_ms: 1500,
            ..ControlConfig::default()
        })
        .unwrap();
        let mut nodes = BTreeMap::new();
        // Five active nodes and two spares.
        for i in 1..=7u32 {
            let cfg = ReplicaConfig {
                addr: format!("t:{i}"),
                heartbeat_interval_ms: 100,
                ec_chunk_bytes: 64,
                ec_arena_bytes: 1 << 20,
                ..ReplicaConfig::default()
            };
            nodes.insert(NodeId(i), Replica::new(NodeId(i), 1, cfg, MemStore::new()));
        }
        let mut w = World {
            now: 0,
            cp,
            nodes,
            queue: VecDeque::new(),
            replies: Vec::new(),
            seq: 0,
            possible_loss: 0,
            ec_updates: 0,
            ec_delta_bytes: 0,
            drop_retires_from: None,
        };
        w.run(300);
        let a = w.cp.step(w.now, CpInput::Bootstrap { active: 5 });
        w.actions(a);
        for (name, kind) in [
            ("r3", MemgestKind::Rep { r: 3 }),
            ("e32", MemgestKind::Ec { k: 3, m: 2 }),
            ("e21", MemgestKind::Ec { k: 2, m: 1 }),
        ] {
            let a = w.cp.step(
                w.now,
                CpInput::CreateMemgest {
                    name: name.into(),
                    kind,
                    evictable: None,
                },
            );
            w.actions(a);
        }
        w.run(500);
        w
    }

    fn memgest(&self, name: &str) -> MemgestId {
        self.cp.map().memgest_by_name(name).unwrap()
    }

    fn actions(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Publish(m) => {
                    for id in self.nodes.keys() {
                        self.queue.push_back((*id, Input::Map(m.clone())));
                    }
                }
                Action::SendMap { to, map } => self.queue.push_back((to, Input::Map(map))),
                Action::HeartbeatAck {
                    to,
                    incarnation,
                    sent_ms,
                    ..
                } => self.queue.push_back((
                    to,
                    Input::HeartbeatAck {
                        incarnation,
                        sent_ms,
                    },
                )),
                Action::Fenced { to, incarnation } => {
                    self.queue.push_back((to, Input::Fenced { incarnation }))
                }
                Action::Rejected(e) => panic!("control plane refused: {e}"),
            }
        }
    }

    fn deliver(&mut self) {
        let mut budget = 1_000_000;
        while let Some((to, input)) = self.queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            let Some(r) = self.nodes.get_mut(&to) else {
                continue; // crashed: messages to it are lost
            };
            let outs = r.step(self.now, input);
            r.check_invariants();
            for o in outs {
                match o {
                    Output::Send { to: t, msg } => {
                        if self.drop_retires_from == Some(to)
                            && matches!(msg.body, ringlet_replica::PeerBody::Retire { .. })
                        {
                            continue;
                        }
                        if let ringlet_replica::PeerBody::EcUpdate { delta, .. } = &msg.body {
                            self.ec_updates += 1;
                            self.ec_delta_bytes += delta.len() as u64;
                        }
                        self.queue.push_back((t, Input::Peer { from: to, msg }))
                    }
                    Output::Reply { client, reply } => self.replies.push((client, reply.body)),
                    Output::Control(i) => {
                        let a = self.cp.step(self.now, i);
                        self.actions(a);
                    }
                    Output::PossibleLoss { .. } => self.possible_loss += 1,
                }
            }
        }
    }

    /// Advance `ms` of virtual time in 10 ms ticks, delivering everything in between.
    fn run(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 10;
            let a = self.cp.step(self.now, CpInput::Tick);
            self.actions(a);
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                self.queue.push_back((id, Input::Tick));
            }
            self.deliver();
        }
    }

    /// One operation as a client runs it: `NotReady` (e.g. the first write of a replicated
    /// memgest waiting for its written mark) is retried, a bounded number of times.
    fn op(&mut self, op: ClientOp) -> ClientReply {
        for _ in 0..20 {
            match self.op_once(op.clone()) {
                ClientReply::NotReady => self.run(10),
                r => return r,
            }
        }
        panic!("still NotReady after 20 tries");
    }

    fn op_once(&mut self, op: ClientOp) -> ClientReply {
        self.seq += 1;
        let slot = key_slot(op.key());
        let map = self.cp.map().clone();
        let coord = map.coordinator(slot).unwrap();
        self.queue.push_back((
            coord,
            Input::Client {
                client: 7,
                req: ClientRequest {
                    id: ReqId {
                        client: 7,
                        seq: self.seq,
                    },
                    epoch: map.epoch,
                    op,
                },
            },
        ));
        self.replies.clear();
        for _ in 0..50 {
            self.deliver();
            if let Some((_, r)) = self.replies.pop() {
                return r;
            }
            self.run(10);
        }
        panic!("no reply");
    }

    fn set(&mut self, key: &str, value: &[u8], memgest: Option<MemgestId>) {
        let r = self.op(ClientOp::Set {
            kind: ringlet_types::ValueKind::String,
            expiry_ms: None,
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            memgest,
        });
        assert!(matches!(r, ClientReply::Written { .. }), "set {key}: {r:?}");
    }

    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.op(ClientOp::Get {
            key: key.as_bytes().to_vec(),
        }) {
            ClientReply::Value { value, .. } => value,
            r => panic!("get {key}: {r:?}"),
        }
    }

    fn coordinator(&self, key: &str) -> &Replica<MemStore> {
        let c = self.cp.map().coordinator(key_slot(key.as_bytes())).unwrap();
        &self.nodes[&c]
    }

    /// Nodes (other than the coordinator) whose store holds `key`.
    fn copies_elsewhere(&self, key: &str) -> usize {
        let c = self.cp.map().coordinator(key_slot(key.as_bytes())).unwrap();
        self.nodes
            .iter()
            .filter(|(id, r)| **id != c && r.store().get(key.as_bytes()).is_some())
            .count()
    }

    fn ec_totals(&self) -> ringlet_erasure::Accounting {
        self.nodes
            .values()
            .fold(ringlet_erasure::Accounting::default(), |a, r| {
                a.plus(&r.ec_accounting())
            })
    }
}

fn val(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 131 + j * 7 + j / 61) as u8).collect()
}

#[test]
fn ec_set_get_delete_read_back_byte_identical() {
    let mut w = World::new();
    let e32 = w.memgest("e32");
    let e21 = w.memgest("e21");
    for i in 0..60 {
        let m = if i % 2 == 0 { e32 } else { e21 };
        w.set(&format!("k{i}"), &val(i, 1 + i * 37 % 900), Some(m));
    }
    // Overwrite some (the old range is freed at commit), delete some.
    for i in (0..60).step_by(3) {
        let m = if i % 2 == 0 { e32 } else { e21 };
        w.set(&format!("k{i}"), &val(i + 1000, 5 + i * 13 % 700), Some(m));
    }
    for i in (0..60).step_by(5) {
        let r = w.op(ClientOp::Delete {
            key: format!("k{i}").into_bytes(),
        });
        assert!(matches!(r, ClientReply::Written { .. }));
    }
    for i in 0..60 {
        let want = if i % 5 == 0 {
            None
        } else if i % 3 == 0 {
            Some(val(i + 1000, 5 + i * 13 % 700))
        } else {
            Some(val(i, 1 + i * 37 % 900))
        };
        assert_eq!(w.get(&format!("k{i}")), want, "k{i}");
        // The store keeps a pointer, not the value.
        let e = w
            .coordinator(&format!("k{i}"))
            .store()
            .get(format!("k{i}").as_bytes());
        if let Some(v) = e.and_then(|e| e.value) {
            assert_eq!(v.len(), ringlet_replica::node::EC_PTR_BYTES);
        }
    }
}

#[test]
fn set_under_another_memgest_moves_across_none_rep_ec_both_ways() {
    let mut w = World::new();
    let r3 = w.memgest("r3");
    let e32 = w.memgest("e32");
    let e21 = w.memgest("e21");
    let none = MemgestId::NONE;
    // Every transition between the four memgests, in both directions.
    let path = [
        none, e32, r3, e21, none, r3, e32, e21, e32, none, e21, r3, none,
    ];
    for (step, m) in path.iter().enumerate() {
        let v = val(step, 100 + step * 50);
        w.set("mover", &v, Some(*m));
        w.run(1500); // repair rounds retire stale rep copies
        assert_eq!(w.get("mover"), Some(v.clone()), "step {step} -> {m:?}");
        let kind = w.cp.map().memgest_kind(*m);
        // Copies on other nodes: only rep:3 keeps any.
        let want_elsewhere = if matches!(kind, MemgestKind::Rep { .. }) {
            2
        } else {
            0
        };
        assert_eq!(w.copies_elsewhere("mover"), want_elsewhere, "step {step}");
        // Arena payload is exactly this value when it is ec, nothing otherwise; parity
        // holders describe exactly as much.
        let acct = w.ec_totals();
        let want_payload = if matches!(kind, MemgestKind::Ec { .. }) {
            v.len() as u64
        } else {
            0
        };
        assert_eq!(
            acct.payload_bytes, want_payload,
            "arena payload at step {step}"
        );
        let described: u64 = w
            .nodes
            .values()
            .map(|r| r.ec_described_payload_bytes())
            .sum();
        let holders = match kind {
            MemgestKind::Ec { m, .. } => u64::from(m),
            _ => 0,
        };
        assert_eq!(
            described,
            want_payload * holders,
            "parity metadata at step {step}"
        );
    }
    // Delete, then the key is gone everywhere.
    let r = w.op(ClientOp::Delete {
        key: b"mover".to_vec(),
    });
    assert!(matches!(r, ClientReply::Written { .. }));
    assert_eq!(w.get("mover"), None);
}

#[test]
fn ec_3_2_memory_per_payload_byte() {
    let mut w = World::new();
    let e32 = w.memgest("e32");
    let mut payload = 0u64;
    let n = 800;
    for i in 0..n {
        let len = 200 + (i * 7919) % 4000;
        payload += len as u64;
        w.set(&format!("m{i}"), &val(i, len), Some(e32));
    }
    let a = w.ec_totals();
    assert_eq!(a.payload_bytes, payload);
    let data_parity = (a.data_bytes + a.parity_bytes) as f64 / payload as f64;
    let with_meta = a.bytes_per_payload_byte().unwrap();
    eprintln!(
        "ec:3+2, {} keys, {payload} payload bytes: arena {} + parity {} + parity-side metadata {} bytes; (arena+parity)/payload = {data_parity:.3}, with metadata {with_meta:.3} (ideal 1 + M/K = 1.667)",
        n, a.data_bytes, a.parity_bytes, a.meta_bytes
    );
    assert!(data_parity < 1.8, "ec:3+2 must stay under 1.8x payload");
}

#[test]
fn takeover_rebuilds_the_index_from_parity_and_decodes_values() {
    let mut w = World::new();
    let e32 = w.memgest("e32");
    // One hash tag: every key in one slot, so one arena (one PG data position) holds more
    // keys than one metadata page (1,024) and the takeover reads several pages.
    let n = 1100;
    let key = |i: usize| format!("{{t}}{i}");
    for i in 0..n {
        w.set(&key(i), &val(i, 1 + (i * 613) % 500), Some(e32));
    }
    for i in (0..n).step_by(7) {
        let r = w.op(ClientOp::Delete {
            key: key(i).into_bytes(),
        });
        assert!(matches!(r, ClientReply::Written { .. }));
    }
    let want = |i: usize| (!i.is_multiple_of(7)).then(|| val(i, 1 + (i * 613) % 500));
    let slot = key_slot(key(0).as_bytes());
    let map = w.cp.map().clone();
    let victim = map.coordinator(slot).unwrap();
    // Crash the coordinator (data node): the spare takes its positions.
    w.nodes.remove(&victim);
    w.run(4000);
    let coord = w.cp.map().coordinator(slot).unwrap();
    assert_ne!(coord, victim);
    assert!(coord.0 >= 6, "a spare took over");
    for i in 0..n {
        assert_eq!(
            w.get(&key(i)),
            want(i),
            "{} after the data node failed",
            key(i)
        );
    }
    assert_eq!(
        w.possible_loss, 0,
        "one failure is within every memgest's tolerance"
    );
    let st = &w.nodes[&coord].stats;
    assert!(st.ec_takeovers > 0);
    eprintln!(
        "takeover: {} keys, on-demand decodes {}, decoded {} bytes, recoveries {}",
        n, st.ec_decodes_on_demand, st.ec_decoded_bytes, st.ec_recoveries_completed
    );
    // Let the background recovery finish, then lose a parity holder of that PG as well (the
    // second of M = 2 failures; no spare is left, so the position stays empty): every value
    // is still served. (Writes of that memgest wait for a replacement holder: the commit
    // rule needs all M.)
    w.run(3000);
    assert!(
        w.nodes[&coord].is_settled(),
        "{}",
        w.nodes[&coord].debug_unsettled()
    );
    let pg_holder = {
        let m = w.cp.map().clone();
        let p = m.placement.as_ref().unwrap();
        let r = p.range_of(slot).unwrap();
        p.parity(r.pg, 2)[0]
    };
    w.nodes.remove(&pg_holder);
    w.run(500);
    for i in 0..n {
        assert_eq!(
            w.get(&key(i)),
            want(i),
            "{} after a parity holder failed too",
            key(i)
        );
    }
}

/// Two data nodes of one PG fail at the same time (M = 2 for ec:3+2): each replacement must
/// decode with both parity holders (the other lost data chunk of a codeword is unavailable).
#[test]
fn two_data_nodes_of_a_pg_fail_at_once() {
    let mut w = World::new();
    let e32 = w.memgest("e32");
    let map = w.cp.map().clone();
    let p = map.placement.clone().unwrap();
    // Two hash tags whose slots belong to different data positions of the same PG.
    let pos = |tag: &str| {
        let r = p
            .range_of(key_slot(format!("{{{tag}}}").as_bytes()))
            .unwrap();
        (r.pg, r.data_index)
    };
    let a = "a0".to_string();
    let (pg, ia) = pos(&a);
    let b = (1..10_000)
        .map(|i| format!("b{i}"))
        .find(|t| {
            let (g, i) = pos(t);
            g == pg && i != ia
        })
        .unwrap();
    let n = 150;
    let key = |tag: &str, i: usize| format!("{{{tag}}}{i}");
    let e21 = w.memgest("e21");
    for i in 0..n {
        w.set(&key(&a, i), &val(i, 1 + (i * 389) % 700), Some(e32));
        w.set(&key(&b, i), &val(i + 7, 1 + (i * 211) % 700), Some(e32));
        // ec:2+1 keys in the same arenas' PG: two data failures exceed its tolerance.
        w.set(
            &format!("{{{a}}}w{i}"),
            &val(i + 3, 1 + (i * 97) % 300),
            Some(e21),
        );
        w.set(
            &format!("{{{b}}}w{i}"),
            &val(i + 5, 1 + (i * 89) % 300),
            Some(e21),
        );
    }
    let va = map.coordinator(key_slot(key(&a, 0).as_bytes())).unwrap();
    let vb = map.coordinator(key_slot(key(&b, 0).as_bytes())).unwrap();
    assert_ne!(va, vb);
    w.nodes.remove(&va);
    w.nodes.remove(&vb);
    // rep:3 and ec:2+1 in the same PGs lose more than they tolerate: their rebuilds give up
    // after rebuild_timeout_ms (20 s) with PossibleLoss; ec:3+2 must not lose anything.
    w.run(45_000);
    assert!(
        w.possible_loss > 0,
        "the weaker memgests reported their loss"
    );
    for (id, r) in &w.nodes {
        assert!(r.is_settled(), "node {id}: {}", r.debug_unsettled());
    }
    // ec:2+1 beyond its tolerance: each value reads back intact or not at all (the
    // undecodable ones were dropped and reported), never as wrong bytes.
    let mut kept = 0;
    for i in 0..n {
        for (tag, want) in [
            (&a, val(i + 3, 1 + (i * 97) % 300)),
            (&b, val(i + 5, 1 + (i * 89) % 300)),
        ] {
            if let Some(v) = w.get(&format!("{{{tag}}}w{i}")) {
                assert_eq!(v, want, "ec:2+1 key {{{tag}}}w{i} read back wrong bytes");
                kept += 1;
            }
        }
    }
    eprintln!(
        "ec:2+1 beyond tolerance: {kept} of {} values survived",
        2 * n
    );
    for i in 0..n {
        assert_eq!(
            w.get(&key(&a, i)),
            Some(val(i, 1 + (i * 389) % 700)),
            "{}",
            key(&a, i)
        );
        assert_eq!(
            w.get(&key(&b, i)),
            Some(val(i + 7, 1 + (i * 211) % 700)),
            "{}",
            key(&b, i)
        );
    }
    let m = w.cp.map().clone();
    for v in [va, vb] {
        assert!(!m.placement.as_ref().unwrap().members().contains(&v));
    }
    let decoded: u64 = w.nodes.values().map(|r| r.stats.ec_decoded_bytes).sum();
    assert!(decoded > 0, "values were decoded");
}

// ---------------------------------------------------------------------- TTLs on ec values

impl World {
    fn set_ttl(&mut self, key: &str, value: &[u8], memgest: Option<MemgestId>, x: Option<u64>) {
        let r = self.op(ClientOp::Set {
            kind: ringlet_types::ValueKind::String,
            expiry_ms: x,
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            memgest,
        });
        assert!(matches!(r, ClientReply::Written { .. }), "set {key}: {r:?}");
    }

    /// Value, expiry and version as the coordinator answers a Get.
    fn get_full(&mut self, key: &str) -> (Option<Vec<u8>>, Option<u64>, ringlet_types::Version) {
        match self.op(ClientOp::Get {
            key: key.as_bytes().to_vec(),
        }) {
            ClientReply::Value {
                value,
                expiry_ms,
                version,
                ..
            } => (value, expiry_ms, version),
            r => panic!("get {key}: {r:?}"),
        }
    }

    /// Lose the parity holder of `key`'s placement group (its replacement resyncs from the
    /// data nodes' snapshots), then crash `key`'s coordinator so that its replacement takes
    /// over from that holder; the new coordinator.
    fn resync_holder_then_take_over(&mut self, key: &str) -> NodeId {
        let slot = key_slot(key.as_bytes());
        let holder = {
            let m = self.cp.map().clone();
            let p = m.placement.as_ref().unwrap();
            let r = p.range_of(slot).unwrap();
            p.parity(r.pg, 1)[0]
        };
        self.nodes.remove(&holder);
        self.run(4000);
        let syncs: u64 = self.nodes.values().map(|r| r.stats.ec_holder_syncs).sum();
        assert!(syncs > 0, "the replacement holder resynced");
        let coord = self.crash_coordinator_of(key);
        assert!(self.nodes[&coord].stats.ec_takeovers > 0);
        coord
    }

    fn crash_coordinator_of(&mut self, key: &str) -> NodeId {
        let slot = key_slot(key.as_bytes());
        let victim = self.cp.map().coordinator(slot).unwrap();
        self.nodes.remove(&victim);
        self.run(4000);
        let coord = self.cp.map().coordinator(slot).unwrap();
        assert_ne!(coord, victim, "a spare took over");
        coord
    }

    fn meta_only_writes(&self) -> u64 {
        self.nodes
            .values()
            .map(|r| r.stats.ec_meta_only_writes)
            .sum()
    }
}

/// TTLs on ec values (docs/design/cluster-ec.md "TTLs"): a Set with an expiry commits under
/// both ec memgests, the expiry travels in the key metadata of every parity holder, and a
/// coordinator rebuilt by a spare from that metadata (takeover) answers the same expiry for
/// every key — including the ones whose TTL was changed (EXPIRE) or removed (PERSIST) by a
/// metadata-only update, and a key moved into ec with its TTL (MEMGEST MOVE). The active
/// expiry's `Expire` then deletes a due ec key through the ec delete path (parity metadata
/// dropped), and leaves a renewed one alone.
#[test]
fn ec_ttls_are_metadata_and_survive_a_takeover() {
    let mut w = World::new();
    let (e32, e21, r3) = (w.memgest("e32"), w.memgest("e21"), w.memgest("r3"));
    // One slot (hash tag): one coordinator, one arena per memgest.
    let key = |s: &str| format!("{{x}}{s}");
    let x0 = 10_000_000u64; // far in the virtual future: nothing expires by itself here
    w.set_ttl(&key("a"), &val(1, 700), Some(e32), Some(x0 + 1));
    w.set_ttl(&key("b"), &val(2, 90), Some(e21), Some(x0 + 2));
    w.set_ttl(&key("c"), &val(3, 300), Some(e32), None);
    w.set_ttl(&key("d"), &val(4, 40), Some(e32), Some(x0 + 4));
    // A rep:3 key with a TTL moved into ec:3+2 (what MEMGEST MOVE sends): TTL kept.
    w.set_ttl(&key("m"), &val(5, 120), Some(r3), Some(x0 + 5));
    let (v, _, _) = w.get_full(&key("m"));
    w.set_ttl(&key("m"), &v.unwrap(), Some(e32), Some(x0 + 5));
    assert_eq!(w.copies_elsewhere(&key("m")), 0, "rep copies retired");
    let before = w.ec_totals();
    let meta_only = w.meta_only_writes();
    // EXPIRE (same bytes, new expiry) and PERSIST (same bytes, no expiry): the front
    // rewrites the value it read; the core sends them as metadata-only updates.
    let (va, xa, ver_a) = w.get_full(&key("a"));
    assert_eq!(xa, Some(x0 + 1));
    w.set_ttl(&key("a"), va.as_ref().unwrap(), None, Some(x0 + 100));
    let (vd, _, _) = w.get_full(&key("d"));
    w.set_ttl(&key("d"), vd.as_ref().unwrap(), None, None);
    assert_eq!(
        w.meta_only_writes(),
        meta_only + 2,
        "EXPIRE/PERSIST were metadata-only"
    );
    let after = w.ec_totals();
    assert_eq!(
        (after.payload_bytes, after.data_bytes, after.parity_bytes),
        (before.payload_bytes, before.data_bytes, before.parity_bytes),
        "a metadata-only update allocates no range and changes no parity"
    );
    let (va2, xa2, ver_a2) = w.get_full(&key("a"));
    assert_eq!((va2, xa2), (va, Some(x0 + 100)));
    assert!(ver_a2 > ver_a, "a TTL change is a new version");
    // A different value is a rewrite (fresh range), still with its TTL.
    w.set_ttl(&key("c"), &val(6, 300), None, Some(x0 + 3));
    assert_eq!(w.meta_only_writes(), meta_only + 2);
    let want: Vec<(String, Vec<u8>, Option<u64>)> = vec![
        (key("a"), val(1, 700), Some(x0 + 100)),
        (key("b"), val(2, 90), Some(x0 + 2)),
        (key("c"), val(6, 300), Some(x0 + 3)),
        (key("d"), val(4, 40), None),
        (key("m"), val(5, 120), Some(x0 + 5)),
    ];
    for (k, v, x) in &want {
        let (gv, gx, _) = w.get_full(k);
        assert_eq!((gv.as_ref(), gx), (Some(v), *x), "{k} before the failure");
    }
    // The coordinator fails; a spare rebuilds the index from the parity holders' metadata.
    let coord = w.crash_coordinator_of(&key("a"));
    assert!(w.nodes[&coord].stats.ec_takeovers > 0);
    for (k, v, x) in &want {
        let (gv, gx, _) = w.get_full(k);
        assert_eq!((gv.as_ref(), gx), (Some(v), *x), "{k} after the takeover");
    }
    assert_eq!(w.possible_loss, 0);
    // Active expiry on the new coordinator: `Expire` at the current version deletes the ec
    // key (an ec delete: tombstone at the holders); at an older version it does nothing.
    let (_, _, ver_b) = w.get_full(&key("b"));
    let r = w.op(ClientOp::Expire {
        key: key("b").into_bytes(),
        version: ver_b,
    });
    assert!(matches!(r, ClientReply::Written { .. }), "{r:?}");
    assert_eq!(w.get_full(&key("b")).0, None);
    let r = w.op(ClientOp::Expire {
        key: key("a").into_bytes(),
        version: ver_a,
    });
    assert_eq!(r, ClientReply::Unchanged, "a renewed key is not expired");
    assert!(w.get_full(&key("a")).0.is_some());
    let payload: u64 = w
        .nodes
        .values()
        .map(|r| r.ec_described_payload_bytes())
        .sum();
    assert!(payload > 0);
    // EXPIRE on the new coordinator (after a takeover, once the arena recovered) is
    // metadata-only as well, and a second takeover keeps it.
    w.run(3000);
    let before = w.meta_only_writes();
    w.set_ttl(&key("c"), &val(6, 300), None, Some(x0 + 33));
    assert_eq!(w.meta_only_writes(), before + 1);
    assert_eq!(w.get_full(&key("c")).1, Some(x0 + 33));
}

/// A parity holder replaced by a spare resyncs from the data nodes' snapshots; the expiry
/// must come with the snapshot's key metadata, or a later takeover that reads that holder
/// (ec:2+1 has only one) would rebuild keys that never expire.
#[test]
fn ec_ttls_survive_a_holder_resync_then_a_takeover() {
    let mut w = World::new();
    let e21 = w.memgest("e21");
    let key = |i: usize| format!("{{y}}{i}");
    let x0 = 20_000_000u64;
    for i in 0..40 {
        let x = (i % 3 != 0).then_some(x0 + i as u64);
        w.set_ttl(&key(i), &val(i, 10 + i * 13), Some(e21), x);
    }
    w.resync_holder_then_take_over(&key(0));
    for i in 0..40 {
        let x = (i % 3 != 0).then_some(x0 + i as u64);
        let (v, gx, _) = w.get_full(&key(i));
        assert_eq!(
            (v, gx),
            (Some(val(i, 10 + i * 13)), x),
            "{} after resync + takeover",
            key(i)
        );
    }
}

/// Deletes made before a parity holder's resync survive a takeover that reads that holder
/// (ec:2+1 has only one): the data node's snapshot carries its tombstones, not only its live
/// keys. Without them the new coordinator had no tombstone for a deleted key (simulator
/// seeds 7330, 7334, 8247, 8723: "acknowledged write lost" for a delete), so an older copy of
/// the key elsewhere could come back.
#[test]
fn ec_deletes_survive_a_holder_resync_then_a_takeover() {
    let mut w = World::new();
    let e21 = w.memgest("e21");
    let key = |i: usize| format!("{{z}}{i}");
    for i in 0..30 {
        w.set(&key(i), &val(i, 20 + i * 7), Some(e21));
    }
    let mut deleted = Vec::new();
    for i in (0..30).step_by(3) {
        let r = w.op(ClientOp::Delete {
            key: key(i).into_bytes(),
        });
        let ClientReply::Written { version } = r else {
            panic!("delete {}: {r:?}", key(i));
        };
        deleted.push((i, version));
    }
    let coord = w.resync_holder_then_take_over(&key(0));
    for (i, v) in &deleted {
        let e = w.nodes[&coord].store().get(key(*i).as_bytes());
        assert!(
            e.as_ref()
                .is_some_and(|e| e.value.is_none() && e.version >= *v),
            "{}: the tombstone of its delete after resync + takeover, got {e:?}",
            key(*i)
        );
        assert_eq!(w.get(&key(*i)), None);
    }
    for i in (0..30).filter(|i| i % 3 != 0) {
        assert_eq!(w.get(&key(i)), Some(val(i, 20 + i * 7)), "{}", key(i));
    }
}

/// A Set moving a key from rep:3 to ec:2+1 reached the parity holder, but its coordinator
/// died before the move's second phase (retiring the old replicas' copies) got anywhere. The
/// spare taking over adopts the new version from the holder's metadata; it must retire the
/// old copies before serving, or two old replicas still form a quorum-read majority for the
/// previous version after the new one was read (simulator seed 8065).
#[test]
fn a_takeover_retires_old_replicas_of_an_adopted_move_before_serving() {
    let mut w = World::new();
    let (r3, e21) = (w.memgest("r3"), w.memgest("e21"));
    let k = "{m}1";
    w.set(k, b"old", Some(r3));
    let old = w.coordinator(k).store().get(k.as_bytes()).unwrap().version;
    let slot = key_slot(k.as_bytes());
    let coord = w.cp.map().coordinator(slot).unwrap();
    let with_old = |w: &World| {
        w.nodes
            .values()
            .filter(|r| {
                r.store()
                    .get(k.as_bytes())
                    .is_some_and(|e| e.version == old && e.memgest == r3)
            })
            .count()
    };
    assert_eq!(with_old(&w), 3);
    // A first write of e21 elsewhere: the memgest's `written` mark (the first ec write
    // waits for it with NotReady) is set before the raw move write below.
    w.set("{other}1", b"x", Some(e21));
    // The move write: its retires are lost, so it never commits (no reply).
    w.drop_retires_from = Some(coord);
    w.seq += 1;
    let map = w.cp.map().clone();
    w.queue.push_back((
        coord,
        Input::Client {
            client: 7,
            req: ClientRequest {
                id: ReqId {
                    client: 7,
                    seq: w.seq,
                },
                epoch: map.epoch,
                op: ClientOp::Set {
                    kind: ringlet_types::ValueKind::String,
                    expiry_ms: None,
                    key: k.as_bytes().to_vec(),
                    value: b"new".to_vec(),
                    memgest: Some(e21),
                },
            },
        },
    ));
    w.run(100);
    assert!(w.replies.is_empty(), "the move must not be acknowledged");
    assert_eq!(with_old(&w), 3, "no old replica retired yet");
    // The coordinator dies; step until its successor serves the range.
    w.nodes.remove(&coord);
    w.drop_retires_from = None;
    let mut served = false;
    for _ in 0..600 {
        w.run(10);
        let m = w.cp.map().clone();
        let Some(c) = m.coordinator(slot).filter(|c| *c != coord) else {
            continue;
        };
        if w.nodes[&c].ready_at(slot) == Some(0) {
            served = true;
            break;
        }
    }
    assert!(served, "a spare took over and serves the range");
    // Serving: the new version is what it answers...
    assert_eq!(w.get(k), Some(b"new".to_vec()));
    // ...so the old one must not be on a majority of the 3 rep positions any more.
    assert!(
        with_old(&w) <= 1,
        "{} old replicas still hold the previous version",
        with_old(&w)
    );
}

/// What an EXPIRE costs on an ec:3+2 key (printed; the assertions only pin the shape):
/// metadata-only, it sends each of the M = 2 holders one update with an empty delta and
/// allocates nothing; a rewrite of a new value of the same size sends a delta of the value's
/// size to each holder. `cargo test -p ringlet-replica --test ec_core ec_expire_cost --
/// --nocapture`.
#[test]
fn ec_expire_cost_is_metadata_only() {
    let mut w = World::new();
    let e32 = w.memgest("e32");
    for len in [1024usize, 16 * 1024] {
        let key = format!("{{c}}{len}");
        w.set_ttl(&key, &val(1, len), Some(e32), Some(1_000_000));
        let before = (w.ec_updates, w.ec_delta_bytes, w.ec_totals());
        w.set_ttl(&key, &val(1, len), None, Some(2_000_000)); // EXPIRE
        let expire = (w.ec_updates - before.0, w.ec_delta_bytes - before.1);
        let after = w.ec_totals();
        assert_eq!(expire.1, 0, "an EXPIRE sends no delta");
        assert_eq!(
            after.data_bytes, before.2.data_bytes,
            "and allocates no range"
        );
        let b = (w.ec_updates, w.ec_delta_bytes);
        w.set_ttl(&key, &val(2, len), None, Some(3_000_000)); // a new value
        let rewrite = (w.ec_updates - b.0, w.ec_delta_bytes - b.1);
        assert!(
            rewrite.1 >= 2 * len as u64,
            "a rewrite sends the value-sized delta"
        );
        eprintln!(
            "ec:3+2 {len} B value: EXPIRE = {} updates, {} delta bytes; rewrite = {} updates, {} delta bytes",
            expire.0, expire.1, rewrite.0, rewrite.1
        );
    }
}
