//! Scripted fault shapes: short sequences of partitions and crashes that react to what the
//! cluster does (a leader is elected, a leader's commit index moves), to drive it into the
//! states where the classic Raft bugs bite. Random faults alone almost never line these up.
//!
//! - **Figure 8** (Raft §5.4.2): a leader replicates to a minority only (it is cut off with
//!   one follower while clients keep proposing to it); the others elect a leader of a higher
//!   term, which is cut off the moment it is elected, so that its entries stay on its disk
//!   alone; the first side heals and elects a third leader; that leader is crashed the moment
//!   its commit index first moves, and the second one comes back. A leader that commits
//!   entries of an earlier term by counting replicas has, at that moment, committed entries
//!   that the second leader can overwrite. (Seeds with small `append_entries_max` make the
//!   earlier-term entries reach a majority before the new leader's own no-op does.)
//! - **Joint split** (dissertation §4.3): two fresh nodes join as learners, then one joint
//!   change replaces two of the five voters with them, and the same instant the network splits
//!   the leader and the new nodes (sometimes with one kept voter) from the rest, so that each
//!   side holds a majority of one half of the joint configuration only. Removed voters linger
//!   for a while before they are shut down (see `World::decommission_linger_us`), as they would
//!   until an operator stops them.
//! - **Leader isolation** (lease-edge seeds only, see `LEASE_EDGE_SHARE`): the leader is cut
//!   off from every other node for two to four election timeouts while it keeps running. Its
//!   lease must end before any successor can be elected; with clocks at the drift bound and a
//!   long T, a lease without its drift margin outlasts the followers' vote refusal.
//! - **Quiet bridge** (lease-edge seeds only): the workload is hushed (no operations, no
//!   keepalives) until the leader's log has been idle for a while, then only the link between
//!   the leader and one follower is cut. That follower times out with a log as long as
//!   everyone's; the others still hear the leader and must refuse it their votes (the vote
//!   refusal of check-quorum), or a second leader is elected under a lease that still holds.
//!
//! - **Late bind** (fate-sharing seeds only, docs/GUARANTEES.md "Fate-sharing sessions"): a
//!   client leading with a bound session sends one keepalive to a follower across a link
//!   that is cut (it waits in the stream, as TCP would hold it), goes back to the leader,
//!   is acknowledged there and so closes the stream to the follower, whose close waits
//!   behind that keepalive. Leadership then moves to the follower, and the link heals: the
//!   new leader receives a binding keepalive the client sent long ago, then the client's
//!   close of that stream, while the client still acts on the old leader's acknowledgement.
//!   A leader that releases at once, without waiting out the promises made before its term,
//!   ends the session of a holder that believes.
//!
//! - **Stale refusal** (fast-election seeds only, docs/GUARANTEES.md "Fast election"): the
//!   leader crashes, and one follower's refused redial is held back on its way. The leader
//!   restarts and is handed leadership again in a later term, which the follower follows;
//!   every node but the follower and just enough others to keep the leader's quorum is cut
//!   off from the leader for longer than an election timeout, and a forged reset closes the
//!   follower's connection to it (the redial reaches the live leader). Then the held
//!   refusal arrives, stamped with the follower's epoch of the earlier term, while the
//!   follower's messages to the leader are cut. A follower that counts a refusal from an
//!   earlier epoch drops its vote refusal under the live leader's lease, and the nodes cut
//!   off elect it while the lease still holds.
//!
//! Random node faults and partitions are held back while a scenario runs; network loss,
//! duplication and delay are not.

use std::collections::BTreeSet;

use tenure_core::node::Role;
use tenure_core::types::NodeId;

use super::{World, DOWNTIME_US};
use crate::network::full_partition;
use crate::observe::ClientId;
use crate::protocol::Addr;
use crate::time::{SimTimeUs, US_PER_MS};
use crate::trace::TraceKind;

/// How long any scenario phase may wait for the cluster before the scenario is abandoned.
const PHASE_US: SimTimeUs = 3_000 * US_PER_MS;
/// How long the second Figure 8 leader stays cut off before the first side heals.
const HOLD_US: (u64, u64) = (20 * US_PER_MS, 300 * US_PER_MS);
/// How long a joint split lasts.
const SPLIT_US: (u64, u64) = (300 * US_PER_MS, 3_000 * US_PER_MS);

