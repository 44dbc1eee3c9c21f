//! `ringlet-linearize`: checks that a recorded history of single-key register operations
//! (get / set / delete / cas) is linearizable.
//!
//! How it works: the history is split per key (linearizability is P-compositional: a history
//! is linearizable iff each key's sub-history is), and each key is checked with the
//! Wing–Gong search as improved by Lowe and used by Porcupine: walk the time-ordered list of
//! call/return events, tentatively linearize any call whose model step succeeds, backtrack
//! when a return is reached whose call was not linearized, and memoize (set of linearized
//! ops, register state) pairs already explored so equivalent branches are cut.
//!
//! Operations that never completed (timeouts: outcome unknown) get a return time of +∞: they
//! may take effect at any point after their invocation, or never (linearized at the very end,
//! where nothing observes them). Reads with unknown outcome carry no information and are
//! dropped.
//!
//! Goals: exact answer for the histories our simulator and multi-process tests produce;
//! a step budget so a pathological history reports `Unknown` instead of hanging.
//! Non-goals: multi-key transactions, other data types.
//!
//! Modules: all here. [`check_history_json`] reads the JSON format real tests write.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use thiserror::Error;

/// One operation of a history. Times are any monotonic clock (ms, ns, or a global event
/// counter); an op `a` precedes `b` iff `a.complete < b.invoke`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub client: u64,
    pub key: String,
    pub invoke: u64,
    /// `None`: outcome unknown (timed out, ambiguous).
    pub complete: Option<u64>,
    #[serde(flatten)]
    pub kind: OpKind,
}

/// What an operation did and observed. Values are strings (`None`: absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum OpKind {
    Get {
        result: Option<String>,
    },
    Set {
        value: String,
    },
    Delete,
    /// Compare-and-set: if the register equals `expected`, set it to `new`. `ok` is the
    /// observed outcome, `None` if unknown.
    Cas {
        expected: Option<String>,
        new: Option<String>,
        ok: Option<bool>,
    },
}

/// A history: the JSON file format of [`check_history_json`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub ops: Vec<Op>,
}

/// Result for one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Linearizable,
    Violation,
    /// The search exceeded its budget.
    Unknown,
}

/// Result for a whole history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub keys: usize,
    pub ops: usize,
    pub violations: Vec<String>,
    pub unknown: Vec<String>,
}

impl Report {
    /// No violation found (keys past the budget are not violations, but are listed).
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }
}

