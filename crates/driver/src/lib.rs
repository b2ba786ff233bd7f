//! The driver core: everything between a [`Node`] and the clients it answers, with no IO.
//!
//! A driver (the server's driver thread, or one node of the simulator) owns a `Node`, its
//! storage and its sockets. What it must *decide* for clients is here, so that the simulator
//! judges exactly the answers real clients get:
//!
//! - which proposal is waiting for which log position, by `(index, term)`;
//! - which keepalive waits for which acknowledgement, by tag;
//! - what each request is answered once the node applies entries, installs a snapshot,
//!   steps down or stops — `Applied`, a definite failure, or an explicit indeterminate
//!   outcome ([`Outcome`]);
//! - the leadership and latency events the server turns into metrics ([`Event`]).
//!
//! [`Pipeline`] owns the node and its driver core and takes each Ready through its order
//! (write, early appends, sync, `Node::advance`, send, [`DriverCore::on_ready`]); the
//! server's driver thread and the simulator both run it, over their own storage and network.
//! The driver observes after every other input ([`Pipeline::observe`]) and collects answers
//! and events with [`DriverCore::drain`]. Time is whatever monotonic microsecond count the
//! driver keeps (real or simulated); this crate never reads a clock.
//!
//! # When is a failure definite?
//!
//! A proposal at `(index, term)` takes effect exactly when the entry committed at `index`
//! has `term`. So once the node applies index `index`:
//! - the applied entry has `term`: **applied**, with its response;
//! - it has another term, or carries no command: **definitely failed** (`Superseded`) — a
//!   committed entry is never replaced, so ours can never commit;
//! - the node skipped over `index` by installing a snapshot: the entry at `index` is not in
//!   view. If the proposal carried a request id, the state machine's table of remembered
//!   results decides (applied with the original result, or not applied at all); otherwise
//!   the outcome is **indeterminate**.
//!
//! A node that steps down keeps waiting: the entry may still be committed by a later leader,
//! and applying it here will tell. A node that stops answers everything indeterminate.

#![deny(missing_docs)]

mod pipeline;
mod snapshot;

pub use pipeline::{Finished, Pipeline, Wrote};
pub use snapshot::finish_background_snapshot;

use std::collections::BTreeMap;

use tenure_core::event::NodeEvent;
use tenure_core::node::{AfterPersist, Applied, Bind, Node, ProposeError, Role, Status, StreamEnd};
use tenure_core::sm::{Command, RequestId, Response, SessionId, SmError};
use tenure_core::types::{Index, NodeId, Term};

/// Microseconds on the driver's monotonic clock (real or simulated).
pub type Micros = u64;

/// Keepalives unanswered after this long are answered as not acknowledged (their clients
/// have retried long since); bounds the memory a silent quorum can cost.
pub const KEEPALIVE_PENDING_MAX_AGE_US: Micros = 10_000_000;

/// Most keepalives waiting for acknowledgement at once; the oldest is refused past it.
pub const KEEPALIVES_PENDING_MAX: usize = 65_536;

/// What became of a proposal. Exactly one of three kinds (DESIGN rule 7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command was committed and applied; `response` is the state machine's answer
    /// (which may itself be a rejection such as a stale token: that is a result, and nothing
    /// changed). For a retried request this is the first application's result.
    Applied {
        /// An index at which the command's effect is in the log.
        index: Index,
        /// The state machine's response.
        response: Response,
    },
    /// The command did not and will not take effect.
    Failed(Failure),
    /// The command may or may not have taken effect. Retry with the same request id: the
    /// retry returns the original result if it was applied, and applies it otherwise.
    Indeterminate(Unknown),
}

/// Why a proposal definitely failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The node refused it before it reached the log (not the leader, transfer in progress,
    /// too many uncommitted entries, bad command, …).
    #[error("{0}")]
    Refused(ProposeError),
    /// Another entry was committed at the proposal's index: it was lost with its leader's
    /// term. Safe to retry at the current leader.
    #[error("the entry was replaced by another leader's (leader: {leader:?})")]
    Superseded {
        /// The leader this node knows of now.
        leader: Option<NodeId>,
    },
}

