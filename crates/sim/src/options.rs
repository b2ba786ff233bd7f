//! Options of a simulation run, the injectable bugs, and argument validation shared with the CLI.

use std::ops::Range;

/// Cluster sizes the simulator accepts. Even sizes are refused: they add a node without adding
/// fault tolerance, which DESIGN warns about.
pub const NODE_COUNTS: [usize; 3] = [3, 5, 7];

/// Shortest liveness phase: ten election timeouts (1.5 s with the default timing) for the
/// election, plus time for pending operations to finish.
pub const LIVENESS_MIN_MS: u64 = 3_000;

/// How one seed is run. The same options and seed always produce the same run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOptions {
    /// Voters at bootstrap: 3, 5 or 7.
    pub nodes: usize,
    /// Simulated clients.
    pub clients: usize,
    /// Length of the safety phase (faults on), in simulated milliseconds.
    pub safety_ms: u64,
    /// Length of the liveness phase (everything healed), in simulated milliseconds.
    pub liveness_ms: u64,
    /// Inject faults during the safety phase. Off only for debugging the simulator.
    pub faults: bool,
    /// Re-introduce a known bug, to prove a checker catches it.
    pub bug: Option<InjectBug>,
    /// Keep a readable trace of faults, role changes, election leader changes and rejected
    /// stale writes.
    pub trace: bool,
    /// Also trace every Raft message delivered and every commit advance (very verbose).
    pub trace_raft: bool,
    /// On resuming a paused node, deliver the ticks it missed before the packets that queued
    /// up (a driver that ticks from a monotonic clock). Off only to reproduce what happens
    /// when a driver handles queued input first.
    pub pause_catch_up: bool,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            nodes: 5,
            clients: 6,
            safety_ms: 30_000,
            liveness_ms: 5_000,
            faults: true,
            bug: None,
            trace: false,
            trace_raft: false,
            pause_catch_up: true,
        }
    }
}

impl SimOptions {
    /// A node's empty disk: the write-ahead log over a fresh in-memory file system, with
    /// records of at most `record_bytes_max` if given, and the log's own test switch on for
    /// `--inject-bug snapshot-recorded-before-written`.
    pub fn new_disk(&self, record_bytes_max: Option<u32>) -> crate::disk::Disk {
        let mut options = if self.bug == Some(InjectBug::SnapshotRecordedBeforeWritten) {
            crate::disk::Disk::options_recording_snapshots_early()
                .expect("the bug's name is refused in builds without the log's bug switches")
        } else {
            tenure_wal::WalOptions::default()
        };
        if let Some(bytes) = record_bytes_max {
            options.record_bytes_max = bytes;
        }
        crate::disk::Disk::new(options)
    }

    /// Checks the options, returning a message fit for a command-line user.
    pub fn validate(&self) -> Result<(), String> {
        validate_nodes(self.nodes)?;
        if self.clients == 0 || self.clients > 64 {
            return Err(format!("--clients must be in 1..=64, got {}", self.clients));
        }
        if self.safety_ms == 0 {
            return Err("--safety-secs must be positive".to_string());
        }
        if self.liveness_ms < LIVENESS_MIN_MS {
            return Err(format!(
                "--liveness-secs must be at least {} s (ten election timeouts plus time to finish pending operations)",
                LIVENESS_MIN_MS as f64 / 1000.0
            ));
        }
        Ok(())
    }

    /// Simulated microseconds covered by one seed.
    pub fn total_us(&self) -> u64 {
        (self.safety_ms + self.liveness_ms) * 1_000
    }
}

/// Accepts 3, 5 or 7 nodes.
pub fn validate_nodes(nodes: usize) -> Result<(), String> {
    if NODE_COUNTS.contains(&nodes) {
        Ok(())
    } else {
        Err(format!("--nodes must be 3, 5 or 7 (odd sizes only: an even size adds a node without adding fault tolerance), got {nodes}"))
    }
}

