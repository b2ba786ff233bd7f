//! What happened in consensus, as the core itself saw it: elections started and lost,
//! leadership won and given up (and why), leaders learned of, memberships changed. Handed
//! out in [`crate::node::AfterPersist::events`] in the order they happened, so that drivers count
//! metrics and write event logs from the core's own account instead of guessing from status
//! differences, and the golden interaction tests print them as etcd's testdata prints its
//! log lines. The words are written once, in `Display`.

use std::fmt;

use crate::types::{Membership, NodeId, Term};

/// Why a leader stopped leading, as the code path that stopped it knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// A transfer to `to` was under way and a higher term began: the target campaigned.
    Transferred {
        /// The transfer's target.
        to: NodeId,
    },
    /// A transfer to `to` ran out its time after TimeoutNow was sent; the leader stepped
    /// down so that a fresh election can restore a leader with a lease.
    TransferTimedOut {
        /// The transfer's target.
        to: NodeId,
    },
    /// The node saw a message of a higher term.
    HigherTerm {
        /// The term seen.
        term: Term,
    },
    /// The node's removal from the voters was committed.
    Removed,
    /// Check-quorum: a majority had not been heard from within an election timeout.
    LostQuorum,
}

impl StepDownReason {
    /// A stable name for logs and metrics labels.
    pub fn name(&self) -> &'static str {
        match self {
            StepDownReason::Transferred { .. } => "transferred",
            StepDownReason::TransferTimedOut { .. } => "transfer-timed-out",
            StepDownReason::HigherTerm { .. } => "higher-term",
            StepDownReason::Removed => "removed",
            StepDownReason::LostQuorum => "lost-quorum",
        }
    }

    /// Whether the step-down was asked for (a transfer), not forced on the leader.
    pub fn is_planned(&self) -> bool {
        matches!(self, StepDownReason::Transferred { .. })
    }
}

impl fmt::Display for StepDownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepDownReason::Transferred { to } => write!(f, "transferred leadership to {to}"),
            StepDownReason::TransferTimedOut { to } => {
                write!(f, "the transfer to {to} did not complete in time")
            }
            StepDownReason::HigherTerm { term } => write!(f, "saw a higher term {term}"),
            StepDownReason::Removed => write!(f, "removed from the voters"),
            StepDownReason::LostQuorum => write!(f, "lost contact with a quorum (check-quorum)"),
        }
    }
}

/// One thing that happened in this node's consensus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// A pre-vote round (`pre_vote`, which changes no term and no vote anywhere) or a real
    /// election started, for `term` (for a pre-vote round, the term it would campaign in).
    ElectionStarted {
        /// The term campaigned for.
        term: Term,
        /// A pre-vote round.
        pre_vote: bool,
    },
    /// A pre-vote round ended without winning (refused, timed out, or a leader was heard).
    PreVoteLost {
        /// The node's term (the round asked for votes in the next one).
        term: Term,
    },
    /// This node won the election of `term`.
    BecameLeader {
        /// The term it leads.
        term: Term,
    },
    /// This node stopped leading `term`.
    SteppedDown {
        /// The term it led.
        term: Term,
        /// Why.
        reason: StepDownReason,
    },
    /// This node follows `leader`, newly learned of in `term`.
    LeaderKnown {
        /// The leader's term.
        term: Term,
        /// The leader.
        leader: NodeId,
    },
    /// With fast election on: the connection to `leader` closed and a reconnect was refused,
    /// so its process is gone; this follower dropped its vote refusal.
    LeaderGone {
        /// The term `leader` led.
        term: Term,
        /// The leader that is gone.
        leader: NodeId,
    },
    /// The effective membership changed (a configuration entry was appended, committed into
    /// its final form, truncated away, or arrived with a snapshot).
    MembershipChanged {
        /// Before.
        from: Membership,
        /// Now.
        to: Membership,
    },
}

impl NodeEvent {
    /// The event's stable name, as logs (`event=`) and the dashboard's journal give it.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeEvent::ElectionStarted { .. } => "election_started",
            NodeEvent::PreVoteLost { .. } => "pre_vote_lost",
            NodeEvent::BecameLeader { .. } => "leader_elected",
            NodeEvent::SteppedDown { .. } => "step_down",
            NodeEvent::LeaderKnown { .. } => "leader_known",
            NodeEvent::LeaderGone { .. } => "leader_gone",
            NodeEvent::MembershipChanged { .. } => "membership_changed",
        }
    }
}

impl fmt::Display for NodeEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeEvent::ElectionStarted {
                term,
                pre_vote: true,
            } => write!(f, "pre-vote round for term {term} started"),
            NodeEvent::ElectionStarted {
                term,
                pre_vote: false,
            } => write!(f, "election for term {term} started"),
            NodeEvent::PreVoteLost { term } => {
                write!(
                    f,
                    "lost a pre-vote round for term {}; stays follower",
                    term + 1
                )
            }
            NodeEvent::BecameLeader { term } => write!(f, "became leader of term {term}"),
            NodeEvent::SteppedDown { term, reason } => {
                write!(f, "stopped leading term {term}: {reason}")
            }
            NodeEvent::LeaderKnown { term, leader } => {
                write!(f, "node {leader} leads term {term}")
            }
            NodeEvent::LeaderGone { term, leader } => write!(
                f,
                "the process of node {leader}, leader of term {term}, is gone (its connection \
                 closed and its peer port refused a reconnect); vote refusal dropped"
            ),
            NodeEvent::MembershipChanged { from, to } => {
                write!(f, "membership changed from {from} to {to}")
            }
        }
    }
}
