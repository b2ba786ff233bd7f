//! Linearizability (Herlihy & Wing 1990) of the fenced keys and of the elections, checked by
//! the Wing–Gong search with Lowe's memoization of (linearized set, state) ("Testing for
//! linearizability", 2017), the algorithm of Knossos and Porcupine.
//!
//! The search is P-compositional (Horn & Kroening 2015): linearizability is local, so each
//! key and each election is checked on its own, which keeps every search small.
//!
//! An indeterminate operation may take effect at any point after its invocation, or never:
//! it is given an infinite completion time, and the search succeeds as soon as every
//! operation with a definite answer is linearized. A definite failure did not take effect and
//! is left out (except `stale-token`, which is an observation: the key held a higher token).

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;

use tenure_proto::Reason;

use crate::history::{Kind, Micros, Op, Outcome, Value};

/// A sequential specification.
pub trait Model {
    /// The object's state.
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// The initial state.
    fn init(&self) -> Self::State;
    /// The state after `op` from `state`, or `None` if `op` cannot happen there with the
    /// answer it got.
    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State>;
}

/// One operation as the search sees it.
struct Entry<'a> {
    op: &'a Op,
    call: Micros,
    /// `Micros::MAX` for indeterminate operations.
    ret: Micros,
}

/// The search's answer for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Linearity {
    /// A linearization exists.
    Linearizable,
    /// None exists. `stuck` is the operation whose answer no order could explain, at the
    /// deepest point the search reached, with the state there.
    Violation {
        /// Description for people.
        explanation: String,
    },
    /// The search gave up after its step budget (reported as inconclusive, not as a pass).
    Unknown {
        /// Steps taken.
        steps: u64,
    },
}

/// Most search steps per object before the answer is `Unknown`.
pub const STEPS_MAX: u64 = 20_000_000;

/// Most memoized (linearized set, state) pairs per object before the answer is `Unknown`
/// (24 bytes each).
pub const CACHE_MAX: usize = 4_000_000;