/// A known bug that `--inject-bug` puts back, and the checker expected to catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum InjectBug {
    /// A node grants a second vote in a term (core switch `double_vote`).
    DoubleVote,
    /// A leader commits entries only it has (core switch `commit_without_majority`).
    CommitWithoutMajority,
    /// The state machine accepts a fenced write with a stale token (core switch
    /// `stale_fence_accepted`).
    StaleFenceAccepted,
    /// The vote is not persisted, so a restarted node votes again in the same term (core
    /// switch `no_vote_persist`).
    NoVotePersist,
    /// A new term or vote is written without an fsync, as only a commit index may be
    /// (core switch `unsynced_vote`): a crash can lose a vote already granted.
    UnsyncedVote,
    /// Clients time their lease from the receipt of a keepalive ack instead of from the send
    /// of the keepalive (a simulator-side client bug).
    LeaseFromReceiveTime,
    /// The driver core answers every proposal left waiting below a snapshot it caught up by
    /// as `not-leader` (definitely failed), though the snapshot may contain it (driver-core
    /// switch `not_leader_after_snapshot`; found by a black-box test on real servers).
    NotLeaderAfterSnapshot,
    /// A leader commits an entry of an earlier term by counting replicas (core switch
    /// `old_term_commit`; Raft §5.4.2, Figure 8). Reached by the figure-8 shape in seeds with
    /// small AppendEntries batches.
    OldTermCommit,
    /// A joint configuration counts only the incoming voters' quorum for votes (core switch
    /// `joint_vote_one_half`). Reached by the joint-split shape: each half elects a leader,
    /// often in the same term.
    JointVoteOneHalf,
    /// A joint configuration counts only the incoming voters' quorum for commitment (core
    /// switch `joint_commit_one_half`). Reached by the joint-split shape, with removed voters
    /// lingering long enough for the other half to elect a leader.
    JointCommitOneHalf,
    /// A leader counts its own not yet durable entries toward commitment (core switch
    /// `commit_undurable`). Reached in pipelined seeds (`PIPELINED_SHARE`): leaders replicate
    /// a Ready's entries while their own fsync runs (dissertation §10.2.1; the core's
    /// `step_while_persisting`), followers acknowledge meanwhile, and some leaders crash
    /// before the fsync completes. A committed entry then survives on a minority only, and a
    /// leader elected without it overwrites it (leader-completeness).
    ///
    /// With persist-then-send drivers it is masked: every AppendEntries leaves after the
    /// entries it carries are durable on the leader, so no acknowledgement is counted while
    /// `last_index > persisted`. The server's driver sends its AppendEntries before its fsync
    /// (`Node::early_appends`) but steps nothing until the fsync returned, so it masks it
    /// too; the simulator's pipelined seeds go further and count acknowledgements meanwhile.
    CommitUndurable,
    /// Followers that heard from a leader within the election timeout still grant votes (core
    /// switch `no_vote_refusal`). Reached by the quiet-bridge shape of lease-edge seeds: with
    /// the workload hushed and the log idle, only the leader–follower link is cut; that
    /// follower times out with an up-to-date log and the others, who still hear the leader,
    /// elect it while the old leader's lease holds (lease-safety's lease check).
    ///
    /// Not reachable with a busy log: a follower cut off from the leader misses the entries
    /// the others store meanwhile, and their up-to-date check refuses it anyway. Nothing but
    /// the lease depends on the refusal; the lease's only consumer (keepalive
    /// acknowledgements) is also covered by committed checkpoints, so the lease check, not a
    /// client-visible effect, is what sees it.
    NoVoteRefusal,
    /// The leader lease loses its drift margin (core switch `no_lease_drift_margin`). Reached
    /// by the leader-isolation shape of lease-edge seeds (drift bound near 10%, clocks at the
    /// bound, T of 50 to 80 ticks, a fast network): without the margin the isolated leader's
    /// lease outlasts the fast followers' vote refusal by a few ticks, and a successor whose
    /// randomized timeout is short is elected inside it.
    ///
    /// With T = 15 ticks the lease's rounding allowance alone hides it: the lease still ends
    /// at tick `base + T − 2`, which outlasts a refusal of `T − 1` ticks only if
    /// `(T − 2)(1 + ρ) > T − 1`, i.e. ρ > 1/(T − 2) ≈ 7.7%, and then by less than a
    /// millisecond minus the network delay.
    NoLeaseDriftMargin,
    /// Another leader's checkpoints are not padded for drift (core switch
    /// `no_checkpoint_drift_padding`). The clients' own margin (2ρ × TTL) hides it from their
    /// beliefs; lease-safety's server-side check (no expiry before an acknowledgement's
    /// receipt + TTL on the acknowledging node's clock) sees it in seeds with wide drift
    /// bounds and clocks at the bound, when a leader is deposed after acknowledging.
    NoCheckpointDriftPadding,
    /// A vote is granted without the log up-to-date check (core switch
    /// `vote_without_log_check`).
    VoteWithoutLogCheck,
    /// A follower truncates after `prevLogIndex` even when the entries match, so a stale
    /// AppendEntries deletes acknowledged entries (core switch `truncate_matching_entries`).
    TruncateMatchingEntries,
    /// An ended session's expiry deadline stays on the node (core switch
    /// `keep_ended_deadline`), caught by the node's own invariant check.
    KeepEndedDeadline,
    /// A leader serves reads without a log entry as soon as it has applied its commit index,
    /// without confirming that it still leads (core switch `read_without_confirmation`). A
    /// deposed leader that has not heard of its successor answers from an old state: a read
    /// misses a write that completed before it started (linearizability's real-time order).
    ReadWithoutConfirmation,
    /// A leader serves lease reads for an election timeout past its lease, when its
    /// followers no longer refuse votes for others (core switch
    /// `read_lease_past_vote_refusal`). A leader cut off from the others keeps answering
    /// reads after they elected a successor that completed writes.
    ReadLeasePastVoteRefusal,
    /// With fast election on, a follower drops its vote refusal as soon as its connection
    /// to the leader closes, without the refused reconnect that proves the leader's process
    /// gone (core switch `close_drops_vote_refusal`). Forged resets of a live leader's
    /// connections then let its followers elect a successor while its lease holds.
    CloseDropsVoteRefusal,
    /// A fate-sharing client closes the stream its session is bound to as soon as it moves
    /// to another node, while it still believes (a simulator-side client bug: what the
    /// client library's keepalive loop did with a stream that went quiet). Reached when the
    /// close reaches a leader that still has the session bound to that stream: the leader
    /// releases a session whose holder believes (lease-safety's check of ended sessions).
    ClientClosesBoundStream,
    /// A leader releases a fate-sharing session when its bound stream ends for any reason,
    /// the server's own ending of it included (core switch `release_on_server_close`).
    /// Reached when a server closes the connection of a frozen or cut-off holder that it
    /// could not reach: the holder still believes.
    ReleaseOnServerClose,
    /// A leader releases a fate-sharing session at once when its bound stream closes,
    /// without waiting out the promises other leaderships made for it (core switch
    /// `release_ignores_older_promises`). Reached when a binding keepalive reaches a new
    /// leader late, on a stream the client already left for one that the previous leader
    /// acknowledged, and the client then closes the old stream.
    ReleaseIgnoresOlderPromises,
    /// The disk records a background snapshot in the log (discarding the entries it covers)
    /// as soon as the node hands it out, before its file is durable (a simulator-side
    /// storage bug: the write-ahead log's three steps taken out of order, see
    /// `BackgroundSnapshots`). Reached in seeds with background snapshots when a node
    /// crashes while one is being written: it finds a log without the snapshot or the
    /// entries, and cannot restart (or restarts without committed entries).
    SnapshotRecordedBeforeWritten,
    /// The order of finishing a background snapshot before the fix: the disk decides whether
    /// to record it (by its own stored snapshot), then the node is told, and the two must
    /// agree — what the server's driver did until a node that had stepped a leader's
    /// InstallSnapshot, not yet persisted, dropped a snapshot the log had just recorded (the
    /// driver thread died on the disagreement). Reached when a written snapshot waits for the
    /// driver's next pass and that pass steps a leader's snapshot at or past it.
    SnapshotLogDecides,
    /// A request with a request id on a session that has ended is answered `UnknownSession`,
    /// a definite failure (core switch `session_ended_definite`), as the state machine did
    /// before: a client whose earlier attempt took effect, and whose session expired before
    /// its retry, is told the request never happened.
    SessionEndedDefinite,
    /// An election created after another was deleted starts its tokens at 1 again instead
    /// of above the token floor (core switch `deleted_election_tokens_restart`): a
    /// re-created election hands out a token its deleted namesake already handed out.
    /// Its seeds always have tenants, who delete elections and keys.
    DeletedElectionTokensRestart,
    /// A grant with a request nonce refused over its principal's session quota is answered
    /// as a definite failure (core switch `grant_quota_definite`), though it may be the retry
    /// of a grant that took effect and whose session has since ended. Found by the
    /// exact-outcomes checker in the first tenancy runs, before anyone wrote it down; the
    /// sequential model now says such a refusal is not definite, so linearizability (which
    /// compares every answer with the model's) sees it first. Its seeds always have tenants.
    GrantQuotaDefinite,
}

