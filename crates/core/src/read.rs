//! Linearizable reads without log entries (Raft dissertation §6.4).
//!
//! A read (`Get`, `Leader`) changes nothing, so appending it to the log only to learn that
//! this node still leads costs an fsync on a quorum for nothing. The leader serves it from its
//! own state instead, once three things hold:
//!
//! 1. **Its view is complete.** It has committed and applied an entry of its own term (its
//!    term-start no-op), so its commit index covers every entry committed by earlier leaders.
//! 2. **It has applied the read index**: its commit index when the read arrived. Every write
//!    that completed before the read started was committed by then (by this leader, or by an
//!    earlier one and covered by 1).
//! 3. **It still led after the read arrived**, so no later leader can have completed a write
//!    before the read started. Either:
//!    - *lease*: its leader lease holds now — a quorum heard from it at tick `s`, and each of
//!      them refuses votes for `T` after hearing from it, so nobody else can be elected
//!      before `s + T` on their clocks, which the lease's margin keeps ahead of `now` on
//!      ours (the same lease that lets it acknowledge keepalives); or
//!    - *ReadIndex*: a quorum acknowledged, in this term, a message it sent at a tick later
//!      than the read's arrival. Each of them was still in this term after the read arrived,
//!      and a later leader needs votes from one of them in a higher term. This needs no
//!      clock bound, and is what a leader without a lease (just elected, or transferring
//!      leadership, or with check-quorum off) waits for: it heartbeats at the next tick.
//!
//! The read is answered with the state at the leader's applied index (at least the read
//! index; later committed entries are concurrent writes, which a linearizable read may see).
//! A leader that steps down refuses the reads it holds (`NotLeader`: nothing was done, so the
//! failure is definite), and one that cannot confirm its leadership within two election
//! timeouts refuses them `LeadershipUnconfirmed`.

use std::collections::VecDeque;

use crate::lease::leadership_confirmed_after;
use crate::raft::{ProposeError, Raft, Role};
use crate::sm::{Command, Response, StateMachine};
use crate::types::{Index, Term};

/// Most reads a leader holds while it confirms its leadership; more are refused as busy.
pub const READS_PENDING_MAX: usize = 100_000;

/// A read the node answered, for [`crate::node::AfterPersist::reads`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// The driver's tag for the read.
    pub tag: u64,
    /// `Ok((index, response))`: the answer in the state after applying `index`. `Err`: the
    /// read was not served (a definite failure; it changed nothing).
    pub outcome: Result<(Index, Response), ProposeError>,
}

#[derive(Clone, Debug)]
pub(crate) struct PendingRead {
    pub(crate) tag: u64,
    pub(crate) command: Command,
    /// The leader's local tick when the read arrived.
    pub(crate) received_tick: u64,
    /// The leader's commit index when the read arrived.
    pub(crate) read_index: Index,
}

/// The reads a leader holds, in arrival order (so their arrival ticks and read indexes only
/// grow), and the answers not yet handed out.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reads {
    pub(crate) pending: VecDeque<PendingRead>,
    /// The term the pending reads arrived in.
    pub(crate) term: Term,
    pub(crate) done: Vec<ReadResult>,
}

impl Reads {
    /// Answers the reads that can be answered now, oldest first (see the module docs).
    pub(crate) fn serve(&mut self, raft: &Raft, sm: &StateMachine) {
        if self.pending.is_empty() {
            return;
        }
        if raft.role != Role::Leader || raft.term != self.term {
            let leader_hint = raft.leader;
            for r in std::mem::take(&mut self.pending) {
                self.done.push(ReadResult {
                    tag: r.tag,
                    outcome: Err(ProposeError::NotLeader { leader_hint }),
                });
            }
            return;
        }
        let now = raft.now_tick;
        let t = raft.config.election_timeout_ticks;
        let lease_past_vote_refusal = injected!(raft.bugs.read_lease_past_vote_refusal)
            && raft.lease_until_tick().is_some_and(|until| now < until + t);
        let complete = raft.leader_ready();
        let applied = raft.log.applied;
        while let Some(r) = self.pending.front() {
            let confirmed = leadership_confirmed_after(raft, r.received_tick)
                || lease_past_vote_refusal
                || injected!(raft.bugs.read_without_confirmation);
            if complete && confirmed && applied >= r.read_index {
                let r = self.pending.pop_front().expect("just looked");
                let response = sm.query(&r.command).expect("only reads are queued");
                self.done.push(ReadResult {
                    tag: r.tag,
                    outcome: Ok((applied, response)),
                });
            } else if now >= r.received_tick + 2 * t {
                let r = self.pending.pop_front().expect("just looked");
                self.done.push(ReadResult {
                    tag: r.tag,
                    outcome: Err(ProposeError::LeadershipUnconfirmed),
                });
            } else {
                break;
            }
        }
    }
}
