//! Identifiers and log entries shared by every part of the core.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

use crate::sm::{Command, RequestId};

/// A node's identity in the cluster. Never reused for a different node.
pub type NodeId = u64;
/// A Raft term (Raft §5.1). Terms only go up.
pub type Term = u64;
/// A position in the replicated log, starting at 1. Index 0 is the empty prefix.
pub type Index = u64;

/// The cluster's membership as of some log position (Raft dissertation §4.3).
///
/// Invariant: `voters` is never empty for an initialized cluster; `learners` is disjoint
/// from `voters` and from `voters_outgoing`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Membership {
    /// The voters of the new (or only) configuration.
    pub voters: BTreeSet<NodeId>,
    /// The voters of the old configuration while in joint consensus; empty otherwise.
    /// Decisions (elections, commitment) need a majority of *both* sets while joint.
    pub voters_outgoing: BTreeSet<NodeId>,
    /// Nodes that receive the log but never vote and never count towards a quorum.
    pub learners: BTreeSet<NodeId>,
}

impl Membership {
    /// A simple (non-joint) configuration of the given voters.
    pub fn new(voters: impl IntoIterator<Item = NodeId>) -> Membership {
        Membership {
            voters: voters.into_iter().collect(),
            voters_outgoing: BTreeSet::new(),
            learners: BTreeSet::new(),
        }
    }

    /// True while the cluster is in joint consensus.
    pub fn is_joint(&self) -> bool {
        !self.voters_outgoing.is_empty()
    }

    /// True if `id` votes in either half of the configuration.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.voters_outgoing.contains(&id)
    }

    /// Whether `id` is a voter of either half or a learner (`all_nodes().contains(id)`
    /// without building the set).
    pub fn contains(&self, id: NodeId) -> bool {
        self.voters.contains(&id)
            || self.voters_outgoing.contains(&id)
            || self.learners.contains(&id)
    }

    /// Every node that should receive the log: voters of both halves and learners.
    pub fn all_nodes(&self) -> BTreeSet<NodeId> {
        let mut all = self.voters.clone();
        all.extend(self.voters_outgoing.iter().copied());
        all.extend(self.learners.iter().copied());
        all
    }
}

/// What an entry carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    /// Appended by every new leader so that it can commit entries of earlier terms (Raft §5.4.2).
    Noop,
    /// A command for the replicated state machine.
    Command(Command),
    /// A membership configuration; it takes effect as soon as it is in the log, not when
    /// committed (Raft dissertation §4.1).
    Membership(Membership),
    // Last, so that the encoding of the variants above is unchanged.
    /// A client's command with its request id: applied at most once per id (a retry gets
    /// the first application's result).
    Request {
        /// Which request of which client.
        id: RequestId,
        /// The command.
        command: Command,
    },
}

/// One entry of the replicated log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Term of the leader that created the entry.
    pub term: Term,
    /// Position of the entry in the log.
    pub index: Index,
    /// What the entry carries.
    pub payload: Payload,
}

/// The part of a node's state that must be durable before it sends anything (Raft Figure 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardState {
    /// Latest term the node has seen.
    pub term: Term,
    /// The candidate voted for in `term`, if any.
    pub vote: Option<NodeId>,
    /// Highest index known committed. Persisted so that a restart can re-apply without
    /// waiting for the leader; losing it is safe.
    pub commit: Index,
}

/// A snapshot of the replicated state up to and including `index`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Last index covered by the snapshot.
    pub index: Index,
    /// Term of the entry at `index`.
    pub term: Term,
    /// Membership as of `index`.
    pub membership: Membership,
    /// The state machine, encoded by [`crate::sm::StateMachine::snapshot`].
    pub data: Vec<u8>,
}

/// Everything a node finds on its disk when it starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Term, vote and commit as last persisted.
    pub hard_state: HardState,
    /// The latest persisted snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// Entries after the snapshot, contiguous, as persisted.
    pub entries: Vec<Entry>,
}

/// For people: `voters 1,2,3` (`voters none` for a node that has not learned its
/// membership yet), with the outgoing voters of a joint configuration and the
/// learners when there are any.
impl std::fmt::Display for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids = |set: &std::collections::BTreeSet<NodeId>| {
            if set.is_empty() {
                return "none".to_string();
            }
            set.iter()
                .map(NodeId::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(f, "voters {}", ids(&self.voters))?;
        if self.is_joint() {
            write!(
                f,
                " (joint with outgoing voters {})",
                ids(&self.voters_outgoing)
            )?;
        }
        if !self.learners.is_empty() {
            write!(f, " learners {}", ids(&self.learners))?;
        }
        Ok(())
    }
}
