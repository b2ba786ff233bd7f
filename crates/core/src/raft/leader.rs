//! The leader's duties in consensus: heartbeats, check-quorum, and the leader lease (the
//! time until which this leader provably leads, DESIGN rule 4).
//!
//! A leader's lease rests on the followers' vote refusal: a follower that heard from the
//! leader of its term less than T ago refuses to (pre-)vote for anyone else
//! (`Raft::in_vote_lease`). So once a quorum acknowledged a message this leader sent at tick
//! `s`, nobody else can be elected before `s + T` on the followers' clocks, which is
//! `s + T − margin` on this leader's (`Config::lease_margin_ticks`: clock drift and tick
//! rounding).

use std::collections::BTreeMap;

use super::{Raft, Role};
use crate::event::StepDownReason;
use crate::message::Body;
use crate::quorum::{joint_quorum_min_by, joint_vote_result, VoteResult};
use crate::types::NodeId;

impl Raft {
    /// The local tick until which this leader provably leads: no other node can be elected
    /// before it, because a quorum heard from it at or after the quorum's acknowledged send
    /// tick and refuses votes for T after that, and the margin covers drift and rounding.
    pub(crate) fn lease_until_tick(&self) -> Option<u64> {
        if self.lease_void || !self.config.check_quorum {
            return None;
        }
        let base = self.quorum_heard_tick()?;
        let margin = if injected!(self.bugs.no_lease_drift_margin) {
            2
        } else {
            self.config.lease_margin_ticks()
        };
        Some(base + self.t() - margin)
    }

    /// While leader: the latest local tick `s` such that a quorum (of each half, while
    /// joint) acknowledged, in this term, a message this leader sent at tick `s` or later.
    /// Every member of that quorum was still in this term after `s`.
    pub(crate) fn quorum_heard_tick(&self) -> Option<u64> {
        if self.role != Role::Leader {
            return None;
        }
        let acked = |id: NodeId| {
            if id == self.id {
                Some(self.now_tick)
            } else {
                self.progress.get(&id).and_then(|p| p.acked_sent_tick)
            }
        };
        joint_quorum_min_by(&self.membership, acked)
    }

    /// This leader sent TimeoutNow in its term: its transferee may be elected at any moment,
    /// with votes that ignore the vote refusal.
    pub(crate) fn transfer_sent(&self) -> bool {
        self.lease_void
    }

    pub(crate) fn lease_valid(&self) -> bool {
        self.lease_until_tick()
            .is_some_and(|until| self.now_tick < until)
    }

    /// While leader: send heartbeats at the next tick instead of waiting out the interval
    /// (a read waits for a quorum to acknowledge a message sent after it arrived).
    pub(crate) fn heartbeat_at_next_tick(&mut self) {
        if self.role == Role::Leader {
            self.heartbeat_elapsed_ticks = self.config.heartbeat_ticks;
        }
    }

    pub(super) fn tick_leader(&mut self) {
        self.leader_contact_elapsed_ticks = 0;
        self.heartbeat_elapsed_ticks += 1;
        self.check_quorum_elapsed_ticks += 1;

        if self.check_quorum_elapsed_ticks >= self.t() {
            self.check_quorum_elapsed_ticks = 0;
            if self.config.check_quorum && !self.quorum_active() {
                // Check-quorum (dissertation §6.2): a leader cut off from a majority steps
                // down so that clients stop waiting on it.
                self.stepping_down = Some(StepDownReason::LostQuorum);
                self.become_follower(self.term, None);
                return;
            }
            for p in self.progress.values_mut() {
                p.recent_active = false;
            }
        }

        if let Some(transfer) = &mut self.transfer {
            transfer.elapsed_ticks += 1;
            if transfer.elapsed_ticks >= self.config.election_timeout_ticks {
                let to = transfer.to;
                self.transfer = None;
                if self.lease_void {
                    // TimeoutNow left: the target may still win, so this leader cannot
                    // vouch for its lease again in this term. Stepping down lets a fresh
                    // election restore a leader that can.
                    self.stepping_down = Some(StepDownReason::TransferTimedOut { to });
                    self.become_follower(self.term, None);
                    return;
                }
            }
        }

        if self.heartbeat_elapsed_ticks >= self.config.heartbeat_ticks {
            self.heartbeat_elapsed_ticks = 0;
            self.broadcast_heartbeat();
        }
    }

    pub(super) fn quorum_active(&self) -> bool {
        let mut votes: BTreeMap<NodeId, bool> = self
            .progress
            .iter()
            .map(|(id, p)| (*id, p.recent_active))
            .collect();
        votes.insert(self.id, true);
        joint_vote_result(&self.membership, &votes) == VoteResult::Won
    }

    /// Heartbeats carry whatever a probing peer still needs and an empty batch otherwise;
    /// either way they renew followers' contact, the commit index and the leader lease.
    pub(super) fn broadcast_heartbeat(&mut self) {
        let peers: Vec<NodeId> = self.progress.keys().copied().collect();
        for to in peers {
            let p = &self.progress[&to];
            if p.probing || p.next_index <= self.log.last_index() {
                self.send_append(to);
            } else {
                let prev = p.next_index - 1;
                match self.log.term(prev) {
                    Some(prev_term) => {
                        let term = self.term;
                        let body = Body::AppendEntries {
                            prev_log_index: prev,
                            prev_log_term: prev_term,
                            entries: Vec::new(),
                            leader_commit: self.log.committed,
                            sent_tick: self.now_tick,
                        };
                        self.send(to, term, body);
                    }
                    None => self.send_append(to),
                }
            }
        }
    }

    pub(super) fn send_timeout_now(&mut self, to: NodeId) {
        self.lease_void = true;
        let term = self.term;
        self.send(to, term, Body::TimeoutNow);
    }
}
