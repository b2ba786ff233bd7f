//! The simulated network: per-packet delay, loss, duplication (hence reordering), and
//! partitions (full or one-way) that can be healed.

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::Addr;
use crate::rng::SimRng;
use crate::time::{SimTimeUs, US_PER_MS};

/// Shortest one-way delay.
pub const DELAY_MIN_US: u64 = US_PER_MS;
/// Range of the occasional long delays (a slow path, a retransmission after a lost packet).
pub const LONG_DELAY_US: (u64, u64) = (20 * US_PER_MS, 400 * US_PER_MS);
/// Most partitions in force at once.
pub const PARTITIONS_MAX: usize = 2;

/// How the network misbehaves, drawn per seed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetworkFaults {
    /// Longest ordinary one-way delay.
    pub delay_max_us: u64,
    /// In a slow-network seed, the longest one-way delay during the safety phase (delays
    /// comparable to the election timeout: elections overlap and votes arrive late, which is
    /// when vote durability matters); 0 otherwise. Safety must hold whatever the delays.
    pub slow_delay_max_us: u64,
    /// Probability a packet is lost.
    pub loss: f64,
    /// Probability a node-to-node packet is delivered twice (the copy with its own delay).
    pub duplicate: f64,
    /// Probability a packet takes a long delay.
    pub long_delay: f64,
}

/// The network's state.
pub struct Network {
    faults: NetworkFaults,
    /// Whether loss, duplication and long delays are on (off in the liveness phase).
    faults_on: bool,
    /// Directed links that drop everything, as the union of `partitions`.
    blocked: BTreeSet<(Addr, Addr)>,
    /// Partitions in force, by id, as their blocked directed links.
    partitions: BTreeMap<u64, Vec<(Addr, Addr)>>,
}

/// What the network does with one packet: the delays of the copies it delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Lost, or blocked by a partition.
    Dropped,
    /// Delivered once, after this delay.
    Once(SimTimeUs),
    /// Delivered after the first delay, and duplicated: a copy arrives after the second.
    Twice(SimTimeUs, SimTimeUs),
}

impl Network {
    /// A network with the given faults switched on.
    pub fn new(faults: NetworkFaults) -> Network {
        Network {
            faults,
            faults_on: true,
            blocked: BTreeSet::new(),
            partitions: BTreeMap::new(),
        }
    }

    /// Delays of the copies of a packet from `from` to `to` sent now: none if lost or
    /// blocked, two if duplicated. Client links never duplicate (they model TCP streams; a
    /// client's own retries are its duplicates).
    pub fn route(&self, from: Addr, to: Addr, rng: &mut SimRng) -> Route {
        if self.is_blocked(from, to) {
            return Route::Dropped;
        }
        if self.faults_on && rng.chance(self.faults.loss) {
            return Route::Dropped;
        }
        let both_nodes = matches!((from, to), (Addr::Node(_), Addr::Node(_)));
        if both_nodes && self.faults_on && rng.chance(self.faults.duplicate) {
            let first = self.delay(rng);
            let duplicate = self.delay(rng);
            Route::Twice(first, duplicate)
        } else {
            Route::Once(self.delay(rng))
        }
    }

    /// A one-way delay on a link, as a packet sent now would see it.
    pub fn delay(&self, rng: &mut SimRng) -> SimTimeUs {
        if self.faults_on && rng.chance(self.faults.long_delay) {
            rng.between(LONG_DELAY_US.0, LONG_DELAY_US.1)
        } else if self.faults_on && self.faults.slow_delay_max_us > 0 {
            rng.between(DELAY_MIN_US, self.faults.slow_delay_max_us)
        } else {
            rng.between(DELAY_MIN_US, self.faults.delay_max_us.max(DELAY_MIN_US))
        }
    }

    /// True if packets from `from` to `to` are dropped now. Checked again at delivery, so a
    /// partition also drops packets already in flight.
    pub fn is_blocked(&self, from: Addr, to: Addr) -> bool {
        !self.blocked.is_empty() && self.blocked.contains(&(from, to))
    }

    /// Number of partitions in force.
    pub fn partitions(&self) -> usize {
        self.partitions.len()
    }

    /// Puts a partition in force.
    pub fn partition(&mut self, id: u64, links: Vec<(Addr, Addr)>) {
        self.blocked.extend(links.iter().copied());
        self.partitions.insert(id, links);
    }

    /// Heals one partition.
    pub fn heal(&mut self, id: u64) -> bool {
        let healed = self.partitions.remove(&id).is_some();
        if healed {
            self.blocked = self.partitions.values().flatten().copied().collect();
        }
        healed
    }

    /// Heals every partition and switches loss, duplication and long delays off.
    pub fn heal_all(&mut self) {
        self.partitions.clear();
        self.blocked.clear();
        self.faults_on = false;
    }
}

/// Links blocked by isolating `side` from every other endpoint in `all`, both ways.
pub fn full_partition(side: &BTreeSet<Addr>, all: &[Addr]) -> Vec<(Addr, Addr)> {
    let mut links = Vec::new();
    for a in side {
        for b in all {
            if !side.contains(b) {
                links.push((*a, *b));
                links.push((*b, *a));
            }
        }
    }
    links
}
