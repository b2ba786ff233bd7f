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
//! And the holder's half once more, for sessions that end without a revoke: no `Expire` or
//! `Release` (fate-sharing, docs/GUARANTEES.md) commits while the client holding the session
//! believes it leads with it. A release may end a session long before its TTL, so this is
//! what shows a release of a live holder's session even when no other candidate was waiting
//! to take the election over.

use std::collections::BTreeMap;

use tenure_core::node::Role;
use tenure_core::sm::{Command, Response, SessionId};
use tenure_core::types::{NodeId, Term};

use super::{Checker, View};
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
}

impl LeaseSafety {
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

impl Checker for LeaseSafety {
    fn name(&self) -> &'static str {
        "lease-safety"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
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