/// Why a proposal's outcome cannot be known here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unknown {
    /// The node caught up by a snapshot that covers the proposal's index, and nothing in the
    /// state machine says whether the entry there was this proposal.
    #[error("the node caught up by a snapshot covering the proposal; it may have been applied")]
    CoveredBySnapshot,
    /// The node stopped before the proposal's index was applied.
    #[error("the node stopped before the outcome was known")]
    Stopped,
    /// The driver gave up waiting (its request timeout).
    #[error("timed out waiting for the outcome; the command may still take effect")]
    TimedOut,
}

/// What became of a keepalive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeepaliveOutcome {
    /// Acknowledged by a leader that provably leads: the holder may count its session valid
    /// until the keepalive's send time + `ttl_ticks`, minus its drift margin.
    Acked {
        /// The session's TTL in ticks.
        ttl_ticks: u64,
    },
    /// Not acknowledged (the session was not extended as far as the holder may know).
    Refused(ProposeError),
}

/// A proposal's answer, for the reply handle the driver gave with it.
#[derive(Clone, Debug)]
pub struct Answer<P> {
    /// The driver's handle (a oneshot sender, or a simulated client's address and attempt).
    pub reply: P,
    /// The outcome.
    pub outcome: Outcome,
}

/// A keepalive's answer.
#[derive(Clone, Debug)]
pub struct KeepaliveAnswer<K> {
    /// The driver's handle.
    pub reply: K,
    /// The session renewed.
    pub session: SessionId,
    /// The outcome.
    pub outcome: KeepaliveOutcome,
}

/// Something the server counts in its metrics and logs (the simulator drains and drops them).
///
/// Elections, step-downs (with the core's own reason), leaders learned of and membership
/// changes come from the core's account, `AfterPersist::events` (see [`DriverCore::on_ready`]);
/// expiries, releases and fenced rejections from the applied entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A proposal of this node was applied this long after it was proposed.
    Committed {
        /// Latency.
        latency_us: Micros,
    },
    /// A keepalive was acknowledged this long after it arrived.
    Renewed {
        /// Latency.
        latency_us: Micros,
    },
    /// A keepalive arrived this long after the previous one of its session.
    LeaseAgeAtRenewal {
        /// Age.
        age_us: Micros,
    },
    /// The consensus's own account (`AfterPersist::events`): an election or pre-vote round
    /// started, a pre-vote lost, a step-down and why, the leader gone, a membership change.
    /// A leader learned of (or won) is [`Event::LeaderKnown`] instead.
    Core(NodeEvent),
    /// This node learned of a (new) Raft leader; `leaderless_us` is how long it had none.
    LeaderKnown {
        /// The leader's term.
        term: Term,
        /// The leader (this node itself when it won).
        leader: NodeId,
        /// Time without a known leader before, if there was such a gap.
        leaderless_us: Option<Micros>,
    },
    /// A session was expired by a committed `Expire`.
    SessionExpired {
        /// The session.
        session: SessionId,
    },
    /// A fate-sharing session was ended by a committed `Release`: the client closed the
    /// stream it was bound to (its holder let go, or its process exited).
    SessionReleased {
        /// The session.
        session: SessionId,
    },
    /// A fenced write was rejected for its token (or for naming another election).
    FencedRejection {
        /// The key written.
        key: String,
        /// The election the write named.
        election: String,
        /// The token presented.
        token: u64,
        /// The token it fell below (the key's highest accepted, or the election's latest),
        /// when the rejection names one.
        current: Option<u64>,
        /// The state machine's refusal.
        error: SmError,
    },
    /// An election's leader changed.
    ElectionLeaderChanged,
}

impl Event {
    /// The event's stable name, as logs (`event=`) and the dashboard's journal give it;
    /// `me` is the node that saw it (a leader learned of is `leader_elected` when it is
    /// `me`).
    pub fn kind(&self, me: NodeId) -> &'static str {
        match self {
            Event::Committed { .. } => "committed",
            Event::Renewed { .. } => "renewed",
            Event::LeaseAgeAtRenewal { .. } => "lease_age_at_renewal",
            Event::Core(e) => e.kind(),
            Event::LeaderKnown { leader, .. } if *leader == me => "leader_elected",
            Event::LeaderKnown { .. } => "leader_known",
            Event::SessionExpired { .. } => "session_expired",
            Event::SessionReleased { .. } => "session_released",
            Event::FencedRejection { .. } => "fenced_write_rejected",
            Event::ElectionLeaderChanged => "election_leader_changed",
        }
    }

    /// The event in words, as node `me` saw it: the one wording of the server's log line
    /// and of the dashboard's journal. Clients' strings (keys) are quoted and escaped.
    pub fn worded(&self, me: NodeId) -> Worded<'_> {
        Worded { event: self, me }
    }
}

