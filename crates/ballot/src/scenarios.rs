//! Prepared scenarios: the lessons the page offers as buttons, each a seed, a start and a
//! step list like any share link. The page plays one to its end, or loads it to step
//! through it one step at a time ([`crate::engine::Engine::scenario`]).

use crate::engine::Start;

/// One prepared scenario.
#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    /// Short name (the page's query `?scenario=NAME`).
    pub name: &'static str,
    /// What it shows.
    pub title: &'static str,
    /// Cluster size.
    pub n: u64,
    /// Seed.
    pub seed: u64,
    /// Where the cluster starts.
    pub start: Start,
    /// Step list.
    pub steps: &'static str,
}

/// Every prepared scenario.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "elect",
        title: "Time passes: the first follower to time out collects a majority",
        n: 5,
        seed: 7,
        start: Start::Fresh,
        steps: "wait-40,settle",
    },
    Scenario {
        name: "split-vote",
        title: "Split vote: two candidates in term 2, 3 grants node 1 and 4 grants node 2; no leader in term 2, node 1 wins term 3",
        n: 5,
        seed: 7,
        start: Start::Fresh,
        steps: SPLIT_VOTE,
    },
    Scenario {
        name: "partition",
        title: "Partition {4, 5} | {1, 2, 3}: Raft elects one leader per term on the majority side; bully crowns one coordinator per side",
        n: 5,
        seed: 7,
        start: Start::Fresh,
        steps: "wait-40,settle,partition-4.5,wait-40",
    },
    Scenario {
        name: "fence",
        title: "The leader pauses past its lease; its late write with the old token is rejected by the fence",
        n: 5,
        seed: 7,
        start: Start::Fresh,
        steps: "wait-40,settle,hold-5,settle,hold-4,settle,wait-5,pause-5,wait-60,write-4,settle,resume-5,write-5,settle",
    },
    Scenario {
        name: "lease",
        title: "Term 41, leader 1: its heartbeats stop and node 2 times out at once, but 3, 4 and 5 still keep leader 1's lease and refuse; once their clocks pass it, node 2 wins term 42 and node 1 steps down",
        n: 5,
        seed: 7,
        start: Start::Term41,
        steps: LEASE,
    },
];

/// The leader's lease, from the established start (node 1 leads term 41): node 1 freezes;
/// node 2 times out at once, and 3, 4 and 5, which heard from node 1 less than T ago, refuse
/// its pre-votes; their clocks move past the lease (T ticks after they last heard node 1);
/// node 2 times out again and wins term 42; node 1 wakes and steps down.
pub const LEASE: &str = concat!(
    "pause-1,timeout-2,settle,",
    "tick-3-15,tick-4-15,tick-5-15,",
    "timeout-2,settle,resume-1,settle"
);

/// The split vote, ballot by ballot: leader 5 freezes; 1 and 2 time out while 3 and 4 have
/// stopped hearing from it; both win their pre-votes and campaign in term 2; 3 grants 1 and
/// 4 grants 2, each refuses the other; two votes each of the three needed, so term 2 has no
/// leader; 1 times out again and wins term 3 with 3 and 4.
pub const SPLIT_VOTE: &str = concat!(
    "wait-40,settle,pause-5,wait-14,tick-3,tick-4,timeout-1,timeout-2,",
    // Pre-votes: both ask 3 and 4, both are told yes.
    "deliver-1-3,deliver-1-4,deliver-2-3,deliver-2-4,deliver-3-1,deliver-4-1,deliver-3-2,deliver-4-2,",
    // Votes in term 2: 3 grants 1 first, 4 grants 2 first; each then refuses the other.
    "deliver-1-3,deliver-2-4,deliver-1-4,deliver-2-3,deliver-1-2,deliver-2-1,",
    "deliver-3-1,deliver-4-2,deliver-4-1,deliver-3-2,deliver-2-1,deliver-1-2,",
    // Term 3: node 1 times out again and collects 3 and 4.
    "timeout-1,deliver-1-3,deliver-1-4,deliver-3-1,deliver-4-1,",
    "deliver-1-3,deliver-1-4,deliver-3-1,deliver-4-1,settle"
);

/// The scenario named `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}
