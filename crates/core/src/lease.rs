//! The node-local lease clock and the leader's session duties: when this node may expire
//! each session, which keepalives it may acknowledge, and the checkpoints and expiries it
//! proposes as leader (DESIGN rule 4).
//!
//! A keepalive is acknowledged only when [`LeaseClock::ackable`] says so, and that is the
//! one place that decides it: the leader provably still leads ([`leadership_confirmed_after`]
//! — it holds its leader lease, or a quorum acknowledged a message it sent after the
//! keepalive arrived), the session lives and is not being expired, and this leader's own
//! committed Grant or Checkpoint entries oblige any successor to keep the session for the
//! TTL counted from the keepalive's arrival.
//!
//! The clock is not replicated (local clocks differ between nodes) and not persisted: on
//! restart it is rebuilt from the state machine conservatively, as if every Grant and
//! Checkpoint had just been applied, which can only make sessions live longer, never shorter.
//!
//! **Fate-sharing sessions.** A keepalive may bind its session to the stream it came on
//! ([`Bind`]). The leader remembers, for its own term only, the stream each session is bound
//! to; when that stream is closed from the client's side ([`StreamEnd::Client`]) the holder
//! has let go of the session (the client library closes a bound stream only once its holder
//! no longer believes, or because its process exited), and the leader proposes
//! `Command::Release` at once — but never before the promises that other leaderships made
//! for the session (acknowledgements this leadership did not give) have run out, which a
//! holder that legitimately moved to another stream may still be acting on. The argument is
//! in docs/GUARANTEES.md, "Fate-sharing sessions".

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::drift::DriftPpm;
use crate::node::{Bind, KeepaliveAck, StreamEnd};
use crate::raft::{ProposeError, Raft, Role};
use crate::sm::{Command, Response, SessionId, StateMachine};
use crate::types::{Index, Payload, Term};

/// Most keepalives a leader holds while it waits to be able to acknowledge them.
pub const PENDING_KEEPALIVES_MAX: usize = 100_000;
/// Most sessions a leader expires in one tick, so that one tick's work stays bounded.
pub const EXPIRIES_PER_TICK_MAX: usize = 1_000;
/// Most sessions one Checkpoint entry carries: a leader renewing more sessions in one
/// checkpoint interval proposes several entries, so that no entry outgrows a message.
pub const CHECKPOINT_SESSIONS_MAX: usize = 4_096;

/// Whether this leader provably still leads for something that arrived at local tick
/// `received_tick` (DESIGN rule 4): it holds its leader lease, or a quorum acknowledged a
/// message it sent after that tick. Keepalives and reads without a log entry both ask this.
pub(crate) fn leadership_confirmed_after(raft: &Raft, received_tick: u64) -> bool {
    // Once TimeoutNow is out, the transferee wins with votes that ignore the refusal, so a
    // quorum round can only show that it had not won yet when the round was acknowledged,
    // not now: nothing is confirmed for the rest of the term.
    if raft.transfer_sent() {
        return false;
    }
    raft.lease_valid()
        || raft
            .quorum_heard_tick()
            .is_some_and(|heard| heard > received_tick)
}

/// A duration measured on another node's clock, stretched to be safe on ours: twice the
/// drift over it, rounded up, and one tick for the rounding of our own tick count.
fn padded(ticks: u64, drift: DriftPpm) -> u64 {
    ticks
        .saturating_add(drift.skew_over_ticks(ticks.saturating_mul(2)))
        .saturating_add(1)
}

#[derive(Clone, Copy, Debug)]
struct PendingAck {
    session: SessionId,
    tag: u64,
    received_tick: u64,
}

/// The stream a session is bound to in this leader's term (fate-sharing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Binding {
    /// The driver's id of the stream.
    stream: u64,
    /// The client's sequence number of the latest keepalive that bound it: a keepalive
    /// with a lower one, late on another stream, does not move the binding back.
    seq: u64,
}

