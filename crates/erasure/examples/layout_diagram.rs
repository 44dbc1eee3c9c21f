//! Prints the SRS stripe layout as an ASCII table:
//! `cargo run -p ringlet-erasure --example layout_diagram -- K M s`.
use ringlet_erasure::layout::{CodewordId, DataChunk, Layout};

fn main() {
    let a: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let (k, m, s) = (
        a.first().copied().unwrap_or(3),
        a.get(1).copied().unwrap_or(1),
        a.get(2).copied().unwrap_or(2),
    );
    let Ok(l) = Layout::with_any_stretch(k, m, s, 4096) else {
        eprintln!("bad shape");
        return;
    };
    println!("SRS({k},{m},{s}): l = lcm(K,s) = {}, l/s = {} chunks per data node per stripe, l/K = {} codewords per stripe", l.l(), l.chunks_per_node(), l.codewords_per_stripe());
    println!("cell = cw<j>.d<p> : chunk is data position p of codeword j (stripe 0)");
    for node in 0..s {
        let cells: Vec<String> = (0..u64::from(l.chunks_per_node()))
            .map(|c| {
                let (cw, p) = l.locate_chunk(DataChunk { node, chunk: c }).unwrap_or((
                    CodewordId {
                        stripe: 0,
                        codeword: 0,
                    },
                    0,
                ));
                format!("cw{}.d{}", cw.codeword, p)
            })
            .collect();
        println!("  data node {node}  | {} |", cells.join(" | "));
    }
    for q in 0..m {
        let cells: Vec<String> = (0..l.codewords_per_stripe())
            .map(|j| format!("cw{j}.p{q}"))
            .collect();
        println!("  parity   {q}  | {} |", cells.join(" | "));
    }
    for j in 0..l.codewords_per_stripe() {
        let mem = l
            .members(CodewordId {
                stripe: 0,
                codeword: j,
            })
            .unwrap_or_default();
        let ms: Vec<String> = mem
            .iter()
            .map(|c| format!("n{}c{}", c.node, c.chunk))
            .collect();
        println!(
            "  codeword {j}: data [{}] + parity on holders 0..{m}",
            ms.join(", ")
        );
    }
    println!(
        "max chunks of one codeword on one data node: {}; node failures always tolerated: {}",
        l.max_chunks_per_node_in_codeword(),
        l.node_failures_tolerated()
    );
}