impl InjectBug {
    /// Every injectable bug.
    pub const ALL: [InjectBug; 28] = [
        InjectBug::DoubleVote,
        InjectBug::CommitWithoutMajority,
        InjectBug::StaleFenceAccepted,
        InjectBug::NoVotePersist,
        InjectBug::UnsyncedVote,
        InjectBug::LeaseFromReceiveTime,
        InjectBug::NotLeaderAfterSnapshot,
        InjectBug::OldTermCommit,
        InjectBug::JointVoteOneHalf,
        InjectBug::JointCommitOneHalf,
        InjectBug::CommitUndurable,
        InjectBug::NoVoteRefusal,
        InjectBug::NoLeaseDriftMargin,
        InjectBug::NoCheckpointDriftPadding,
        InjectBug::VoteWithoutLogCheck,
        InjectBug::TruncateMatchingEntries,
        InjectBug::KeepEndedDeadline,
        InjectBug::ReadWithoutConfirmation,
        InjectBug::ReadLeasePastVoteRefusal,
        InjectBug::CloseDropsVoteRefusal,
        InjectBug::ClientClosesBoundStream,
        InjectBug::ReleaseOnServerClose,
        InjectBug::ReleaseIgnoresOlderPromises,
        InjectBug::SnapshotRecordedBeforeWritten,
        InjectBug::SnapshotLogDecides,
        InjectBug::SessionEndedDefinite,
        InjectBug::DeletedElectionTokensRestart,
        InjectBug::GrantQuotaDefinite,
    ];

