//! Lease safety on the holder — DESIGN rule 4: "a client treats its leadership as valid only
//! until send time of its last acknowledged keepalive + TTL − drift margin, measured on its
//! own monotonic clock … so a holder stops believing before anyone else can be granted the
//! election, as long as clock rates differ by less than the configured drift bound".
//!
//! Property: at no simulated instant do two clients believe they lead the same election.
//! A belief is an interval of *true* simulated time: from the moment a client concludes it
//! leads until the true time at which its own drifting clock reaches its lease deadline, or
//! until it stops believing (resign, transfer, session ended, another leader seen). Two
//! intervals overlap exactly when one starts (or is extended) while the other is running, so
//! checking at every start and extension is complete.
//!
//! Two server-side halves of the same rule are checked too, since client margins alone can
//! hide a server that promises more than it keeps:
//! - "a keepalive may be acknowledged only by a leader that provably still leads … An old
//!   leader that does not know it was replaced must not acknowledge keepalives": no node
//!   acknowledges a keepalive after a leader of a higher term was seen elected;
//! - the leader lease itself, which the acknowledgements rest on: while a leader's lease
//!   holds (`Status::lease_until_tick` ahead of its clock), no leader of a higher term has
//!   been elected. Checked whether or not a keepalive happens to arrive in the window, so a
//!   lease that outlasts the followers' vote refusal shows at once;
//! - "the server never expires the session before receive time + TTL": no committed expiry
//!   ends a session before the true time at which the acknowledging node's clock ran TTL
//!   ticks from the keepalive's receipt.
//!
//! The promise that the acknowledgements rest on is checked on its own, at its exact bound,
//! so that a deadline short by less than a tick shows even when no keepalive happened to
//! arrive at the edge of what it covers: a leader's committed Grant or Checkpoint obliges
//! every other replica to keep the session until the true time at which the *proposing*
//! leader's clock ran the entry's remaining ticks from the proposal (`padded` in the core's
//! lease clock: twice the drift over it, and a tick for the rounding of the replica's own tick
//! count). Checked on every replica after it applies such an entry, and after it rebuilds its
//! deadlines from its state machine (a restart, an installed snapshot), against the true time
//! at which its own clock reaches its deadline. The proposer itself is left out while it runs
//! in the same life: it covers exactly what it acknowledged, which the checks above see;
//! after a restart its own entries bind it like anyone else's.
//!
//! And the holder's half once more, for sessions that end without a revoke: no `Expire` or
//! `Release` (fate-sharing, docs/GUARANTEES.md) commits while the client holding the session
//! believes it leads with it. A release may end a session long before its TTL, so this is
//! what shows a release of a live holder's session even when no other candidate was waiting
//! to take the election over.

use std::collections::BTreeMap;

use tenure_core::node::Role;
use tenure_core::sm::{Command, Response, SessionId};
use tenure_core::types::{Index, NodeId, Term};

use super::{Checker, View};
use crate::driver::NodeSlot;
use crate::mirror::EntryKind;
use crate::observe::{ClientId, Observation};
use crate::time::{fmt_time, SimTimeUs};

#[derive(Clone, Debug)]
struct Belief {
    session: SessionId,
    election: String,
    token: u64,
    since_us: SimTimeUs,
    until_us: SimTimeUs,
}

/// What every client currently believes, and what the servers promised.
#[derive(Default)]
pub struct LeaseSafety {
    beliefs: BTreeMap<ClientId, Belief>,
    /// Highest term in which a leader was seen, and since when.
    leader_term: Option<(Term, SimTimeUs)>,
    /// Latest promise per session: (true time, acknowledging node).
    promises: BTreeMap<SessionId, (SimTimeUs, NodeId)>,
    /// Command entries appended by the leader of their term, until some node applies them:
    /// who proposed each (node, incarnation) and when.
    proposals: BTreeMap<(Index, Term), (Proposer, SimTimeUs)>,
    /// Applied Grant and Checkpoint entries still in force, by session and index: the true
    /// time until which every replica but the proposer must keep the session, and the
    /// proposer.
    by_session: BTreeMap<SessionId, BTreeMap<Index, (SimTimeUs, Proposer)>>,
    /// Entries recorded in `by_session` since it was last swept of those that ran out.
    recorded: usize,
}

/// A node in one life: (id, incarnation).
type Proposer = (NodeId, u64);