#[derive(Debug, Error)]
pub enum Error {
    #[error("reading history: {0}")]
    Io(#[from] std::io::Error),
    #[error("parsing history: {0}")]
    Json(#[from] serde_json::Error),
    #[error("op {index}: completes before it is invoked")]
    Malformed { index: usize },
    #[error("history has {0} ops, more than the {OPS_MAX} this checker accepts")]
    TooLarge(usize),
}

/// Most ops in one history file (bounds memory before the search starts).
pub const OPS_MAX: usize = 10_000_000;
/// Default search budget per key, in model steps.
pub const DEFAULT_BUDGET: u64 = 5_000_000;

/// Read a JSON history (`{"ops": [...]}`) and check it.
///
/// # Errors
/// I/O, JSON, or malformed ops.
pub fn check_history_json(path: impl AsRef<std::path::Path>) -> Result<Report, Error> {
    let text = std::fs::read_to_string(path)?;
    let h: History = serde_json::from_str(&text)?;
    check_history(&h.ops, DEFAULT_BUDGET)
}

/// Check a history, per key, with `budget` model steps per key.
///
/// # Errors
/// An op that completes before it is invoked, or too many ops.
pub fn check_history(ops: &[Op], budget: u64) -> Result<Report, Error> {
    if ops.len() > OPS_MAX {
        return Err(Error::TooLarge(ops.len()));
    }
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for (index, op) in ops.iter().enumerate() {
        if op.complete.is_some_and(|c| c < op.invoke) {
            return Err(Error::Malformed { index });
        }
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut report = Report {
        keys: by_key.len(),
        ops: ops.len(),
        ..Report::default()
    };
    for (key, ops) in by_key {
        match check_key(&ops, budget) {
            Outcome::Linearizable => {}
            Outcome::Violation => report.violations.push(key.to_string()),
            Outcome::Unknown => report.unknown.push(key.to_string()),
        }
    }
    Ok(report)
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Get(u32),
    Set(u32),
    Cas {
        expected: u32,
        new: u32,
        ok: Option<bool>,
    },
}

/// Register model over interned values (0 = absent). Returns the next state if the op is
/// legal in `state`.
fn apply(state: u32, step: Step) -> Option<u32> {
    match step {
        Step::Get(v) => (v == state).then_some(state),
        Step::Set(v) => Some(v),
        Step::Cas { expected, new, ok } => match ok {
            Some(true) => (state == expected).then_some(new),
            Some(false) => (state != expected).then_some(state),
            None => Some(if state == expected { new } else { state }),
        },
    }
}

const NIL: usize = usize::MAX;

#[derive(Clone, Debug)]
struct Node {
    op: usize,
    is_call: bool,
    /// For a call: the index of its return node.
    partner: usize,
    prev: usize,
    next: usize,
}

/// Check one key's operations.
pub fn check_key(ops: &[&Op], budget: u64) -> Outcome {
    // Intern values; drop unknown reads.
    let mut intern: HashMap<Option<String>, u32> = HashMap::new();
    intern.insert(None, 0);
    let mut id = |v: Option<&str>| -> u32 {
        let n = intern.len() as u32;
        *intern.entry(v.map(String::from)).or_insert(n)
    };
    let mut steps: Vec<Step> = Vec::new();
    let mut times: Vec<(u64, u64)> = Vec::new();
    for op in ops {
        let s = match &op.kind {
            OpKind::Get { result } => {
                if op.complete.is_none() {
                    continue;
                }
                Step::Get(id(result.as_deref()))
            }
            OpKind::Set { value } => Step::Set(id(Some(value))),
            OpKind::Delete => Step::Set(0),
            OpKind::Cas { expected, new, ok } => Step::Cas {
                expected: id(expected.as_deref()),
                new: id(new.as_deref()),
                ok: if op.complete.is_none() { None } else { *ok },
            },
        };
        steps.push(s);
        times.push((op.invoke, op.complete.unwrap_or(u64::MAX)));
    }
    let n = steps.len();
    if n == 0 {
        return Outcome::Linearizable;
    }
    // Events sorted by time; at equal times calls come first (treated as concurrent).
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, (inv, comp)) in times.iter().enumerate() {
        events.push((*inv, true, i));
        events.push((*comp, false, i));
    }
    events.sort_by_key(|(t, is_call, i)| (*t, !*is_call, *i));
    // Node 0 is the head sentinel.
    let mut nodes: Vec<Node> = Vec::with_capacity(2 * n + 1);
    nodes.push(Node {
        op: NIL,
        is_call: false,
        partner: NIL,
        prev: NIL,
        next: NIL,
    });
    let mut return_of = vec![NIL; n];
    for (k, (_, is_call, op)) in events.iter().enumerate() {
        let idx = k + 1;
        nodes.push(Node {
            op: *op,
            is_call: *is_call,
            partner: NIL,
            prev: idx - 1,
            next: if k + 1 < events.len() { idx + 1 } else { NIL },
        });
        if !is_call {
            return_of[*op] = idx;
        }
    }
    nodes[0].next = 1;
    for node in nodes.iter_mut().skip(1) {
        if node.is_call {
            node.partner = return_of[node.op];
        }
    }
    let lift = |nodes: &mut Vec<Node>, c: usize| {
        let r = nodes[c].partner;
        for x in [c, r] {
            let (p, nx) = (nodes[x].prev, nodes[x].next);
            nodes[p].next = nx;
            if nx != NIL {
                nodes[nx].prev = p;
            }
        }
    };
    let unlift = |nodes: &mut Vec<Node>, c: usize| {
        let r = nodes[c].partner;
        for x in [r, c] {
            let (p, nx) = (nodes[x].prev, nodes[x].next);
            nodes[p].next = x;
            if nx != NIL {
                nodes[nx].prev = x;
            }
        }
    };
    let words = n.div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, u32)> = HashSet::new();
    let mut stack: Vec<(usize, u32)> = Vec::new();
    let mut state: u32 = 0;
    let mut entry = nodes[0].next;
    let mut spent: u64 = 0;
    while nodes[0].next != NIL {
        spent += 1;
        if spent > budget {
            return Outcome::Unknown;
        }
        if entry == NIL {
            // Every remaining call was tried; backtrack (only reachable via +∞ returns).
            match stack.pop() {
                Some((c, s)) => {
                    state = s;
                    let op = nodes[c].op;
                    linearized[op / 64] &= !(1u64 << (op % 64));
                    unlift(&mut nodes, c);
                    entry = nodes[c].next;
                    continue;
                }
                None => return Outcome::Violation,
            }
        }
        let node = nodes[entry].clone();
        if node.is_call {
            if let Some(next_state) = apply(state, steps[node.op]) {
                let mut bits = linearized.clone();
                bits[node.op / 64] |= 1u64 << (node.op % 64);
                if cache.insert((bits.clone(), next_state)) {
                    stack.push((entry, state));
                    state = next_state;
                    linearized = bits;
                    lift(&mut nodes, entry);
                    entry = nodes[0].next;
                    continue;
                }
            }
            entry = node.next;
        } else {
            // A return whose call is not linearized yet: undo the last choice.
            match stack.pop() {
                Some((c, s)) => {
                    state = s;
                    let op = nodes[c].op;
                    linearized[op / 64] &= !(1u64 << (op % 64));
                    unlift(&mut nodes, c);
                    entry = nodes[c].next;
                }
                None => return Outcome::Violation,
            }
        }
    }
    Outcome::Linearizable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: u64, inv: u64, comp: Option<u64>, kind: OpKind) -> Op {
        Op {
            client,
            key: "k".into(),
            invoke: inv,
            complete: comp,
            kind,
        }
    }
    fn set(v: &str) -> OpKind {
        OpKind::Set { value: v.into() }
    }
    fn get(v: Option<&str>) -> OpKind {
        OpKind::Get {
            result: v.map(String::from),
        }
    }
    fn check(ops: &[Op]) -> Outcome {
        let refs: Vec<&Op> = ops.iter().collect();
        check_key(&refs, DEFAULT_BUDGET)
    }