/// When this node may expire each session, and what this node as leader has made durable
/// enough to acknowledge keepalives.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaseClock {
    /// Local tick before which this node must not expire a session.
    deadline_tick: BTreeMap<SessionId, u64>,
    /// `deadline_tick` ordered by tick, so that the leader's expiry pass looks only at the
    /// sessions that are due instead of walking every session each tick.
    due: BTreeSet<(u64, SessionId)>,
    /// For sessions this node renewed (or granted) as leader: `(tick, term)`, where `tick`
    /// is the part of `deadline_tick` owed to anyone but its leadership of `term` — the
    /// deadline as it stood before that leadership first renewed the session, raised by
    /// other leaders' entries applied since. Without an entry for the current term, all of
    /// `deadline_tick` is owed elsewhere. A fate-sharing release waits for it.
    elsewhere: BTreeMap<SessionId, (u64, Term)>,
    /// As leader: the stream each fate-sharing session is bound to, made in this term.
    bindings: BTreeMap<SessionId, Binding>,
    /// `bindings` by stream, for a stream's close.
    bound_streams: BTreeSet<(u64, SessionId)>,
    /// Bound sessions whose stream the client closed, waiting to be released (their
    /// binding stays until then, so that a later keepalive of the client on another
    /// stream can take them back).
    letting_go: BTreeSet<SessionId>,
    /// As leader of `term`: local tick up to which this leader's own committed Grant or
    /// Checkpoint entries oblige any later leader to keep the session. A keepalive is
    /// acknowledged only if `received + ttl` fits below it.
    coverage_tick: BTreeMap<SessionId, u64>,
    /// This leader's proposals of Grant and Checkpoint entries: index → (term, tick proposed).
    own: BTreeMap<Index, (Term, u64)>,
    /// Sessions renewed since the last checkpoint proposal.
    renewed: BTreeSet<SessionId>,
    /// Keepalives waiting to be acknowledged, in arrival order.
    pending: VecDeque<PendingAck>,
    /// Sessions whose Expire was proposed and not yet applied.
    expiring: BTreeSet<SessionId>,
    last_checkpoint_tick: u64,
    /// The tick of the last full pass over expiries and waiting keepalives. Both only
    /// change with time, with coverage, or with the leader's confirmation, so a pass per
    /// tick (and one whenever coverage grows) finds everything a pass per input would,
    /// without making every input cost O(sessions + waiting keepalives); a keepalive that a
    /// quorum round confirmed in between is acknowledged at the next tick.
    duties_tick: Option<u64>,
    /// An own Grant or Checkpoint was applied since the last full pass: waiting keepalives
    /// may now be covered.
    coverage_grew: bool,
    /// The term in which the leader-only parts above were built.
    leader_term: Option<Term>,
}

impl LeaseClock {
    /// The local tick before which this node will not expire `session`.
    pub(crate) fn deadline_tick(&self, session: SessionId) -> Option<u64> {
        self.deadline_tick.get(&session).copied()
    }

