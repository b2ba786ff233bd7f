//! The checkers other than linearizability, one property each, over the recorded history.
//!
//! - [`fencing`]: DESIGN rule 3 — per election, tokens strictly increase with leadership
//!   changes (one session per token, and a later observation never shows a lower token); per
//!   key, no write is accepted with a token below one accepted before it (by log index), and
//!   every read names a write with the token that write carried.
//! - [`holders`]: DESIGN rule 4 — no two holders believe they lead one election at once. A
//!   holder believes from its campaign answer until the send time of its last acknowledged
//!   keepalive + TTL − drift margin (or until it resigns or revokes); all clients share one
//!   clock.
//! - [`convergence`]: after healing, every node has applied the same index and serves the
//!   same state.

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::drift::{holder_margin_us, DriftPpm, CLIENT_SCHEDULING_ALLOWANCE};

use crate::history::{Kind, Micros, Op, Outcome, Value};

/// DESIGN rule 4's margin for a holder of a `ttl_ms` session, as the client library
/// computes it: the documented drift bound ([`DriftPpm::DEFAULT`]) and the client's
/// scheduling allowance ([`CLIENT_SCHEDULING_ALLOWANCE`]), through the one formula.
pub fn drift_margin_us(ttl_ms: u64) -> Micros {
    let allowance_us = CLIENT_SCHEDULING_ALLOWANCE.as_micros() as u64;
    holder_margin_us(
        ttl_ms.saturating_mul(1_000),
        DriftPpm::DEFAULT,
        allowance_us,
    )
}

/// One checker's verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Checker name.
    pub name: &'static str,
    /// What it looked at (for the report).
    pub checked: String,
    /// Violations, explained.
    pub violations: Vec<String>,
    /// Inconclusive parts (reported, not counted as violations).
    pub unknown: Vec<String>,
}

impl Verdict {
    /// Whether it found nothing wrong.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Fencing tokens: DESIGN rule 3.
pub fn fencing(history: &[Op]) -> Verdict {
    let mut violations = Vec::new();
    // Per election: every (session, token) observation with its time window.
    let mut seen: BTreeMap<&str, Vec<(u64, u64, &Op)>> = BTreeMap::new();
    for op in history {
        match (&op.kind, &op.outcome) {
            (Kind::Campaign { election, session }, Outcome::Ok(Value::Token(t))) => {
                seen.entry(election).or_default().push((*session, *t, op));
            }
            (Kind::Leader { election }, Outcome::Ok(Value::Leader(Some((s, t))))) => {
                seen.entry(election).or_default().push((*s, *t, op));
            }
            _ => {}
        }
    }
    let mut observations = 0;
    for (election, obs) in &seen {
        observations += obs.len();
        let mut by_token: BTreeMap<u64, (u64, &Op)> = BTreeMap::new();
        for &(s, t, op) in obs {
            if let Some(&(other, first)) = by_token.get(&t) {
                if other != s {
                    violations.push(format!(
                        "election {election:?}: token {t} was given to two sessions\n    {first}\n    {op}"
                    ));
                }
            } else {
                by_token.insert(t, (s, op));
            }
        }
        // Real-time order: an observation that began after another ended never shows a
        // lower token. Sorting by completion lets one pass keep the highest token seen so far.
        let mut by_end: Vec<&(u64, u64, &Op)> = obs.iter().collect();
        by_end.sort_by_key(|o| o.2.complete);
        let mut by_start: Vec<&(u64, u64, &Op)> = obs.iter().collect();
        by_start.sort_by_key(|o| o.2.invoke);
        let mut best: Option<&(u64, u64, &Op)> = None;
        let mut k = 0;
        for o in by_start {
            while k < by_end.len() && by_end[k].2.complete < o.2.invoke {
                if best.is_none_or(|b| by_end[k].1 > b.1) {
                    best = Some(by_end[k]);
                }
                k += 1;
            }
            if let Some(b) = best {
                if o.1 < b.1 {
                    violations.push(format!(
                        "election {election:?}: token went back from {} to {}\n    {}\n    then {}",
                        b.1, o.1, b.2, o.2
                    ));
                }
            }
        }
    }
    // Per key: accepted writes in log order carry non-decreasing tokens.
    let mut puts: BTreeMap<&str, Vec<(u64, u64, &Op)>> = BTreeMap::new();
    let mut written: BTreeMap<(&str, &str), (u64, &Op)> = BTreeMap::new();
    for op in history {
        if let Kind::Put {
            key, value, token, ..
        } = &op.kind
        {
            written.insert((key, value), (*token, op));
            if let Outcome::Ok(Value::Index(i)) = &op.outcome {
                puts.entry(key).or_default().push((*i, *token, op));
            }
        }
    }
    let mut accepted = 0;
    for (key, list) in &mut puts {
        accepted += list.len();
        list.sort_by_key(|p| p.0);
        let mut high: Option<(u64, &Op)> = None;
        for &(_, t, op) in list.iter() {
            if let Some((h, hop)) = high {
                if t < h {
                    violations.push(format!(
                        "key {key:?}: a write with token {t} was accepted after one with token {h}\n    {hop}\n    then {op}"
                    ));
                }
            }
            if high.is_none_or(|(h, _)| t > h) {
                high = Some((t, op));
            }
        }
    }
    for op in history {
        if let (Kind::Get { key }, Outcome::Ok(Value::Read(Some((v, t, _))))) =
            (&op.kind, &op.outcome)
        {
            match written.get(&(key.as_str(), v.as_str())) {
                None => violations.push(format!(
                    "key {key:?}: a read returned a value nobody wrote\n    {op}"
                )),
                Some((wt, w)) if wt != t => violations.push(format!(
                    "key {key:?}: a read returned token {t} for a value written with token {wt}\n    {w}\n    {op}"
                )),
                _ => {}
            }
        }
    }
    Verdict {
        name: "fencing",
        checked: format!(
            "{} elections ({observations} token observations), {accepted} accepted writes",
            seen.len()
        ),
        violations,
        unknown: Vec::new(),
    }
}

/// One holder's belief that it leads an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Belief {
    /// Election.
    pub election: String,
    /// Session.
    pub session: u64,
    /// Token it was answered.
    pub token: u64,
    /// From the campaign answer.
    pub from: Micros,
    /// Until validity lapsed or the holder let go.
    pub until: Micros,
    /// The campaign operation.
    pub campaign: usize,
}