/// How long a quiet bridge waits for the leader's log to go idle (sessions must expire first).
const QUIET_WAIT_US: SimTimeUs = 8_000 * US_PER_MS;
/// Per fault tick, in lease-edge seeds: probability of starting each lease-edge shape.
const LEASE_EDGE_SHAPE_P: f64 = 0.05;
/// Per fault tick, in fate-sharing seeds: probability of starting the late-bind shape.
const LATE_BIND_P: f64 = 0.03;
/// Per fault tick, in fast-election seeds: probability of starting the stale-refusal shape.
const STALE_REFUSAL_P: f64 = 0.03;
/// How long the leader of a stale-refusal shape stays down: long enough for the follower's
/// redial to find nothing listening.
const STALE_DOWNTIME_US: (u64, u64) = (20 * US_PER_MS, 60 * US_PER_MS);

/// A scenario in progress.
#[derive(Clone, Debug)]
pub(super) struct Scenario {
    phase: Phase,
    /// The phase gives up at this time.
    deadline_us: SimTimeUs,
    /// Partitions this scenario put in force, healed when it ends.
    partitions: Vec<u64>,
}

#[derive(Clone, Debug)]
enum Phase {
    /// Figure 8, step 1: the old leader and one follower are cut off; wait for the rest to
    /// elect a leader in a higher term.
    F8WaitSecond { cut: Vec<NodeId>, term: u64 },
    /// Step 2: the second leader is isolated; hold until `until_us`, then heal the first cut.
    F8Hold {
        second: NodeId,
        second_term: u64,
        until_us: SimTimeUs,
    },
    /// Step 3: wait for a third leader in a higher term.
    F8WaitThird { second: NodeId, second_term: u64 },
    /// Step 4: crash the third leader as soon as its commit index moves.
    F8CrashAtCommit {
        third: NodeId,
        term: u64,
        commit: u64,
    },
    /// Joint split, step 1: two fresh learners catch up.
    JointCatchUp { learners: [NodeId; 2] },
    /// Leader isolation: hold the cut until `until_us`.
    IsolationHold { until_us: SimTimeUs },
    /// Quiet bridge, step 1: the workload is hushed; wait until `leader`'s last index has not
    /// moved since `since_us` for half an election timeout.
    QuietWaitIdle {
        leader: NodeId,
        term: u64,
        last_index: u64,
        since_us: SimTimeUs,
    },
    /// Quiet bridge, step 2: the leader–follower link is cut until `until_us`.
    QuietBridgeHold { until_us: SimTimeUs },
    /// Late bind, step 1: `client` sent a keepalive to `follower` across the cut link and
    /// went back to `leader`; wait until it has closed its stream to `follower` (a keepalive
    /// at `leader` was acknowledged), then move leadership to `follower`.
    LateBindWaitClose {
        client: ClientId,
        leader: NodeId,
        term: u64,
        follower: NodeId,
    },
    /// Late bind, step 2: wait for `follower` to lead a term above `term`, then heal.
    LateBindWaitLeader { follower: NodeId, term: u64 },
    /// Stale refusal, step 1: `leader` of `term` crashed; `follower`'s refused redial is
    /// held back when it comes (`held`, the epoch it is stamped with).
    StaleCrashed {
        leader: NodeId,
        term: u64,
        follower: (NodeId, u64),
        held: Option<u64>,
    },
    /// Step 2: wait until `leader` leads a term above `term` again (whoever leads is asked
    /// to hand over to it) and `follower` follows it.
    StaleWaitLeader {
        leader: NodeId,
        term: u64,
        follower: (NodeId, u64),
        epoch: u64,
    },
    /// Step 3: the nodes cut off from `leader` (of `term`) stop hearing from it for longer
    /// than an election timeout, until `until_us`; then the held refusal is delivered.
    StaleHold {
        leader: NodeId,
        term: u64,
        follower: (NodeId, u64),
        epoch: u64,
        until_us: SimTimeUs,
    },
}