/// [`Event::worded`]: an event's words, by `Display`.
#[derive(Debug)]
pub struct Worded<'a> {
    event: &'a Event,
    me: NodeId,
}

impl std::fmt::Display for Worded<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |us: Micros| us as f64 / 1000.0;
        match self.event {
            Event::Committed { latency_us } => {
                write!(f, "a proposal committed in {:.1} ms", ms(*latency_us))
            }
            Event::Renewed { latency_us } => {
                write!(f, "a keepalive acknowledged in {:.1} ms", ms(*latency_us))
            }
            Event::LeaseAgeAtRenewal { age_us } => {
                write!(
                    f,
                    "a lease renewed {:.1} ms after its last renewal",
                    ms(*age_us)
                )
            }
            // The consensus's own events are worded by the core (`NodeEvent`'s Display).
            Event::Core(e) => e.fmt(f),
            Event::LeaderKnown {
                term,
                leader,
                leaderless_us,
            } => {
                if *leader == self.me {
                    NodeEvent::BecameLeader { term: *term }.fmt(f)?;
                } else {
                    NodeEvent::LeaderKnown {
                        term: *term,
                        leader: *leader,
                    }
                    .fmt(f)?;
                }
                match leaderless_us {
                    Some(us) => write!(f, " after {:.1} ms without a leader", ms(*us)),
                    None => Ok(()),
                }
            }
            Event::SessionExpired { session } => write!(f, "session {session} expired"),
            Event::SessionReleased { session } => write!(
                f,
                "session {session} released: the client closed the stream it was bound to"
            ),
            Event::FencedRejection { key, error, .. } => {
                write!(f, "fenced write to {key:?} rejected: {error}")
            }
            Event::ElectionLeaderChanged => f.write_str("an election's leader changed"),
        }
    }
}

/// Why a leader stopped leading: the core's own reason, from the code path that stopped it
/// (see `tenure_core::event`), re-exported so that the driver's users name one type.
pub use tenure_core::event::StepDownReason;

/// Test-only bug switches in the driver core, to prove that the checkers catch them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverBugs {
    /// Answer every proposal left waiting at or below the applied index `not-leader`
    /// (definitely failed), even when a snapshot covering it may contain it — the outcome
    /// bug a black-box test found: a committed write answered `not-leader`.
    pub not_leader_after_snapshot: bool,
}

