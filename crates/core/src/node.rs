//! The node: Raft consensus, the replicated state machine and the leader's lease clock,
//! behind one sans-IO façade, and the [`Ready`] contract.
//!
//! The parts live in their own files: consensus in `raft.rs` (the leader's heartbeats,
//! check-quorum and leader lease in `raft/leader.rs`), the lease clock and the keepalive
//! decision in `lease.rs`, reads without log entries in `read.rs`. This file only feeds
//! them inputs in order and hands out their effects.
//!
//! A driver (the simulator, or the server) owns a [`Node`] and loops:
//!
//! 1. feed it inputs: [`Node::tick`], [`Node::step`], [`Node::propose`], [`Node::keepalive`], …;
//! 2. take [`Node::ready`] and handle it **in the order written on [`Ready`]**: persist
//!    `hard_state`, `snapshot` and `entries` durably (fsync); then call [`Node::advance`];
//!    then send `messages`; then hand `applied`, `leader_changes` and `keepalive_acks` to clients.
//!
//! Nothing here reads a clock, touches a disk or a socket, spawns a thread or uses a global
//! random generator: the same inputs produce the same outputs.
//!
//! **Time comes first.** The node's only clock is the ticks it is given. Before any other
//! input, a driver must deliver every tick that is due by its monotonic clock: a process
//! that was stopped (GC pause, SIGSTOP) and wakes up with queued messages and keepalives
//! must tick for the time it lost *before* stepping them, or the node would judge its
//! leader lease and a keepalive's arrival by a stale clock.

use std::collections::{BTreeMap, BTreeSet};

use crate::bugs::InjectedBugs;
use crate::config::{Config, ConfigError};
use crate::event::NodeEvent;
use crate::lease::LeaseClock;
use crate::message::Message;
use crate::raft::Raft;
use crate::read::{PendingRead, ReadResult, Reads, READS_PENDING_MAX};
use crate::sm::{
    check_request_id, Command, LeaderChange, RequestId, Response, SessionId, StateImage,
    StateMachine,
};
use crate::types::{
    Entry, HardState, Index, Membership, NodeId, Payload, Recovered, Snapshot, Term,
};

pub use crate::raft::{ProposeError, Role, StepError};

pub use crate::lease::{CHECKPOINT_SESSIONS_MAX, EXPIRIES_PER_TICK_MAX, PENDING_KEEPALIVES_MAX};

/// A node that cannot be built from its configuration and disk.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration breaks a rule.
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    /// The recovered state is inconsistent.
    #[error("corrupt recovered state: {0}")]
    Corrupt(String),
}

/// A snapshot of the node's state for status pages and checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// This node.
    pub id: NodeId,
    /// Its role.
    pub role: Role,
    /// Its term.
    pub term: Term,
    /// Its vote in `term`.
    pub vote: Option<NodeId>,
    /// The leader it follows (or itself).
    pub leader: Option<NodeId>,
    /// Commit index.
    pub commit: Index,
    /// Applied index.
    pub applied: Index,
    /// Last log index.
    pub last_index: Index,
    /// Last durable log index.
    pub persisted_index: Index,
    /// Effective membership.
    pub membership: Membership,
    /// Changes whenever the effective membership changes (counted per node since it
    /// started): equal epochs from one node mean equal memberships.
    pub membership_epoch: u64,
    /// Target of an in-progress leadership transfer.
    pub transferring_to: Option<NodeId>,
    /// While leader: the local tick until which it provably leads.
    pub lease_until_tick: Option<u64>,
    /// The node's local tick counter.
    pub now_tick: u64,
}

/// The leader's view of one peer (Raft Figure 2's `matchIndex`, and when it last answered),
/// for status pages: see [`Node::progress`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerProgress {
    /// Highest log index known to be stored on the peer.
    pub match_index: Index,
    /// Local tick of the peer's last answer in the leader's current term; `None` if it has
    /// not answered since this node became leader.
    pub heard_tick: Option<u64>,
}

/// Where a proposal landed in the log. Its result arrives in [`AfterPersist::applied`] at `index`;
/// if the entry there has another term, the proposal was lost and may be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposed {
    /// Log index.
    pub index: Index,
    /// Term.
    pub term: Term,
}

/// One applied command and its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// Log index.
    pub index: Index,
    /// Term of the entry.
    pub term: Term,
    /// The command.
    pub command: Command,
    /// Its result.
    pub response: Response,
    /// The client request the entry carried, if any.
    pub request: Option<RequestId>,
    /// Set when the entry was a retry of a request already applied at this earlier index:
    /// `response` is that first application's result, and nothing changed now.
    pub first_applied: Option<Index>,
}

/// A keepalive this leader acknowledges: the holder may count its session valid until the
/// *send* time of that keepalive plus `ttl_ticks`, minus its drift margin (DESIGN rule 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepaliveAck {
    /// The session renewed.
    pub session: SessionId,
    /// The driver's tag for the request.
    pub tag: u64,
    /// The session's TTL.
    pub ttl_ticks: u64,
}

/// A keepalive's request that its session share the fate of the stream it came on
/// (fate-sharing, opt-in per session): see [`Node::keepalive_bound`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    /// The driver's id of the stream; never reused while the process runs.
    pub stream: u64,
    /// The client's sequence number of the keepalive, increasing across the streams of one
    /// session: a binding moves only to a later keepalive, so that one that arrives late on
    /// a stream the client has left does not take the binding back.
    pub seq: u64,
}

