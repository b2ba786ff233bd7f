//! Raft consensus: elections, replication, commitment, transfer, membership, snapshots.
//!
//! This module knows nothing about what entries mean; [`crate::node::Node`] applies them.
//! Section numbers refer to the Raft paper ("In Search of an Understandable Consensus
//! Algorithm", extended version) and Ongaro's dissertation.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::bugs::InjectedBugs;
use crate::config::Config;
use crate::event::{NodeEvent, StepDownReason};
use crate::log::RaftLog;
use crate::message::{Body, Message, RejectHint};
use crate::quorum::{
    committed_index_by, joint_committed_index_by, joint_vote_result, vote_result, VoteResult,
};
use crate::types::{Entry, HardState, Index, Membership, NodeId, Payload, Snapshot, Term};

mod leader;

/// A node's role (Raft §5.1, plus the pre-candidate of dissertation §9.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Follows a leader, or waits for one.
    Follower,
    /// Asks whether it could win before disturbing anyone with a new term.
    PreCandidate,
    /// Campaigns in its current term.
    Candidate,
    /// Leads its term.
    Leader,
}

/// The leader's view of one peer's log (Raft Figure 2, `nextIndex`/`matchIndex`).
#[derive(Clone, Debug)]
pub(crate) struct Progress {
    /// Highest index known stored on the peer.
    pub(crate) match_index: Index,
    /// Next index to send.
    pub(crate) next_index: Index,
    /// While probing, send one batch per heartbeat and wait for the answer instead of
    /// streaming, because we do not know where the peer's log diverges.
    pub(crate) probing: bool,
    /// Highest `sent_tick` the peer echoed in this term: it heard from us at or after it.
    pub(crate) acked_sent_tick: Option<u64>,
    /// Heard from in the current check-quorum period.
    pub(crate) recent_active: bool,
    /// Local tick when a snapshot was last sent, to avoid sending one every heartbeat.
    pub(crate) snapshot_sent_tick: Option<u64>,
    /// Local tick of the last answer heard from the peer in this term, for status pages
    /// ("last contact"); nothing in consensus reads it.
    pub(crate) heard_tick: Option<u64>,
}

impl Progress {
    fn new(next_index: Index) -> Progress {
        Progress {
            match_index: 0,
            next_index,
            probing: true,
            acked_sent_tick: None,
            recent_active: false,
            snapshot_sent_tick: None,
            heard_tick: None,
        }
    }
}

/// An in-progress leadership transfer (dissertation §3.10).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transfer {
    pub(crate) to: NodeId,
    pub(crate) elapsed_ticks: u64,
}

/// Why a leader-only operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node does not lead; try `leader_hint` if known.
    #[error("not the leader (leader hint: {leader_hint:?})")]
    NotLeader {
        /// The leader this node last heard from in its current term.
        leader_hint: Option<NodeId>,
    },
    /// A leadership transfer is in progress; retry at the new leader.
    #[error("leadership transfer in progress")]
    Transferring,
    /// Too many proposals wait for commitment; retry later.
    #[error("too many uncommitted entries")]
    TooManyUncommitted,
    /// A membership change is still in flight.
    #[error("a membership change is still in progress")]
    MembershipChangePending,
    /// The requested membership is not acceptable.
    #[error("invalid membership: {0}")]
    InvalidMembership(String),
    /// Keepalive for a session that does not exist.
    #[error("session {0} does not exist")]
    UnknownSession(u64),
    /// The command breaks the cluster's limits; nothing was proposed.
    #[error("invalid command: {0}")]
    Invalid(crate::sm::SmError),
    /// Clients may not propose commands reserved to the leader (`Expire`, `Release`,
    /// `Checkpoint`).
    #[error("this command is reserved to the leader")]
    ClientCommandNotAllowed,
    /// Only `Get` and `Leader` are served as reads without a log entry.
    #[error("not a read")]
    NotARead,
    /// The leader could not confirm with a quorum, within two election timeouts, that it
    /// still leads; the read was not served. Retry (at the leader of the moment).
    #[error("could not confirm leadership with a quorum")]
    LeadershipUnconfirmed,
}