impl World {
    /// Maybe starts a scenario (on a fault tick); true if one runs (then random node faults
    /// and partitions are skipped this tick).
    pub(super) fn scenario_tick(&mut self) -> bool {
        if self.scenario.is_some() {
            self.scenario_watch();
            return self.scenario.is_some();
        }
        if self.rng.chance(self.mix.figure8) {
            self.start_figure8();
        } else if self.rng.chance(self.mix.joint_split) {
            self.start_joint_split();
        } else if self.lease_edge && self.rng.chance(LEASE_EDGE_SHAPE_P) {
            self.start_leader_isolation();
        } else if self.lease_edge && self.rng.chance(LEASE_EDGE_SHAPE_P) {
            self.start_quiet_bridge();
        } else if self.fate.is_some() && self.rng.chance(LATE_BIND_P) {
            self.start_late_bind();
        } else if self.fast_election && self.stale_refusal_rng.chance(STALE_REFUSAL_P) {
            self.start_stale_refusal();
        }
        self.scenario.is_some()
    }

    /// Advances the running scenario after a step.
    pub(super) fn scenario_watch(&mut self) {
        let Some(scenario) = self.scenario.clone() else {
            return;
        };
        if !self.faults_on {
            self.end_scenario("the liveness phase starts");
            return;
        }
        if self.now_us >= scenario.deadline_us {
            self.end_scenario("the cluster did not get there in time");
            return;
        }
        match scenario.phase {
            Phase::F8WaitSecond { cut, term } => {
                let Some((second, second_term)) = self.leader_above(term, &cut) else {
                    return;
                };
                let id = self.isolate(&[second]);
                self.trace.log(self.now_us, || {
                    format!("scenario figure-8: leader {second} of term {second_term} elected; cut off at once")
                });
                let until_us = self.now_us + self.rng.between(HOLD_US.0, HOLD_US.1);
                self.set_phase(
                    Phase::F8Hold {
                        second,
                        second_term,
                        until_us,
                    },
                    Some(id),
                );
            }
            Phase::F8Hold {
                second,
                second_term,
                until_us,
            } => {
                if self.now_us < until_us {
                    return;
                }
                // Heal every scenario partition but the one around the second leader.
                if let Some(s) = self.scenario.as_mut() {
                    let keep = s.partitions.pop();
                    let healed: Vec<u64> = std::mem::take(&mut s.partitions);
                    s.partitions.extend(keep);
                    for id in healed {
                        self.network.heal(id);
                    }
                }
                self.trace.log(self.now_us, || {
                    "scenario figure-8: the first cut heals".to_string()
                });
                self.set_phase(
                    Phase::F8WaitThird {
                        second,
                        second_term,
                    },
                    None,
                );
            }
            Phase::F8WaitThird {
                second,
                second_term,
            } => {
                let Some((third, term)) = self.leader_above(second_term, &[second]) else {
                    return;
                };
                let commit = self.nodes[&third].status.as_ref().map_or(0, |s| s.commit);
                self.trace.log(self.now_us, || {
                    format!("scenario figure-8: leader {third} of term {term}; it crashes when its commit index moves")
                });
                self.set_phase(
                    Phase::F8CrashAtCommit {
                        third,
                        term,
                        commit,
                    },
                    None,
                );
            }
            Phase::F8CrashAtCommit {
                third,
                term,
                commit,
            } => {
                let status = self.nodes.get(&third).and_then(|s| s.status.clone());
                let still_leads = status
                    .as_ref()
                    .is_some_and(|s| s.role == Role::Leader && s.term == term);
                if !still_leads {
                    self.end_scenario("the third leader lost its leadership first");
                    return;
                }
                if status.is_some_and(|s| s.commit > commit) {
                    if let Some(slot) = self.nodes.get_mut(&third) {
                        slot.crash();
                    }
                    self.stats.fault("crash");
                    self.trace.event(TraceKind::Fault, self.now_us, &[6, third]);
                    self.schedule_restart(third, DOWNTIME_US.0, DOWNTIME_US.1);
                    self.end_scenario("the third leader crashed right after its commit moved");
                }
            }
            Phase::JointCatchUp { learners } => self.joint_split(learners),
            Phase::IsolationHold { until_us } | Phase::QuietBridgeHold { until_us } => {
                if self.now_us >= until_us {
                    self.end_scenario("the cut heals");
                }
            }
            Phase::LateBindWaitClose {
                client,
                leader,
                term,
                follower,
            } => {
                if !self.leads(leader, term) {
                    self.end_scenario("the leader lost its leadership first");
                    return;
                }
                let closed = self
                    .clients
                    .get(client as usize)
                    .is_some_and(|c| !c.holds_stream_to(follower));
                if !closed {
                    return;
                }
                let moved = self.in_node(leader, |n| n.transfer_leadership(follower));
                self.drive_node(leader);
                if !matches!(moved, Some(Ok(()))) {
                    self.end_scenario("the leader refused to hand over");
                    return;
                }
                self.stats.fault("raft-transfer");
                self.trace.log(self.now_us, || {
                    format!("scenario late-bind: client {client} closed its stream to {follower}; leadership moves there")
                });
                self.set_phase(Phase::LateBindWaitLeader { follower, term }, None);
            }
            Phase::LateBindWaitLeader { follower, term } => {
                if self
                    .leader_above(term, &[])
                    .is_none_or(|(l, _)| l != follower)
                {
                    return;
                }
                self.end_scenario("the follower leads: the cut link heals");
            }
            Phase::StaleCrashed { held: None, .. } => {}
            Phase::StaleCrashed {
                leader,
                term,
                follower,
                held: Some(epoch),
            } => self.set_phase(
                Phase::StaleWaitLeader {
                    leader,
                    term,
                    follower,
                    epoch,
                },
                None,
            ),
            Phase::StaleWaitLeader {
                leader,
                term,
                follower,
                epoch,
            } => self.stale_wait_leader(leader, term, follower, epoch),
            Phase::StaleHold {
                leader,
                term,
                follower: (follower, incarnation),
                epoch,
                until_us,
            } => {
                if self.now_us < until_us {
                    return;
                }
                if self.nodes.get(&follower).map(|s| s.incarnation) != Some(incarnation) {
                    // The held refusal died with the follower's process.
                    self.end_scenario("the follower restarted");
                    return;
                }
                if !self.leads(leader, term) {
                    self.end_scenario("the leader lost its leadership first");
                    return;
                }
                // The follower's messages stop reaching the leader: it learns nothing of an
                // election the follower may start now.
                let id = self.next_partition_id;
                self.next_partition_id += 1;
                self.network
                    .partition(id, vec![(Addr::Node(follower), Addr::Node(leader))]);
                if let Some(s) = self.scenario.as_mut() {
                    s.partitions.push(id);
                }
                self.trace.log(self.now_us, || {
                    format!("scenario stale-refusal: node {follower} hears at last that its redial of {leader}, from epoch {epoch}, was refused")
                });
                self.drive_close(follower, leader, Some(epoch));
                let until_us = self.now_us + 2 * self.election_timeout_us;
                self.set_phase(Phase::IsolationHold { until_us }, None);
            }
            Phase::QuietWaitIdle {
                leader,
                term,
                last_index,
                since_us,
            } => {
                let status = self.nodes.get(&leader).and_then(|s| s.status.clone());
                let Some(status) = status.filter(|s| s.role == Role::Leader && s.term == term)
                else {
                    self.end_scenario(
                        "the leader lost its leadership while the workload was hushed",
                    );
                    return;
                };
                if status.last_index != last_index {
                    let phase = Phase::QuietWaitIdle {
                        leader,
                        term,
                        last_index: status.last_index,
                        since_us: self.now_us,
                    };
                    if let Some(s) = self.scenario.as_mut() {
                        s.phase = phase;
                    }
                    return;
                }
                if self.now_us < since_us + self.election_timeout_us / 2 {
                    return;
                }
                let followers: Vec<NodeId> = status
                    .membership
                    .voters
                    .iter()
                    .copied()
                    .filter(|v| *v != leader && self.nodes.get(v).is_some_and(|s| s.is_up()))
                    .collect();
                let Some(follower) = self.rng.pick(&followers).copied() else {
                    self.end_scenario("no follower to cut");
                    return;
                };
                let id = self.next_partition_id;
                self.next_partition_id += 1;
                let (a, b) = (Addr::Node(leader), Addr::Node(follower));
                self.stats.fault("scenario-partition");
                self.trace
                    .event(TraceKind::Fault, self.now_us, &[12, id, 2]);
                self.network.partition(id, vec![(a, b), (b, a)]);
                self.trace.log(self.now_us, || {
                    format!("scenario quiet-bridge: log idle at index {last_index}; link {leader}–{follower} cut")
                });
                let until_us = self.now_us + 3 * self.election_timeout_us;
                self.set_phase(Phase::QuietBridgeHold { until_us }, Some(id));
            }
        }
    }