/// Who ended a stream, as the driver knows it: see [`Node::stream_ended`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The client closed it (its half-close, a reset of the stream or its connection, or
    /// its connection's end of file): the fate-sharing promise says its holder no longer
    /// believes in the sessions bound to it.
    Client,
    /// The server ended it itself (an error answered, an idle or unanswered connection
    /// closed, a shutdown), or cannot tell: it says nothing about the holder.
    Server,
}

/// Everything the driver must do after feeding the node inputs, in this order:
///
/// 1. Make [`Ready::persist`] durable (write and fsync). When its `must_sync` is false the
///    only change is the hard state's commit index, which may be written without an fsync
///    ([`crate::storage::Storage::persist_commit`]): a lost commit index is learned again
///    from the log and the leader, so nothing waits on it.
/// 2. Call [`Node::advance`].
/// 3. Send [`Ready::then`]'s `messages` (never before step 1: votes and acknowledgements
///    promise durability; a leader's own AppendEntries may leave before it, see
///    [`Node::early_appends`]).
/// 4. Hand its `applied`, `leader_changes`, `keepalive_acks` and `reads` to clients; these
///    come from entries that are committed and durable, or from a leader lease that holds.
///
/// The two halves are separate types so that a driver can keep what follows while the
/// write is being made durable, without a copy of its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ready {
    /// Step 1: what must be durable before anything in `then` may happen.
    pub persist: Persist,
    /// Steps 3 and 4, once `persist` is durable and the node advanced.
    pub then: AfterPersist,
}

/// The half of a [`Ready`] that must be made durable first (step 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Persist {
    /// Term, vote and commit index to persist, if they changed.
    pub hard_state: Option<HardState>,
    /// Whether step 1 must fsync: entries, a snapshot, or a new term or vote are to be
    /// persisted. False when only the commit index changed (one fsync per write instead
    /// of two: the entries' own, not another for the commit index that follows them).
    pub must_sync: bool,
    /// A snapshot to persist; then discard stored entries up to `snapshot.index` (all of
    /// them if the stored entry at `snapshot.index` has another term).
    pub snapshot: Option<Snapshot>,
    /// Entries to persist: first discard stored entries at `entries[0].index` and after,
    /// then append.
    pub entries: Vec<Entry>,
}

impl Persist {
    /// True if there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.hard_state.is_none() && self.snapshot.is_none() && self.entries.is_empty()
    }
}

/// The half of a [`Ready`] that follows its persist (steps 2 to 4).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AfterPersist {
    /// The index and term of [`Persist::snapshot`], if the Ready had one: a proposal it
    /// covers is decided by the state machine's memory of requests, not by an entry.
    pub snapshot_installed: Option<(Index, Term)>,
    /// With `Config::snapshot_in_background`: a snapshot to take, as a frozen image of the
    /// state at a snapshot point. Not part of step 1: the driver encodes it
    /// ([`SnapshotImage::encode`]) and makes it durable whenever it can, on any thread,
    /// keeping every stored entry it covers until then, and reports with
    /// [`Node::snapshot_taken`]. The node takes no other until then.
    pub snapshot_image: Option<SnapshotImage>,
    /// Messages to send after the above are durable.
    pub messages: Vec<Message>,
    /// Results of committed entries applied by this node, in index order.
    pub applied: Vec<Applied>,
    /// Changes of leader in elections, in index order.
    pub leader_changes: Vec<LeaderChange>,
    /// Keepalives acknowledged.
    pub keepalive_acks: Vec<KeepaliveAck>,
    /// Reads answered (served without a log entry, or refused), see [`Node::read`].
    pub reads: Vec<ReadResult>,
    /// What happened in consensus since the last Ready, in order (elections, leadership
    /// won and lost and why, leaders learned of, membership changes): for metrics and
    /// event logs. Nothing to persist or answer.
    pub events: Vec<NodeEvent>,
    /// Every committed entry up to this index has been applied and its result handed out
    /// (in this Ready's `applied` or an earlier one's, or skipped over by an installed
    /// snapshot). A proposal at or below it that got no result here never will.
    pub applied_through: Index,
}

impl Ready {
    /// True if there is nothing to do.
    pub fn is_empty(&self) -> bool {
        let t = &self.then;
        self.persist.is_empty()
            && t.snapshot_image.is_none()
            && t.messages.is_empty()
            && t.applied.is_empty()
            && t.leader_changes.is_empty()
            && t.keepalive_acks.is_empty()
            && t.reads.is_empty()
            && t.events.is_empty()
    }
}

/// A snapshot to take in the background (see [`AfterPersist::snapshot_image`]): the state machine
/// frozen at `index`, with the term and membership the snapshot records.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotImage {
    index: Index,
    term: Term,
    membership: Membership,
    state: StateImage,
}

impl SnapshotImage {
    /// The last index the snapshot covers.
    pub fn index(&self) -> Index {
        self.index
    }

    /// The term of the entry at [`SnapshotImage::index`].
    pub fn term(&self) -> Term {
        self.term
    }

    /// The membership as of [`SnapshotImage::index`].
    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    /// The snapshot, encoded: the costly part (about 0.2 µs per session, election and
    /// fenced key), meant for another thread.
    pub fn encode(&self) -> Snapshot {
        Snapshot {
            index: self.index,
            term: self.term,
            membership: self.membership.clone(),
            data: self.state.encode(),
        }
    }
}