/// Every holder's belief intervals, by DESIGN rule 4, from the history.
pub fn beliefs(history: &[Op]) -> Vec<Belief> {
    // Per session: TTL, validity extensions (answer time, valid until), and when the holder
    // let go of each election (resign) or of everything (revoke).
    #[derive(Default)]
    struct S {
        ttl_ms: u64,
        /// (answer time, send time + ttl − margin)
        extensions: Vec<(Micros, Micros)>,
        revoked: Option<Micros>,
        resigned: BTreeMap<String, Vec<Micros>>,
    }
    let mut sessions: BTreeMap<u64, S> = BTreeMap::new();
    for op in history {
        if let (Kind::Grant { .. }, Outcome::Ok(Value::Session { session, ttl_ms })) =
            (&op.kind, &op.outcome)
        {
            let s = sessions.entry(*session).or_default();
            s.ttl_ms = *ttl_ms;
            s.extensions.push((
                op.complete,
                (op.invoke + ttl_ms * 1_000).saturating_sub(drift_margin_us(*ttl_ms)),
            ));
        }
    }
    for op in history {
        match (&op.kind, &op.outcome) {
            (Kind::KeepAlive { session }, Outcome::Ok(Value::Renewed { ttl_ms })) => {
                let s = sessions.entry(*session).or_default();
                s.extensions.push((
                    op.complete,
                    (op.invoke + ttl_ms * 1_000).saturating_sub(drift_margin_us(*ttl_ms)),
                ));
            }
            (Kind::Revoke { session }, _) => {
                let s = sessions.entry(*session).or_default();
                s.revoked = Some(s.revoked.map_or(op.invoke, |r| r.min(op.invoke)));
            }
            (Kind::Resign { election, session }, _) => {
                sessions
                    .entry(*session)
                    .or_default()
                    .resigned
                    .entry(election.clone())
                    .or_default()
                    .push(op.invoke);
            }
            _ => {}
        }
    }
    for s in sessions.values_mut() {
        s.extensions.sort();
    }
    let mut out = Vec::new();
    for op in history {
        let (Kind::Campaign { election, session }, Outcome::Ok(Value::Token(token))) =
            (&op.kind, &op.outcome)
        else {
            continue;
        };
        let Some(s) = sessions.get(session) else {
            continue;
        };
        let from = op.complete;
        // Validity at `from`: the best extension answered by then; then later extensions
        // count only while the holder still believed when they arrived.
        let mut until: Micros = 0;
        for &(answered, valid) in &s.extensions {
            if answered <= from || answered <= until {
                until = until.max(valid);
            } else {
                break;
            }
        }
        // Letting go ends belief at the moment the holder asks (conservative for the holder).
        if let Some(r) = s.revoked {
            if r >= from {
                until = until.min(r);
            }
        }
        if let Some(rs) = s.resigned.get(election.as_str()) {
            if let Some(r) = rs.iter().filter(|&&r| r >= from).min() {
                until = until.min(*r);
            }
        }
        if until > from {
            out.push(Belief {
                election: election.clone(),
                session: *session,
                token: *token,
                from,
                until,
                campaign: op.id,
            });
        }
    }
    out
}

