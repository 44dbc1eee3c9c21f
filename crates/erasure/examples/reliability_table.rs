//! Prints Ring appendix-style reliability/availability tables for a given MTTF and rebuild
//! time: `cargo run -p ringlet-erasure --example reliability_table -- <mttf_hours> <rebuild_hours>`.
use ringlet_erasure::reliability::{reliability, ModelParams};
use ringlet_types::MemgestKind;

fn main() {
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mttf = args.first().copied().unwrap_or(43_800.0);
    let rebuild = args.get(1).copied().unwrap_or(6.0);
    println!("MTTF {mttf} h, rebuild {rebuild} h (per RS node share), 1 year");
    println!(
        "{:<16} {:>12} {:>8} {:>10}",
        "scheme", "P(loss)", "nines", "avail 9s"
    );
    for (k, m) in [(2u8, 1u8), (3, 1), (3, 2), (4, 2)] {
        for s in u32::from(k)..=7 {
            let p = ModelParams::from_hours(s, mttf, rebuild);
            if let Ok(r) = reliability(MemgestKind::Ec { k, m }, &p) {
                println!(
                    "{:<16} {:>12.3e} {:>8.2} {:>10.2}",
                    format!("SRS({k},{m},{s})"),
                    r.annual_loss_probability,
                    r.nines,
                    r.availability_nines
                );
            }
        }
    }
    for kind in [
        MemgestKind::None,
        MemgestKind::Rep { r: 2 },
        MemgestKind::Rep { r: 3 },
        MemgestKind::Rep { r: 5 },
    ] {
        let p = ModelParams::from_hours(3, mttf, rebuild);
        if let Ok(r) = reliability(kind, &p) {
            println!(
                "{:<16} {:>12.3e} {:>8.2} {:>10.2}",
                format!("{kind} s=3"),
                r.annual_loss_probability,
                r.nines,
                r.availability_nines
            );
        }
    }
}