impl DriverBugs {
    /// Parses a bug's name (as in `TENURE_INJECT_BUG` or `tenure sim --inject-bug`).
    pub fn from_name(name: &str) -> Option<DriverBugs> {
        match name {
            "not-leader-after-snapshot" => Some(DriverBugs {
                not_leader_after_snapshot: true,
            }),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct PendingProposal<P> {
    request: Option<RequestId>,
    proposed_us: Micros,
    reply: P,
}

#[derive(Clone, Debug)]
struct PendingKeepalive<K> {
    session: SessionId,
    received_us: Micros,
    reply: K,
}

/// Everything [`DriverCore::drain`] hands back.
#[derive(Clone, Debug)]
pub struct Output<P, K> {
    /// Proposal answers, in the order they were decided.
    pub answers: Vec<Answer<P>>,
    /// Keepalive answers.
    pub keepalives: Vec<KeepaliveAnswer<K>>,
    /// Events for metrics.
    pub events: Vec<Event>,
}

impl<P, K> Default for Output<P, K> {
    fn default() -> Self {
        Output {
            answers: Vec::new(),
            keepalives: Vec::new(),
            events: Vec::new(),
        }
    }
}

impl<P, K> Output<P, K> {
    /// True if there is nothing to hand out.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty() && self.keepalives.is_empty() && self.events.is_empty()
    }
}

/// The bookkeeping between one node and its clients; see the crate docs.
///
/// `P` is the driver's handle for answering a proposal, `K` for a keepalive.
///
/// Invariant: every proposal handed to [`DriverCore::propose`] is answered exactly once —
/// at once if the node refuses it, else by `on_ready`, `stop` or `give_up` — unless the node
/// crashes ([`DriverCore::crash`]), where nothing is answered because nothing survives.
#[derive(Clone, Debug)]
pub struct DriverCore<P, K> {
    bugs: DriverBugs,
    /// Waiting proposals by the log position they were appended at. Two may share an index
    /// (an entry replaced after a leader change, then this node leads again): applying the
    /// index decides both.
    proposals: BTreeMap<(Index, Term), PendingProposal<P>>,
    /// Waiting keepalives by the tag given to the node.
    keepalives: BTreeMap<u64, PendingKeepalive<K>>,
    /// Waiting reads by the tag given to the node.
    reads: BTreeMap<u64, P>,
    next_tag: u64,
    /// When each session's latest keepalive arrived, for the lease-age metric; forgotten
    /// when the session ends.
    last_keepalive_us: BTreeMap<SessionId, Micros>,
    /// The node's status at the last [`DriverCore::observe`]: events are its differences
    /// from the next one.
    last_status: Status,
    /// Scratch space for the next status, refreshed in place (see `Node::refresh_status`)
    /// so that observing after every input clones the membership only when it changes.
    next_status: Status,
    leaderless_since_us: Option<Micros>,
    out: Output<P, K>,
}

impl<P, K> DriverCore<P, K> {
    /// A driver core for a node whose status is `status`, at driver time `now_us`.
    pub fn new(status: &Status, now_us: Micros, bugs: DriverBugs) -> DriverCore<P, K> {
        DriverCore {
            bugs,
            proposals: BTreeMap::new(),
            keepalives: BTreeMap::new(),
            reads: BTreeMap::new(),
            next_tag: 1,
            last_keepalive_us: BTreeMap::new(),
            last_status: status.clone(),
            next_status: status.clone(),
            leaderless_since_us: status.leader.is_none().then_some(now_us),
            out: Output::default(),
        }
    }

    /// Proposals waiting for their outcome.
    pub fn proposals_pending(&self) -> usize {
        self.proposals.len()
    }

    /// Keepalives waiting for acknowledgement.
    pub fn keepalives_pending(&self) -> usize {
        self.keepalives.len()
    }

    /// Reads waiting for the leader to confirm its leadership or apply their read index.
    pub fn reads_pending(&self) -> usize {
        self.reads.len()
    }

    /// Proposes `command` (with its request id, if any) on `node`. A refusal is answered at
    /// once; otherwise the proposal waits for its entry and its position is returned.
    ///
    /// A read (`Get`, `Leader`) is not appended: it goes to [`DriverCore::read`] (its
    /// request id, if any, is not needed: a read changes nothing), and `None` is returned.
    pub fn propose(
        &mut self,
        node: &mut Node,
        now_us: Micros,
        request: Option<RequestId>,
        command: Command,
        reply: P,
    ) -> Option<(Index, Term)> {
        if command.is_read() {
            self.read(node, now_us, command, reply);
            return None;
        }
        match node.propose_request(request, command) {
            Ok(p) => {
                self.proposals.insert(
                    (p.index, p.term),
                    PendingProposal {
                        request,
                        proposed_us: now_us,
                        reply,
                    },
                );
                self.observe(node, now_us);
                Some((p.index, p.term))
            }
            Err(e) => {
                self.out.answers.push(Answer {
                    reply,
                    outcome: Outcome::Failed(Failure::Refused(e)),
                });
                None
            }
        }
    }

    /// A linearizable read served by the leader without a log entry ([`Node::read`]). It is
    /// answered `Applied` with the index whose state it saw, or a definite failure (a read
    /// that was not served changed nothing).
    pub fn read(&mut self, node: &mut Node, now_us: Micros, command: Command, reply: P) {
        let tag = self.next_tag;
        self.next_tag += 1;
        match node.read(command, tag) {
            Ok(()) => {
                self.reads.insert(tag, reply);
            }
            Err(e) => self.out.answers.push(Answer {
                reply,
                outcome: Outcome::Failed(Failure::Refused(e)),
            }),
        }
        self.observe(node, now_us);
    }

    /// A keepalive for `session` arrived. Acknowledged later from `AfterPersist::keepalive_acks`,
    /// or refused (now if the node cannot take it; later if it stops leading first).
    pub fn keepalive(&mut self, node: &mut Node, now_us: Micros, session: SessionId, reply: K) {
        self.keepalive_as(node, now_us, session, None, reply);
    }

    /// [`DriverCore::keepalive`] presenting the hash of the session's secret (required for
    /// a session granted with one; refused `WrongSecret` otherwise).
    pub fn keepalive_as(
        &mut self,
        node: &mut Node,
        now_us: Micros,
        session: SessionId,
        secret_hash: Option<tenure_core::sm::SecretHash>,
        reply: K,
    ) {
        self.keepalive_bound(node, now_us, session, secret_hash, None, reply);
    }

    /// [`DriverCore::keepalive_as`] that, with `bind`, binds the session to the stream the
    /// keepalive came on (fate-sharing, [`Node::keepalive_bound`]); the driver reports the
    /// stream's end with [`DriverCore::stream_ended`].
    pub fn keepalive_bound(
        &mut self,
        node: &mut Node,
        now_us: Micros,
        session: SessionId,
        secret_hash: Option<tenure_core::sm::SecretHash>,
        bind: Option<Bind>,
        reply: K,
    ) {
        let tag = self.next_tag;
        self.next_tag += 1;
        match node.keepalive_bound(session, tag, secret_hash.as_ref(), bind) {
            Ok(()) => {
                // Only sessions the node knows: an unknown id must not grow this map.
                if let Some(previous) = self.last_keepalive_us.insert(session, now_us) {
                    self.out.events.push(Event::LeaseAgeAtRenewal {
                        age_us: now_us.saturating_sub(previous),
                    });
                }
                if self.keepalives.len() >= KEEPALIVES_PENDING_MAX {
                    if let Some((_, p)) = self.keepalives.pop_first() {
                        self.refuse_keepalive(p, ProposeError::TooManyUncommitted);
                    }
                }
                self.keepalives.insert(
                    tag,
                    PendingKeepalive {
                        session,
                        received_us: now_us,
                        reply,
                    },
                );
            }
            Err(e) => self.out.keepalives.push(KeepaliveAnswer {
                reply,
                session,
                outcome: KeepaliveOutcome::Refused(e),
            }),
        }
        self.observe(node, now_us);
    }

    /// A stream that keepalives came on ended, closed by `end`: the sessions bound to it
    /// are released if its client closed it ([`Node::stream_ended`]). A driver must say
    /// [`StreamEnd::Server`] for every end it caused itself or cannot attribute.
    pub fn stream_ended(&mut self, node: &mut Node, now_us: Micros, stream: u64, end: StreamEnd) {
        node.stream_ended(stream, end);
        self.observe(node, now_us);
    }

    fn refuse_keepalive(&mut self, p: PendingKeepalive<K>, why: ProposeError) {
        self.out.keepalives.push(KeepaliveAnswer {
            reply: p.reply,
            session: p.session,
            outcome: KeepaliveOutcome::Refused(why),
        });
    }

    /// After any input or tick: note when the node lost its leader (for the leaderless time
    /// a later [`Event::LeaderKnown`] reports), and a node that no longer leads refuses the
    /// keepalives it holds (it will never acknowledge them). What happened in consensus is
    /// the core's own account, taken from `AfterPersist::events` in [`DriverCore::on_ready`].
    pub fn observe(&mut self, node: &Node, now_us: Micros) {
        node.refresh_status(&mut self.next_status);
        let now = &self.next_status;
        if now.leader.is_none() {
            self.leaderless_since_us.get_or_insert(now_us);
        }
        let (role, leader) = (now.role, now.leader);
        std::mem::swap(&mut self.last_status, &mut self.next_status);
        if role != Role::Leader && !self.keepalives.is_empty() {
            let why = ProposeError::NotLeader {
                leader_hint: leader,
            };
            for (_, p) in std::mem::take(&mut self.keepalives) {
                self.refuse_keepalive(p, why.clone());
            }
        }
    }

    /// The core's events of one Ready as the driver's: a leader learned of (this node itself
    /// when it won) with the time the node had none.
    fn note_core_events(&mut self, node: &Node, now_us: Micros, events: &[NodeEvent]) {
        for e in events {
            let event = match e {
                NodeEvent::BecameLeader { term } => self.leader_known(*term, node.id(), now_us),
                NodeEvent::LeaderKnown { term, leader } => {
                    self.leader_known(*term, *leader, now_us)
                }
                e => Event::Core(e.clone()),
            };
            self.out.events.push(event);
        }
    }

    fn leader_known(&mut self, term: Term, leader: NodeId, now_us: Micros) -> Event {
        let leaderless_us = self
            .leaderless_since_us
            .take()
            .map(|since| now_us.saturating_sub(since));
        Event::LeaderKnown {
            term,
            leader,
            leaderless_us,
        }
    }

    /// After a Ready was persisted, `advance`d and its messages sent: answer what it decided
    /// (its `applied`, `keepalive_acks`, `reads`, `leader_changes`, installed snapshot and
    /// `applied_through`; the driver may already have taken the messages out).
    pub fn on_ready(&mut self, node: &Node, now_us: Micros, ready: &AfterPersist) {
        self.note_core_events(node, now_us, &ready.events);
        for a in &ready.applied {
            self.count_applied(a);
            self.decide_index(node, now_us, a.index, Some(a));
        }
        for r in &ready.reads {
            if let Some(reply) = self.reads.remove(&r.tag) {
                let outcome = match &r.outcome {
                    Ok((index, response)) => Outcome::Applied {
                        index: *index,
                        response: response.clone(),
                    },
                    Err(e) => Outcome::Failed(Failure::Refused(e.clone())),
                };
                self.out.answers.push(Answer { reply, outcome });
            }
        }
        for _ in &ready.leader_changes {
            self.out.events.push(Event::ElectionLeaderChanged);
        }
        for ack in &ready.keepalive_acks {
            if let Some(p) = self.keepalives.remove(&ack.tag) {
                self.out.events.push(Event::Renewed {
                    latency_us: now_us.saturating_sub(p.received_us),
                });
                self.out.keepalives.push(KeepaliveAnswer {
                    reply: p.reply,
                    session: p.session,
                    outcome: KeepaliveOutcome::Acked {
                        ttl_ticks: ack.ttl_ticks,
                    },
                });
            }
        }
        // Proposals at or below `applied_through` that no applied command answered. Unless
        // this Ready's snapshot covers them, the node applied their index in view and it
        // was not theirs (a no-op, a configuration, or another term's command): definitely
        // lost. A snapshot that covers them may have been a leader's, installed over a log
        // that never held the entry there — which may well have been theirs.
        let leader = node.leader();
        let snapshot_index = ready.snapshot_installed.map_or(0, |(index, _)| index);
        while let Some((&(index, term), _)) = self.proposals.first_key_value() {
            if index > ready.applied_through {
                break;
            }
            let p = self
                .proposals
                .remove(&(index, term))
                .expect("first key exists");
            let outcome = if self.bugs.not_leader_after_snapshot || index > snapshot_index {
                Outcome::Failed(Failure::Superseded { leader })
            } else {
                self.covered_by_snapshot(node, &p, leader)
            };
            self.out.answers.push(Answer {
                reply: p.reply,
                outcome,
            });
        }
        self.observe(node, now_us);
    }

    /// Answers every proposal waiting at `index`, which the node just applied (`applied` is
    /// the command there, `None` if the entry carried none).
    fn decide_index(
        &mut self,
        node: &Node,
        now_us: Micros,
        index: Index,
        applied: Option<&Applied>,
    ) {
        let waiting: Vec<(Index, Term)> = self
            .proposals
            .range((index, 0)..=(index, Term::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in waiting {
            let p = self.proposals.remove(&key).expect("listed above");
            let outcome = match applied {
                Some(a) if a.term == key.1 => {
                    self.out.events.push(Event::Committed {
                        latency_us: now_us.saturating_sub(p.proposed_us),
                    });
                    Outcome::Applied {
                        index: a.first_applied.unwrap_or(a.index),
                        response: a.response.clone(),
                    }
                }
                _ => Outcome::Failed(Failure::Superseded {
                    leader: node.leader(),
                }),
            };
            self.out.answers.push(Answer {
                reply: p.reply,
                outcome,
            });
        }
    }

    /// The outcome of a proposal whose index a snapshot skipped over.
    fn covered_by_snapshot(
        &self,
        node: &Node,
        p: &PendingProposal<P>,
        leader: Option<NodeId>,
    ) -> Outcome {
        let Some(id) = p.request else {
            return Outcome::Indeterminate(Unknown::CoveredBySnapshot);
        };
        let sm = node.state_machine();
        if let Some((index, response)) = sm.remembered(id) {
            return Outcome::Applied { index, response };
        }
        // Not remembered. For a write on a live session whose results still reach back to
        // this request, that means it was never applied — and its own index is behind us,
        // so it never will be. Anything else cannot be told apart from "applied and
        // forgotten".
        match id {
            RequestId::Session { session, seq }
                if sm.remembers_since(session).is_some_and(|floor| seq > floor) =>
            {
                Outcome::Failed(Failure::Superseded { leader })
            }
            _ => Outcome::Indeterminate(Unknown::CoveredBySnapshot),
        }
    }

    fn count_applied(&mut self, a: &Applied) {
        if let Response::Ended { session } = &a.response {
            self.last_keepalive_us.remove(session);
        }
        match (a.command.unsealed(), &a.response) {
            (Command::Expire { .. }, Response::Ended { session }) => {
                self.out
                    .events
                    .push(Event::SessionExpired { session: *session });
            }
            (Command::Release { .. }, Response::Ended { session }) => {
                self.out
                    .events
                    .push(Event::SessionReleased { session: *session });
            }
            (
                Command::FencedPut {
                    key,
                    election,
                    token,
                    ..
                },
                Response::Rejected(
                    error @ (SmError::StaleToken { .. }
                    | SmError::TokenSuperseded { .. }
                    | SmError::TokenNotIssued { .. }
                    | SmError::WrongElection { .. }),
                ),
            ) if a.first_applied.is_none() => {
                let current = match error {
                    SmError::StaleToken { current, .. }
                    | SmError::TokenSuperseded { current, .. } => Some(*current),
                    SmError::TokenNotIssued { latest, .. } => Some(*latest),
                    _ => None,
                };
                self.out.events.push(Event::FencedRejection {
                    key: key.clone(),
                    election: election.clone(),
                    token: *token,
                    current,
                    error: error.clone(),
                });
            }
            _ => {}
        }
    }

    /// Answers the keepalives older than [`KEEPALIVE_PENDING_MAX_AGE_US`] as refused.
    pub fn expire_keepalives(&mut self, now_us: Micros) {
        // Tags rise with arrival time, so the oldest come first.
        while let Some(entry) = self.keepalives.first_entry() {
            if now_us.saturating_sub(entry.get().received_us) < KEEPALIVE_PENDING_MAX_AGE_US {
                break;
            }
            let p = entry.remove();
            self.refuse_keepalive(p, ProposeError::TooManyUncommitted);
        }
    }

    /// The node stops: every waiting proposal is indeterminate (its entry may still be
    /// committed by the others), every keepalive refused.
    pub fn stop(&mut self) {
        for (_, p) in std::mem::take(&mut self.proposals) {
            self.out.answers.push(Answer {
                reply: p.reply,
                outcome: Outcome::Indeterminate(Unknown::Stopped),
            });
        }
        for (_, p) in std::mem::take(&mut self.keepalives) {
            self.refuse_keepalive(p, ProposeError::NotLeader { leader_hint: None });
        }
        // A read that was not served changed nothing: a definite failure.
        for (_, reply) in std::mem::take(&mut self.reads) {
            self.out.answers.push(Answer {
                reply,
                outcome: Outcome::Failed(Failure::Refused(ProposeError::NotLeader {
                    leader_hint: None,
                })),
            });
        }
    }

    /// The node crashed: everything in memory is gone, and nobody is answered (the clients'
    /// connections died with the process).
    pub fn crash(&mut self) {
        self.proposals.clear();
        self.keepalives.clear();
        self.reads.clear();
        self.last_keepalive_us.clear();
        self.out = Output::default();
    }

    /// Takes the answers and events decided so far.
    pub fn drain(&mut self) -> Output<P, K> {
        std::mem::take(&mut self.out)
    }
}

#[cfg(test)]
mod tests;