/// A tenure node: Raft, the replicated state machine and the lease clock.
#[derive(Clone, Debug)]
pub struct Node {
    raft: Raft,
    sm: StateMachine,
    lease: LeaseClock,
    applied: Vec<Applied>,
    leader_changes: Vec<LeaderChange>,
    acks: Vec<KeepaliveAck>,
    reads: Reads,
    /// Set between `ready()` and `advance()`; inputs in between are a driver bug.
    awaiting_advance: bool,
    /// `AfterPersist::applied_through` of the last Ready handed out.
    applied_handed: Index,
    /// Term and vote at the end of the last input, for the invariant that neither goes back.
    term_and_vote_seen: (Term, Option<NodeId>),
    /// The state machine's applied index when its invariants were last checked.
    sm_checked_at: std::cell::Cell<Option<Index>>,
    /// The state machine's applied index and the number of session deadlines when the
    /// two key sets were last compared.
    deadlines_checked_at: std::cell::Cell<Option<(Index, usize)>>,
    /// Records the state held at the last snapshot (taken or loaded), for
    /// `Config::snapshot_grows_with_state`.
    snapshot_records: u64,
    /// A background snapshot not yet handed out in a Ready.
    snapshot_image: Option<SnapshotImage>,
    /// The index of the background snapshot handed out and not yet reported taken.
    snapshot_in_flight: Option<Index>,
}

impl Node {
    /// Build a node from its configuration and what it found on disk.
    pub fn new(config: Config, recovered: Recovered) -> Result<Node, NodeError> {
        Node::build(config, recovered, InjectedBugs::default())
    }

    /// [`Node::new`] with known bugs switched back on (a test's or the simulator's; see
    /// [`crate::bugs`]).
    #[cfg(feature = "inject-bugs")]
    pub fn with_injected_bugs(
        config: Config,
        recovered: Recovered,
        bugs: InjectedBugs,
    ) -> Result<Node, NodeError> {
        Node::build(config, recovered, bugs)
    }

    fn build(config: Config, recovered: Recovered, bugs: InjectedBugs) -> Result<Node, NodeError> {
        config.validate()?;
        let limits = config.limits.clone();
        if let Some(first) = recovered.entries.first() {
            let expected = recovered.snapshot.as_ref().map_or(0, |s| s.index) + 1;
            if first.index != expected {
                return Err(NodeError::Corrupt(format!(
                    "first entry has index {} but {} was expected",
                    first.index, expected
                )));
            }
        }
        for w in recovered.entries.windows(2) {
            if w[1].index != w[0].index + 1 || w[1].term < w[0].term {
                return Err(NodeError::Corrupt(format!(
                    "log breaks at index {}",
                    w[1].index
                )));
            }
        }
        let mut recovered = recovered;
        let last_term = recovered
            .entries
            .last()
            .map(|e| e.term)
            .or(recovered.snapshot.as_ref().map(|s| s.term))
            .unwrap_or(0);
        if last_term > recovered.hard_state.term {
            // The crash came after a Ready's entries reached the disk and before its hard
            // state did. Any vote of that newer term was in the same Ready, whose messages
            // were never sent, so adopting the term without a vote promises nothing that
            // anyone relied on.
            recovered.hard_state.term = last_term;
            recovered.hard_state.vote = None;
        }
        let mut sm = match &recovered.snapshot {
            Some(s) => StateMachine::restore(limits, &s.data)
                .map_err(|e| NodeError::Corrupt(format!("snapshot: {e}")))?,
            None => StateMachine::new(limits),
        };
        sm.carry_bugs(bugs);
        let snapshot_records = sm.records() as u64;
        let mut raft = Raft::new(
            config,
            recovered.hard_state,
            recovered.snapshot,
            recovered.entries,
        );
        raft.bugs = bugs;
        let mut node = Node {
            raft,
            sm,
            lease: LeaseClock::default(),
            applied: Vec::new(),
            leader_changes: Vec::new(),
            acks: Vec::new(),
            reads: Reads::default(),
            awaiting_advance: false,
            applied_handed: 0,
            sm_checked_at: std::cell::Cell::new(None),
            term_and_vote_seen: (0, None),
            deadlines_checked_at: std::cell::Cell::new(None),
            snapshot_records,
            snapshot_image: None,
            snapshot_in_flight: None,
        };
        node.lease.reset_from_state_machine(&node.raft, &node.sm);
        node.apply_committed();
        Ok(node)
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.raft.id
    }

    /// One tick of this node's local clock.
    pub fn tick(&mut self) {
        self.assert_not_awaiting();
        self.raft.tick();
        self.after_input();
    }

    /// Handle a message from a peer. Bad input returns an error and changes nothing.
    pub fn step(&mut self, msg: Message) -> Result<(), StepError> {
        self.assert_not_awaiting();
        self.raft.step(msg)?;
        self.after_input();
        Ok(())
    }

    /// Propose a client command (leader only). Commands reserved to the leader and
    /// commands that break the shared limits are refused before they reach the log.
    pub fn propose(&mut self, command: Command) -> Result<Proposed, ProposeError> {
        self.propose_request(None, command)
    }

