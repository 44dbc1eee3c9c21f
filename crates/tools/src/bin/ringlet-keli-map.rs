//! KELI's map matching, one-sided: the client half of `bench/keli_map.py` for Ringlet's
//! shared-memory reader. For each GPS point it runs `ShmReader::chase` of
//! `CHASE cl:<x>:<y> segments e0 e1 street DEPTH 2 FIELDS e0 e1 street lat lon name` (each hop
//! one validated read at the link's location hint, no round trip to the node) and picks the
//! nearest segment within the radius with the script's arithmetic, so its answers can be
//! compared with the script's reference exactly.
//!
//! Usage: ringlet-keli-map --socket PATH --points FILE [--rounds 3] [--cell-m 250]
//! [--radius-m 40]. FILE: one `lat lon` a line. Prints `round <µs per point ...>` per round,
//! then one `match <segment>\t<street>\t<mm>` or `none` per point (last round's answers),
//! then `stats <reader counters>`.

use ringlet_record::chase::{Chase, Stop};
use ringlet_shm::ShmReader;
use std::collections::HashMap;
use std::time::Instant;

/// `bench/keli_map.py`'s projection origin and scales (same expressions, same doubles).
const LAT0: f64 = 10.7769;
const LON0: f64 = 106.7009;
const M_PER_DEG_LAT: f64 = 110_540.0;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn m_per_deg_lon() -> f64 {
    // Python: 111_320.0 * math.cos(math.radians(LAT0)); radians = x * (pi / 180).
    111_320.0 * (LAT0 * (std::f64::consts::PI / 180.0)).cos()
}

fn to_xy(lat: f64, lon: f64) -> (f64, f64) {
    ((lon - LON0) * m_per_deg_lon(), (lat - LAT0) * M_PER_DEG_LAT)
}

/// The script's `point_segment_m`, operation for operation.
fn point_segment_m(p: (f64, f64), a: (f64, f64), b: (f64, f64)) -> f64 {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let ll = dx * dx + dy * dy;
    let t = if ll == 0.0 {
        0.0
    } else {
        (((p.0 - a.0) * dx + (p.1 - a.1) * dy) / ll).clamp(0.0, 1.0)
    };
    let (qx, qy) = (a.0 + t * dx - p.0, a.1 + t * dy - p.1);
    (qx * qx + qy * qy).sqrt()
}

type Answer = Option<(String, String, i64)>;

/// A CHASE entry's attributes (name, display value).
type Attrs = [(Vec<u8>, Vec<u8>)];

fn match_point(
    shm: &mut ShmReader,
    lat: f64,
    lon: f64,
    cell_m: f64,
    radius_m: f64,
    links: &[Vec<u8>],
) -> Answer {
    let p = to_xy(lat, lon);
    let cell = format!(
        "cl:{}:{}",
        (p.0 / cell_m).floor() as i64,
        (p.1 / cell_m).floor() as i64
    );
    let walk = Chase::new(
        cell.into_bytes(),
        links.to_vec(),
        2,
        10_000,
        Some(
            ["e0", "e1", "street", "lat", "lon", "name"]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect(),
        ),
    )
    .expect("chase arguments");
    let reply = shm.chase(walk, links).expect("one-sided chase");
    assert_eq!(reply.stop, Stop::Complete, "chase stopped early");
    let items: HashMap<&[u8], &Attrs> = reply
        .entries
        .iter()
        .map(|e| (e.key.as_slice(), e.attrs.as_slice()))
        .collect();
    let attr = |key: &[u8], name: &str| -> Option<String> {
        let a = items.get(key)?;
        a.iter()
            .find(|(n, _)| n == name.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    let node = |key: &str| -> Option<(f64, f64)> {
        let lat = attr(key.as_bytes(), "lat")?.parse().ok()?;
        let lon = attr(key.as_bytes(), "lon")?.parse().ok()?;
        Some(to_xy(lat, lon))
    };
    let mut top: Option<(f64, String, String)> = None;
    for e in reply.entries.iter().filter(|e| e.depth == 1) {
        let (Some(e0), Some(e1), Some(st)) = (
            attr(&e.key, "e0"),
            attr(&e.key, "e1"),
            attr(&e.key, "street"),
        ) else {
            continue;
        };
        let (Some(a), Some(b), Some(name)) = (node(&e0), node(&e1), attr(st.as_bytes(), "name"))
        else {
            continue;
        };
        let d = point_segment_m(p, a, b);
        let g = String::from_utf8_lossy(&e.key).into_owned();
        let better = match &top {
            None => true,
            Some((td, tg, _)) => d < *td || (d == *td && g < *tg),
        };
        if d <= radius_m && better {
            top = Some((d, g, name));
        }
    }
    top.map(|(d, g, name)| (g, name, (d * 1000.0).round_ties_even() as i64))
}

fn main() {
    let sock = arg("--socket").expect("--socket PATH");
    let points = arg("--points").expect("--points FILE");
    let rounds: usize = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(3);
    let cell_m: f64 = arg("--cell-m")
        .and_then(|v| v.parse().ok())
        .unwrap_or(250.0);
    let radius_m: f64 = arg("--radius-m")
        .and_then(|v| v.parse().ok())
        .unwrap_or(40.0);
    let pts: Vec<(f64, f64)> = std::fs::read_to_string(&points)
        .expect("points file")
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
        })
        .collect();
    let mut shm = ShmReader::connect(&sock).expect("shm reader");
    let links: Vec<Vec<u8>> = ["segments", "e0", "e1", "street"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    let mut answers = Vec::new();
    for _ in 0..rounds.max(1) {
        answers.clear();
        let mut us = Vec::with_capacity(pts.len());
        for &(lat, lon) in &pts {
            let t = Instant::now();
            answers.push(match_point(&mut shm, lat, lon, cell_m, radius_m, &links));
            us.push(t.elapsed().as_nanos() as f64 / 1e3);
        }
        let line: Vec<String> = us.iter().map(|v| format!("{v:.2}")).collect();
        println!("round {}", line.join(" "));
    }
    for a in &answers {
        match a {
            Some((g, name, mm)) => println!("match {g}\t{name}\t{mm}"),
            None => println!("none"),
        }
    }
    let st = shm.stats();
    println!(
        "stats hops at a hint {}, hints stale (table {}, entry {}, node {}), no hint {}, \
         lookups by key {} (the roots included)",
        st.hint_hits,
        st.hint_stale_table,
        st.hint_stale_entry,
        st.hint_stale_node,
        st.hint_missing,
        st.hint_lookups
    );
}
