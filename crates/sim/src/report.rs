//! What one seed's run produced.

use std::collections::BTreeMap;

use crate::time::{fmt_time, SimTimeUs};

/// A property that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The checker that found it (e.g. `election-safety`), or `node-invariant` for a panic
    /// inside the core, or `simulator-panic` for a panic in the simulator itself.
    pub checker: &'static str,
    /// Simulated time at which it was found.
    pub time_us: SimTimeUs,
    /// One line saying what was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {}: {}",
            self.checker,
            fmt_time(self.time_us),
            self.detail
        )
    }
}

/// Counters describing what happened in a run, to show that the faults and the workload
/// actually exercised something.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Distinct (term, node) pairs observed in the leader role.
    pub raft_leaders_elected: u64,
    /// Highest Raft term reached.
    pub max_term: u64,
    /// Raft messages delivered.
    pub messages_delivered: u64,
    /// Messages dropped by loss or partitions.
    pub messages_dropped: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Client operations completed (applied and answered).
    pub client_ops_completed: u64,
    /// Times a client came to believe it leads an election.
    pub election_leaderships: u64,
    /// Writes sent by paused ex-leaders with their old token.
    pub stale_writes_attempted: u64,
    /// Of those, rejected for a stale token (the point of fencing).
    pub stale_writes_rejected: u64,
    /// Sessions that expired (Expire entries applied).
    pub sessions_expired: u64,
    /// Fate-sharing sessions released because the client closed their bound stream
    /// (Release entries applied).
    pub sessions_released: u64,
    /// Entries committed (highest commit index seen).
    pub committed_index: u64,
    /// Fast elections: followers that learned their leader's process was gone (closed
    /// connection, refused reconnect) and dropped their vote refusal.
    pub leaders_gone: u64,
}

impl Stats {
    /// Counts one injected fault of `kind`.
    pub fn fault(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_insert(0) += 1;
    }

    /// Adds another run's counters to these.
    pub fn add(&mut self, other: &Stats) {
        self.raft_leaders_elected += other.raft_leaders_elected;
        self.max_term = self.max_term.max(other.max_term);
        self.messages_delivered += other.messages_delivered;
        self.messages_dropped += other.messages_dropped;
        for (kind, n) in &other.faults {
            *self.faults.entry(kind).or_insert(0) += n;
        }
        self.client_ops_completed += other.client_ops_completed;
        self.election_leaderships += other.election_leaderships;
        self.stale_writes_attempted += other.stale_writes_attempted;
        self.stale_writes_rejected += other.stale_writes_rejected;
        self.sessions_expired += other.sessions_expired;
        self.sessions_released += other.sessions_released;
        self.committed_index += other.committed_index;
        self.leaders_gone += other.leaders_gone;
    }
}

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Hash of every event of the run; equal for two runs of the same seed and options.
    pub trace_hash: u64,
    /// Violations found; the run stops at the first step that produced any.
    pub violations: Vec<Violation>,
    /// Simulated time covered, in microseconds.
    pub simulated_us: SimTimeUs,
    /// What happened.
    pub stats: Stats,
    /// The fault mix drawn for this seed, in one line.
    pub fault_mix: String,
    /// Readable trace lines, when asked for.
    pub trace: Vec<String>,
}

impl SeedReport {
    /// True if no checker fired.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}