    /// Propose a client command carrying a request id (leader only): the state machine
    /// applies each id at most once, and a retry gets the first result (Raft dissertation
    /// §6.3). `None` proposes the command without one.
    pub fn propose_request(
        &mut self,
        id: Option<RequestId>,
        command: Command,
    ) -> Result<Proposed, ProposeError> {
        self.assert_not_awaiting();
        if matches!(
            command.unsealed(),
            Command::Expire { .. } | Command::Release { .. } | Command::Checkpoint { .. }
        ) {
            return Err(ProposeError::ClientCommandNotAllowed);
        }
        self.raft.check_can_propose()?;
        self.raft
            .config
            .limits
            .check(&command)
            .map_err(ProposeError::Invalid)?;
        if let Some(id) = id {
            check_request_id(id, &command).map_err(ProposeError::Invalid)?;
        }
        let is_grant = matches!(command.unsealed(), Command::Grant { .. });
        let payload = match id {
            Some(id) => Payload::Request { id, command },
            None => Payload::Command(command),
        };
        let (index, term) = self.raft.append_as_leader(payload);
        if is_grant {
            self.lease
                .on_grant_proposed(index, term, self.raft.now_tick);
        }
        self.after_input();
        Ok(Proposed { index, term })
    }

    /// A keepalive for `session`, received now (leader only). The acknowledgement, tagged
    /// with `tag`, comes in a later [`AfterPersist::keepalive_acks`] once this leader
    /// provably leads and has made the renewal durable enough for any successor; if that
    /// cannot happen in time it never comes, and the client retries.
    pub fn keepalive(&mut self, session: SessionId, tag: u64) -> Result<(), ProposeError> {
        self.keepalive_as(session, tag, None)
    }

    /// [`Node::keepalive`] presenting the hash of the session's secret: a session granted
    /// with a secret is renewed only with it (`SmError::WrongSecret` otherwise, nothing
    /// changes).
    pub fn keepalive_as(
        &mut self,
        session: SessionId,
        tag: u64,
        secret_hash: Option<&crate::sm::SecretHash>,
    ) -> Result<(), ProposeError> {
        self.keepalive_bound(session, tag, secret_hash, None)
    }

    /// [`Node::keepalive_as`] that, with `bind`, also binds the session to the stream the
    /// keepalive came on (fate-sharing): when the client closes that stream, the leader ends
    /// the session at once instead of after its TTL ([`Node::stream_ended`]). A binding lasts
    /// for this leader's term at most, and moves only to a keepalive with a higher
    /// [`Bind::seq`]. Nothing is bound when the keepalive is refused.
    pub fn keepalive_bound(
        &mut self,
        session: SessionId,
        tag: u64,
        secret_hash: Option<&crate::sm::SecretHash>,
        bind: Option<Bind>,
    ) -> Result<(), ProposeError> {
        self.assert_not_awaiting();
        if !self.sm.secret_matches(session, secret_hash) {
            return Err(ProposeError::Invalid(crate::sm::SmError::WrongSecret(
                session,
            )));
        }
        self.lease
            .on_keepalive(&self.raft, &self.sm, session, tag, bind)?;
        self.after_input();
        Ok(())
    }

    /// The stream `stream` ended, as `end` says. For every session a keepalive bound to it
    /// in this leader's term ([`Node::keepalive_bound`]): when the client closed it, the
    /// leader proposes `Command::Release` as soon as every promise made for the session
    /// outside this leadership has run out (at once when there is none); when the server
    /// ended it, the binding is forgotten and the session lives on its TTL. Changes nothing
    /// on a node that does not lead.
    pub fn stream_ended(&mut self, stream: u64, end: StreamEnd) {
        self.assert_not_awaiting();
        self.lease.on_stream_end(&self.raft, stream, end);
        self.after_input();
    }

    /// The stream `session` is bound to in this leader's term, if any.
    pub fn bound_stream(&self, session: SessionId) -> Option<u64> {
        self.lease.bound_stream(session)
    }

