//! Node configuration, validated at construction.

use serde::{Deserialize, Serialize};

use crate::drift::DriftPpm;
use crate::sm::SmLimits;
use crate::types::NodeId;

/// How one node behaves. Every duration is in ticks of the node's own clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// This node's id; must be non-zero.
    pub id: NodeId,
    /// Voters of the cluster at bootstrap. Empty for a node that joins an existing cluster:
    /// it learns the membership from the leader and never campaigns before that.
    pub initial_voters: Vec<NodeId>,
    /// T: the election timeout is drawn uniformly from `[T, 2T)` at 1/1000-tick resolution.
    /// Also the check-quorum period and the vote-refusal window after hearing from a leader.
    pub election_timeout_ticks: u64,
    /// Interval between heartbeats; at most T/5 so that a slow message or two does not
    /// cost the leader its followers.
    pub heartbeat_ticks: u64,
    /// Run a pre-vote round before incrementing the term (Raft dissertation §9.6).
    pub pre_vote: bool,
    /// Leader steps down if it has not heard from a quorum within T; followers that heard
    /// from a leader within T refuse to vote. Required for the leader lease.
    pub check_quorum: bool,
    /// Bound on the relative clock-rate difference between any two nodes, in parts per
    /// million (10 000 = 1 %, the default; at most [`DriftPpm::MAX`]). Sizes the leader
    /// lease's safety margin and the padding of durations measured on other nodes' clocks.
    pub clock_drift_max: DriftPpm,
    /// Most entries carried by one AppendEntries message.
    pub append_entries_max: usize,
    /// Take a snapshot and compact the log when this many entries were applied since the
    /// last one.
    pub snapshot_threshold_entries: u64,
    /// Also wait, before the next snapshot, until as many entries were applied since the
    /// last one as that snapshot held records (sessions, elections and fenced keys); on by
    /// default. A snapshot costs time in proportion to the state and a log entry costs
    /// about one record, so this keeps the cost of snapshots per applied entry bounded
    /// however large the state grows, for a log at most about as long as the state.
    pub snapshot_grows_with_state: bool,
    /// Let the driver encode and persist the node's own snapshots off the node's thread
    /// (off by default): at a snapshot point the node hands out a frozen image of its state
    /// in [`crate::node::AfterPersist::snapshot_image`], taken in O(1), goes on applying entries,
    /// and compacts its log only when the driver reports the snapshot durable with
    /// [`crate::node::Node::snapshot_taken`]. Off, the node encodes the snapshot inside its
    /// step and hands it out in `Persist::snapshot`, to persist before `advance`.
    pub snapshot_in_background: bool,
    /// Most proposals a leader holds uncommitted before refusing more.
    pub uncommitted_entries_max: u64,
    /// How often the leader commits a checkpoint of session lease times.
    pub lease_checkpoint_ticks: u64,
    /// Seed of this node's random generator (election timeouts). Runs replay from it.
    pub seed: u64,
    /// Failover in about one round trip when the leader's process dies (on by default):
    /// a follower whose connection to its leader closed, and whose immediate reconnect was
    /// refused (nothing listens on the leader's peer port: its process is gone), drops its
    /// vote refusal and campaigns at once instead of waiting out the election timeout (see
    /// [`crate::node::Node::peer_reconnect_refused`] and docs/GUARANTEES.md "Fast election").
    #[serde(default)]
    pub fast_election: bool,
    /// Limits shared by every replica's state machine.
    pub limits: SmLimits,
}

/// A real node's default timing, in milliseconds of its clock: the one place these numbers
/// are written. The server's defaults, `tenure plan`'s and every harness's (tests, demo,
/// benchmarks, nemesis) are these; [`Config::new`]'s tick counts are these over
/// [`timing::TICK_MS`].
pub mod timing {
    /// One core tick.
    pub const TICK_MS: u64 = 10;
    /// The election timeout T (timeouts drawn from `[T, 2T)`).
    pub const ELECTION_TIMEOUT_MS: u64 = 150;
    /// The leader's heartbeat interval (at most T/5).
    pub const HEARTBEAT_MS: u64 = 30;
}