/// A message that cannot be processed. The node's state is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Addressed to another node.
    #[error("message for node {to} delivered to node {me}")]
    WrongRecipient {
        /// Intended receiver.
        to: NodeId,
        /// This node.
        me: NodeId,
    },
    /// Sender id is 0 or this node itself.
    #[error("invalid sender {0}")]
    InvalidSender(NodeId),
    /// The message is internally inconsistent.
    #[error("malformed {kind}: {why}")]
    Malformed {
        /// Message kind.
        kind: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// The consensus half of a node.
#[derive(Clone, Debug)]
pub(crate) struct Raft {
    pub(crate) id: NodeId,
    pub(crate) config: Config,
    /// Known bugs switched back on (`inject-bugs` builds only; empty otherwise).
    pub(crate) bugs: InjectedBugs,
    rng: ChaCha8Rng,

    pub(crate) term: Term,
    pub(crate) vote: Option<NodeId>,
    pub(crate) role: Role,
    pub(crate) leader: Option<NodeId>,
    pub(crate) log: RaftLog,

    /// Membership from the snapshot (or bootstrap) that later config entries build on.
    base_membership: Membership,
    /// The effective membership: the latest config in the log, committed or not.
    pub(crate) membership: Membership,
    /// Index of the entry that set `membership` (the snapshot index if none follows it).
    pub(crate) membership_index: Index,
    /// The log's `shape_version` when `membership` was last recomputed from it: the log
    /// has not changed since if it still matches.
    membership_shape: Option<u64>,
    /// Bumped whenever `membership` takes a different value (see `Status::membership_epoch`).
    pub(crate) membership_epoch: u64,

    /// This node's local clock, in ticks since it started.
    pub(crate) now_tick: u64,
    election_elapsed_ticks: u64,
    /// Drawn from `[T, 2T)` in thousandths of a tick.
    randomized_timeout_milliticks: u64,
    /// Ticks since this node last heard from a leader of its term (or started): while below
    /// T it refuses to (pre-)vote for anyone, which is what makes the leader lease sound.
    leader_contact_elapsed_ticks: u64,
    heartbeat_elapsed_ticks: u64,
    check_quorum_elapsed_ticks: u64,

    votes: BTreeMap<NodeId, bool>,
    pub(crate) progress: BTreeMap<NodeId, Progress>,
    pub(crate) transfer: Option<Transfer>,
    /// Set once this leader sent TimeoutNow: another node may win at any moment, so this
    /// leader's lease is over for the rest of its term.
    lease_void: bool,
    /// (leader, term): this follower's connection to the leader of `term` closed. A
    /// refused reconnect that follows proves the leader's process gone (`fast_election`).
    leader_closed: Option<(NodeId, Term)>,
    /// Bumped whenever the (term, leader) this node knows changes; a refused dial counts
    /// only if the dial started while the node already followed the leader it refuses
    /// (`peer_reconnect_refused`).
    follow_epoch: u64,
    /// The (term, leader) `follow_epoch` belongs to.
    follow_seen: (Term, Option<NodeId>),
    /// The last tick at which this node refused a pre-vote because it still heard from its
    /// leader: if the leader turns out gone right after, that candidate raced this node's
    /// own news of it (fast election's turns).
    pre_vote_refused_tick: Option<u64>,
    /// The tick at which this node's latest pre-vote round started.
    pre_vote_round_tick: u64,
    /// Index of this leader's first entry of its term.
    pub(crate) term_start_index: Index,

    /// The latest snapshot (taken or installed), kept to send to lagging followers.
    pub(crate) snapshot: Option<Snapshot>,
    /// A snapshot received from the leader that the state machine must load.
    pub(crate) snapshot_to_restore: Option<Snapshot>,
    /// A snapshot the driver must persist.
    pub(crate) snapshot_to_persist: Option<Snapshot>,

    pub(crate) msgs: Vec<Message>,
    /// This leader appended entries that its streaming followers have not been sent yet:
    /// they leave together at the next Ready (`flush_appends`).
    pub(crate) appends_pending: bool,
    /// What happened, for `AfterPersist::events`, in order.
    pub(crate) events: Vec<NodeEvent>,
    /// Set by a leader-only code path just before it steps down, with its reason; a leader
    /// that steps down otherwise saw a higher term.
    stepping_down: Option<StepDownReason>,
    /// The hard state as last made durable by the driver.
    pub(crate) persisted_hard_state: HardState,
}

impl Raft {
    pub(crate) fn new(
        config: Config,
        hard_state: HardState,
        snapshot: Option<Snapshot>,
        entries: Vec<Entry>,
    ) -> Raft {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        let (snap_index, snap_term, base_membership) = match &snapshot {
            Some(s) => (s.index, s.term, s.membership.clone()),
            None => (0, 0, Membership::new(config.initial_voters.iter().copied())),
        };
        let mut log = RaftLog::restored(snap_index, snap_term, entries);
        // The persisted commit index may run ahead of a torn log tail; it is only a hint.
        log.committed = hard_state.commit.clamp(snap_index, log.last_index());
        let mut raft = Raft {
            id: config.id,
            bugs: InjectedBugs::default(),
            rng,
            term: hard_state.term,
            vote: hard_state.vote,
            role: Role::Follower,
            leader: None,
            log,
            membership: base_membership.clone(),
            base_membership,
            membership_index: snap_index,
            membership_shape: None,
            membership_epoch: 0,
            now_tick: 0,
            election_elapsed_ticks: 0,
            randomized_timeout_milliticks: 0,
            leader_contact_elapsed_ticks: 0,
            heartbeat_elapsed_ticks: 0,
            check_quorum_elapsed_ticks: 0,
            votes: BTreeMap::new(),
            progress: BTreeMap::new(),
            transfer: None,
            lease_void: false,
            leader_closed: None,
            follow_epoch: 0,
            follow_seen: (0, None),
            pre_vote_refused_tick: None,
            pre_vote_round_tick: 0,
            term_start_index: 0,
            snapshot,
            snapshot_to_restore: None,
            snapshot_to_persist: None,
            msgs: Vec::new(),
            appends_pending: false,
            events: Vec::new(),
            stepping_down: None,
            persisted_hard_state: hard_state,
            config,
        };
        raft.recompute_membership();
        raft.reset_election_timer();
        raft
    }

    // ----- queries -------------------------------------------------------------------

    pub(crate) fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed,
        }
    }

    /// The hard state the driver must persist now, if it changed.
    pub(crate) fn take_hard_state(&mut self) -> Option<HardState> {
        let hs = self.hard_state();
        if hs == self.persisted_hard_state {
            return None;
        }
        self.persisted_hard_state = hs;
        let mut out = hs;
        if injected!(self.bugs.no_vote_persist) {
            out.vote = None;
        }
        Some(out)
    }

    fn promotable(&self) -> bool {
        self.membership.is_voter(self.id)
    }

    fn t(&self) -> u64 {
        self.config.election_timeout_ticks
    }

    /// True while this node must refuse to (pre-)vote for another: it is the leader, or it
    /// heard from a leader (or started) less than T ago.
    fn in_vote_lease(&self) -> bool {
        self.config.check_quorum
            && !injected!(self.bugs.no_vote_refusal)
            && (self.role == Role::Leader || self.leader_contact_elapsed_ticks < self.t())
    }

    /// A leadership transfer is in progress.
    pub(crate) fn transferring(&self) -> bool {
        self.transfer.is_some()
    }

    /// The leader has applied everything committed before its term, so its view of the
    /// replicated state is complete.
    pub(crate) fn leader_ready(&self) -> bool {
        self.role == Role::Leader
            && self.log.committed >= self.term_start_index
            && self.log.applied >= self.term_start_index
    }

    // ----- role changes --------------------------------------------------------------

    fn reset_election_timer(&mut self) {
        self.election_elapsed_ticks = 0;
        let t_milli = self.t() * 1000;
        self.randomized_timeout_milliticks = t_milli + self.rng.next_u64() % t_milli;
    }

    fn reset_term(&mut self, term: Term) {
        if self.term != term {
            self.term = term;
            self.vote = None;
        }
        self.leader = None;
        self.votes.clear();
        self.transfer = None;
        self.lease_void = false;
        self.reset_election_timer();
    }

    pub(crate) fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        let (old_term, old_leader) = (self.term, self.leader);
        match self.role {
            Role::Leader => {
                let reason = match (self.stepping_down.take(), self.transfer) {
                    (Some(reason), _) => reason,
                    (None, Some(t)) if term > old_term => StepDownReason::Transferred { to: t.to },
                    (None, None) if term > old_term => StepDownReason::HigherTerm { term },
                    (None, _) => panic!(
                        "node {}: leader of term {old_term} stepped down without a reason",
                        self.id
                    ),
                };
                self.events.push(NodeEvent::SteppedDown {
                    term: old_term,
                    reason,
                });
            }
            Role::PreCandidate => self.events.push(NodeEvent::PreVoteLost { term: old_term }),
            Role::Follower | Role::Candidate => {}
        }
        self.reset_term(term);
        self.role = Role::Follower;
        self.leader = leader;
        self.progress.clear();
        if let Some(l) = leader {
            if (Some(l), term) != (old_leader, old_term) {
                self.events.push(NodeEvent::LeaderKnown { term, leader: l });
            }
        }
    }

    fn become_pre_candidate(&mut self) {
        assert_ne!(
            self.role,
            Role::Leader,
            "a leader cannot become pre-candidate"
        );
        if self.role == Role::PreCandidate {
            // The last round timed out without a majority either way.
            self.events.push(NodeEvent::PreVoteLost { term: self.term });
        }
        self.events.push(NodeEvent::ElectionStarted {
            term: self.term + 1,
            pre_vote: true,
        });
        self.role = Role::PreCandidate;
        self.pre_vote_round_tick = self.now_tick;
        self.leader = None;
        self.votes.clear();
        self.reset_election_timer();
    }

    fn become_candidate(&mut self) {
        assert_ne!(self.role, Role::Leader, "a leader cannot become candidate");
        let term = self.term + 1;
        self.reset_term(term);
        self.role = Role::Candidate;
        self.vote = Some(self.id);
        self.events.push(NodeEvent::ElectionStarted {
            term,
            pre_vote: false,
        });
    }

    fn become_leader(&mut self) {
        assert!(
            matches!(self.role, Role::Candidate),
            "node {} became leader from {:?}",
            self.id,
            self.role
        );
        self.role = Role::Leader;
        self.leader = Some(self.id);
        self.events
            .push(NodeEvent::BecameLeader { term: self.term });
        self.transfer = None;
        self.lease_void = false;
        self.heartbeat_elapsed_ticks = 0;
        self.check_quorum_elapsed_ticks = 0;
        self.reset_progress();
        // A no-op of the new term lets the leader commit everything before it (Raft §5.4.2,
        // §8): until it commits, the leader does not know what is committed.
        let index = self.log.last_index() + 1;
        self.term_start_index = index;
        self.log.append(Entry {
            term: self.term,
            index,
            payload: Payload::Noop,
        });
        self.broadcast_append();
    }

    fn reset_progress(&mut self) {
        let next = self.log.last_index() + 1;
        self.progress = self
            .membership
            .all_nodes()
            .into_iter()
            .filter(|id| *id != self.id)
            .map(|id| (id, Progress::new(next)))
            .collect();
    }

    // ----- ticks ---------------------------------------------------------------------

    pub(crate) fn tick(&mut self) {
        self.now_tick += 1;
        match self.role {
            Role::Leader => self.tick_leader(),
            _ => self.tick_election(),
        }
    }

    fn tick_election(&mut self) {
        self.election_elapsed_ticks += 1;
        self.leader_contact_elapsed_ticks = self.leader_contact_elapsed_ticks.saturating_add(1);
        if self.promotable()
            && self.election_elapsed_ticks * 1000 >= self.randomized_timeout_milliticks
        {
            self.start_election(false);
        }
    }

    // ----- elections -----------------------------------------------------------------

    fn start_election(&mut self, transfer: bool) {
        if self.config.pre_vote && !transfer {
            self.become_pre_candidate();
            self.votes.insert(self.id, true);
            let term = self.term + 1;
            self.send_to_voters(term, |log| Body::PreVote {
                last_log_index: log.last_index(),
                last_log_term: log.last_term(),
            });
            self.count_votes();
        } else {
            self.request_votes(transfer);
        }
    }

    /// Whether this node's own pre-vote round, started this tick or the one before, goes
    /// before a rival's crossing it: two pre-candidates that grant each other both become
    /// candidates in the same term, each voting for itself, and with two voters left neither
    /// wins (a split vote costs another randomized timeout). So a fresh round gives way only
    /// to a rival with a better log, or an as good one and a lower id, or one that already
    /// refused this round; an older round gives way to anyone, so that a pre-candidate that
    /// cannot win (cut off from the others) never holds up one that can. Refusing a pre-vote
    /// is always safe: a grant changes no term and no vote.
    fn pre_vote_round_goes_first(&self, rival: NodeId, index: Index, term: Term) -> bool {
        if self.role != Role::PreCandidate
            || self.now_tick > self.pre_vote_round_tick + 1
            || self.votes.get(&rival) == Some(&false)
        {
            return false;
        }
        if !self.log.is_up_to_date(index, term) {
            return true;
        }
        let as_good = (term, index) == (self.log.last_term(), self.log.last_index());
        as_good && self.id < rival
    }

    /// Become a candidate in a new term and ask every voter for its vote (`transfer`: on
    /// the leader's TimeoutNow, which lets voters set aside their lease).
    fn request_votes(&mut self, transfer: bool) {
        self.become_candidate();
        self.votes.insert(self.id, true);
        let term = self.term;
        self.send_to_voters(term, |log| Body::RequestVote {
            last_log_index: log.last_index(),
            last_log_term: log.last_term(),
            transfer,
        });
        self.count_votes();
    }

    fn send_to_voters(&mut self, term: Term, body: impl Fn(&RaftLog) -> Body) {
        let mut voters = self.membership.voters.clone();
        voters.extend(self.membership.voters_outgoing.iter().copied());
        for to in voters {
            if to != self.id {
                let b = body(&self.log);
                self.send(to, term, b);
            }
        }
    }

    fn count_votes(&mut self) {
        let result = if injected!(self.bugs.joint_vote_one_half) {
            vote_result(&self.membership.voters, &self.votes)
        } else {
            joint_vote_result(&self.membership, &self.votes)
        };
        match result {
            VoteResult::Won => match self.role {
                Role::PreCandidate => self.request_votes(false),
                Role::Candidate => self.become_leader(),
                _ => {}
            },
            VoteResult::Lost => {
                let term = self.term;
                self.become_follower(term, None);
            }
            VoteResult::Pending => {}
        }
    }

    // ----- messages ------------------------------------------------------------------

    fn send(&mut self, to: NodeId, term: Term, body: Body) {
        self.msgs.push(Message {
            from: self.id,
            to,
            term,
            body,
        });
    }

    fn validate(&self, m: &Message) -> Result<(), StepError> {
        if m.to != self.id {
            return Err(StepError::WrongRecipient {
                to: m.to,
                me: self.id,
            });
        }
        if m.from == 0 || m.from == self.id {
            return Err(StepError::InvalidSender(m.from));
        }
        let malformed = |why: String| StepError::Malformed {
            kind: m.body.kind(),
            why,
        };
        match &m.body {
            Body::AppendEntries {
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                ..
            } => {
                let mut last_term = *prev_log_term;
                for (k, e) in entries.iter().enumerate() {
                    if e.index != prev_log_index + 1 + k as Index {
                        return Err(malformed(format!("entry {k} has index {}", e.index)));
                    }
                    if e.term < last_term || e.term > m.term {
                        return Err(malformed(format!("entry {} has term {}", e.index, e.term)));
                    }
                    last_term = e.term;
                }
                if *prev_log_term > m.term {
                    return Err(malformed("prev_log_term above the message term".into()));
                }
                let _ = leader_commit;
            }
            Body::InstallSnapshot { snapshot, .. } => {
                if snapshot.index == 0 || snapshot.membership.voters.is_empty() {
                    return Err(malformed("empty snapshot".into()));
                }
                if snapshot.term > m.term {
                    return Err(malformed("snapshot term above the message term".into()));
                }
            }
            Body::PreVote { last_log_term, .. } | Body::RequestVote { last_log_term, .. }
                if *last_log_term > m.term =>
            {
                return Err(malformed("last_log_term above the message term".into()));
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn step(&mut self, m: Message) -> Result<(), StepError> {
        self.validate(&m)?;

        if m.term > self.term {
            match &m.body {
                Body::PreVote { .. } => {}
                // Our own pre-vote round, answered positively, carries the term we would
                // campaign in; it is not a newer term.
                Body::PreVoteResponse { granted: true } => {}
                Body::RequestVote {
                    transfer: false, ..
                } if self.in_vote_lease() => {
                    // Check-quorum (dissertation §4.2.3): a node that hears from a live
                    // leader ignores disruptive candidates, without even adopting the term.
                    return Ok(());
                }
                Body::AppendEntries { .. } | Body::InstallSnapshot { .. } => {
                    self.become_follower(m.term, Some(m.from));
                }
                _ => self.become_follower(m.term, None),
            }
        } else if m.term < self.term {
            match &m.body {
                Body::AppendEntries { sent_tick, .. } | Body::InstallSnapshot { sent_tick, .. } => {
                    // Tell a stale leader about the newer term so that it steps down; with
                    // pre-vote, nothing else would (dissertation §9.6).
                    let sent_tick = *sent_tick;
                    self.refuse_append(m.from, None, sent_tick);
                }
                Body::PreVote { .. } => {
                    self.send(m.from, self.term, Body::PreVoteResponse { granted: false });
                }
                _ => {}
            }
            return Ok(());
        }

        match m.body {
            Body::PreVote {
                last_log_index,
                last_log_term,
            } => {
                let in_lease = self.in_vote_lease();
                if in_lease {
                    self.pre_vote_refused_tick = Some(self.now_tick);
                }
                let granted = m.term > self.term
                    && !in_lease
                    && !self.pre_vote_round_goes_first(m.from, last_log_index, last_log_term)
                    && (self.log.is_up_to_date(last_log_index, last_log_term)
                        || injected!(self.bugs.vote_without_log_check));
                let term = if granted { m.term } else { self.term };
                self.send(m.from, term, Body::PreVoteResponse { granted });
            }
            Body::RequestVote {
                last_log_index,
                last_log_term,
                transfer,
            } => {
                let can_vote = self.vote.is_none()
                    || self.vote == Some(m.from)
                    || (injected!(self.bugs.double_vote) && self.role == Role::Follower);
                let lease_ok = transfer || !self.in_vote_lease() || self.vote == Some(m.from);
                let granted = can_vote
                    && lease_ok
                    && self.role != Role::Leader
                    && (self.log.is_up_to_date(last_log_index, last_log_term)
                        || injected!(self.bugs.vote_without_log_check));
                if granted {
                    // A vote once cast stands for the whole term (a repeated grant is the
                    // same vote).
                    self.vote = self.vote.or(Some(m.from));
                    self.election_elapsed_ticks = 0;
                }
                let term = self.term;
                self.send(m.from, term, Body::RequestVoteResponse { granted });
            }
            Body::PreVoteResponse { granted } => {
                if self.role == Role::PreCandidate && (!granted || m.term == self.term + 1) {
                    self.votes.insert(m.from, granted);
                    self.count_votes();
                }
            }
            Body::RequestVoteResponse { granted } => {
                if self.role == Role::Candidate {
                    self.votes.insert(m.from, granted);
                    self.count_votes();
                }
            }
            Body::AppendEntries {
                prev_log_index,
                prev_log_term,
                entries,
                leader_commit,
                sent_tick,
            } => {
                if !self.accept_leader(m.from) {
                    return Ok(());
                }
                self.handle_append(
                    m.from,
                    prev_log_index,
                    prev_log_term,
                    &entries,
                    leader_commit,
                    sent_tick,
                );
            }
            Body::InstallSnapshot {
                snapshot,
                sent_tick,
            } => {
                if !self.accept_leader(m.from) {
                    return Ok(());
                }
                self.handle_snapshot(m.from, snapshot, sent_tick);
            }
            Body::AppendEntriesResponse {
                success,
                match_index,
                hint,
                sent_tick,
            } => {
                if self.role == Role::Leader {
                    self.handle_append_response(m.from, success, match_index, hint, sent_tick);
                }
            }
            Body::TimeoutNow => {
                if self.role != Role::Leader && self.promotable() {
                    self.start_election(true);
                }
            }
        }
        Ok(())
    }

    /// A message from the leader of our term: follow it. Returns false if we are a leader
    /// of the same term ourselves, which Election Safety says cannot happen; the simulator's
    /// checkers judge such runs, so the message is dropped rather than acted on.
    fn accept_leader(&mut self, from: NodeId) -> bool {
        if self.role == Role::Leader {
            return false;
        }
        if self.role != Role::Follower || self.leader != Some(from) {
            let term = self.term;
            self.become_follower(term, Some(from));
        }
        self.election_elapsed_ticks = 0;
        self.leader_contact_elapsed_ticks = 0;
        true
    }

    // ----- fast election ---------------------------------------------------------------

    /// The transport's connection to `peer` closed. Proves nothing on its own (a middlebox
    /// or a forged reset can close a connection of a live leader); remembered so that a
    /// refused reconnect that follows can.
    pub(crate) fn peer_connection_closed(&mut self, peer: NodeId) {
        if !self.config.fast_election || !self.follows(peer) {
            return;
        }
        self.leader_closed = Some((peer, self.term));
        if injected!(self.bugs.close_drops_vote_refusal) {
            self.leader_gone(peer);
        }
    }

    /// A reconnect to `peer`'s peer port, made after its connection closed, was refused:
    /// nothing listens there, so `peer`'s process is gone (a node keeps its peer listener
    /// open for as long as its driver runs). If `peer` is the leader this follower promised
    /// its vote refusal to, and the dial started while this node already followed it
    /// (`dialed_in_epoch` is [`Raft::follow_epoch`] as of the dial's start), the process
    /// that led this term is gone and no other process can lead it: drop the refusal and
    /// campaign (docs/GUARANTEES.md "Fast election"). A dial from an earlier epoch may have
    /// been refused while the leader was down before it restarted and won a later term.
    pub(crate) fn peer_reconnect_refused(&mut self, peer: NodeId, dialed_in_epoch: u64) {
        if self.config.fast_election
            && self.follows(peer)
            && self.leader_closed == Some((peer, self.term))
            && dialed_in_epoch == self.follow_epoch
        {
            self.leader_gone(peer);
        }
    }

    /// Counts a change of the (term, leader) this node knows; called after every input.
    pub(crate) fn note_follow_epoch(&mut self) {
        let now = (self.term, self.leader);
        if now != self.follow_seen {
            self.follow_seen = now;
            self.follow_epoch += 1;
        }
    }

    /// See [`Raft::peer_reconnect_refused`].
    pub(crate) fn follow_epoch(&self) -> u64 {
        self.follow_epoch
    }

    fn follows(&self, peer: NodeId) -> bool {
        self.role == Role::Follower && self.leader == Some(peer)
    }

    fn leader_gone(&mut self, leader: NodeId) {
        self.leader_closed = None;
        self.leader = None;
        self.leader_contact_elapsed_ticks = self.leader_contact_elapsed_ticks.max(self.t());
        self.events.push(NodeEvent::LeaderGone {
            term: self.term,
            leader,
        });
        if !self.promotable() {
            return;
        }
        // Every follower of the dead leader learns of it within a round trip; if all
        // campaigned at once, each would vote for itself and the votes would split. They
        // take turns instead, a tick apart in the order of their ids: the first campaigns
        // now, the next a whole tick later (in case the first one is down too), and so on. A
        // follower that refused a pre-vote in this tick or the last, because it had not yet
        // learned that the leader is gone, goes now: that candidate's round is lost (its
        // pre-vote waits, it does not campaign), and this one can win it at once.
        let raced = self
            .pre_vote_refused_tick
            .is_some_and(|t| self.now_tick <= t + 1);
        let rank = if raced {
            0
        } else {
            self.membership
                .voters
                .union(&self.membership.voters_outgoing)
                .filter(|v| **v != leader && **v < self.id)
                .count() as u64
        };
        if rank == 0 {
            self.start_election(false);
        } else {
            // The timer fires on the (rank + 1)-th tick from now, so at least `rank` whole
            // ticks from now: the next tick may be a moment away, and a turn taken then
            // would start a second candidate while the first one's votes are in flight.
            self.election_elapsed_ticks = 0;
            self.randomized_timeout_milliticks = (rank + 1) * 1000;
        }
    }

    fn handle_append(
        &mut self,
        from: NodeId,
        prev: Index,
        prev_term: Term,
        entries: &[Entry],
        leader_commit: Index,
        sent_tick: u64,
    ) {
        if prev < self.log.committed {
            // Everything up to our commit index matches the leader (Leader Completeness), so
            // answer with it; the entries before it are old news.
            let committed = self.log.committed;
            let skip = (committed - prev) as usize;
            let matched = if skip < entries.len() {
                let last = self.log.append_from_leader(committed, &entries[skip..]);
                self.on_log_changed();
                self.commit_to(leader_commit.min(last));
                last
            } else {
                committed
            };
            self.accept_append(from, matched, sent_tick);
            return;
        }
        if self.log.term(prev) == Some(prev_term) {
            let last = if injected!(self.bugs.truncate_matching_entries) {
                self.log.replace_after(prev, entries)
            } else {
                self.log.append_from_leader(prev, entries)
            };
            self.on_log_changed();
            self.commit_to(leader_commit.min(last));
            self.accept_append(from, last, sent_tick);
        } else {
            let hint = match self.log.term(prev) {
                None => RejectHint {
                    conflict_term: None,
                    conflict_index: self.log.last_index() + 1,
                },
                Some(t) => RejectHint {
                    conflict_term: Some(t),
                    conflict_index: self.log.first_index_of_term(prev, t),
                },
            };
            self.refuse_append(from, Some(hint), sent_tick);
        }
    }

    fn handle_snapshot(&mut self, from: NodeId, snapshot: Snapshot, sent_tick: u64) {
        let index = snapshot.index;
        if index <= self.log.committed {
            self.accept_append(from, self.log.committed, sent_tick);
            return;
        }
        if self.log.term(index) == Some(snapshot.term) {
            // We already hold the snapshot's last entry: keep the log after it (Raft §7).
            self.commit_to(index);
        } else {
            self.log.restore(index, snapshot.term);
            self.base_membership = snapshot.membership.clone();
            self.recompute_membership();
            self.snapshot_to_restore = Some(snapshot.clone());
            self.snapshot_to_persist = Some(snapshot.clone());
            self.snapshot = Some(snapshot);
        }
        self.accept_append(from, index, sent_tick);
    }

    /// Tell the leader `to` that our log matches its own up to `match_index`, in answer to
    /// its message of `sent_tick`.
    fn accept_append(&mut self, to: NodeId, match_index: Index, sent_tick: u64) {
        let body = Body::AppendEntriesResponse {
            success: true,
            match_index,
            hint: None,
            sent_tick,
        };
        self.send(to, self.term, body);
    }

    /// Tell `to` that its entries do not follow on from our log (`hint`: where they may),
    /// or, without a hint, that its term is stale.
    fn refuse_append(&mut self, to: NodeId, hint: Option<RejectHint>, sent_tick: u64) {
        let body = Body::AppendEntriesResponse {
            success: false,
            match_index: 0,
            hint,
            sent_tick,
        };
        self.send(to, self.term, body);
    }

    fn handle_append_response(
        &mut self,
        from: NodeId,
        success: bool,
        match_index: Index,
        hint: Option<RejectHint>,
        sent_tick: u64,
    ) {
        let last_index = self.log.last_index();
        let Some(p) = self.progress.get_mut(&from) else {
            return;
        };
        p.recent_active = true;
        p.heard_tick = Some(self.now_tick);
        if sent_tick <= self.now_tick {
            p.acked_sent_tick = Some(p.acked_sent_tick.map_or(sent_tick, |t| t.max(sent_tick)));
        }
        if success {
            if match_index > p.match_index {
                p.match_index = match_index.min(last_index);
            }
            p.next_index = p.next_index.max(p.match_index + 1);
            p.probing = false;
            p.snapshot_sent_tick = None;
            self.maybe_commit();
        } else if let Some(hint) = hint {
            let mut next = hint.conflict_index;
            if let Some(t) = hint.conflict_term {
                if let Some(i) = self.log.last_index_of_term(t) {
                    next = i + 1;
                }
            }
            let p = self.progress.get_mut(&from).expect("checked above");
            p.next_index = next.clamp(p.match_index + 1, last_index + 1);
            p.probing = true;
        } else {
            return;
        }
        // Keep a catching-up peer busy, and finish a leadership transfer once the target
        // has everything.
        if let Some(p) = self.progress.get(&from) {
            if p.next_index <= self.log.last_index() {
                self.send_append(from);
            }
        }
        if let Some(transfer) = self.transfer {
            if transfer.to == from
                && self
                    .progress
                    .get(&from)
                    .is_some_and(|p| p.match_index == self.log.last_index())
            {
                self.send_timeout_now(from);
            }
        }
    }

    // ----- replication ---------------------------------------------------------------

    fn send_append(&mut self, to: NodeId) {
        let term = self.term;
        let commit = self.log.committed;
        let now = self.now_tick;
        let max = self.config.append_entries_max;
        let t = self.t();
        let Some(p) = self.progress.get_mut(&to) else {
            return;
        };
        let prev = p.next_index - 1;
        match self.log.term(prev) {
            Some(prev_term) if prev >= self.log.snapshot_index() => {
                let entries = self.log.slice(p.next_index, max);
                if !p.probing {
                    // Stream optimistically; a loss shows up as a rejection and resets us.
                    p.next_index += entries.len() as Index;
                }
                self.msgs.push(Message {
                    from: self.id,
                    to,
                    term,
                    body: Body::AppendEntries {
                        prev_log_index: prev,
                        prev_log_term: prev_term,
                        entries,
                        leader_commit: commit,
                        sent_tick: now,
                    },
                });
            }
            _ => {
                // The entries the peer needs were compacted: send the snapshot, at most once
                // per election timeout while the peer has not acknowledged it.
                if p.snapshot_sent_tick.is_some_and(|s| now < s + t) {
                    return;
                }
                let Some(snapshot) = self.snapshot.clone() else {
                    return;
                };
                p.snapshot_sent_tick = Some(now);
                self.msgs.push(Message {
                    from: self.id,
                    to,
                    term,
                    body: Body::InstallSnapshot {
                        snapshot,
                        sent_tick: now,
                    },
                });
            }
        }
    }

    fn broadcast_append(&mut self) {
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for to in peers {
            self.send_append(to);
        }
    }

    /// Append a new entry as leader and start replicating it.
    pub(crate) fn append_as_leader(&mut self, payload: Payload) -> (Index, Term) {
        let index = self.log.last_index() + 1;
        let term = self.term;
        let is_config = matches!(payload, Payload::Membership(_));
        self.log.append(Entry {
            term,
            index,
            payload,
        });
        if is_config {
            self.on_log_changed();
            self.sync_progress_with_membership();
        }
        // Replication waits for the Ready: proposals that arrive together leave as one
        // AppendEntries per follower (up to `append_entries_max` entries each), not one each.
        self.appends_pending = true;
        (index, term)
    }

    /// Sends every streaming follower the entries appended since the last Ready, in
    /// messages of up to `append_entries_max` entries. `Node::ready` calls it before it
    /// hands out the messages. (A follower being probed gets its next batch when it answers
    /// or at the next heartbeat, as before.)
    pub(crate) fn flush_appends(&mut self) {
        if !std::mem::take(&mut self.appends_pending) || self.role != Role::Leader {
            return;
        }
        let last = self.log.last_index();
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for to in peers {
            loop {
                let next = match self.progress.get(&to) {
                    Some(p) if !p.probing && p.next_index <= last => p.next_index,
                    _ => break,
                };
                self.send_append(to);
                if self.progress.get(&to).is_none_or(|p| p.next_index == next) {
                    // Nothing streamed (a snapshot went instead): it answers first.
                    break;
                }
            }
        }
    }

    pub(crate) fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader_hint: self.leader,
            });
        }
        if self.transfer.is_some() {
            return Err(ProposeError::Transferring);
        }
        if self.log.last_index() - self.log.committed >= self.config.uncommitted_entries_max {
            return Err(ProposeError::TooManyUncommitted);
        }
        Ok(())
    }

    fn sync_progress_with_membership(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let nodes = self.membership.all_nodes();
        let next = self.log.last_index() + 1;
        self.progress.retain(|id, _| nodes.contains(id));
        for id in nodes {
            if id != self.id {
                self.progress
                    .entry(id)
                    .or_insert_with(|| Progress::new(next));
            }
        }
    }

    /// Advance the commit index to what a majority has durably stored, counting only
    /// entries of the current term (Raft §5.4.2).
    pub(crate) fn maybe_commit(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let own = if injected!(self.bugs.commit_undurable) {
            self.log.last_index()
        } else {
            self.log.persisted()
        };
        let matched = |id: NodeId| {
            if id == self.id {
                own
            } else {
                self.progress.get(&id).map_or(0, |p| p.match_index)
            }
        };
        let candidate = if injected!(self.bugs.commit_without_majority) {
            self.log.persisted()
        } else if injected!(self.bugs.joint_commit_one_half) {
            committed_index_by(&self.membership.voters, matched)
        } else {
            joint_committed_index_by(&self.membership, matched)
        };
        let own_term = self.log.term(candidate) == Some(self.term);
        if candidate > self.log.committed && (own_term || injected!(self.bugs.old_term_commit)) {
            self.commit_to(candidate);
            // Tell followers promptly; waiting for the next heartbeat would add latency.
            self.broadcast_heartbeat();
            self.after_commit_as_leader();
        }
    }

    fn commit_to(&mut self, index: Index) {
        if index > self.log.committed {
            self.log.committed = index.min(self.log.last_index());
        }
    }

    /// Membership transitions that follow from commitment (dissertation §4.3).
    fn after_commit_as_leader(&mut self) {
        if self.log.committed < self.membership_index {
            return;
        }
        if self.membership.is_joint() {
            // The joint configuration is committed: move to the new one on our own.
            let mut next = self.membership.clone();
            next.voters_outgoing.clear();
            self.append_as_leader(Payload::Membership(next));
        } else if !self.membership.is_voter(self.id) {
            // Removed from the cluster and the removal is committed: stop leading.
            let term = self.term;
            self.stepping_down = Some(StepDownReason::Removed);
            self.become_follower(term, None);
        }
    }

    // ----- membership ----------------------------------------------------------------

    /// Recompute the effective membership from the log (it can move back when a conflicting
    /// suffix is truncated).
    fn recompute_membership(&mut self) {
        let latest = self
            .log
            .last_membership()
            .map(|(index, m)| (index, m.clone()));
        let (index, membership) =
            latest.unwrap_or((self.log.snapshot_index(), self.base_membership.clone()));
        if membership != self.membership {
            let from = std::mem::replace(&mut self.membership, membership);
            self.membership_epoch += 1;
            self.events.push(NodeEvent::MembershipChanged {
                from,
                to: self.membership.clone(),
            });
        }
        self.membership_index = index;
        self.membership_shape = Some(self.log.shape_version());
    }

    /// After entries may have been stored: recompute the membership unless the log is
    /// unchanged since the last recomputation (a heartbeat, or entries already held). Every
    /// change of `base_membership` recomputes directly, so the cache never hides one.
    fn on_log_changed(&mut self) {
        if self.membership_shape != Some(self.log.shape_version()) {
            self.recompute_membership();
        }
    }

    /// The membership in force at `index` (for snapshots taken there).
    pub(crate) fn membership_at(&self, index: Index) -> Membership {
        self.log
            .entries()
            .iter()
            .rev()
            .filter(|e| e.index <= index)
            .find_map(|e| match &e.payload {
                Payload::Membership(m) => Some(m.clone()),
                _ => None,
            })
            .unwrap_or_else(|| self.base_membership.clone())
    }

    pub(crate) fn change_membership(
        &mut self,
        target: Membership,
    ) -> Result<(Index, Term), ProposeError> {
        self.check_can_propose()?;
        if self.membership.is_joint() || self.membership_index > self.log.committed {
            return Err(ProposeError::MembershipChangePending);
        }
        if target.voters.is_empty() {
            return Err(ProposeError::InvalidMembership("no voters".into()));
        }
        if target.voters.contains(&0) || target.learners.contains(&0) {
            return Err(ProposeError::InvalidMembership("node id 0".into()));
        }
        if !target.voters.is_disjoint(&target.learners) {
            return Err(ProposeError::InvalidMembership(
                "a node is both voter and learner".into(),
            ));
        }
        let next = if target.voters == self.membership.voters {
            Membership {
                voters: target.voters,
                voters_outgoing: Default::default(),
                learners: target.learners,
            }
        } else {
            // Joint consensus: both the old and the new voters must agree until C_new.
            Membership {
                voters: target.voters,
                voters_outgoing: self.membership.voters.clone(),
                learners: target.learners,
            }
        };
        if !next.voters_outgoing.is_disjoint(&next.learners) {
            return Err(ProposeError::InvalidMembership(
                "demoting a voter to learner needs two changes: remove, then add as learner".into(),
            ));
        }
        Ok(self.append_as_leader(Payload::Membership(next)))
    }

    // ----- transfer ------------------------------------------------------------------

    pub(crate) fn transfer_leadership(&mut self, to: NodeId) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader_hint: self.leader,
            });
        }
        if to == self.id {
            return Ok(());
        }
        if !self.membership.is_voter(to) {
            return Err(ProposeError::InvalidMembership(format!(
                "node {to} is not a voter"
            )));
        }
        if let Some(t) = self.transfer {
            if t.to == to {
                return Ok(());
            }
            return Err(ProposeError::Transferring);
        }
        self.transfer = Some(Transfer {
            to,
            elapsed_ticks: 0,
        });
        if self
            .progress
            .get(&to)
            .is_some_and(|p| p.match_index == self.log.last_index())
        {
            self.send_timeout_now(to);
        } else {
            self.send_append(to);
        }
        Ok(())
    }

    // ----- persistence ---------------------------------------------------------------

    /// The driver made everything handed out so far durable.
    pub(crate) fn on_persisted(&mut self) {
        self.log.mark_persisted();
        self.maybe_commit();
    }

    /// The term and membership a snapshot at `index` (applied, still in the log) records.
    pub(crate) fn snapshot_point(&self, index: Index) -> (Term, Membership) {
        let term = self.log.term(index).expect("snapshot point is in the log");
        (term, self.membership_at(index))
    }

    /// Record a snapshot of the state machine at `index` and compact the log up to it; the
    /// driver persists it with the next Ready.
    pub(crate) fn compact(&mut self, index: Index, data: Vec<u8>) {
        let (term, membership) = self.snapshot_point(index);
        let snapshot = Snapshot {
            index,
            term,
            membership,
            data,
        };
        self.snapshot_to_persist = Some(snapshot.clone());
        self.adopt_own_snapshot(snapshot);
    }

    /// Keep `snapshot` (of this node's own applied state, past the current one) to send to
    /// followers that are behind, and compact the in-memory log up to it. Persisting it is
    /// the caller's business.
    pub(crate) fn adopt_own_snapshot(&mut self, snapshot: Snapshot) {
        assert!(
            snapshot.index > self.log.snapshot_index() && snapshot.index <= self.log.applied,
            "node {}: own snapshot at {} outside ({}, {}]",
            self.id,
            snapshot.index,
            self.log.snapshot_index(),
            self.log.applied
        );
        assert_eq!(
            self.log.term(snapshot.index),
            Some(snapshot.term),
            "node {}: own snapshot's term",
            self.id
        );
        self.base_membership = snapshot.membership.clone();
        self.log.compact(snapshot.index);
        self.snapshot = Some(snapshot);
        self.recompute_membership();
    }

    // ----- invariants ----------------------------------------------------------------

    /// The checks cheap enough for every input (O(peers)), in every build.
    ///
    /// Invariant: snapshot ≤ applied ≤ commit ≤ last index (`RaftLog::check_positions`).
    /// Invariant: the role agrees with the leader field — a leader names itself, a
    /// (pre-)candidate names no leader — and a (pre-)candidate has no progress map.
    /// Invariant: for every peer a leader tracks, match < next ≤ last index + 1.
    /// Invariant: the leader lease never extends past what the quorum granted: it ends no
    /// later than `T` after the latest tick a quorum acknowledged, which is not in the future.
    pub(crate) fn assert_cheap_invariants(&self) {
        self.log.check_positions();
        let ctx = || format!("node {} term {} role {:?}", self.id, self.term, self.role);
        match self.role {
            Role::Leader => assert_eq!(self.leader, Some(self.id), "{}: leader field", ctx()),
            Role::Candidate | Role::PreCandidate => {
                assert_eq!(self.leader, None, "{}: campaigning with a leader", ctx());
                assert!(self.progress.is_empty(), "{}: progress", ctx());
            }
            Role::Follower => assert!(self.progress.is_empty(), "{}: progress", ctx()),
        }
        let last = self.log.last_index();
        for (id, p) in &self.progress {
            assert!(
                p.match_index < p.next_index && p.next_index <= last + 1,
                "{}: peer {id} has match {} next {} with last index {last}",
                ctx(),
                p.match_index,
                p.next_index
            );
        }
        if let Some(until) = self.lease_until_tick() {
            let heard = self.quorum_heard_tick().expect("a lease needs a quorum");
            assert!(
                heard <= self.now_tick && until <= heard + self.t(),
                "{}: lease until {until} from a quorum heard at {heard} (now {})",
                ctx(),
                self.now_tick
            );
        }
    }

    /// Invariant: a leader voted for itself in its term and names itself leader.
    /// Invariant: no entry is newer than the current term.
    /// Invariant: the effective membership is the latest config in the log or the base.
    /// Invariant: a pre-candidate or candidate has no progress map; a leader tracks exactly
    /// the other members.
    pub(crate) fn check_invariants(&self) {
        self.log.check_invariants();
        let ctx = || format!("node {} term {} role {:?}", self.id, self.term, self.role);
        assert!(
            self.log.last_term() <= self.term,
            "{}: last log term {} above term",
            ctx(),
            self.log.last_term()
        );
        match self.role {
            Role::Leader => {
                assert_eq!(
                    self.vote,
                    Some(self.id),
                    "{}: leader did not vote for itself",
                    ctx()
                );
                assert_eq!(
                    self.leader,
                    Some(self.id),
                    "{}: leader does not name itself",
                    ctx()
                );
                for id in self.progress.keys() {
                    assert!(
                        self.membership.contains(*id),
                        "{}: progress for non-member {id}",
                        ctx()
                    );
                }
            }
            Role::Candidate => {
                assert_eq!(
                    self.vote,
                    Some(self.id),
                    "{}: candidate did not vote for itself",
                    ctx()
                );
                assert!(
                    self.progress.is_empty(),
                    "{}: candidate has progress",
                    ctx()
                );
            }
            Role::PreCandidate | Role::Follower => {
                assert!(
                    self.progress.is_empty(),
                    "{}: non-leader has progress",
                    ctx()
                );
            }
        }
        assert!(
            self.membership
                .learners
                .is_disjoint(&self.membership.voters),
            "{}: learner is also a voter",
            ctx()
        );
    }
}