    #[test]
    fn sequential_ok_and_stale_read_violates() {
        let ok = [
            op(1, 0, Some(1), set("a")),
            op(2, 2, Some(3), get(Some("a"))),
            op(1, 4, Some(5), set("b")),
            op(2, 6, Some(7), get(Some("b"))),
        ];
        assert_eq!(check(&ok), Outcome::Linearizable);
        let stale = [
            op(1, 0, Some(1), set("a")),
            op(1, 2, Some(3), set("b")),
            op(2, 4, Some(5), get(Some("a"))),
        ];
        assert_eq!(check(&stale), Outcome::Violation);
    }

    #[test]
    fn concurrent_writes_either_order() {
        let h = [
            op(1, 0, Some(10), set("a")),
            op(2, 1, Some(9), set("b")),
            op(3, 11, Some(12), get(Some("a"))),
            op(3, 13, Some(14), get(Some("a"))),
        ];
        assert_eq!(check(&h), Outcome::Linearizable);
        // But two later reads cannot flip back and forth.
        let flip = [
            op(1, 0, Some(10), set("a")),
            op(2, 1, Some(9), set("b")),
            op(3, 11, Some(12), get(Some("a"))),
            op(3, 13, Some(14), get(Some("b"))),
        ];
        assert_eq!(check(&flip), Outcome::Violation);
    }

    #[test]
    fn unknown_write_may_apply_late_or_never() {
        let late = [
            op(1, 0, None, set("a")),
            op(2, 5, Some(6), get(None)),
            op(2, 7, Some(8), get(Some("a"))),
        ];
        assert_eq!(check(&late), Outcome::Linearizable);
        let never = [op(1, 0, None, set("a")), op(2, 5, Some(6), get(None))];
        assert_eq!(check(&never), Outcome::Linearizable);
        // An unknown write cannot be read before it was invoked.
        let early = [op(2, 0, Some(1), get(Some("a"))), op(1, 2, None, set("a"))];
        assert_eq!(check(&early), Outcome::Violation);
        // Nor take effect twice around another write.
        let twice = [
            op(1, 0, None, set("a")),
            op(2, 1, Some(2), get(Some("a"))),
            op(3, 3, Some(4), set("b")),
            op(2, 5, Some(6), get(Some("a"))),
        ];
        assert_eq!(check(&twice), Outcome::Violation);
    }

    #[test]
    fn deletes_and_cas() {
        let h = [
            op(1, 0, Some(1), set("a")),
            op(1, 2, Some(3), OpKind::Delete),
            op(2, 4, Some(5), get(None)),
            op(
                1,
                6,
                Some(7),
                OpKind::Cas {
                    expected: None,
                    new: Some("c".into()),
                    ok: Some(true),
                },
            ),
            op(
                2,
                8,
                Some(9),
                OpKind::Cas {
                    expected: None,
                    new: Some("d".into()),
                    ok: Some(false),
                },
            ),
            op(2, 10, Some(11), get(Some("c"))),
        ];
        assert_eq!(check(&h), Outcome::Linearizable);
        let bad = [
            op(1, 0, Some(1), set("a")),
            op(
                1,
                2,
                Some(3),
                OpKind::Cas {
                    expected: Some("z".into()),
                    new: Some("c".into()),
                    ok: Some(true),
                },
            ),
        ];
        assert_eq!(check(&bad), Outcome::Violation);
    }

    #[test]
    fn budget_reports_unknown() {
        // Many concurrent writes and a read of a value that never existed: the search must
        // explore many orders before failing; a tiny budget stops it.
        let mut h: Vec<Op> = (0..12)
            .map(|i| op(i, 0, Some(100), set(&format!("v{i}"))))
            .collect();
        h.push(op(99, 101, Some(102), get(Some("nope"))));
        let refs: Vec<&Op> = h.iter().collect();
        assert_eq!(check_key(&refs, 50), Outcome::Unknown);
        assert_eq!(check_key(&refs, DEFAULT_BUDGET), Outcome::Violation);
    }

    #[test]
    fn per_key_and_json() {
        let mut ops = vec![
            op(1, 0, Some(1), set("a")),
            op(2, 2, Some(3), get(Some("a"))),
        ];
        let mut other = op(1, 4, Some(5), get(Some("zzz")));
        other.key = "other".into();
        ops.push(other);
        let h = History { ops };
        let dir = std::env::temp_dir().join(format!("ringlet-lin-{}.json", std::process::id()));
        std::fs::write(&dir, serde_json::to_string(&h).unwrap()).unwrap();
        let r = check_history_json(&dir).unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(r.keys, 2);
        assert_eq!(r.violations, vec!["other".to_string()]);
        assert!(!r.is_ok());
        let bad = [op(1, 5, Some(1), set("a"))];
        assert!(matches!(
            check_history(&bad, 10),
            Err(Error::Malformed { .. })
        ));
    }
}
