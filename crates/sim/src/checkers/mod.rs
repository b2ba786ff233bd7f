//! Cluster-wide checkers. Each file checks one property and cites where it comes from.
//!
//! Checkers live outside the nodes and see only what a driver can see: Ready contents,
//! `status()`, the state machine's digest, and what clients observed. They are incremental:
//! each observation is checked against what the checker has accumulated, so running them after
//! every step stays cheap.

use std::collections::BTreeMap;

use tenure_core::types::NodeId;

use crate::driver::NodeSlot;
use crate::history::History;
use crate::observe::Observation;
use crate::time::SimTimeUs;

pub mod election_safety;
pub mod exact_outcomes;
pub mod fencing;
pub mod leader_completeness;
pub mod lease_safety;
pub mod linearizability;
pub mod liveness;
pub mod log_matching;
pub mod state_machine_safety;

/// What checkers may look at besides the observation itself.
pub struct View<'a> {
    /// True simulated time of the step.
    pub now_us: SimTimeUs,
    /// Every node slot (status, log mirror).
    pub nodes: &'a BTreeMap<NodeId, NodeSlot>,
    /// Cluster-wide records.
    pub history: &'a History,
    /// When the liveness phase began, if it has.
    pub healed_at_us: Option<SimTimeUs>,
    /// The election timeout T in true time for the slowest clock.
    pub election_timeout_us: SimTimeUs,
}

/// One property, checked incrementally.
pub trait Checker {
    /// The name printed in reports, e.g. `election-safety`.
    fn name(&self) -> &'static str;
    /// Takes one observation in; returns a one-line description if the property broke.
    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String>;
}

/// Names of every checker, in the order they run.
pub const NAMES: [&str; 9] = [
    "election-safety",
    "log-matching",
    "leader-completeness",
    "state-machine-safety",
    "fencing",
    "lease-safety",
    "linearizability",
    "exact-outcomes",
    "liveness",
];

/// A fresh instance of every checker.
pub fn all() -> Vec<Box<dyn Checker>> {
    vec![
        Box::new(election_safety::ElectionSafety::default()),
        Box::new(log_matching::LogMatching::default()),
        Box::new(leader_completeness::LeaderCompleteness::default()),
        Box::new(state_machine_safety::StateMachineSafety::default()),
        Box::new(fencing::Fencing::default()),
        Box::new(lease_safety::LeaseSafety::default()),
        Box::new(linearizability::Linearizability::default()),
        Box::new(exact_outcomes::ExactOutcomes::default()),
        Box::new(liveness::Liveness::default()),
    ]
}
