//! What the world tells the checkers after each step.

use tenure_core::node::{Applied, Role};
use tenure_core::sm::{Command, LeaderChange, RequestId, Response};
use tenure_core::types::{Index, NodeId, Term};

use crate::mirror::ChainedEntry;
use crate::time::SimTimeUs;

/// A simulated client's identity.
pub type ClientId = u64;
/// A client operation's identity, unique in a run.
pub type OpId = u64;

/// One fact observed during a step. Checkers are fed these in order after every step.
#[derive(Clone, Debug)]
pub enum Observation {
    /// A node's role or term changed.
    Role {
        /// The node.
        node: NodeId,
        /// Its new role.
        role: Role,
        /// Its term.
        term: Term,
    },
    /// A node sent a granted vote (a `RequestVoteResponse` with `granted`).
    VoteGranted {
        /// The voter.
        voter: NodeId,
        /// The candidate.
        candidate: NodeId,
        /// The term of the vote.
        term: Term,
    },
    /// A node appended entries to its log.
    Appended {
        /// The node.
        node: NodeId,
        /// The appended entries' fingerprints.
        entries: Vec<ChainedEntry>,
    },
    /// A node's commit index moved over these entries (those still in its log).
    Committed {
        /// The node.
        node: NodeId,
        /// The newly committed entries' fingerprints.
        entries: Vec<ChainedEntry>,
    },
    /// Commands a node applied in one Ready, with the leader changes they caused.
    Applied {
        /// The node.
        node: NodeId,
        /// Results in index order.
        applied: Vec<Applied>,
        /// Leader changes of elections.
        leader_changes: Vec<LeaderChange>,
    },
    /// The next command of the canonical applied sequence: every command, in index order, as
    /// the first node to apply it reported it.
    Canonical(CanonicalEntry),
    /// A node's state machine digest after applying up to `applied_index`.
    Digest {
        /// The node.
        node: NodeId,
        /// The state machine's applied index.
        applied_index: Index,
        /// `StateMachine::digest()`.
        digest: u64,
    },
    /// A client started or stopped believing it leads an election.
    Belief {
        /// The client's session it leads with (its candidacy's).
        session: tenure_core::sm::SessionId,
        /// The client.
        client: ClientId,
        /// The election.
        election: String,
        /// Its token (0 when it stops believing).
        token: u64,
        /// While believing: the true simulated time at which its lease runs out by its own
        /// clock. `None` when it stops believing.
        until_us: Option<SimTimeUs>,
    },
    /// A leader's lease holds at this step (`Status::lease_until_tick` is ahead of its clock):
    /// the core promises that no other node can be elected before the lease ends. Observed at
    /// most once per node and local tick.
    LeaseHeld {
        /// The leader.
        node: tenure_core::types::NodeId,
        /// Its term.
        term: tenure_core::types::Term,
    },
    /// A node sent a keepalive acknowledgement (seen by the world as the reply leaves it).
    KeepaliveAcked {
        /// The acknowledging node.
        node: tenure_core::types::NodeId,
        /// Its term when it acknowledged.
        term: tenure_core::types::Term,
        /// The session renewed.
        session: tenure_core::sm::SessionId,
        /// True time at which the node's own clock reaches the keepalive's receipt + TTL: no
        /// replica may end the session before it (DESIGN rule 4).
        promise_us: SimTimeUs,
    },
    /// A node rebuilt every session's deadline from its state machine: it started from its
    /// disk, or installed a snapshot.
    DeadlinesReset {
        /// The node.
        node: NodeId,
    },
    /// A client invoked an operation (first send).
    OpInvoked {
        /// The operation.
        op: OpId,
        /// The client.
        client: ClientId,
        /// The command.
        command: Command,
    },
    /// A client received the answer to an operation.
    OpCompleted {
        /// The operation.
        op: OpId,
        /// The client.
        client: ClientId,
        /// The log index at which its effect is (`None` if it was refused before reaching
        /// the log).
        position: Option<Index>,
        /// The state machine's response, if it reached the log.
        response: Option<Response>,
    },
    /// A node appended a client's proposal (one attempt of an operation) at `(index, term)`.
    Proposed {
        /// The node.
        node: NodeId,
        /// The client.
        client: ClientId,
        /// The attempt.
        req_id: u64,
        /// Where the entry went.
        index: Index,
        /// Its term.
        term: Term,
    },
    /// A node answered a proposal it had appended: `definite` if it said the command did
    /// not and will not take effect, otherwise (applied, or indeterminate) `false`.
    Answered {
        /// The node.
        node: NodeId,
        /// The client.
        client: ClientId,
        /// The attempt.
        req_id: u64,
        /// Whether the answer was a definite failure.
        definite_failure: bool,
        /// The answer's kind, for the report.
        what: &'static str,
    },
    /// The liveness phase started: all faults healed.
    Healed,
    /// In the liveness phase, with nothing failing, the leader was asked to hand Raft
    /// leadership to `to` and accepted.
    TransferRequested {
        /// The leader.
        from: NodeId,
        /// The target.
        to: NodeId,
    },
    /// The run ended.
    Finished,
}

/// One command of the canonical applied sequence.
#[derive(Clone, Debug)]
pub struct CanonicalEntry {
    /// Its index.
    pub index: Index,
    /// Its term.
    pub term: Term,
    /// The command.
    pub command: Command,
    /// The client request it carried, if any.
    pub request: Option<RequestId>,
    /// Set if the entry retried a request first applied at this index: its response is that
    /// first result, and it changed nothing.
    pub replay_of: Option<Index>,
    /// The state machine's response.
    pub response: Response,
    /// Leader changes caused by it.
    pub leader_changes: Vec<LeaderChange>,
}