    fn start_leader_isolation(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let t = self.election_timeout_us;
        let until_us = self.now_us + self.rng.between(2 * t, 4 * t);
        self.scenario = Some(Scenario {
            phase: Phase::IsolationHold { until_us },
            deadline_us: until_us + PHASE_US,
            partitions: Vec::new(),
        });
        let id = self.isolate(&[leader]);
        if let Some(s) = self.scenario.as_mut() {
            s.partitions.push(id);
        }
        self.stats.fault("scenario-leader-isolation");
        self.trace.log(self.now_us, || {
            format!("scenario leader-isolation: leader {leader} cut off from every node")
        });
    }

    fn start_late_bind(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(voters) = self.voters_of(leader) else {
            return;
        };
        let term = self.nodes[&leader].status.as_ref().map_or(0, |s| s.term);
        let followers: Vec<NodeId> = voters
            .iter()
            .copied()
            .filter(|v| *v != leader && self.nodes.get(v).is_some_and(|s| s.is_up() && !s.paused))
            .collect();
        let clients: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|c| c.leads_bound_via(leader))
            .map(|c| c.id())
            .collect();
        let (Some(follower), Some(client)) = (
            self.rng.pick(&followers).copied(),
            self.rng.pick(&clients).copied(),
        ) else {
            return;
        };
        let id = self.next_partition_id;
        self.next_partition_id += 1;
        self.stats.fault("scenario-late-bind");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[12, id, 1]);
        self.network
            .partition(id, vec![(Addr::Client(client), Addr::Node(follower))]);
        self.scenario = Some(Scenario {
            phase: Phase::LateBindWaitClose {
                client,
                leader,
                term,
                follower,
            },
            deadline_us: self.now_us + PHASE_US,
            partitions: vec![id],
        });
        self.trace.log(self.now_us, || {
            format!("scenario late-bind: client {client} sends a keepalive to {follower} across a cut link, then goes back to leader {leader}")
        });
        self.with_client(client as usize, |c, env| {
            c.keepalive_via(follower, leader, env)
        });
    }

    fn start_quiet_bridge(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(status) = self.nodes.get(&leader).and_then(|s| s.status.clone()) else {
            return;
        };
        self.hush = true;
        self.scenario = Some(Scenario {
            phase: Phase::QuietWaitIdle {
                leader,
                term: status.term,
                last_index: status.last_index,
                since_us: self.now_us,
            },
            deadline_us: self.now_us + QUIET_WAIT_US,
            partitions: Vec::new(),
        });
        self.stats.fault("scenario-quiet-bridge");
        self.trace.log(self.now_us, || {
            format!("scenario quiet-bridge: workload hushed under leader {leader}")
        });
    }

    fn start_stale_refusal(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(voters) = self.voters_of(leader) else {
            return;
        };
        let all_up = voters
            .iter()
            .all(|v| self.nodes.get(v).is_some_and(|s| s.is_up() && !s.paused));
        if voters.len() < 3 || voters.len() % 2 == 0 || !all_up {
            return;
        }
        let followers: Vec<NodeId> = voters.iter().copied().filter(|v| *v != leader).collect();
        let Some(follower) = self.rng.pick(&followers).copied() else {
            return;
        };
        let term = self.nodes[&leader].status.as_ref().map_or(0, |s| s.term);
        let follower = (follower, self.nodes[&follower].incarnation);
        if let Some(slot) = self.nodes.get_mut(&leader) {
            slot.crash();
        }
        self.stats.fault("scenario-stale-refusal");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[6, leader]);
        self.trace.log(self.now_us, || {
            format!("scenario stale-refusal: leader {leader} of term {term} crashes; node {}'s refused redial will be held back", follower.0)
        });
        self.schedule_restart(leader, STALE_DOWNTIME_US.0, STALE_DOWNTIME_US.1);
        self.scenario = Some(Scenario {
            phase: Phase::StaleCrashed {
                leader,
                term,
                follower,
                held: None,
            },
            deadline_us: self.now_us + PHASE_US,
            partitions: Vec::new(),
        });
    }

    /// Holds back the refusal of `at`'s redial of `peer` (stamped `epoch`) if a stale-refusal
    /// shape waits for it; true if it did.
    pub(super) fn hold_refusal(&mut self, at: NodeId, peer: NodeId, epoch: u64) -> bool {
        let Some(Scenario {
            phase:
                Phase::StaleCrashed {
                    leader,
                    follower,
                    held,
                    ..
                },
            ..
        }) = self.scenario.as_mut()
        else {
            return false;
        };
        if *leader != peer || follower.0 != at || held.is_some() {
            return false;
        }
        *held = Some(epoch);
        self.trace.log(self.now_us, || {
            format!("scenario stale-refusal: node {at}'s refused redial of {peer} (epoch {epoch}) is held back")
        });
        true
    }

    /// Stale refusal, step 2 (see [`Phase::StaleWaitLeader`]).
    fn stale_wait_leader(
        &mut self,
        leader: NodeId,
        term: u64,
        follower: (NodeId, u64),
        epoch: u64,
    ) {
        let (follower_id, incarnation) = follower;
        if self.nodes.get(&follower_id).map(|s| s.incarnation) != Some(incarnation) {
            self.end_scenario("the follower restarted");
            return;
        }
        let Some((current, current_term)) = self.leader_above(term, &[]) else {
            return;
        };
        if current != leader {
            let caught_up = self
                .nodes
                .get(&leader)
                .is_some_and(|s| s.is_up() && !s.paused);
            let asked = self
                .nodes
                .get(&current)
                .and_then(|s| s.status.as_ref())
                .is_some_and(|s| s.transferring_to == Some(leader));
            if caught_up && !asked {
                let _ = self.in_node(current, |n| n.transfer_leadership(leader));
                self.drive_node(current);
            }
            return;
        }
        let follower = follower_id;
        let follows = self
            .nodes
            .get(&follower)
            .and_then(|s| s.status.as_ref())
            .is_some_and(|s| {
                s.role == Role::Follower && s.leader == Some(leader) && s.term == current_term
            });
        if !follows {
            return;
        }
        let Some(voters) = self.voters_of(leader) else {
            self.end_scenario("the membership changed");
            return;
        };
        // Keep the leader's quorum with the follower and just enough others (running ones
        // it can reach); cut the rest off from it, so that with the follower they are a
        // majority of their own.
        let mut others: Vec<NodeId> = voters
            .iter()
            .copied()
            .filter(|v| *v != leader && *v != follower)
            .collect();
        let majority = voters.len() / 2 + 1;
        let mut kept = Vec::new();
        while kept.len() + 2 < majority {
            let reachable: Vec<usize> = (0..others.len())
                .filter(|i| {
                    let o = others[*i];
                    self.nodes.get(&o).is_some_and(|s| s.is_up() && !s.paused)
                        && !self.network.is_blocked(Addr::Node(leader), Addr::Node(o))
                        && !self.network.is_blocked(Addr::Node(o), Addr::Node(leader))
                })
                .collect();
            let Some(i) = self.rng.pick(&reachable).copied() else {
                self.end_scenario("the leader cannot keep a quorum");
                return;
            };
            kept.push(others.remove(i));
        }
        let cut: Vec<(Addr, Addr)> = others
            .iter()
            .flat_map(|o| {
                [
                    (Addr::Node(leader), Addr::Node(*o)),
                    (Addr::Node(*o), Addr::Node(leader)),
                ]
            })
            .collect();
        let id = self.next_partition_id;
        self.next_partition_id += 1;
        self.stats.fault("scenario-partition");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[12, id, cut.len() as u64]);
        self.network.partition(id, cut);
        // A forged reset of the follower's connection to the live leader: it sees the close,
        // and its redial reaches the leader's listener.
        if let Some(incarnation) = self.nodes.get(&follower).map(|s| s.incarnation) {
            let delay = self.network.delay(&mut self.rng);
            self.schedule_connection(
                delay,
                follower,
                incarnation,
                leader,
                super::closes::Close::Seen,
            );
        }
        self.trace.log(self.now_us, || {
            format!("scenario stale-refusal: {leader} leads term {current_term} again; {others:?} cut off from it, {follower}'s connection to it reset")
        });
        let until_us = self.now_us + self.election_timeout_us * 3 / 2;
        self.set_phase(
            Phase::StaleHold {
                leader,
                term: current_term,
                follower: (follower, incarnation),
                epoch,
                until_us,
            },
            Some(id),
        );
    }

    fn set_phase(&mut self, phase: Phase, partition: Option<u64>) {
        let deadline_us = self.now_us + PHASE_US;
        if let Some(s) = self.scenario.as_mut() {
            s.phase = phase;
            s.deadline_us = deadline_us;
            s.partitions.extend(partition);
        }
    }

    fn end_scenario(&mut self, why: &str) {
        self.hush = false;
        if let Some(s) = self.scenario.take() {
            for id in s.partitions {
                self.network.heal(id);
            }
            self.trace
                .log(self.now_us, || format!("scenario ends: {why}"));
        }
    }

    /// Whether `node` (still) leads `term`, as of its last step.
    fn leads(&self, node: NodeId, term: u64) -> bool {
        self.nodes
            .get(&node)
            .and_then(|s| s.status.as_ref())
            .is_some_and(|s| s.role == Role::Leader && s.term == term)
    }

    /// An up, unpaused node outside `except` leading a term above `term`.
    fn leader_above(&self, term: u64, except: &[NodeId]) -> Option<(NodeId, u64)> {
        self.nodes
            .values()
            .filter(|s| s.is_up() && !s.paused && !except.contains(&s.id))
            .filter_map(|s| s.status.as_ref().map(|st| (s.id, st)))
            .find(|(_, st)| st.role == Role::Leader && st.term > term)
            .map(|(id, st)| (id, st.term))
    }

    /// Cuts `side` off from every other live node (clients keep reaching everyone).
    fn isolate(&mut self, side: &[NodeId]) -> u64 {
        let id = self.next_partition_id;
        self.next_partition_id += 1;
        let side_addrs: BTreeSet<Addr> = side.iter().map(|n| Addr::Node(*n)).collect();
        let all: Vec<Addr> = self.live_ids.iter().map(|n| Addr::Node(*n)).collect();
        let links = full_partition(&side_addrs, &all);
        self.stats.fault("scenario-partition");
        self.trace
            .event(TraceKind::Fault, self.now_us, &[12, id, links.len() as u64]);
        self.network.partition(id, links);
        id
    }

    fn voters_of(&self, leader: NodeId) -> Option<BTreeSet<NodeId>> {
        let slot = self.nodes.get(&leader)?;
        let status = slot.status.as_ref()?;
        if !slot.membership_committed() || status.membership.is_joint() {
            return None;
        }
        Some(status.membership.voters.clone())
    }

    fn start_figure8(&mut self) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(voters) = self.voters_of(leader) else {
            return;
        };
        if voters.len() < 5 {
            return;
        }
        let others: Vec<NodeId> = voters
            .iter()
            .copied()
            .filter(|v| *v != leader && self.nodes.get(v).is_some_and(|s| s.is_up()))
            .collect();
        let Some(follower) = self.rng.pick(&others).copied() else {
            return;
        };
        let term = self.nodes[&leader].status.as_ref().map_or(0, |s| s.term);
        self.scenario = Some(Scenario {
            phase: Phase::F8WaitSecond {
                cut: vec![leader, follower],
                term,
            },
            deadline_us: self.now_us + PHASE_US,
            partitions: Vec::new(),
        });
        let id = self.isolate(&[leader, follower]);
        if let Some(s) = self.scenario.as_mut() {
            s.partitions.push(id);
        }
        self.stats.fault("scenario-figure-8");
        self.trace.log(self.now_us, || {
            format!("scenario figure-8: leader {leader} (term {term}) and follower {follower} cut off from the rest")
        });
    }

    fn start_joint_split(&mut self) {
        if self.pending_join.is_some() {
            return;
        }
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(voters) = self.voters_of(leader) else {
            return;
        };
        let learners_now = self.nodes[&leader]
            .status
            .as_ref()
            .map(|s| s.membership.learners.clone())
            .unwrap_or_default();
        if voters.len() != self.opts.nodes || !learners_now.is_empty() || voters.len() < 5 {
            return;
        }
        let a = self.start_fresh_node();
        let b = self.start_fresh_node();
        let learners: BTreeSet<NodeId> = [a, b].into_iter().collect();
        let result = self.in_node(leader, |n| n.change_membership(voters.clone(), learners));
        self.drive_node(leader);
        if !matches!(result, Some(Ok(_))) {
            // The fresh nodes were never added: shut them down again.
            for id in [a, b] {
                self.retire_fresh_node(id);
            }
            return;
        }
        for id in [a, b] {
            if let Some(s) = self.nodes.get_mut(&id) {
                s.was_member = true;
            }
        }
        self.stats.fault("scenario-joint-split");
        self.trace.log(self.now_us, || {
            format!("scenario joint-split: leader {leader} adds learners {a} and {b}")
        });
        self.scenario = Some(Scenario {
            phase: Phase::JointCatchUp { learners: [a, b] },
            deadline_us: self.now_us + PHASE_US,
            partitions: Vec::new(),
        });
    }

    /// Once the learners hold everything the leader committed, replace two voters with them
    /// in one joint change and split the network at the same instant.
    fn joint_split(&mut self, learners: [NodeId; 2]) {
        let Some(leader) = self.current_leader() else {
            return;
        };
        let Some(voters) = self.voters_of(leader) else {
            return;
        };
        let status = self.nodes[&leader].status.clone().expect("leader is up");
        if !learners
            .iter()
            .all(|l| status.membership.learners.contains(l))
        {
            self.end_scenario("the learners are no longer learners");
            return;
        }
        let caught_up = learners.iter().all(|l| {
            self.nodes
                .get(l)
                .and_then(|s| s.status.as_ref())
                .is_some_and(|s| s.last_index >= status.commit)
        });
        if !caught_up {
            return;
        }
        let pool: Vec<NodeId> = voters.iter().copied().filter(|v| *v != leader).collect();
        let mut pool = pool;
        let mut removed = Vec::new();
        for _ in 0..2 {
            let i = self.rng.below(pool.len() as u64) as usize;
            removed.push(pool.remove(i));
        }
        let mut new_voters = voters.clone();
        for r in &removed {
            new_voters.remove(r);
        }
        new_voters.extend(learners);
        let result = self.in_node(leader, |n| {
            n.change_membership(new_voters.clone(), BTreeSet::new())
        });
        if !matches!(result, Some(Ok(_))) {
            self.end_scenario("the leader refused the joint change");
            return;
        }
        self.stats.fault("membership-change");
        // The kept voters (not the leader) are `pool` now; sometimes one joins the leader's side.
        let mut side = vec![leader, learners[0], learners[1]];
        if self.rng.chance(0.4) {
            if let Some(k) = self.rng.pick(&pool).copied() {
                side.push(k);
            }
        }
        let id = self.isolate(&side);
        self.trace.log(self.now_us, || {
            format!("scenario joint-split: leader {leader} replaces {removed:?} with {learners:?} (voters {new_voters:?}); {side:?} split from the rest")
        });
        self.drive_node(leader);
        let heal_at = self.now_us + self.rng.between(SPLIT_US.0, SPLIT_US.1);
        self.queue.push(heal_at, super::Event::HealPartition { id });
        // The split heals by itself; the scenario is over.
        self.scenario = None;
        self.trace.log(self.now_us, || {
            "scenario joint-split: split in force".to_string()
        });
    }
}