/// A 128-bit Zobrist key per operation: the linearized set is the XOR of its members' keys,
/// updated in O(1) per step instead of cloning a bit set. With the state's 64-bit hash this
/// makes a 192-bit memo key; a collision (negligible odds) could only prune a branch the
/// search had not seen.
fn zobrist(i: usize) -> (u64, u64) {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix((i as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(1));
    (a, mix(a ^ 0x5851_f42d_4c95_7f2d))
}

fn state_hash<S: Hash>(s: &S) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// Check one object's operations against `model`.
pub fn check<M: Model>(model: &M, ops: &[&Op]) -> Linearity {
    let mut entries: Vec<Entry> = ops
        .iter()
        .map(|op| Entry {
            op,
            call: op.invoke,
            ret: match op.outcome {
                Outcome::Indeterminate { .. } => Micros::MAX,
                _ => op.complete.max(op.invoke),
            },
        })
        .collect();
    entries.sort_by_key(|e| (e.call, e.ret));
    let n = entries.len();
    if n == 0 {
        return Linearity::Linearizable;
    }
    // Events: a call before a return at the same instant, so that touching operations
    // count as concurrent (the permissive reading).
    let mut events: Vec<(Micros, bool, usize)> = Vec::with_capacity(2 * n);
    for (i, e) in entries.iter().enumerate() {
        events.push((e.call, false, i));
        events.push((e.ret, true, i));
    }
    events.sort_by_key(|&(t, is_ret, i)| (t, is_ret, i));
    // A doubly linked list over the events; node k is events[k], with a sentinel head at
    // index 2n.
    let len = events.len();
    let head = len;
    let mut next = vec![usize::MAX; len + 1];
    let mut prev = vec![usize::MAX; len + 1];
    let mut ret_node = vec![0usize; n];
    let mut call_node = vec![0usize; n];
    let mut last = head;
    for (k, &(_, is_ret, i)) in events.iter().enumerate() {
        next[last] = k;
        prev[k] = last;
        last = k;
        if is_ret {
            ret_node[i] = k;
        } else {
            call_node[i] = k;
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, k: usize| {
        let (p, nx) = (prev[k], next[k]);
        next[p] = nx;
        if nx != usize::MAX {
            prev[nx] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, k: usize| {
        let (p, nx) = (prev[k], next[k]);
        next[p] = k;
        if nx != usize::MAX {
            prev[nx] = k;
        }
    };

    let mut state = model.init();
    let keys: Vec<(u64, u64)> = (0..n).map(zobrist).collect();
    let mut bits: (u64, u64) = (0, 0);
    let mut cache: HashSet<(u64, u64, u64)> = HashSet::new();
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut cursor = next[head];
    let mut steps: u64 = 0;
    let mut deepest: (usize, usize, String) = (0, usize::MAX, String::new());
    loop {
        steps += 1;
        if steps > STEPS_MAX || cache.len() > CACHE_MAX {
            return Linearity::Unknown { steps };
        }
        if cursor == usize::MAX {
            return Linearity::Linearizable;
        }
        let (_, is_ret, i) = events[cursor];
        if is_ret && entries[i].ret == Micros::MAX {
            // Only indeterminate operations are left: they never took effect.
            return Linearity::Linearizable;
        }
        if !is_ret {
            if let Some(new_state) = model.step(&state, entries[i].op) {
                let new_bits = (bits.0 ^ keys[i].0, bits.1 ^ keys[i].1);
                if cache.insert((new_bits.0, new_bits.1, state_hash(&new_state))) {
                    stack.push((i, state));
                    state = new_state;
                    bits = new_bits;
                    unlink(&mut next, &mut prev, call_node[i]);
                    unlink(&mut next, &mut prev, ret_node[i]);
                    cursor = next[head];
                    continue;
                }
            }
            cursor = next[cursor];
            continue;
        }
        // A definite operation's return was reached before it could be linearized.
        if stack.len() >= deepest.0 && (stack.len() > deepest.0 || deepest.1 == usize::MAX) {
            deepest = (stack.len(), i, format!("{state:?}"));
        }
        let Some((j, old)) = stack.pop() else {
            break;
        };
        state = old;
        bits = (bits.0 ^ keys[j].0, bits.1 ^ keys[j].1);
        relink(&mut next, &mut prev, ret_node[j]);
        relink(&mut next, &mut prev, call_node[j]);
        cursor = next[call_node[j]];
    }
    let (depth, i, st) = deepest;
    let stuck = entries[i].op;
    let concurrent: Vec<String> = entries
        .iter()
        .filter(|e| e.op.id != stuck.id && e.call <= stuck.complete && e.ret >= stuck.invoke)
        .take(8)
        .map(|e| format!("    concurrent: {}", e.op))
        .collect();
    Linearity::Violation {
        explanation: format!(
            "no linearization: at best {depth} of {n} operations ordered, then no order \
             explains\n    {stuck}\n    in state {st}\n{}",
            concurrent.join("\n")
        ),
    }
}

/// A fenced key: the stored value and the token it was written with.
pub struct FencedKey;

impl Model for FencedKey {
    /// (value, token) of the stored value.
    type State = Option<(String, u64)>;

    fn init(&self) -> Self::State {
        None
    }

    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State> {
        let stored_token = state.as_ref().map_or(0, |s| s.1);
        match (&op.kind, &op.outcome) {
            (Kind::Put { value, token, .. }, Outcome::Ok(_))
            | (Kind::Put { value, token, .. }, Outcome::Indeterminate { .. }) => {
                // Equal tokens pass: one leader writes many times under its token. An
                // indeterminate put whose token is stale here would have been rejected,
                // which is the same as never taking effect; the search covers that case.
                (*token >= stored_token).then(|| Some((value.clone(), *token)))
            }
            (Kind::Put { token, .. }, Outcome::Fail { reason, .. })
                if *reason == Reason::StaleToken =>
            {
                // The rejection is an observation: the key held a higher token.
                (*token < stored_token).then(|| state.clone())
            }
            (Kind::Get { .. }, Outcome::Ok(Value::Read(read))) => {
                let seen = read.as_ref().map(|(v, t, _)| (v.clone(), *t));
                (seen == *state).then(|| state.clone())
            }
            _ => Some(state.clone()),
        }
    }
}

/// An election: its latest token and who leads under it (`None` once that leader ended).
///
/// Leadership also changes without any client operation (a session expires, a queued
/// candidate is promoted), so the model lets the election move to any *higher* token with
/// any leader whenever an observation needs it; what it forbids is going back: a lower token
/// than one already observed, two sessions under one token, or a leader under a token whose
/// leadership was seen to end.
pub struct Election;

impl Election {
    fn observe(state: &(u64, Option<u64>), session: u64, token: u64) -> Option<(u64, Option<u64>)> {
        use std::cmp::Ordering::*;
        match token.cmp(&state.0) {
            Less => None,
            Equal => (state.1 == Some(session)).then_some(*state),
            Greater => Some((token, Some(session))),
        }
    }
}

impl Model for Election {
    type State = (u64, Option<u64>);

    fn init(&self) -> Self::State {
        (0, None)
    }

    fn step(&self, state: &Self::State, op: &Op) -> Option<Self::State> {
        match (&op.kind, &op.outcome) {
            (Kind::Campaign { session, .. }, Outcome::Ok(Value::Token(t))) => {
                Election::observe(state, *session, *t)
            }
            (Kind::Leader { .. }, Outcome::Ok(Value::Leader(Some((s, t))))) => {
                Election::observe(state, *s, *t)
            }
            (Kind::Leader { .. }, Outcome::Ok(Value::Leader(None))) => Some((state.0, None)),
            (Kind::Resign { session, .. }, Outcome::Ok(_)) => {
                if state.1 == Some(*session) {
                    Some((state.0, None))
                } else {
                    Some(*state)
                }
            }
            _ => Some(*state),
        }
    }
}

/// The verdict of the linearizability checker over a whole history.
#[derive(Debug, Clone)]
pub struct LinearReport {
    /// Objects checked.
    pub objects: usize,
    /// Violations, one explanation each.
    pub violations: Vec<String>,
    /// Objects whose search ran out of budget.
    pub unknown: Vec<String>,
}

/// Check every fenced key and every election of `history`, each on its own.
pub fn check_history(history: &[Op]) -> LinearReport {
    let mut keys: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    let mut elections: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history {
        let included = match &op.outcome {
            Outcome::Ok(_) => true,
            Outcome::Indeterminate { .. } => matches!(op.kind, Kind::Put { .. }),
            Outcome::Fail { reason, .. } => *reason == Reason::StaleToken,
        };
        if !included {
            continue;
        }
        match &op.kind {
            Kind::Put { key, .. } | Kind::Get { key } => keys.entry(key).or_default().push(op),
            Kind::Campaign { election, .. }
            | Kind::Leader { election }
            | Kind::Resign { election, .. } => elections.entry(election).or_default().push(op),
            _ => {}
        }
    }
    let mut report = LinearReport {
        objects: keys.len() + elections.len(),
        violations: Vec::new(),
        unknown: Vec::new(),
    };
    for (key, ops) in &keys {
        match check(&FencedKey, ops) {
            Linearity::Linearizable => {}
            Linearity::Violation { explanation } => {
                let mut text = format!("key {key:?}: {explanation}");
                let visible = visible_failed_writes(history, key);
                for why in visible.iter().take(3) {
                    text.push_str("\n    ");
                    text.push_str(why);
                }
                if visible.len() > 3 {
                    text.push_str(&format!(
                        "\n    … and {} more writes answered with a definite failure whose value was read later",
                        visible.len() - 3
                    ));
                }
                report.violations.push(text);
            }
            Linearity::Unknown { steps } => report
                .unknown
                .push(format!("key {key:?}: gave up after {steps} steps")),
        }
    }
    for (election, ops) in &elections {
        match check(&Election, ops) {
            Linearity::Linearizable => {}
            Linearity::Violation { explanation } => report
                .violations
                .push(format!("election {election:?}: {explanation}")),
            Linearity::Unknown { steps } => report.unknown.push(format!(
                "election {election:?}: gave up after {steps} steps"
            )),
        }
    }
    report
}

/// The most common way a wrong outcome shows: a read returns the value of a write that was
/// answered with a definite failure. Values are unique, so the read names the write.
pub fn visible_failed_writes(history: &[Op], key: &str) -> Vec<String> {
    let mut failed: BTreeMap<&str, &Op> = BTreeMap::new();
    for op in history {
        if let (Kind::Put { key: k, value, .. }, Outcome::Fail { .. }) = (&op.kind, &op.outcome) {
            if k == key {
                failed.insert(value, op);
            }
        }
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for op in history {
        if let (Kind::Get { key: k }, Outcome::Ok(Value::Read(Some((v, _, _))))) =
            (&op.kind, &op.outcome)
        {
            if k == key {
                if let Some(put) = failed.get(v.as_str()) {
                    if seen.insert(put.id) {
                        let reason = match &put.outcome {
                            Outcome::Fail { reason, .. } => reason.as_str(),
                            _ => "",
                        };
                        out.push(format!(
                            "the write {put}\n    was answered `{reason}` (a definite failure: \
                             it did not and will not take effect), yet the later read\n    {op}\n    \
                             returns its value"
                        ));
                    }
                }
            }
        }
    }
    out
}
