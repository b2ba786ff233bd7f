//! Fault injection during the safety phase: partitions, crashes (now or mid-write), pauses,
//! membership changes and Raft leadership transfers, rolled every fault tick from the seed's
//! fault mix.

use std::collections::BTreeSet;

use tenure_core::node::Role;
use tenure_core::types::{Membership, NodeId};

use super::{Event, World, DOWNTIME_US};
use crate::driver::NodeSlot;
use crate::faults::FAULT_TICK_US;
use crate::network::{full_partition, PARTITIONS_MAX};
use crate::observe::ClientId;
use crate::protocol::Addr;
use crate::time::US_PER_MS;
use crate::trace::TraceKind;

/// Ordinary pauses, and the long ones (past an election timeout and past many leases).
const PAUSE_US: (u64, u64) = (20 * US_PER_MS, 1_500 * US_PER_MS);
const LONG_PAUSE_US: (u64, u64) = (1_500 * US_PER_MS, 4_000 * US_PER_MS);
/// Share of pauses that are long.
const LONG_PAUSE_SHARE: f64 = 0.3;
/// How long a partition lasts before it heals by itself.
const PARTITION_US: (u64, u64) = (100 * US_PER_MS, 3_000 * US_PER_MS);
/// Share of one-way partitions that cut a node–client link rather than a node–node link.
const CLIENT_LINK_SHARE: f64 = 0.3;
/// Probability that a client is on the isolated side of a full partition.
const CLIENT_ISOLATED_P: f64 = 0.25;

impl World {
    pub(super) fn current_leader(&self) -> Option<NodeId> {
        self.nodes
            .values()
            .filter(|s| s.role() == Some(Role::Leader) && !s.paused)
            .max_by_key(|s| s.status.as_ref().map_or(0, |st| st.term))
            .map(|s| s.id)
    }

