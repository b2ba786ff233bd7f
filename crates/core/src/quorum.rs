//! Quorum arithmetic for simple and joint configurations (Raft §5.2, dissertation §4.3).
//!
//! Pure helpers, property-tested against a deliberately naive reference in
//! `tests/quorum_props.rs`.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{Index, Membership, NodeId};

/// The outcome of counting votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteResult {
    /// A majority (of both halves, while joint) granted.
    Won,
    /// A majority (of either half) refused: the election cannot be won.
    Lost,
    /// Not decided yet.
    Pending,
}

/// Smallest number of voters that forms a majority of `n`.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The highest index stored by a majority of `voters`, given each voter's match index
/// (missing voters count as 0). An empty voter set imposes no constraint (`Index::MAX`),
/// so that it is neutral in a joint configuration's `min`.
pub fn committed_index(voters: &BTreeSet<NodeId>, matched: &BTreeMap<NodeId, Index>) -> Index {
    if voters.is_empty() {
        return Index::MAX;
    }
    let mut indexes: Vec<Index> = voters
        .iter()
        .map(|id| matched.get(id).copied().unwrap_or(0))
        .collect();
    // Sorted descending, the majority-th value is stored by at least a majority.
    indexes.sort_unstable_by(|a, b| b.cmp(a));
    indexes[majority(voters.len()) - 1]
}

/// `committed_index` over a possibly joint configuration: both halves must agree.
pub fn joint_committed_index(membership: &Membership, matched: &BTreeMap<NodeId, Index>) -> Index {
    let incoming = committed_index(&membership.voters, matched);
    let outgoing = committed_index(&membership.voters_outgoing, matched);
    incoming.min(outgoing)
}

/// Count votes from one voter set.
pub fn vote_result(voters: &BTreeSet<NodeId>, votes: &BTreeMap<NodeId, bool>) -> VoteResult {
    if voters.is_empty() {
        return VoteResult::Won;
    }
    let granted = voters
        .iter()
        .filter(|id| votes.get(id) == Some(&true))
        .count();
    let refused = voters
        .iter()
        .filter(|id| votes.get(id) == Some(&false))
        .count();
    let need = majority(voters.len());
    if granted >= need {
        VoteResult::Won
    } else if refused > voters.len() - need {
        VoteResult::Lost
    } else {
        VoteResult::Pending
    }
}

/// Count votes over a possibly joint configuration: winning needs both halves.
pub fn joint_vote_result(membership: &Membership, votes: &BTreeMap<NodeId, bool>) -> VoteResult {
    let a = vote_result(&membership.voters, votes);
    let b = vote_result(&membership.voters_outgoing, votes);
    match (a, b) {
        (VoteResult::Won, VoteResult::Won) => VoteResult::Won,
        (VoteResult::Lost, _) | (_, VoteResult::Lost) => VoteResult::Lost,
        _ => VoteResult::Pending,
    }
}

/// The latest `value` that a majority (of both halves) reached: for each voter a tick,
/// the quorum-th largest. Used for the leader lease: the send tick of the heartbeat that a
/// quorum has acknowledged. Missing voters count as `None` (no acknowledgement).
pub fn joint_quorum_min(membership: &Membership, values: &BTreeMap<NodeId, u64>) -> Option<u64> {
    fn one(voters: &BTreeSet<NodeId>, values: &BTreeMap<NodeId, u64>) -> Option<u64> {
        if voters.is_empty() {
            return Some(u64::MAX);
        }
        let mut v: Vec<Option<u64>> = voters.iter().map(|id| values.get(id).copied()).collect();
        // `None` sorts lowest, which is what an unacknowledged voter deserves.
        v.sort_unstable_by(|a, b| b.cmp(a));
        v[majority(voters.len()) - 1]
    }
    let a = one(&membership.voters, values)?;
    let b = one(&membership.voters_outgoing, values)?;
    Some(a.min(b))
}
