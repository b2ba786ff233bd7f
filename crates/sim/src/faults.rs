//! The fault mix: which faults a seed injects and how often, drawn from the seed.
//!
//! Each kind of fault is switched on for a seed with probability `KIND_ON`, at a rate drawn
//! from its range, so that some seeds hammer one fault kind and others mix several. The mix
//! is printed in one line with `--verbose` and with every violation.

use crate::network::NetworkFaults;
use crate::rng::SimRng;
use crate::time::{SimTimeUs, US_PER_MS};

/// How often the world rolls the dice for node and partition faults.
pub const FAULT_TICK_US: SimTimeUs = 50 * US_PER_MS;
/// Probability that a given fault kind is on for a seed.
const KIND_ON: f64 = 0.6;
/// Share of seeds whose network is slow during the safety phase.
const SLOW_NETWORK_SHARE: f64 = 0.2;
/// Range of the longest delay of a slow network.
const SLOW_DELAY_MAX_US: (u64, u64) = (50 * US_PER_MS, 250 * US_PER_MS);

/// Rates and probabilities of every fault kind for one seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultMix {
    /// Network misbehaviour.
    pub network: NetworkFaults,
    /// Per fault tick: probability of a new partition.
    pub partition: f64,
    /// Share of partitions that are one-way.
    pub one_way_share: f64,
    /// Per fault tick: probability of a crash.
    pub crash: f64,
    /// Share of crashes that happen between the write and the fsync of a Ready (torn write).
    pub torn_share: f64,
    /// Per granted vote: probability that the voter crashes right after sending it and
    /// restarts quickly (probes vote durability).
    pub crash_after_vote: f64,
    /// Per fault tick: probability of pausing a node.
    pub pause: f64,
    /// Per fault tick: probability of a membership change.
    pub membership: f64,
    /// Per fault tick: probability of a Raft leadership transfer.
    pub transfer: f64,
    /// Per client decision while leading: probability of freezing past the TTL.
    pub client_freeze: f64,
    /// Per client decision while leading: probability of stopping keepalives.
    pub client_silent: f64,
    /// Per client decision while leading: probability of resigning.
    pub resign: f64,
    /// Per client decision while leading: probability of transferring the election.
    pub election_transfer: f64,
    /// Per fault tick: probability of starting the Figure 8 scenario (see `world::scenario`).
    pub figure8: f64,
    /// Per fault tick: probability of starting the joint-split scenario.
    pub joint_split: f64,
    /// Per fault tick: probability of arming the lease-handover shape: the leader crashes
    /// right after its next keepalive acknowledgement leaves, and that holder goes silent,
    /// so that the next leader alone decides when the session expires.
    pub lease_handover: f64,
}

impl FaultMix {
    /// Draws a mix. With `faults` off only the ordinary workload remains (no loss, no
    /// partitions, no crashes, pauses or freezes).
    pub fn draw(rng: &mut SimRng, faults: bool) -> FaultMix {
        let mut kind = |lo: f64, hi: f64| -> f64 {
            let on = rng.chance(KIND_ON);
            let rate = rng.uniform(lo, hi);
            if faults && on {
                rate
            } else {
                0.0
            }
        };
        let loss = kind(0.001, 0.08);
        let duplicate = kind(0.001, 0.05);
        let long_delay = kind(0.002, 0.05);
        let partition = kind(0.005, 0.05);
        let crash = kind(0.005, 0.04);
        let crash_after_vote = kind(0.05, 0.6);
        let pause = kind(0.005, 0.04);
        let membership = kind(0.003, 0.03);
        let transfer = kind(0.003, 0.03);
        let client_freeze = kind(0.005, 0.05);
        let client_silent = kind(0.002, 0.02);
        let figure8 = kind(0.005, 0.03);
        let joint_split = kind(0.005, 0.03);
        let lease_handover = kind(0.01, 0.05);
        let delay_max_us = rng.between(2, 15) * US_PER_MS;
        let slow = rng.chance(SLOW_NETWORK_SHARE);
        let slow_max = rng.between(SLOW_DELAY_MAX_US.0, SLOW_DELAY_MAX_US.1);
        let slow_delay_max_us = if faults && slow { slow_max } else { 0 };
        let one_way_share = rng.uniform(0.0, 0.6);
        let torn_share = rng.uniform(0.0, 0.7);
        // Resigning and transferring are ordinary workload, on in every seed.
        let resign = rng.uniform(0.005, 0.04);
        let election_transfer = rng.uniform(0.005, 0.04);
        FaultMix {
            network: NetworkFaults {
                delay_max_us,
                slow_delay_max_us,
                loss,
                duplicate,
                long_delay,
            },
            partition,
            one_way_share,
            crash,
            torn_share,
            crash_after_vote,
            pause,
            membership,
            transfer,
            client_freeze,
            client_silent,
            resign,
            election_transfer,
            figure8,
            joint_split,
            lease_handover,
        }
    }

    /// The mix in one line.
    pub fn describe(&self) -> String {
        format!(
            "delay<={}ms{} loss={:.3} dup={:.3} long-delay={:.3} partition={:.3}/tick (one-way {:.0}%) \
             crash={:.3}/tick (torn {:.0}%) crash-after-vote={:.2} pause={:.3}/tick membership={:.3}/tick \
             raft-transfer={:.3}/tick client-freeze={:.3} client-silent={:.3} resign={:.3} election-transfer={:.3} \
             figure-8={:.3}/tick joint-split={:.3}/tick lease-handover={:.3}/tick",
            self.network.delay_max_us / US_PER_MS,
            if self.network.slow_delay_max_us > 0 {
                format!(" (slow network: <={}ms until heal)", self.network.slow_delay_max_us / US_PER_MS)
            } else {
                String::new()
            },
            self.network.loss,
            self.network.duplicate,
            self.network.long_delay,
            self.partition,
            self.one_way_share * 100.0,
            self.crash,
            self.torn_share * 100.0,
            self.crash_after_vote,
            self.pause,
            self.membership,
            self.transfer,
            self.client_freeze,
            self.client_silent,
            self.resign,
            self.election_transfer,
            self.figure8,
            self.joint_split,
            self.lease_handover,
        )
    }
}