    /// The sessions that have a deadline, in id order.
    pub(crate) fn sessions_with_deadline(&self) -> impl Iterator<Item = SessionId> + '_ {
        self.deadline_tick.keys().copied()
    }

    /// How many sessions have a deadline.
    pub(crate) fn deadlines(&self) -> usize {
        self.deadline_tick.len()
    }

    /// A keepalive for `session` arrived now at this node (see `Node::keepalive_as`, which
    /// checked the secret). Refused unless this node leads and the session lives.
    pub(crate) fn on_keepalive(
        &mut self,
        raft: &Raft,
        sm: &StateMachine,
        session: SessionId,
        tag: u64,
        bind: Option<Bind>,
    ) -> Result<(), ProposeError> {
        if raft.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader_hint: raft.leader,
            });
        }
        // A session whose expiry this leader already proposed is as good as gone: an
        // acknowledgement now would promise time that the committed expiry takes away.
        let info = match sm.session(session) {
            Some(info) if !self.expiring.contains(&session) => info,
            _ => return Err(ProposeError::UnknownSession(session)),
        };
        let now = raft.now_tick;
        // `now` is the floor of the time elapsed, so the keepalive arrived up to one tick
        // after it: counting from the next tick never expires a session before receive
        // time + TTL.
        self.raise_own(session, raft.term, now + 1 + info.ttl_ticks);
        if let Some(bind) = bind {
            self.bind(session, bind);
        }
        self.renewed.insert(session);
        if self.pending.len() >= PENDING_KEEPALIVES_MAX {
            self.pending.pop_front();
        }
        self.pending.push_back(PendingAck {
            session,
            tag,
            received_tick: now,
        });
        Ok(())
    }

    /// Raises `session`'s deadline to `tick` for an acknowledgement of this leadership of
    /// `term`, first setting aside what was owed elsewhere (see `elsewhere`).
    fn raise_own(&mut self, session: SessionId, term: Term, tick: u64) {
        let before = self.deadline_tick.get(&session).copied().unwrap_or(0);
        match self.elsewhere.get(&session) {
            Some((_, t)) if *t == term => {}
            _ => {
                self.elsewhere.insert(session, (before, term));
            }
        }
        self.raise_deadline(session, tick);
    }

    /// Raises `session`'s deadline to `tick` (or sets it, if it had none), keeping `due`
    /// in step.
    fn raise_deadline(&mut self, session: SessionId, tick: u64) {
        match self.deadline_tick.get_mut(&session) {
            Some(deadline) if *deadline >= tick => {}
            Some(deadline) => {
                self.due.remove(&(*deadline, session));
                *deadline = tick;
                self.due.insert((tick, session));
            }
            None => {
                self.deadline_tick.insert(session, tick);
                self.due.insert((tick, session));
            }
        }
    }

    /// Forgets `session`'s deadline, keeping `due` in step.
    fn remove_deadline(&mut self, session: SessionId) {
        if let Some(deadline) = self.deadline_tick.remove(&session) {
            self.due.remove(&(deadline, session));
        }
    }

    /// Raises `session`'s deadline to `tick` for a promise made elsewhere (another leader's
    /// entry, or one this node cannot tell apart from one).
    fn raise_elsewhere(&mut self, session: SessionId, tick: u64) {
        self.raise_deadline(session, tick);
        if let Some((owed, _)) = self.elsewhere.get_mut(&session) {
            *owed = (*owed).max(tick);
        }
    }

    /// The tick before which promises made outside this node's leadership of `term` may
    /// still hold for `session`.
    fn owed_elsewhere_tick(&self, session: SessionId, term: Term) -> u64 {
        match self.elsewhere.get(&session) {
            Some((owed, t)) if *t == term => *owed,
            _ => self.deadline_tick.get(&session).copied().unwrap_or(0),
        }
    }

    /// A keepalive that the leader took binds `session` to its stream, unless the session
    /// is bound already by a later keepalive of the client (on another stream).
    fn bind(&mut self, session: SessionId, bind: Bind) {
        if let Some(current) = self.bindings.get_mut(&session) {
            if current.stream == bind.stream {
                current.seq = current.seq.max(bind.seq);
                return;
            }
            if current.seq >= bind.seq {
                return;
            }
            self.bound_streams.remove(&(current.stream, session));
            self.letting_go.remove(&session);
        }
        self.bindings.insert(
            session,
            Binding {
                stream: bind.stream,
                seq: bind.seq,
            },
        );
        self.bound_streams.insert((bind.stream, session));
    }

    /// The stream `stream` ended, closed by `end`. Sessions bound to it by a client that
    /// closed it are let go of (released as soon as [`LeaseClock::leader_duties`] may);
    /// a stream the server ended itself only loses its bindings. Nothing happens on a node
    /// that does not lead, or for a stream nothing is bound to.
    pub(crate) fn on_stream_end(&mut self, raft: &Raft, stream: u64, end: StreamEnd) {
        if raft.role != Role::Leader || self.leader_term != Some(raft.term) {
            return;
        }
        let sessions: Vec<SessionId> = self
            .bound_streams
            .range((stream, SessionId::MIN)..=(stream, SessionId::MAX))
            .map(|(_, s)| *s)
            .collect();
        let by_client = end == StreamEnd::Client || injected!(raft.bugs.release_on_server_close);
        for session in sessions {
            if by_client {
                self.letting_go.insert(session);
            } else {
                self.bindings.remove(&session);
                self.bound_streams.remove(&(stream, session));
            }
        }
    }

    /// The stream `session` is bound to in this term, if any (for tests and status pages).
    pub(crate) fn bound_stream(&self, session: SessionId) -> Option<u64> {
        self.bindings.get(&session).map(|b| b.stream)
    }

    /// This leader proposed a Grant at `index` in `term`, at local tick `now`.
    pub(crate) fn on_grant_proposed(&mut self, index: Index, term: Term, now: u64) {
        self.own.insert(index, (term, now));
    }

    /// The entry at `index` was a retry that changed nothing: only the bookkeeping of own
    /// proposals must forget the index.
    pub(crate) fn on_retry_applied(&mut self, index: Index) {
        self.own.remove(&index);
    }

    /// Keep the clock in step with the replicated sessions: `command` at `index` (of `term`)
    /// was applied with `response`.
    pub(crate) fn on_applied(
        &mut self,
        raft: &Raft,
        sm: &StateMachine,
        (index, term): (Index, Term),
        command: &Command,
        response: &Response,
    ) {
        let now = raft.now_tick;
        let drift = padding_drift(raft);
        // An entry this node proposed as leader in its current term: its acknowledgements
        // are tracked exactly, so it only extends coverage. Anything else comes from
        // another leader (or an earlier life of this one) whose acknowledgements we cannot
        // see, so we keep the session at least as long as that entry promised, padded for
        // clock drift between us.
        let own = match self.own.remove(&index) {
            Some((t, proposed)) if t == term && self.leader_term == Some(term) => Some(proposed),
            _ => None,
        };
        match (command.unsealed(), response) {
            (Command::Grant { .. }, Response::Granted { session, ttl_ticks }) => {
                match own {
                    Some(_) => self.raise_own(*session, term, now + 1 + ttl_ticks),
                    None => self.raise_elsewhere(*session, now + padded(*ttl_ticks, drift)),
                }
                if let Some(proposed) = own {
                    // One tick more than the TTL: a successor counts the TTL from the tick
                    // after it applies this entry (`padded` adds it), never from before.
                    self.coverage_tick
                        .insert(*session, proposed + 1 + ttl_ticks);
                    self.coverage_grew = true;
                }
            }
            (Command::Checkpoint { remaining }, Response::Checkpointed) => {
                if own.is_some() {
                    self.coverage_grew = true;
                }
                for (s, r) in remaining {
                    if sm.session(*s).is_none() {
                        continue;
                    }
                    match own {
                        Some(proposed) => {
                            let c = self.coverage_tick.entry(*s).or_insert(0);
                            *c = (*c).max(proposed + r);
                        }
                        None => self.raise_elsewhere(*s, now + padded(*r, drift)),
                    }
                }
            }
            (_, Response::Ended { session }) => {
                if !injected!(raft.bugs.keep_ended_deadline) {
                    self.remove_deadline(*session);
                }
                self.elsewhere.remove(session);
                if let Some(b) = self.bindings.remove(session) {
                    self.bound_streams.remove(&(b.stream, *session));
                }
                self.letting_go.remove(session);
                self.coverage_tick.remove(session);
                self.renewed.remove(session);
                self.expiring.remove(session);
            }
            _ => {}
        }
    }

    /// Conservative deadlines for every session, as if its last Grant or Checkpoint had
    /// been applied just now (after a restart or an installed snapshot).
    pub(crate) fn reset_from_state_machine(&mut self, raft: &Raft, sm: &StateMachine) {
        let now = raft.now_tick;
        let drift = padding_drift(raft);
        self.deadline_tick = sm
            .sessions()
            .map(|(s, info)| (s, now + padded(info.remaining_ticks, drift)))
            .collect();
        self.due = self.deadline_tick.iter().map(|(s, d)| (*d, *s)).collect();
        self.elsewhere.clear();
        self.coverage_tick.clear();
        self.expiring.clear();
    }

    /// Leader-only work after every input: checkpoints, expiries, keepalive acks (pushed on
    /// `acks`).
    pub(crate) fn leader_duties(
        &mut self,
        raft: &mut Raft,
        sm: &StateMachine,
        acks: &mut Vec<KeepaliveAck>,
    ) {
        let term = raft.term;
        if raft.role != Role::Leader {
            if self.leader_term.is_some() {
                self.drop_leader_state();
            }
            return;
        }
        if self.leader_term != Some(term) {
            self.drop_leader_state();
            self.leader_term = Some(term);
            self.last_checkpoint_tick = raft.now_tick;
        }
        if !raft.leader_ready() {
            return;
        }
        let now = raft.now_tick;
        self.propose_checkpoint_if_due(raft, sm, now);
        let new_tick = self.duties_tick != Some(now);
        if new_tick {
            self.duties_tick = Some(now);
            self.propose_expiries(raft, now);
        }
        if !self.letting_go.is_empty() {
            self.propose_releases(raft, now);
        }
        if new_tick || std::mem::take(&mut self.coverage_grew) {
            self.acknowledge_keepalives(raft, sm, now, acks);
        } else {
            self.acknowledge_newest_keepalive(raft, sm, acks);
        }
    }

    fn drop_leader_state(&mut self) {
        self.bindings.clear();
        self.bound_streams.clear();
        self.letting_go.clear();
        self.coverage_tick.clear();
        self.own.clear();
        self.renewed.clear();
        self.pending.clear();
        self.expiring.clear();
        self.duties_tick = None;
        self.coverage_grew = false;
        self.leader_term = None;
    }

    fn propose_checkpoint_if_due(&mut self, raft: &mut Raft, sm: &StateMachine, now: u64) {
        let interval = raft.config.lease_checkpoint_ticks;
        if now < self.last_checkpoint_tick + interval || raft.check_can_propose().is_err() {
            // Not now: the renewed sessions wait for the next try.
            return;
        }
        // Sessions renewed since the last checkpoint, and sessions with keepalives waiting
        // for coverage, get a checkpoint that covers keepalives received over the next two
        // intervals, so that acknowledgements flow without waiting on every commit.
        let mut sessions: BTreeSet<SessionId> = std::mem::take(&mut self.renewed);
        sessions.extend(self.pending.iter().map(|p| p.session));
        let remaining: Vec<(SessionId, u64)> = sessions
            .into_iter()
            .filter_map(|s| sm.session(s).map(|info| (s, info.ttl_ticks + 2 * interval)))
            .collect();
        if remaining.is_empty() {
            return;
        }
        self.last_checkpoint_tick = now;
        for (k, chunk) in remaining.chunks(CHECKPOINT_SESSIONS_MAX).enumerate() {
            if raft.check_can_propose().is_err() {
                // The log filled up midway: what was not proposed goes with the next one.
                let rest = &remaining[k * CHECKPOINT_SESSIONS_MAX..];
                self.renewed.extend(rest.iter().map(|(s, _)| *s));
                return;
            }
            let (index, term) = raft.append_as_leader(Payload::Command(Command::Checkpoint {
                remaining: chunk.to_vec(),
            }));
            self.own.insert(index, (term, now));
        }
    }

    fn propose_expiries(&mut self, raft: &mut Raft, now: u64) {
        if raft.check_can_propose().is_err() {
            return;
        }
        // Sessions being expired stay in `due` until their Expire applies; there are at
        // most a few ticks' worth of them, so skipping them keeps the pass bounded.
        let due: Vec<SessionId> = self
            .due
            .range(..=(now, SessionId::MAX))
            .map(|(_, s)| *s)
            .filter(|s| !self.expiring.contains(s))
            .take(EXPIRIES_PER_TICK_MAX)
            .collect();
        for session in due {
            self.expiring.insert(session);
            raft.append_as_leader(Payload::Command(Command::Expire { session }));
        }
    }

    /// Proposes `Release` for every session whose bound stream its client closed, once the
    /// promises made for it outside this leadership have run out (until then it waits, and
    /// a later keepalive of the client that binds another stream takes it back). Like
    /// expiries, only a leader that has applied everything committed before its term
    /// proposes one: only then has it seen every other leader's promise.
    fn propose_releases(&mut self, raft: &mut Raft, now: u64) {
        if raft.check_can_propose().is_err() {
            return;
        }
        let term = raft.term;
        let due: Vec<SessionId> = self
            .letting_go
            .iter()
            .copied()
            .filter(|s| {
                injected!(raft.bugs.release_ignores_older_promises)
                    || self.owed_elsewhere_tick(*s, term) <= now
            })
            .take(EXPIRIES_PER_TICK_MAX)
            .collect();
        for session in due {
            self.letting_go.remove(&session);
            if let Some(b) = self.bindings.remove(&session) {
                self.bound_streams.remove(&(b.stream, session));
            }
            if self.expiring.insert(session) {
                raft.append_as_leader(Payload::Command(Command::Release { session }));
            }
        }
    }

    /// The one decision of whether the waiting keepalive `p` can be acknowledged now; its
    /// session's TTL if so. The leader provably still leads for it
    /// ([`leadership_confirmed_after`] its arrival), the session lives and is not being
    /// expired, and this leader's committed entries oblige any successor to keep the session
    /// for the TTL counted from the keepalive's arrival.
    fn ackable(&self, raft: &Raft, sm: &StateMachine, p: &PendingAck) -> Option<u64> {
        let ttl = sm.session(p.session)?.ttl_ticks;
        let covered = self
            .coverage_tick
            .get(&p.session)
            .is_some_and(|c| *c >= p.received_tick + 1 + ttl);
        let ok = !self.expiring.contains(&p.session)
            && covered
            && leadership_confirmed_after(raft, p.received_tick);
        ok.then_some(ttl)
    }

    /// Acknowledge the keepalive that arrived last, if it can be at once; the others wait
    /// for the next full pass (they were not ackable at the last one, and nothing that
    /// would change that within the tick happened since, but a quorum round).
    fn acknowledge_newest_keepalive(
        &mut self,
        raft: &Raft,
        sm: &StateMachine,
        acks: &mut Vec<KeepaliveAck>,
    ) {
        let Some(p) = self.pending.back() else {
            return;
        };
        if let Some(ttl_ticks) = self.ackable(raft, sm, p) {
            let p = self.pending.pop_back().expect("just looked");
            acks.push(KeepaliveAck {
                session: p.session,
                tag: p.tag,
                ttl_ticks,
            });
        }
    }

    /// A full pass over the waiting keepalives: acknowledge what can be, keep what may still
    /// be, drop the rest.
    fn acknowledge_keepalives(
        &mut self,
        raft: &Raft,
        sm: &StateMachine,
        now: u64,
        acks: &mut Vec<KeepaliveAck>,
    ) {
        if self.pending.is_empty() {
            return;
        }
        let t = raft.config.election_timeout_ticks;
        let mut keep = VecDeque::new();
        for p in std::mem::take(&mut self.pending) {
            if sm.session(p.session).is_none() || self.expiring.contains(&p.session) {
                // The session is gone or going: this keepalive will never be acknowledged.
                continue;
            }
            if let Some(ttl_ticks) = self.ackable(raft, sm, &p) {
                acks.push(KeepaliveAck {
                    session: p.session,
                    tag: p.tag,
                    ttl_ticks,
                });
            } else if now < p.received_tick + t {
                keep.push_back(p);
            }
            // Older than T: the client has long retried; dropping it loses nothing.
        }
        self.pending = keep;
    }

    /// Invariant: while not leading, no keepalive waits and no leader-only state is kept
    /// (no session is bound to a stream: a binding never outlives the term it was made in).
    /// Invariant: every waiting keepalive arrived at or before the current tick, in order.
    /// Invariant: the index of bindings by stream lists exactly the bindings, and only
    /// bound sessions whose stream was closed wait to be released.
    /// Invariant: the deadlines by tick list exactly the deadlines (checked in full only
    /// when there are few, to keep checking cheap).
    pub(crate) fn check_invariants(&self, raft: &Raft) {
        assert_eq!(
            self.due.len(),
            self.deadline_tick.len(),
            "node {}: deadlines by tick out of step",
            raft.id
        );
        if self.deadline_tick.len() <= 64 {
            assert!(
                self.deadline_tick
                    .iter()
                    .all(|(s, d)| self.due.contains(&(*d, *s))),
                "node {}: deadlines by tick out of step",
                raft.id
            );
        }
        if raft.role != Role::Leader {
            assert!(
                self.leader_term.is_none() && self.pending.is_empty() && self.bindings.is_empty(),
                "node {}: a {:?} keeps leader lease state",
                raft.id,
                raft.role
            );
        }
        assert!(
            self.bindings.len() == self.bound_streams.len()
                && self
                    .letting_go
                    .iter()
                    .all(|s| self.bindings.contains_key(s)),
            "node {}: {} bindings, {} indexed by stream, {} waiting to be released",
            raft.id,
            self.bindings.len(),
            self.bound_streams.len(),
            self.letting_go.len()
        );
        if let (Some(first), Some(last)) = (self.pending.front(), self.pending.back()) {
            assert!(
                first.received_tick <= last.received_tick && last.received_tick <= raft.now_tick,
                "node {}: waiting keepalives out of arrival order or from the future",
                raft.id
            );
        }
    }
}

/// The drift bound used to pad durations measured on other nodes' clocks (zero under the
/// injected `no_checkpoint_drift_padding` bug).
fn padding_drift(raft: &Raft) -> DriftPpm {
    if injected!(raft.bugs.no_checkpoint_drift_padding) {
        DriftPpm::ZERO
    } else {
        raft.config.clock_drift_max
    }
}
