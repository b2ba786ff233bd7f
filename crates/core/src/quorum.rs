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
    committed_index_by(voters, |id| matched.get(&id).copied().unwrap_or(0))
}

/// `committed_index` with each voter's match index looked up by `matched`, for callers that
/// keep the indexes elsewhere (the leader's progress map) and should not build a map.
pub fn committed_index_by(voters: &BTreeSet<NodeId>, matched: impl Fn(NodeId) -> Index) -> Index {
    if voters.is_empty() {
        return Index::MAX;
    }
    // Sorted descending, the majority-th value is stored by at least a majority.
    kth_largest(voters, matched, majority(voters.len()))
}

/// `joint_committed_index` with a lookup, like [`committed_index_by`].
pub fn joint_committed_index_by(
    membership: &Membership,
    matched: impl Fn(NodeId) -> Index,
) -> Index {
    let incoming = committed_index_by(&membership.voters, &matched);
    let outgoing = committed_index_by(&membership.voters_outgoing, &matched);
    incoming.min(outgoing)
}

/// `joint_committed_index` over a possibly joint configuration: both halves must agree.
pub fn joint_committed_index(membership: &Membership, matched: &BTreeMap<NodeId, Index>) -> Index {
    joint_committed_index_by(membership, |id| matched.get(&id).copied().unwrap_or(0))
}

/// The `k`-th largest (1-based) of `value` over a non-empty `voters` with `k <= len`.
/// Clusters have a handful of voters, so a fixed buffer keeps this allocation-free.
fn kth_largest<T: Ord + Copy + Default>(
    voters: &BTreeSet<NodeId>,
    value: impl Fn(NodeId) -> T,
    k: usize,
) -> T {
    const INLINE: usize = 16;
    let mut inline = [T::default(); INLINE];
    let mut heap = Vec::new();
    let values: &mut [T] = if voters.len() <= INLINE {
        for (slot, id) in inline.iter_mut().zip(voters) {
            *slot = value(*id);
        }
        &mut inline[..voters.len()]
    } else {
        heap.extend(voters.iter().map(|id| value(*id)));
        &mut heap
    };
    values.sort_unstable_by(|a, b| b.cmp(a));
    values[k - 1]
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
    joint_quorum_min_by(membership, |id| values.get(&id).copied())
}

/// `joint_quorum_min` with each voter's value looked up by `value`, for callers that keep
/// the values elsewhere (the leader's progress map) and should not build a map per call.
pub fn joint_quorum_min_by(
    membership: &Membership,
    value: impl Fn(NodeId) -> Option<u64>,
) -> Option<u64> {
    let one = |voters: &BTreeSet<NodeId>| -> Option<u64> {
        if voters.is_empty() {
            return Some(u64::MAX);
        }
        // `None` sorts lowest, which is what an unacknowledged voter deserves.
        kth_largest(voters, &value, majority(voters.len()))
    };
    let a = one(&membership.voters)?;
    let b = one(&membership.voters_outgoing)?;
    Some(a.min(b))
}