    /// A bug of fate-sharing sessions: its seeds always have fate-sharing clients.
    pub fn is_fate_sharing(self) -> bool {
        matches!(
            self,
            InjectBug::ClientClosesBoundStream
                | InjectBug::ReleaseOnServerClose
                | InjectBug::ReleaseIgnoresOlderPromises
        )
    }

    /// A bug of the core (rather than of the simulator's clients, the driver or the log).
    pub fn is_core(self) -> bool {
        !matches!(
            self,
            InjectBug::LeaseFromReceiveTime
                | InjectBug::ClientClosesBoundStream
                | InjectBug::NotLeaderAfterSnapshot
                | InjectBug::SnapshotRecordedBeforeWritten
                | InjectBug::SnapshotLogDecides
        )
    }

    /// The core's switches for this bug (none in a build without the core's switches,
    /// where [`SimOptions::validate`] refuses a core bug).
    #[cfg(not(feature = "inject-bugs"))]
    pub fn core_bugs(_bug: Option<InjectBug>) -> crate::CoreBugs {
        crate::CoreBugs::default()
    }

    /// The core's switches for this bug (all off for a simulator-side bug).
    #[cfg(feature = "inject-bugs")]
    pub fn core_bugs(bug: Option<InjectBug>) -> crate::CoreBugs {
        let mut b = crate::CoreBugs::default();
        match bug {
            None
            | Some(InjectBug::LeaseFromReceiveTime)
            | Some(InjectBug::ClientClosesBoundStream)
            | Some(InjectBug::NotLeaderAfterSnapshot)
            | Some(InjectBug::SnapshotRecordedBeforeWritten)
            | Some(InjectBug::SnapshotLogDecides) => {}
            Some(InjectBug::DoubleVote) => b.double_vote = true,
            Some(InjectBug::CommitWithoutMajority) => b.commit_without_majority = true,
            Some(InjectBug::StaleFenceAccepted) => b.stale_fence_accepted = true,
            Some(InjectBug::NoVotePersist) => b.no_vote_persist = true,
            Some(InjectBug::UnsyncedVote) => b.unsynced_vote = true,
            Some(InjectBug::OldTermCommit) => b.old_term_commit = true,
            Some(InjectBug::JointVoteOneHalf) => b.joint_vote_one_half = true,
            Some(InjectBug::JointCommitOneHalf) => b.joint_commit_one_half = true,
            Some(InjectBug::CommitUndurable) => b.commit_undurable = true,
            Some(InjectBug::NoVoteRefusal) => b.no_vote_refusal = true,
            Some(InjectBug::NoLeaseDriftMargin) => b.no_lease_drift_margin = true,
            Some(InjectBug::NoCheckpointDriftPadding) => b.no_checkpoint_drift_padding = true,
            Some(InjectBug::VoteWithoutLogCheck) => b.vote_without_log_check = true,
            Some(InjectBug::TruncateMatchingEntries) => b.truncate_matching_entries = true,
            Some(InjectBug::KeepEndedDeadline) => b.keep_ended_deadline = true,
            Some(InjectBug::ReadWithoutConfirmation) => b.read_without_confirmation = true,
            Some(InjectBug::ReadLeasePastVoteRefusal) => b.read_lease_past_vote_refusal = true,
            Some(InjectBug::CloseDropsVoteRefusal) => b.close_drops_vote_refusal = true,
            Some(InjectBug::ReleaseOnServerClose) => b.release_on_server_close = true,
            Some(InjectBug::ReleaseIgnoresOlderPromises) => b.release_ignores_older_promises = true,
            Some(InjectBug::SessionEndedDefinite) => b.session_ended_definite = true,
            Some(InjectBug::DeletedElectionTokensRestart) => {
                b.deleted_election_tokens_restart = true
            }
            Some(InjectBug::GrantQuotaDefinite) => b.grant_quota_definite = true,
        }
        b
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            InjectBug::DoubleVote => "double-vote",
            InjectBug::CommitWithoutMajority => "commit-without-majority",
            InjectBug::StaleFenceAccepted => "stale-fence-accepted",
            InjectBug::NoVotePersist => "no-vote-persist",
            InjectBug::UnsyncedVote => "unsynced-vote",
            InjectBug::LeaseFromReceiveTime => "lease-from-receive-time",
            InjectBug::NotLeaderAfterSnapshot => "not-leader-after-snapshot",
            InjectBug::OldTermCommit => "old-term-commit",
            InjectBug::JointVoteOneHalf => "joint-vote-one-half",
            InjectBug::JointCommitOneHalf => "joint-commit-one-half",
            InjectBug::CommitUndurable => "commit-undurable",
            InjectBug::NoVoteRefusal => "no-vote-refusal",
            InjectBug::NoLeaseDriftMargin => "no-lease-drift-margin",
            InjectBug::NoCheckpointDriftPadding => "no-checkpoint-drift-padding",
            InjectBug::VoteWithoutLogCheck => "vote-without-log-check",
            InjectBug::TruncateMatchingEntries => "truncate-matching-entries",
            InjectBug::KeepEndedDeadline => "keep-ended-deadline",
            InjectBug::ReadWithoutConfirmation => "read-without-confirmation",
            InjectBug::ReadLeasePastVoteRefusal => "read-lease-past-vote-refusal",
            InjectBug::CloseDropsVoteRefusal => "close-drops-vote-refusal",
            InjectBug::ClientClosesBoundStream => "client-closes-bound-stream",
            InjectBug::ReleaseOnServerClose => "release-on-server-close",
            InjectBug::ReleaseIgnoresOlderPromises => "release-ignores-older-promises",
            InjectBug::SnapshotRecordedBeforeWritten => "snapshot-recorded-before-written",
            InjectBug::SnapshotLogDecides => "snapshot-log-decides",
            InjectBug::SessionEndedDefinite => "session-ended-definite",
            InjectBug::DeletedElectionTokensRestart => "deleted-election-tokens-restart",
            InjectBug::GrantQuotaDefinite => "grant-quota-definite",
        }
    }

    /// Parses a command-line name; the error lists the valid names.
    ///
    /// A bug of the core needs the core's bug switches, which only a build with the
    /// `inject-bugs` feature has (`cargo build -p tenure-cli --features inject-bugs`); in
    /// any other build naming one is refused here, with that advice.
    pub fn from_name(name: &str) -> Result<InjectBug, String> {
        let bug = InjectBug::ALL
            .iter()
            .copied()
            .find(|b| b.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = InjectBug::ALL.iter().map(|b| b.name()).collect();
                format!("unknown bug {name:?}; valid names: {}", names.join(", "))
            })?;
        if bug == InjectBug::SnapshotRecordedBeforeWritten && !tenure_wal::WalOptions::BUGS_BUILT {
            return Err(format!(
                "{name} is a bug of the write-ahead log, and this build has no log bug \
                 switches (build with --features inject-bugs)"
            ));
        }
        if bug.is_core() && !cfg!(feature = "inject-bugs") {
            return Err(format!(
                "{name} is a bug of the core, and this build has no core bug switches \
                 (build with --features inject-bugs)"
            ));
        }
        Ok(bug)
    }

    /// The checker whose property the bug breaks.
    pub fn expected_checker(self) -> &'static str {
        match self {
            InjectBug::DoubleVote => "election-safety",
            InjectBug::CommitWithoutMajority => "leader-completeness",
            InjectBug::StaleFenceAccepted => "fencing",
            InjectBug::NoVotePersist | InjectBug::UnsyncedVote => "election-safety",
            InjectBug::LeaseFromReceiveTime => "lease-safety",
            InjectBug::NotLeaderAfterSnapshot => "exact-outcomes",
            InjectBug::OldTermCommit => "leader-completeness",
            InjectBug::JointVoteOneHalf => "election-safety",
            InjectBug::JointCommitOneHalf => "leader-completeness",
            InjectBug::CommitUndurable => "leader-completeness",
            InjectBug::NoVoteRefusal => "lease-safety",
            InjectBug::NoLeaseDriftMargin => "lease-safety",
            InjectBug::NoCheckpointDriftPadding => "lease-safety",
            InjectBug::VoteWithoutLogCheck => "leader-completeness",
            InjectBug::TruncateMatchingEntries => "leader-completeness",
            InjectBug::KeepEndedDeadline => "node-invariant",
            InjectBug::ReadWithoutConfirmation => "linearizability",
            InjectBug::ReadLeasePastVoteRefusal => "linearizability",
            InjectBug::CloseDropsVoteRefusal => "lease-safety",
            InjectBug::ClientClosesBoundStream
            | InjectBug::ReleaseOnServerClose
            | InjectBug::ReleaseIgnoresOlderPromises => "lease-safety",
            InjectBug::SnapshotRecordedBeforeWritten => "recovery",
            InjectBug::SnapshotLogDecides => "storage-contract",
            InjectBug::SessionEndedDefinite => "exact-outcomes",
            InjectBug::DeletedElectionTokensRestart => "fencing",
            InjectBug::GrantQuotaDefinite => "linearizability",
        }
    }
}