impl Config {
    /// A configuration with sensible defaults for a node of a bootstrap cluster.
    pub fn new(id: NodeId, initial_voters: Vec<NodeId>) -> Config {
        Config {
            id,
            initial_voters,
            election_timeout_ticks: timing::ELECTION_TIMEOUT_MS / timing::TICK_MS,
            heartbeat_ticks: timing::HEARTBEAT_MS / timing::TICK_MS,
            pre_vote: true,
            check_quorum: true,
            clock_drift_max: DriftPpm::DEFAULT,
            append_entries_max: 64,
            snapshot_threshold_entries: 1_000,
            snapshot_grows_with_state: true,
            snapshot_in_background: false,
            uncommitted_entries_max: 10_000,
            lease_checkpoint_ticks: 5,
            seed: id,
            fast_election: true,
            limits: SmLimits::default(),
        }
    }

    /// Check every rule a configuration must satisfy.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::ZeroId);
        }
        if self.initial_voters.contains(&0) {
            return Err(ConfigError::ZeroId);
        }
        if self.election_timeout_ticks < 5 {
            return Err(ConfigError::ElectionTimeoutTooShort(
                self.election_timeout_ticks,
            ));
        }
        if self.heartbeat_ticks == 0 || self.heartbeat_ticks * 5 > self.election_timeout_ticks {
            return Err(ConfigError::HeartbeatTooSlow {
                heartbeat_ticks: self.heartbeat_ticks,
                election_timeout_ticks: self.election_timeout_ticks,
            });
        }
        if self.clock_drift_max > DriftPpm::MAX {
            return Err(ConfigError::DriftOutOfRange(self.clock_drift_max));
        }
        if self.lease_margin_ticks() * 2 >= self.election_timeout_ticks {
            return Err(ConfigError::LeaseMarginTooLarge);
        }
        if self.append_entries_max == 0 {
            return Err(ConfigError::Zero("append_entries_max"));
        }
        if self.snapshot_threshold_entries == 0 {
            return Err(ConfigError::Zero("snapshot_threshold_entries"));
        }
        if self.uncommitted_entries_max == 0 {
            return Err(ConfigError::Zero("uncommitted_entries_max"));
        }
        if self.lease_checkpoint_ticks == 0 {
            return Err(ConfigError::Zero("lease_checkpoint_ticks"));
        }
        if self.limits.ttl_min_ticks == 0 {
            return Err(ConfigError::Zero("limits.ttl_min_ticks"));
        }
        if self.limits.ttl_min_ticks > self.limits.ttl_max_ticks {
            return Err(ConfigError::TtlBounds {
                min: self.limits.ttl_min_ticks,
                max: self.limits.ttl_max_ticks,
            });
        }
        for (name, value) in [
            (
                "limits.election_name_bytes_max",
                self.limits.election_name_bytes_max,
            ),
            ("limits.key_bytes_max", self.limits.key_bytes_max),
            (
                "limits.candidates_per_election_max",
                self.limits.candidates_per_election_max,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        Ok(())
    }

    /// Ticks subtracted from the leader lease to cover clock drift between leader and
    /// followers (twice the drift bound over T, rounded up) and tick quantization on both
    /// sides (two ticks).
    pub fn lease_margin_ticks(&self) -> u64 {
        let drift = self
            .clock_drift_max
            .skew_over_ticks(self.election_timeout_ticks.saturating_mul(2));
        drift.saturating_add(2)
    }
}

/// A configuration that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Node ids start at 1.
    #[error("node id 0 is reserved; ids start at 1")]
    ZeroId,
    /// T too short to randomize usefully.
    #[error("election timeout of {0} ticks is too short; use at least 5")]
    ElectionTimeoutTooShort(u64),
    /// Heartbeat must be at most T/5.
    #[error("heartbeat of {heartbeat_ticks} ticks exceeds a fifth of the election timeout ({election_timeout_ticks} ticks)")]
    HeartbeatTooSlow {
        /// Heartbeat.
        heartbeat_ticks: u64,
        /// T.
        election_timeout_ticks: u64,
    },
    /// Drift bound above [`DriftPpm::MAX`].
    #[error("clock drift bound of {0} is above the most accepted, {max}", max = DriftPpm::MAX)]
    DriftOutOfRange(DriftPpm),
    /// The drift margin would eat the whole leader lease.
    #[error("the lease safety margin leaves no leader lease; raise the election timeout")]
    LeaseMarginTooLarge,
    /// The TTL bounds are upside down.
    #[error("ttl bounds are inverted: min {min} ticks > max {max} ticks")]
    TtlBounds {
        /// Lower bound.
        min: u64,
        /// Upper bound.
        max: u64,
    },
    /// A limit that must be positive is zero.
    #[error("{0} must be positive")]
    Zero(&'static str),
}