/// After this many entries recorded, the ones that ran out are swept.
const COVERAGE_SWEEP_AT: usize = 1_024;

/// The true time at which node `slot`'s clock reaches local tick `tick`, if it runs with its
/// clock in step (not paused, not replaying the ticks it missed).
fn true_time_of_tick(slot: &NodeSlot, tick: u64) -> Option<i128> {
    if slot.paused || slot.catching_up || slot.missed_ticks > 0 {
        return None;
    }
    let now_tick = slot.status.as_ref()?.now_tick;
    Some(
        i128::from(slot.last_tick_us)
            + (i128::from(tick) - i128::from(now_tick)) * i128::from(slot.tick_period_us),
    )
}

impl LeaseSafety {
    /// The coverage checks: see the module's documentation.
    fn coverage_side(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        let now = view.now_us;
        match observation {
            Observation::Appended { node, entries } => {
                let slot = view.nodes.get(node)?;
                let status = slot.status.as_ref()?;
                if status.role != Role::Leader {
                    return None;
                }
                // Only the leader of a term makes entries of it: what it appends in its own
                // term, it proposed now.
                for e in entries {
                    if e.kind == EntryKind::Command && e.term == status.term {
                        self.proposals
                            .entry((e.index, e.term))
                            .or_insert(((*node, slot.incarnation), now));
                    }
                }
                None
            }
            Observation::Applied { node, applied, .. } => {
                let slot = view.nodes.get(node)?;
                let me = (*node, slot.incarnation);
                for a in applied {
                    if a.first_applied.is_some() {
                        // A retry changed nothing: it promises nothing beyond its first
                        // application.
                        continue;
                    }
                    let grant;
                    let remaining: &[(SessionId, u64)] = match (a.command.unsealed(), &a.response) {
                        (Command::Grant { .. }, Response::Granted { session, ttl_ticks }) => {
                            grant = [(*session, *ttl_ticks)];
                            &grant
                        }
                        (Command::Checkpoint { remaining }, Response::Checkpointed) => remaining,
                        _ => continue,
                    };
                    if let Some((proposer, at_us)) = self.proposals.remove(&(a.index, a.term)) {
                        // Its first application anywhere. Entries at or below an applied index
                        // are decided: what was not applied there never will be.
                        self.proposals = self.proposals.split_off(&(a.index + 1, 0));
                        if let Some(period) = view.nodes.get(&proposer.0).map(|s| s.tick_period_us)
                        {
                            for (s, r) in remaining {
                                let until = at_us + r * period;
                                let by_index = self.by_session.entry(*s).or_default();
                                by_index.insert(a.index, (until, proposer));
                                self.recorded += 1;
                            }
                        }
                    }
                    for (session, _) in remaining {
                        let Some(&(until, proposer)) =
                            self.by_session.get(session).and_then(|b| b.get(&a.index))
                        else {
                            continue;
                        };
                        if proposer == me || until <= now {
                            continue;
                        }
                        if let Some(v) = short_deadline(slot, *session, until, a.index) {
                            return Some(v);
                        }
                    }
                }
                if self.recorded > COVERAGE_SWEEP_AT {
                    self.recorded = 0;
                    self.by_session.retain(|_, by_index| {
                        by_index.retain(|_, (u, _)| *u > now);
                        !by_index.is_empty()
                    });
                }
                None
            }
            Observation::DeadlinesReset { node } => {
                let slot = view.nodes.get(node)?;
                let applied = slot.status.as_ref()?.applied;
                let me = (*node, slot.incarnation);
                for (session, by_index) in &self.by_session {
                    let Some((index, until)) = by_index
                        .range(..=applied)
                        .filter(|(_, (_, proposer))| *proposer != me)
                        .max_by_key(|(_, (u, _))| *u)
                        .map(|(i, (u, _))| (*i, *u))
                    else {
                        continue;
                    };
                    if until <= now {
                        continue;
                    }
                    if let Some(v) = short_deadline(slot, *session, until, index) {
                        return Some(format!("after rebuilding its deadlines: {v}"));
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn server_side(&mut self, observation: &Observation, now: SimTimeUs) -> Option<String> {
        match observation {
            Observation::Role {
                role: Role::Leader,
                term,
                ..
            } => {
                if self.leader_term.is_none_or(|(t, _)| *term > t) {
                    self.leader_term = Some((*term, now));
                }
                None
            }
            Observation::LeaseHeld { node, term } => match self.leader_term {
                Some((t, since)) if t > *term => Some(format!(
                    "node {node}'s leader lease of term {term} still held at {}, but a leader of term {t} was elected at {}",
                    fmt_time(now),
                    fmt_time(since)
                )),
                _ => None,
            },
            Observation::KeepaliveAcked {
                node,
                term,
                session,
                promise_us,
            } => {
                if let Some((t, since)) = self.leader_term {
                    if t > *term {
                        return Some(format!(
                            "node {node} acknowledged a keepalive of session {session} in term {term} at {}, but a leader of term {t} was elected at {}",
                            fmt_time(now),
                            fmt_time(since)
                        ));
                    }
                }
                let p = self.promises.entry(*session).or_insert((0, *node));
                if *promise_us > p.0 {
                    *p = (*promise_us, *node);
                }
                None
            }
            Observation::Canonical(entry) => {
                let (Command::Expire { .. } | Command::Release { .. }, Response::Ended { session }) =
                    (&entry.command, &entry.response)
                else {
                    return None;
                };
                let believer = self
                    .beliefs
                    .iter()
                    .find(|(_, b)| b.session == *session && b.until_us > now);
                if let Some((client, b)) = believer {
                    return Some(format!(
                        "session {session} ended by {:?} at index {} at {}, while client {client} believes it leads {:?} with it (token {}) until {}",
                        entry.command,
                        entry.index,
                        fmt_time(now),
                        b.election,
                        b.token,
                        fmt_time(b.until_us)
                    ));
                }
                if matches!(entry.command, Command::Release { .. }) {
                    // A release ends the session early on purpose: no promise of the TTL
                    // holds once the holder let go.
                    self.promises.remove(session);
                    return None;
                }
                let (promise, node) = self.promises.remove(session)?;
                if now < promise {
                    return Some(format!(
                        "session {session} expired at index {} at {}, before {} that node {node}'s acknowledgement promised",
                        entry.index,
                        fmt_time(now),
                        fmt_time(promise)
                    ));
                }
                None
            }
            _ => None,
        }
    }
}

/// A violation if node `slot` keeps `session` (still live there) for less than until
/// `until`, the true time to which the entry at `index` obliges it.
fn short_deadline(
    slot: &NodeSlot,
    session: SessionId,
    until: SimTimeUs,
    index: Index,
) -> Option<String> {
    let deadline = slot.node()?.session_deadline_tick(session)?;
    let at = true_time_of_tick(slot, deadline)?;
    (at < i128::from(until)).then(|| {
        format!(
            "node {} keeps session {session} until its tick {deadline} (true {}), but the entry at index {index} obliges it until {}",
            slot.id,
            fmt_time(at.max(0) as SimTimeUs),
            fmt_time(until)
        )
    })
}

impl Checker for LeaseSafety {
    fn name(&self) -> &'static str {
        "lease-safety"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        if let Some(v) = self.coverage_side(observation, view) {
            return Some(v);
        }
        if !matches!(observation, Observation::Belief { .. }) {
            return self.server_side(observation, view.now_us);
        }
        let Observation::Belief {
            client,
            session,
            election,
            token,
            until_us,
        } = observation
        else {
            return None;
        };
        let now = view.now_us;
        let Some(until_us) = until_us else {
            self.beliefs.remove(client);
            return None;
        };
        if *until_us <= now {
            self.beliefs.remove(client);
            return None;
        }
        let since_us = match self.beliefs.get(client) {
            Some(b) if b.election == *election && b.token == *token && b.until_us > now => {
                b.since_us
            }
            _ => now,
        };
        for (other, b) in &self.beliefs {
            if other != client && b.election == *election && b.until_us > now {
                return Some(format!(
                    "clients {other} and {client} both believe they lead {election:?} at {}: client {other} with token {} since {} until {}, client {client} with token {token} until {}",
                    fmt_time(now),
                    b.token,
                    fmt_time(b.since_us),
                    fmt_time(b.until_us),
                    fmt_time(*until_us)
                ));
            }
        }
        self.beliefs.insert(
            *client,
            Belief {
                session: *session,
                election: election.clone(),
                token: *token,
                since_us,
                until_us: *until_us,
            },
        );
        None
    }
}