impl std::fmt::Display for InjectBug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a seed range `A..B` (start inclusive, end exclusive, as in Rust), `A..=B` (both
/// inclusive) or a single seed `N`.
pub fn parse_seed_range(text: &str) -> Result<Range<u64>, String> {
    let parse = |s: &str| -> Result<u64, String> {
        s.trim()
            .parse::<u64>()
            .map_err(|e| format!("bad seed {s:?} in {text:?}: {e}"))
    };
    let range = if let Some((a, b)) = text.split_once("..=") {
        let end = parse(b)?
            .checked_add(1)
            .ok_or_else(|| format!("seed range {text:?} overflows"))?;
        parse(a)?..end
    } else if let Some((a, b)) = text.split_once("..") {
        parse(a)?..parse(b)?
    } else {
        let n = parse(text)?;
        n..n.checked_add(1)
            .ok_or_else(|| format!("seed {text:?} overflows"))?
    };
    if range.is_empty() {
        return Err(format!("seed range {text:?} is empty (A..B excludes B)"));
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_counts_other_than_3_5_7_are_rejected() {
        for bad in [0, 1, 2, 4, 6, 8, 9] {
            assert!(validate_nodes(bad).is_err(), "{bad} accepted");
        }
        for good in NODE_COUNTS {
            assert!(validate_nodes(good).is_ok());
        }
    }

    #[test]
    fn seed_ranges_are_half_open_like_rust() {
        assert_eq!(parse_seed_range("1..10000"), Ok(1..10000));
        assert_eq!(parse_seed_range("1..=10"), Ok(1..11));
        assert_eq!(parse_seed_range("7"), Ok(7..8));
        assert!(parse_seed_range("5..5").is_err());
        assert!(parse_seed_range("x..5").is_err());
    }

    #[test]
    fn bug_names_round_trip_and_unknown_names_list_the_valid_ones() {
        for bug in InjectBug::ALL {
            assert_eq!(InjectBug::from_name(bug.name()), Ok(bug));
        }
        let err = InjectBug::from_name("nope").unwrap_err();
        assert!(
            err.contains("double-vote") && err.contains("lease-from-receive-time"),
            "{err}"
        );
    }
}