    fn up_nodes(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|s| s.is_up())
            .map(|s| s.id)
            .collect()
    }

    pub(super) fn on_fault_tick(&mut self) {
        if !self.faults_on {
            return;
        }
        self.queue
            .push(self.now_us + FAULT_TICK_US, Event::FaultTick);
        if self.scenario_tick() {
            // A scripted shape is being played; random node faults would only spoil it.
            self.decommission_removed();
            return;
        }
        if self.handover_at.is_none() && self.rng.chance(self.mix.lease_handover) {
            self.handover_at = self.current_leader();
            self.handover_transferred = false;
        }
        if self.rng.chance(self.mix.partition) && self.network.partitions() < PARTITIONS_MAX {
            self.partition();
        }
        if self.rng.chance(self.mix.crash) {
            self.crash_someone();
        }
        if self.rng.chance(self.mix.pause) {
            self.pause_someone();
        }
        if self.rng.chance(self.mix.membership) {
            self.change_membership();
        }
        if self.rng.chance(self.mix.transfer) {
            self.raft_transfer();
        }
        if self.fast_election && self.rng.chance(self.forged_reset) {
            self.forge_resets();
        }
        self.decommission_removed();
    }

    fn partition(&mut self) {
        let id = self.next_partition_id;
        self.next_partition_id += 1;
        let nodes: Vec<NodeId> = self.live_ids.clone();
        let links = if self.rng.chance(self.mix.one_way_share) {
            let a = *self.rng.pick(&nodes).expect("nodes exist");
            let link = if self.rng.chance(CLIENT_LINK_SHARE) && !self.clients.is_empty() {
                let c = self.rng.below(self.clients.len() as u64);
                if self.rng.chance(0.5) {
                    (Addr::Node(a), Addr::Client(c))
                } else {
                    (Addr::Client(c), Addr::Node(a))
                }
            } else {
                let others: Vec<NodeId> = nodes.iter().copied().filter(|n| *n != a).collect();
                let Some(b) = self.rng.pick(&others).copied() else {
                    return;
                };
                (Addr::Node(a), Addr::Node(b))
            };
            self.stats.fault("one-way-partition");
            self.trace.log(self.now_us, || {
                format!(
                    "fault: partition {id}: one-way {:?} -> {:?} blocked",
                    link.0, link.1
                )
            });
            vec![link]
        } else {
            let side_max = (nodes.len() / 2).max(1) as u64;
            let side_len = self.rng.between(1, side_max) as usize;
            let mut pool = nodes.clone();
            let mut side = BTreeSet::new();
            for _ in 0..side_len {
                let i = self.rng.below(pool.len() as u64) as usize;
                side.insert(Addr::Node(pool.remove(i)));
            }
            for c in 0..self.clients.len() as ClientId {
                if self.rng.chance(CLIENT_ISOLATED_P) {
                    side.insert(Addr::Client(c));
                }
            }
            let mut all: Vec<Addr> = nodes.iter().map(|n| Addr::Node(*n)).collect();
            all.extend((0..self.clients.len() as ClientId).map(Addr::Client));
            self.stats.fault("partition");
            self.trace.log(self.now_us, || {
                format!("fault: partition {id}: {side:?} isolated")
            });
            full_partition(&side, &all)
        };
        self.trace
            .event(TraceKind::Fault, self.now_us, &[5, id, links.len() as u64]);
        self.network.partition(id, links);
        let heal_at = self.now_us + self.rng.between(PARTITION_US.0, PARTITION_US.1);
        self.queue.push(heal_at, Event::HealPartition { id });
    }

    fn crash_someone(&mut self) {
        let up: Vec<NodeId> = self.up_nodes();
        let Some(id) = self.rng.pick(&up).copied() else {
            return;
        };
        if self.rng.chance(self.mix.torn_share) {
            // It crashes at its next Ready that writes, between the write and the fsync.
            if let Some(slot) = self.nodes.get_mut(&id) {
                slot.crash_mid_ready = true;
            }
            self.trace.log(self.now_us, || {
                format!("fault: node {id} will crash during its next write")
            });
            return;
        }
        if let Some(slot) = self.nodes.get_mut(&id) {
            slot.crash();
        }
        self.stats.fault("crash");
        self.trace.event(TraceKind::Fault, self.now_us, &[6, id]);
        self.trace
            .log(self.now_us, || format!("fault: node {id} crashes"));
        self.schedule_restart(id, DOWNTIME_US.0, DOWNTIME_US.1);
    }

    fn pause_someone(&mut self) {
        let candidates: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|s| s.is_up() && !s.paused)
            .map(|s| s.id)
            .collect();
        let Some(id) = self.rng.pick(&candidates).copied() else {
            return;
        };
        let (lo, hi) = if self.rng.chance(LONG_PAUSE_SHARE) {
            LONG_PAUSE_US
        } else {
            PAUSE_US
        };
        let duration = self.rng.between(lo, hi);
        let Some(slot) = self.nodes.get_mut(&id) else {
            return;
        };
        slot.paused = true;
        slot.pause_gen += 1;
        let pause_gen = slot.pause_gen;
        self.stats.fault("pause");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[7, id, duration]);
        self.trace.log(self.now_us, || {
            format!("fault: node {id} pauses for {} ms", duration / US_PER_MS)
        });
        self.queue.push(
            self.now_us + duration,
            Event::Resume {
                node: id,
                pause_gen,
            },
        );
    }

    /// The current leader and its membership, when that membership is committed (no change
    /// is in flight).
    fn leader_with_committed_membership(&self) -> Option<(NodeId, Membership)> {
        let leader = self.current_leader()?;
        let slot = self.nodes.get(&leader)?;
        if !slot.membership_committed() {
            return None;
        }
        Some((leader, slot.status.as_ref()?.membership.clone()))
    }

    /// Proposes one membership change at the leader: add a fresh node as a learner, promote a
    /// learner, demote or remove a voter. Voters stay between `nodes - 1` and `nodes`.
    fn change_membership(&mut self) {
        let Some((leader, membership)) = self.leader_with_committed_membership() else {
            return;
        };
        let mut voters = membership.voters.clone();
        let mut learners = membership.learners.clone();
        let target = self.opts.nodes;
        let what: String;
        if let Some(joining) = self.pending_join {
            learners.insert(joining);
            what = format!("add node {joining} as learner");
        } else if !learners.is_empty() && (voters.len() < target || self.rng.chance(0.3)) {
            let pool: Vec<NodeId> = learners.iter().copied().collect();
            let l = *self.rng.pick(&pool).expect("learners exist");
            learners.remove(&l);
            if voters.len() < target {
                voters.insert(l);
                what = format!("promote learner {l}");
            } else {
                what = format!("remove learner {l}");
            }
        } else if voters.len() >= target {
            let pool: Vec<NodeId> = voters.iter().copied().collect();
            let v = *self.rng.pick(&pool).expect("voters exist");
            voters.remove(&v);
            if self.rng.chance(0.4) {
                learners.insert(v);
                what = format!("demote voter {v}");
            } else {
                what = format!("remove voter {v}");
            }
        } else {
            // Too few voters and no learner to promote: start a fresh node (never reusing an
            // id) with an empty disk; a later change adds it.
            let id = self.start_fresh_node();
            self.pending_join = Some(id);
            return;
        }
        let joining = self.pending_join;
        let result = self.in_node(leader, |n| {
            // As the server does: the new node's addresses go into the replicated
            // member directory first (replicas' digests cover it, so a directory that
            // diverges between replicas, or is lost by a snapshot, is caught).
            if let Some(id) = joining {
                let _ = n.propose(tenure_core::sm::Command::SetMember {
                    node: id,
                    addresses: tenure_core::sm::MemberAddresses {
                        peer: format!("node-{id}:7000"),
                        client: format!("node-{id}:7001"),
                        http: format!("node-{id}:7002"),
                    },
                });
            }
            n.change_membership(voters.clone(), learners.clone())
        });
        match result {
            Some(Ok(_)) => {
                if let Some(joining) = self.pending_join.take() {
                    if let Some(s) = self.nodes.get_mut(&joining) {
                        s.was_member = true;
                    }
                }
                self.stats.fault("membership-change");
                self.trace.event(
                    TraceKind::Fault,
                    self.now_us,
                    &[8, leader, voters.len() as u64, learners.len() as u64],
                );
                self.trace.log(self.now_us, || {
                    format!("membership: leader {leader} proposes to {what}: voters {voters:?} learners {learners:?}")
                });
            }
            Some(Err(e)) => {
                self.trace.log(self.now_us, || {
                    format!("membership: leader {leader} refused to {what}: {e:?}")
                });
            }
            None => {}
        }
        self.drive_node(leader);
    }

    /// Starts a fresh node (never reusing an id) with an empty disk and no initial voters.
    pub(super) fn start_fresh_node(&mut self) -> NodeId {
        let id = self.next_node_id;
        self.next_node_id += 1;
        let config = self.node_config(id, Vec::new());
        let period = self.draw_tick_period();
        self.nodes.insert(
            id,
            NodeSlot::new(id, config, period, false, self.new_disk()),
        );
        let pipelined = self.pipelined;
        if let Some(slot) = self.nodes.get_mut(&id) {
            slot.pipelined = pipelined;
        }
        self.live_ids.push(id);
        self.stats.fault("new-node");
        self.trace
            .log(self.now_us, || format!("membership: start fresh node {id}"));
        self.start_node(id);
        id
    }

    /// Shuts down for good a fresh node that never became a member.
    pub(super) fn retire_fresh_node(&mut self, id: NodeId) {
        if let Some(s) = self.nodes.get_mut(&id) {
            s.crash();
            s.decommissioned = true;
        }
        self.live_ids.retain(|n| *n != id);
    }

    /// Shuts down, for good, members that a committed configuration no longer contains, once
    /// they have been out of it for the seed's linger time (an operator stops a removed
    /// server some time after the change, and until then it runs, ticks and campaigns).
    fn decommission_removed(&mut self) {
        let Some((_, membership)) = self.leader_with_committed_membership() else {
            return;
        };
        let members = membership.all_nodes();
        let removed: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|s| s.was_member && !s.decommissioned && !members.contains(&s.id))
            .map(|s| s.id)
            .collect();
        self.removed_since_us.retain(|id, _| removed.contains(id));
        for id in removed {
            let since = *self.removed_since_us.entry(id).or_insert(self.now_us);
            if self.now_us < since + self.decommission_linger_us {
                continue;
            }
            self.removed_since_us.remove(&id);
            if let Some(s) = self.nodes.get_mut(&id) {
                s.crash();
                s.decommissioned = true;
            }
            self.live_ids.retain(|n| *n != id);
            self.trace.event(TraceKind::Fault, self.now_us, &[9, id]);
            self.trace.log(self.now_us, || {
                format!("membership: node {id} is out of the configuration; shut down")
            });
        }
    }

    /// The lease-handover shape, by transfer instead of a crash (every other time it is
    /// armed, by the leader's term: no draw, so the other shapes keep their streams): as a
    /// keepalive reaches the armed leader, it hands Raft leadership to a follower and, at the
    /// same instant, stops hearing
    /// from every node (its own messages still leave), so that it goes on believing it
    /// leads while the target wins the next term with votes that set aside their refusal.
    /// Its clients still reach it: any keepalive it acknowledges now promises time the new
    /// leader knows nothing of, and the shape's holder goes silent at the next
    /// acknowledgement, so the new leader expires its session when it may. A leader that
    /// confirmed its leadership after its TimeoutNow left shows as an expiry before a
    /// promise, or two holders.
    pub(super) fn maybe_hand_over_by_transfer(&mut self, leader: NodeId) {
        let Some(status) = self.nodes.get(&leader).and_then(|s| s.status.clone()) else {
            return;
        };
        if !self.faults_on
            || self.handover_transferred
            || status.term % 2 == 1
            || status.role != Role::Leader
        {
            return;
        }
        self.handover_transferred = true;
        let Some(to) = status
            .membership
            .voters
            .iter()
            .copied()
            .find(|v| *v != leader)
        else {
            return;
        };
        let result = self.in_node(leader, |n| n.transfer_leadership(to));
        if result.is_none() {
            return;
        }
        let id = self.next_partition_id;
        self.next_partition_id += 1;
        let links: Vec<(Addr, Addr)> = self
            .live_ids
            .iter()
            .filter(|n| **n != leader)
            .map(|n| (Addr::Node(*n), Addr::Node(leader)))
            .collect();
        self.stats.fault("transfer-handover");
        self.trace.log(self.now_us, || {
            format!(
                "fault: lease hand-over by transfer: leader {leader} hands over to {to} and \
                 hears from no node (partition {id}): {result:?}"
            )
        });
        self.trace
            .event(TraceKind::Fault, self.now_us, &[5, id, links.len() as u64]);
        self.network.partition(id, links);
        self.queue.push(
            self.now_us + 2 * self.election_timeout_us,
            Event::HealPartition { id },
        );
        self.drive_node(leader);
    }

    fn raft_transfer(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let voters: Vec<NodeId> = self.nodes[&leader]
            .status
            .as_ref()
            .map(|s| {
                s.membership
                    .voters
                    .iter()
                    .copied()
                    .filter(|v| *v != leader)
                    .collect()
            })
            .unwrap_or_default();
        let Some(to) = self.rng.pick(&voters).copied() else {
            return;
        };
        let result = self.in_node(leader, |n| n.transfer_leadership(to));
        self.stats.fault("raft-transfer");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[10, leader, to]);
        self.trace.log(self.now_us, || {
            format!("transfer: leader {leader} hands Raft leadership to {to}: {result:?}")
        });
        self.drive_node(leader);
    }
}
