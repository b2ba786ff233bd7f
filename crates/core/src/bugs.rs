//! Known bugs that the core's own tests and the simulator switch back on, to show that each
//! checker catches the bug it is for (`tenure sim --inject-bug`). A compile-time seam: this
//! module exists only with the `inject-bugs` feature, which no shipped build has; without
//! it every [`injected!`](crate::injected) is the constant `false` and the switch it reads is
//! never compiled, so no configuration can turn a bug on.
//!
//! The switches are given to a node as it is built ([`crate::node::Node::with_injected_bugs`])
//! or to a state machine ([`crate::sm::StateMachine::inject_bugs`]); [`crate::config::Config`]
//! holds only configuration.

/// Which known bugs are switched on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedBugs {
    /// Grant a vote even after voting for someone else in the same term.
    pub double_vote: bool,
    /// Commit entries that only one node (the leader) has stored.
    pub commit_without_majority: bool,
    /// Accept a fenced write whose token is below the key's highest accepted token.
    pub stale_fence_accepted: bool,
    /// Leave the vote out of the hard state that must be persisted before replying.
    pub no_vote_persist: bool,
    /// Treat a changed term or vote like a changed commit index: `Persist::must_sync` is
    /// false for them, so a driver writes them without an fsync and a crash can lose a
    /// vote that was already sent.
    pub unsynced_vote: bool,
    /// Commit an entry of an earlier term by counting its replicas, without waiting for an
    /// entry of the leader's own term to reach a majority (Raft §5.4.2, Figure 8).
    pub old_term_commit: bool,
    /// While joint, count votes (and pre-votes) against the incoming voters only, ignoring
    /// the outgoing half's quorum.
    pub joint_vote_one_half: bool,
    /// While joint, commit what a majority of the incoming voters stored, ignoring the
    /// outgoing half's quorum.
    pub joint_commit_one_half: bool,
    /// The leader counts its own entries toward commitment as soon as it appended them,
    /// before they are durable on its disk.
    pub commit_undurable: bool,
    /// Followers that heard from a leader within the election timeout grant (pre-)votes
    /// anyway: the check-quorum vote refusal that the leader lease relies on is gone.
    pub no_vote_refusal: bool,
    /// The leader lease loses its clock-drift margin (only the tick-rounding part is left).
    pub no_lease_drift_margin: bool,
    /// Another leader's Grant and Checkpoint durations are not padded for clock drift when
    /// this node sets its own expiry deadlines from them.
    pub no_checkpoint_drift_padding: bool,
    /// Grant a vote (and a pre-vote) without checking that the candidate's log is at least
    /// as up to date (Raft §5.4.1).
    pub vote_without_log_check: bool,
    /// A follower truncates its log after `prevLogIndex` on every AppendEntries and appends
    /// the message's entries, even when they already match: a stale or reordered message
    /// deletes entries the follower had acknowledged (Raft Figure 2, AppendEntries 3 says to
    /// delete only on a conflict).
    pub truncate_matching_entries: bool,
    /// An ended session keeps its expiry deadline on this node (the node's own invariant
    /// check, gated on the deadline map's size, must still see it).
    pub keep_ended_deadline: bool,
    /// A leader serves reads without a log entry as soon as it has applied its commit
    /// index, without confirming that it still leads (no lease, no ReadIndex round).
    pub read_without_confirmation: bool,
    /// A leader serves lease reads for an election timeout longer than its lease: past the
    /// time its followers stop refusing votes for others.
    pub read_lease_past_vote_refusal: bool,
    /// With `fast_election` on, a follower drops its vote refusal and campaigns as soon as
    /// its connection to the leader closes, without the proof that the leader's process is
    /// gone (a refused reconnect): a forged or middlebox reset ends the leader's lease
    /// behind its back.
    pub close_drops_vote_refusal: bool,
    /// A leader releases a fate-sharing session when the stream it is bound to ends for
    /// any reason, including the server's own ending of it (an idle connection closed, a
    /// request timed out): a frozen holder's session is released while it still believes.
    pub release_on_server_close: bool,
    /// A leader releases a fate-sharing session at once when its bound stream closes,
    /// without waiting out the promises other leaderships made for it: a holder that moved
    /// to another stream, acknowledged by the previous leader, loses its session to a
    /// stale binding made from a keepalive that arrived late.
    pub release_ignores_older_promises: bool,
    /// A request (with a request id) on a session that has ended is answered
    /// `UnknownSession`, a definite failure, although an earlier attempt of it may have taken
    /// effect before the session ended (its remembered result went with the session).
    pub session_ended_definite: bool,
    /// An election created after another of any name was deleted starts its tokens at 1
    /// again instead of above the token floor: a re-created election hands out tokens its
    /// deleted namesake already handed out.
    pub deleted_election_tokens_restart: bool,
    /// A grant carrying a request nonce refused over its principal's session quota is
    /// answered as a definite failure, although it may be the retry of a grant that
    /// created a session which has since ended.
    pub grant_quota_definite: bool,
}

impl InjectedBugs {
    /// True if any bug is switched on (a new switch is counted without being listed here).
    pub fn any(&self) -> bool {
        *self != InjectedBugs::default()
    }
}