    /// A linearizable read (`Get` or `Leader`) served without a log entry (leader only); see
    /// [`crate::read`] for when it is served. Its answer arrives in [`AfterPersist::reads`] under
    /// `tag`: the response in the state after some applied index, or a definite refusal.
    /// Refused at once if this node does not lead, is transferring leadership, holds too
    /// many reads, or the command is not a read or breaks the size limits.
    pub fn read(&mut self, command: Command, tag: u64) -> Result<(), ProposeError> {
        self.assert_not_awaiting();
        if !command.is_read() {
            return Err(ProposeError::NotARead);
        }
        self.raft
            .config
            .limits
            .check(&command)
            .map_err(ProposeError::Invalid)?;
        if self.raft.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader_hint: self.raft.leader,
            });
        }
        if self.raft.transferring() {
            return Err(ProposeError::Transferring);
        }
        if self.reads.pending.len() >= READS_PENDING_MAX {
            return Err(ProposeError::TooManyUncommitted);
        }
        if self.reads.pending.is_empty() {
            self.reads.term = self.raft.term;
        }
        self.reads.pending.push_back(PendingRead {
            tag,
            command,
            received_tick: self.raft.now_tick,
            read_index: self.raft.log.committed,
        });
        if !self.raft.lease_valid() {
            self.raft.heartbeat_at_next_tick();
        }
        self.after_input();
        Ok(())
    }

    /// The transport's connection to peer `peer` closed (it ended; no reconnect has been
    /// tried yet). Changes nothing on its own: a connection of a live node can close too.
    pub fn peer_connection_closed(&mut self, peer: NodeId) {
        self.assert_not_awaiting();
        self.raft.peer_connection_closed(peer);
        self.after_input();
    }

    /// After [`Node::peer_connection_closed`], a dial to `peer`'s peer port was refused:
    /// nothing listens there, so the peer's process is gone. `dialed_in_epoch` is what
    /// [`Node::follow_epoch`] returned before the dial started (an older value is always
    /// safe: the refusal is then ignored). With [`crate::config::Config::fast_election`]
    /// on, a follower of that peer drops its vote refusal and campaigns at once.
    pub fn peer_reconnect_refused(&mut self, peer: NodeId, dialed_in_epoch: u64) {
        self.assert_not_awaiting();
        self.raft.peer_reconnect_refused(peer, dialed_in_epoch);
        self.after_input();
    }

    /// A counter that changes whenever the (term, leader) this node knows changes. A
    /// transport stamps each dial with the value it last saw, so that a refusal is counted
    /// only against the leadership the node already followed when the dial started.
    pub fn follow_epoch(&self) -> u64 {
        self.raft.follow_epoch()
    }

    /// Hand Raft leadership to `to` (leader only).
    pub fn transfer_leadership(&mut self, to: NodeId) -> Result<(), ProposeError> {
        self.assert_not_awaiting();
        self.raft.transfer_leadership(to)?;
        self.after_input();
        Ok(())
    }

    /// Change the cluster's voters and learners by joint consensus (leader only).
    pub fn change_membership(
        &mut self,
        voters: BTreeSet<NodeId>,
        learners: BTreeSet<NodeId>,
    ) -> Result<Proposed, ProposeError> {
        self.assert_not_awaiting();
        let target = Membership {
            voters,
            voters_outgoing: BTreeSet::new(),
            learners,
        };
        let (index, term) = self.raft.change_membership(target)?;
        self.after_input();
        Ok(Proposed { index, term })
    }

    /// True if [`Node::ready`] has something.
    pub fn has_ready(&self) -> bool {
        !self.awaiting_advance
            && (self.raft.log.has_unstable()
                || self.raft.snapshot_to_persist.is_some()
                || self.snapshot_image.is_some()
                || self.raft.hard_state() != self.raft_persisted_hard_state()
                || !self.raft.msgs.is_empty()
                || self.raft.appends_pending
                || !self.applied.is_empty()
                || !self.leader_changes.is_empty()
                || !self.acks.is_empty()
                || !self.reads.done.is_empty()
                || !self.raft.events.is_empty()
                || self.raft.log.applied != self.applied_handed)
    }

    fn raft_persisted_hard_state(&self) -> HardState {
        self.raft.persisted_hard_state
    }

    /// Take what the driver must do now; see [`Ready`] for the order.
    pub fn ready(&mut self) -> Ready {
        self.assert_not_awaiting();
        self.raft.flush_appends();
        self.awaiting_advance = true;
        self.applied_handed = self.raft.log.applied;
        let before = self.raft.persisted_hard_state;
        let hard_state = self.raft.take_hard_state();
        let snapshot = self.raft.snapshot_to_persist.take();
        let entries = self.raft.log.take_unstable();
        // A term or vote must be durable before any message that depends on it leaves (a
        // vote granted, a term's messages); a commit index need not be (docs/GUARANTEES.md, "One fsync per write").
        let term_or_vote = hard_state
            .is_some_and(|hs| (hs.term, hs.vote) != (before.term, before.vote))
            && !injected!(self.raft.bugs.unsynced_vote);
        let ready = Ready {
            then: AfterPersist {
                snapshot_installed: snapshot.as_ref().map(|s| (s.index, s.term)),
                applied_through: self.raft.log.applied,
                snapshot_image: self.snapshot_image.take(),
                messages: std::mem::take(&mut self.raft.msgs),
                applied: std::mem::take(&mut self.applied),
                leader_changes: std::mem::take(&mut self.leader_changes),
                keepalive_acks: std::mem::take(&mut self.acks),
                reads: std::mem::take(&mut self.reads.done),
                events: std::mem::take(&mut self.raft.events),
            },
            persist: Persist {
                must_sync: term_or_vote || snapshot.is_some() || !entries.is_empty(),
                hard_state,
                snapshot,
                entries,
            },
        };
        self.assert_cheap_invariants();
        ready
    }

    /// Pipelined persistence (dissertation §10.2.1), for a driver that replicates a leader's
    /// entries while its own fsync is still running: between [`Node::ready`] and
    /// [`Node::advance`], a leader may count its followers' acknowledgements. Steps `msg` and
    /// returns `Ok(true)` if it is an `AppendEntriesResponse` of this leader's current term;
    /// returns `Ok(false)` and changes nothing otherwise (the driver holds the message until
    /// `advance`). Only entries the leader has itself made durable count for it, so what it
    /// commits meanwhile is on a majority's disks.
    pub fn step_while_persisting(&mut self, msg: Message) -> Result<bool, StepError> {
        if !self.awaiting_advance {
            self.step(msg)?;
            return Ok(true);
        }
        let ours = self.raft.role == Role::Leader
            && msg.term == self.raft.term
            && matches!(msg.body, crate::message::Body::AppendEntriesResponse { .. });
        if !ours {
            return Ok(false);
        }
        self.raft.step(msg)?;
        self.after_input();
        Ok(true)
    }

    /// Pipelined persistence: the clock ticks while a Ready is being made durable (the driver
    /// that replicates during its fsync keeps ticking, or its lease would be judged on a
    /// stale clock). Messages the tick produces wait for [`Node::advance`], except a leader's
    /// AppendEntries ([`Node::take_early_appends`]).
    pub fn tick_while_persisting(&mut self) {
        if !self.awaiting_advance {
            self.tick();
            return;
        }
        self.raft.tick();
        self.after_input();
    }

    /// Pipelined persistence (Raft dissertation §10.2.1): takes out of `ready` (the Ready this
    /// node just handed out) the messages that may leave *before* its writes are durable, for
    /// a driver that sends them, then makes the writes durable, then calls [`Node::advance`]
    /// and sends the rest. They are this leader's AppendEntries of its current term, when the
    /// Ready appends entries and persists no other term: a leader's own copy counts towards
    /// commitment only once `advance` says it is durable, so followers may store and
    /// acknowledge the entries meanwhile, and what commits is still on a majority's disks.
    /// Everything else (votes, acknowledgements, a new term's messages) stays in `ready`.
    /// `None` (and `ready` untouched) when the Ready does not qualify: it appends nothing,
    /// persists another term, or the node does not lead.
    pub fn early_appends(&self, ready: &mut Ready) -> Option<Vec<Message>> {
        assert!(
            self.awaiting_advance,
            "node {}: early_appends outside ready()/advance()",
            self.raft.id
        );
        let term = self.raft.term;
        let qualifies = self.raft.role == Role::Leader
            && !ready.persist.entries.is_empty()
            && ready
                .persist
                .hard_state
                .as_ref()
                .is_none_or(|h| h.term == term);
        if !qualifies {
            return None;
        }
        let (early, late): (Vec<Message>, Vec<Message>) = std::mem::take(&mut ready.then.messages)
            .into_iter()
            .partition(|m| {
                m.term == term && matches!(m.body, crate::message::Body::AppendEntries { .. })
            });
        ready.then.messages = late;
        Some(early)
    }

    /// With pipelined persistence: the leader's AppendEntries produced since [`Node::ready`]
    /// (to followers that acknowledged, or carrying a new commit index), which may be sent
    /// before `advance`. Empty unless a leader awaits `advance`; other messages stay for the
    /// next [`Ready`].
    pub fn take_early_appends(&mut self) -> Vec<Message> {
        if !self.awaiting_advance || self.raft.role != Role::Leader {
            return Vec::new();
        }
        let term = self.raft.term;
        let (early, rest): (Vec<Message>, Vec<Message>) = std::mem::take(&mut self.raft.msgs)
            .into_iter()
            .partition(|m| {
                m.term == term && matches!(m.body, crate::message::Body::AppendEntries { .. })
            });
        self.raft.msgs = rest;
        early
    }

    /// The persistent parts of the last [`Ready`] are durable.
    pub fn advance(&mut self) {
        assert!(self.awaiting_advance, "advance() without ready()");
        self.awaiting_advance = false;
        self.raft.on_persisted();
        self.after_input();
    }

    /// The driver made the snapshot of a [`AfterPersist::snapshot_image`] durable (`Some`, the
    /// encoded image), or gave it up (`None`, e.g. its write failed: the node takes another
    /// at its next snapshot point). The node keeps the snapshot to send to followers that
    /// are behind and compacts its in-memory log up to it — unless a leader's snapshot at
    /// or past its index was installed meanwhile, which already covers it: then it is
    /// dropped. Returns whether it was adopted.
    pub fn snapshot_taken(&mut self, snapshot: Option<Snapshot>) -> bool {
        self.assert_not_awaiting();
        let in_flight = self.snapshot_in_flight.take();
        let adopted = match snapshot {
            Some(s) => {
                assert_eq!(
                    in_flight,
                    Some(s.index),
                    "node {}: a snapshot reported taken that was not handed out (driver bug)",
                    self.raft.id
                );
                let newer = s.index > self.raft.log.snapshot_index();
                if newer {
                    self.raft.adopt_own_snapshot(s);
                }
                newer
            }
            None => false,
        };
        self.after_input();
        adopted
    }

    /// The node's current state.
    pub fn status(&self) -> Status {
        Status {
            id: self.raft.id,
            role: self.raft.role,
            term: self.raft.term,
            vote: self.raft.vote,
            leader: self.raft.leader,
            commit: self.raft.log.committed,
            applied: self.raft.log.applied,
            last_index: self.raft.log.last_index(),
            persisted_index: self.raft.log.persisted(),
            membership: self.raft.membership.clone(),
            membership_epoch: self.raft.membership_epoch,
            transferring_to: self.raft.transfer.map(|t| t.to),
            lease_until_tick: self.raft.lease_until_tick(),
            now_tick: self.raft.now_tick,
        }
    }

    /// Overwrite `status` (an earlier [`Node::status`] of this node) with the current one,
    /// cloning the membership only when its epoch moved (drivers that look after every
    /// input keep one `Status` and refresh it).
    pub fn refresh_status(&self, status: &mut Status) {
        status.id = self.raft.id;
        status.role = self.raft.role;
        status.term = self.raft.term;
        status.vote = self.raft.vote;
        status.leader = self.raft.leader;
        status.commit = self.raft.log.committed;
        status.applied = self.raft.log.applied;
        status.last_index = self.raft.log.last_index();
        status.persisted_index = self.raft.log.persisted();
        if status.membership_epoch != self.raft.membership_epoch {
            status.membership = self.raft.membership.clone();
            status.membership_epoch = self.raft.membership_epoch;
        }
        status.transferring_to = self.raft.transfer.map(|t| t.to);
        status.lease_until_tick = self.raft.lease_until_tick();
        status.now_tick = self.raft.now_tick;
    }

    /// The configuration the node runs with.
    pub fn config(&self) -> &Config {
        &self.raft.config
    }

    /// This node's role, without building a whole [`Status`] (drivers ask after every input).
    pub fn role(&self) -> Role {
        self.raft.role
    }

    /// The highest index this node knows committed, without building a whole [`Status`].
    pub fn commit_index(&self) -> Index {
        self.raft.log.committed
    }

    /// The leader this node knows of in its current term.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.leader
    }

    /// The replicated state machine (read-only).
    pub fn state_machine(&self) -> &StateMachine {
        &self.sm
    }

    /// The in-memory log after the last snapshot.
    pub fn log_entries(&self) -> &[Entry] {
        self.raft.log.entries()
    }

    /// The applied state, frozen now (O(1)), with the term and membership of the applied
    /// index: what `tenure backup` streams. Every applied entry is committed, so this is
    /// the state at a committed index.
    pub fn applied_image(&self) -> SnapshotImage {
        let index = self.raft.log.applied;
        let (term, membership) = if index == 0 {
            (0, Membership::default())
        } else {
            self.raft.snapshot_point(index)
        };
        SnapshotImage {
            index,
            term,
            membership,
            state: self.sm.image(),
        }
    }

    /// Index and term of the last snapshot, `(0, 0)` if none.
    pub fn snapshot_meta(&self) -> (Index, Term) {
        (
            self.raft.log.snapshot_index(),
            self.raft.log.snapshot_term(),
        )
    }

    /// As leader: every other member's progress (match index, tick last heard), by id.
    /// Empty on a node that does not lead. Read-only; for status pages.
    pub fn progress(&self) -> BTreeMap<NodeId, PeerProgress> {
        self.raft
            .progress
            .iter()
            .map(|(id, p)| {
                let progress = PeerProgress {
                    match_index: p.match_index,
                    heard_tick: p.heard_tick,
                };
                (*id, progress)
            })
            .collect()
    }

    /// The local tick before which this node will not expire `session`: its lease clock's
    /// lower bound on the session's life (`None` for a session it does not hold). On the
    /// leader it moves forward with each keepalive; on a follower, with each applied grant
    /// and checkpoint (padded for clock drift), which is how long it would keep the session
    /// if it became leader now.
    pub fn session_deadline_tick(&self, session: SessionId) -> Option<u64> {
        self.lease.deadline_tick(session)
    }

    /// Panics with context if any invariant of the node is broken. Cheap enough to run after
    /// every input in tests and the simulator.
    ///
    /// Invariant: the state machine has applied exactly the commands up to the log's
    /// applied index (its own applied index never exceeds it).
    /// Invariant: every session has an expiry deadline on this node, and no deadline
    /// outlives its session.
    pub fn check_invariants(&self) {
        self.raft.check_invariants();
        self.lease.check_invariants(&self.raft);
        // The state machine's own check walks all of its state, so run it only when the
        // state changed since the last check.
        let sm_applied = self.sm.applied_index();
        if self.sm_checked_at.get() != Some(sm_applied) {
            self.sm.check_invariants();
            self.sm_checked_at.set(Some(sm_applied));
        }
        assert!(
            self.sm.applied_index() <= self.raft.log.applied,
            "node {}: state machine applied {} beyond log applied {}",
            self.raft.id,
            self.sm.applied_index(),
            self.raft.log.applied
        );
        // Every input ends by serving or refusing reads, so reads wait only at a leader of
        // the term they arrived in, in arrival order.
        if let (Some(first), Some(last)) = (self.reads.pending.front(), self.reads.pending.back()) {
            assert!(
                self.raft.role == Role::Leader && self.raft.term == self.reads.term,
                "node {}: reads wait at a {:?} of term {} that arrived in term {}",
                self.raft.id,
                self.raft.role,
                self.raft.term,
                self.reads.term
            );
            assert!(
                first.received_tick <= last.received_tick && first.read_index <= last.read_index,
                "node {}: reads out of arrival order",
                self.raft.id
            );
        }
        // Sessions start and end only by applying entries, and a deadline appears or
        // goes away with them; a stray insertion or removal in between changes the map's
        // size. So the two key sets need comparing only when either of those moved.
        let deadlines_shape = (sm_applied, self.lease.deadlines());
        if self.deadlines_checked_at.get() == Some(deadlines_shape) {
            return;
        }
        self.deadlines_checked_at.set(Some(deadlines_shape));
        // Both are ordered by session id, so one merge walk compares the two key sets.
        let mut sessions = self.sm.sessions().map(|(s, _)| s).peekable();
        let mut deadlines = self.lease.sessions_with_deadline().peekable();
        loop {
            match (sessions.peek().copied(), deadlines.peek().copied()) {
                (None, None) => break,
                (Some(s), Some(d)) if s == d => {
                    sessions.next();
                    deadlines.next();
                }
                (Some(s), d) if d.is_none_or(|d| s < d) => {
                    panic!("node {}: session {s} has no deadline", self.raft.id)
                }
                (_, Some(d)) => panic!("node {}: deadline for ended session {d}", self.raft.id),
                (Some(_), None) => unreachable!("handled by the guard above"),
            }
        }
    }

    // ----- internals -----------------------------------------------------------------

    fn assert_not_awaiting(&self) {
        assert!(
            !self.awaiting_advance,
            "node {}: input between ready() and advance() (driver bug)",
            self.raft.id
        );
    }

    fn after_input(&mut self) {
        self.raft.note_follow_epoch();
        if let Some(snapshot) = self.raft.snapshot_to_restore.take() {
            self.load_snapshot(&snapshot);
        }
        self.apply_committed();
        self.lease
            .leader_duties(&mut self.raft, &self.sm, &mut self.acks);
        self.reads.serve(&self.raft, &self.sm);
        self.assert_cheap_invariants();
    }

    /// The invariants cheap enough (O(1) or O(peers)) to check after every input, in every
    /// build (TigerBeetle style: `assert!`, not `debug_assert!`); [`Node::check_invariants`]
    /// adds the ones that walk the log or the state machine. Every public input ends here
    /// (through `after_input`), so a broken rule stops the node at the input that broke it.
    ///
    /// Invariant: the term never decreases, and within one term the vote never changes once
    /// cast (one vote per term, Raft §5.2), on this node since it started.
    /// Invariant: the consensus state is consistent (see `Raft::assert_cheap_invariants`).
    fn assert_cheap_invariants(&mut self) {
        let (term, vote) = (self.raft.term, self.raft.vote);
        let (seen_term, seen_vote) = self.term_and_vote_seen;
        assert!(
            term >= seen_term,
            "node {}: term went back from {seen_term} to {term}",
            self.raft.id
        );
        if term == seen_term && seen_vote.is_some() {
            assert_eq!(
                vote, seen_vote,
                "node {}: vote changed within term {term}",
                self.raft.id
            );
        }
        self.term_and_vote_seen = (term, vote);
        self.raft.assert_cheap_invariants();
    }

    fn load_snapshot(&mut self, snapshot: &Snapshot) {
        let cfg = &self.raft.config;
        match StateMachine::restore(cfg.limits.clone(), &snapshot.data) {
            Ok(mut sm) => {
                sm.carry_bugs(self.sm.injected_bugs());
                self.sm = sm;
            }
            // The leader encoded this snapshot from its own state machine; failing to
            // decode it means the two binaries disagree, which no retry can fix.
            Err(e) => panic!(
                "node {}: cannot decode snapshot at {}: {e}",
                self.raft.id, snapshot.index
            ),
        }
        self.leader_changes.extend(self.sm.take_leader_changes());
        self.snapshot_records = self.sm.records() as u64;
        self.lease.reset_from_state_machine(&self.raft, &self.sm);
    }

    fn apply_committed(&mut self) {
        let upto = self.raft.log.committed.min(self.raft.log.persisted());
        while self.raft.log.applied < upto {
            let index = self.raft.log.applied + 1;
            let entry = self
                .raft
                .log
                .entry(index)
                .expect("committed entry is in the log")
                .clone();
            self.raft.log.applied = index;
            let (request, command) = match entry.payload {
                Payload::Command(command) => (None, command),
                Payload::Request { id, command } => (Some(id), command),
                Payload::Noop | Payload::Membership(_) => continue,
            };
            let (response, first_applied) = match request {
                Some(id) => self.sm.apply_request(index, id, &command),
                None => (self.sm.apply(index, &command), None),
            };
            if first_applied.is_none() {
                self.lease.on_applied(
                    &self.raft,
                    &self.sm,
                    (index, entry.term),
                    &command,
                    &response,
                );
            } else {
                // A retry changed nothing; only the lease clock's bookkeeping of own grants
                // must forget the index.
                self.lease.on_retry_applied(index);
            }
            self.applied.push(Applied {
                index,
                term: entry.term,
                command,
                response,
                request,
                first_applied,
            });
        }
        self.leader_changes.extend(self.sm.take_leader_changes());
        let (snap_index, _) = self.snapshot_meta();
        let since = self.raft.log.applied - snap_index;
        let config = &self.raft.config;
        // With a large state, wait also until the log holds as many entries as the last
        // snapshot held records: a snapshot then costs about one record's encoding per
        // applied entry, however large the state grows.
        if since >= config.snapshot_threshold_entries
            && (!config.snapshot_grows_with_state || since >= self.snapshot_records)
        {
            let applied = self.raft.log.applied;
            if !config.snapshot_in_background {
                self.snapshot_records = self.sm.records() as u64;
                self.raft.compact(applied, self.sm.snapshot());
            } else if self.snapshot_in_flight.is_none() {
                self.snapshot_records = self.sm.records() as u64;
                let (term, membership) = self.raft.snapshot_point(applied);
                self.snapshot_image = Some(SnapshotImage {
                    index: applied,
                    term,
                    membership,
                    state: self.sm.image(),
                });
                self.snapshot_in_flight = Some(applied);
            }
        }
    }
}