/// No two holders believe they lead one election at once: DESIGN rule 4.
pub fn holders(history: &[Op]) -> Verdict {
    let all = beliefs(history);
    let mut by_election: BTreeMap<&str, Vec<&Belief>> = BTreeMap::new();
    for b in &all {
        by_election.entry(&b.election).or_default().push(b);
    }
    let mut violations = Vec::new();
    for (election, list) in &mut by_election {
        list.sort_by_key(|b| b.from);
        // Sorted by start: once one starts after `a` ends, all later ones do. A session
        // that campaigns again overlaps only itself, which is no violation.
        for (i, a) in list.iter().enumerate() {
            for b in list.iter().skip(i + 1) {
                if b.from >= a.until {
                    break;
                }
                if a.session != b.session {
                    violations.push(format!(
                        "election {election:?}: session {} (token {}) believed it led over \
                         [{:.3}s, {:.3}s) and session {} (token {}) over [{:.3}s, {:.3}s): they \
                         overlap (campaign ops #{} and #{})",
                        a.session,
                        a.token,
                        a.from as f64 / 1e6,
                        a.until as f64 / 1e6,
                        b.session,
                        b.token,
                        b.from as f64 / 1e6,
                        b.until as f64 / 1e6,
                        a.campaign,
                        b.campaign
                    ));
                }
            }
        }
    }
    Verdict {
        name: "single-holder",
        checked: format!(
            "{} belief intervals in {} elections",
            all.len(),
            by_election.len()
        ),
        violations,
        unknown: Vec::new(),
    }
}

/// What one node looked like after healing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFinal {
    /// Node id.
    pub id: u64,
    /// Commit index, applied index, term and voters from `/status`; `None` if it did not
    /// answer.
    pub status: Option<(u64, u64, u64, BTreeSet<u64>)>,
    /// The state it served while it led (each key's value and token, each election's
    /// leader), read through the API after leadership was moved to it; `None` if it could
    /// not be made leader.
    pub state: Option<BTreeMap<String, String>>,
}

/// After healing, every node reached the same applied and commit index and serves the same
/// state.
pub fn convergence(nodes: &[NodeFinal]) -> Verdict {
    let mut violations = Vec::new();
    let mut unknown = Vec::new();
    for n in nodes {
        if n.status.is_none() {
            violations.push(format!(
                "node {} did not answer /status after healing",
                n.id
            ));
        }
    }
    let statuses: BTreeSet<(u64, u64)> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref().map(|s| (s.0, s.1)))
        .collect();
    if statuses.len() > 1 {
        let each: Vec<String> = nodes
            .iter()
            .map(|n| match &n.status {
                Some((c, a, t, v)) => {
                    format!(
                        "node {}: commit {c} applied {a} term {t} voters {v:?}",
                        n.id
                    )
                }
                None => format!("node {}: no answer", n.id),
            })
            .collect();
        violations.push(format!(
            "nodes did not converge to one commit/applied index:\n    {}",
            each.join("\n    ")
        ));
    }
    for n in nodes {
        if let Some((c, a, _, _)) = n.status {
            if a != c {
                violations.push(format!(
                    "node {}: applied {a} is not its commit index {c}",
                    n.id
                ));
            }
        }
    }
    let voters: BTreeSet<&BTreeSet<u64>> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref().map(|s| &s.3))
        .collect();
    if voters.len() > 1 {
        violations.push(format!("nodes disagree on the voters: {voters:?}"));
    }
    let reference = nodes
        .iter()
        .find_map(|n| n.state.as_ref().map(|s| (n.id, s)));
    for n in nodes {
        match (&n.state, reference) {
            (None, _) => unknown.push(format!(
                "node {}: its state could not be read (leadership could not be moved to it)",
                n.id
            )),
            (Some(s), Some((rid, r))) if s != r => {
                let diff: Vec<String> = r
                    .keys()
                    .chain(s.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter(|k| r.get(*k) != s.get(*k))
                    .take(6)
                    .map(|k| {
                        format!(
                            "{k}: node {rid} {:?}, node {} {:?}",
                            r.get(k),
                            n.id,
                            s.get(k)
                        )
                    })
                    .collect();
                violations.push(format!(
                    "node {} serves another state than node {rid}:\n    {}",
                    n.id,
                    diff.join("\n    ")
                ));
            }
            _ => {}
        }
    }
    Verdict {
        name: "convergence",
        checked: format!("{} nodes", nodes.len()),
        violations,
        unknown,
    }
}
