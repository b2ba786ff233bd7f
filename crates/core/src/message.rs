//! Messages between Raft nodes. Every message carries the sender's term (Raft §5.1).

use serde::{Deserialize, Serialize};

use crate::types::{Entry, Index, NodeId, Snapshot, Term};

/// A message from one node to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Sender.
    pub from: NodeId,
    /// Receiver.
    pub to: NodeId,
    /// The sender's term; for `PreVote` the term the sender would campaign in.
    pub term: Term,
    /// What the message says.
    pub body: Body,
}

/// The kinds of message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// Would you vote for me in `term` (my current term + 1)? Changes no state at the
    /// receiver (Raft dissertation §9.6).
    PreVote {
        /// Index of the sender's last entry.
        last_log_index: Index,
        /// Term of the sender's last entry.
        last_log_term: Term,
    },
    /// Answer to `PreVote`; `term` is the pre-vote's term when granted, else the responder's.
    PreVoteResponse {
        /// Whether the vote would be granted.
        granted: bool,
    },
    /// RequestVote (Raft §5.2).
    RequestVote {
        /// Index of the candidate's last entry.
        last_log_index: Index,
        /// Term of the candidate's last entry.
        last_log_term: Term,
        /// Set when the campaign was started by the leader's TimeoutNow: voters skip the
        /// "heard from a leader recently" refusal, because the leader asked for this.
        transfer: bool,
    },
    /// Answer to `RequestVote`.
    RequestVoteResponse {
        /// Whether the vote was granted.
        granted: bool,
    },
    /// AppendEntries (Raft §5.3); with no entries it is a heartbeat.
    AppendEntries {
        /// Index of the entry just before `entries`.
        prev_log_index: Index,
        /// Term of that entry.
        prev_log_term: Term,
        /// Entries to store, contiguous from `prev_log_index + 1`.
        entries: Vec<Entry>,
        /// Leader's commit index.
        leader_commit: Index,
        /// The leader's local tick when it sent this; echoed back so that the leader can
        /// time its lease from send times, never from receive times.
        sent_tick: u64,
    },
    /// Answer to `AppendEntries` or `InstallSnapshot`.
    AppendEntriesResponse {
        /// Whether the entries were accepted.
        success: bool,
        /// On success, the index up to which the follower's log matches the leader's.
        match_index: Index,
        /// On failure, where the leader should retry (fast backtracking, Raft §5.3 end).
        hint: Option<RejectHint>,
        /// `sent_tick` of the message answered.
        sent_tick: u64,
    },
    /// InstallSnapshot (Raft §7), sent whole.
    InstallSnapshot {
        /// The snapshot.
        snapshot: Snapshot,
        /// As in `AppendEntries`.
        sent_tick: u64,
    },
    /// Start an election now, ignoring the election timer (leadership transfer, dissertation §3.10).
    TimeoutNow,
}

/// Where a follower's log diverges from what the leader assumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectHint {
    /// The term of the follower's entry at `prev_log_index`, if it has one.
    pub conflict_term: Option<Term>,
    /// First index of `conflict_term` in the follower's log, or the follower's last index + 1
    /// if its log is too short.
    pub conflict_index: Index,
}

impl Body {
    /// A short name for logs and traces.
    pub fn kind(&self) -> &'static str {
        match self {
            Body::PreVote { .. } => "PreVote",
            Body::PreVoteResponse { .. } => "PreVoteResponse",
            Body::RequestVote { .. } => "RequestVote",
            Body::RequestVoteResponse { .. } => "RequestVoteResponse",
            Body::AppendEntries { .. } => "AppendEntries",
            Body::AppendEntriesResponse { .. } => "AppendEntriesResponse",
            Body::InstallSnapshot { .. } => "InstallSnapshot",
            Body::TimeoutNow => "TimeoutNow",
        }
    }
}
