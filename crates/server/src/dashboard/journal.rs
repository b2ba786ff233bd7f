//! The event log the dashboard streams: one record per thing that happened on this node
//! (elections started, leaders known, step-downs and why, membership changes, session
//! expiries, fenced-write rejections), the same things the driver logs.
//!
//! The driver thread hands it each of its events, as its [`EventSink`]; a bounded ring keeps
//! the last [`EVENTS_RING_MAX`] records for pages that connect later, and a bounded
//! broadcast carries new ones to the pages connected now. Neither ever blocks the driver:
//! the ring drops its oldest record, and a page that falls behind the broadcast misses
//! records (and is told so) rather than holding anyone up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tenure_core::event::NodeEvent;
use tenure_core::types::NodeId;
use tenure_driver::{Event, StepDownReason};
use tokio::sync::broadcast;

use crate::driver::EventSink;

/// Records kept for pages that connect later.
pub const EVENTS_RING_MAX: usize = 256;
/// Records in flight to connected pages; a page further behind than this misses some.
pub const EVENTS_BROADCAST_MAX: usize = 1_024;

/// One thing that happened, as the page shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EventRecord {
    /// Position in this node's journal since it started, from 1: a page that reconnects
    /// asks for what came after the last one it saw.
    pub seq: u64,
    /// Wall-clock time in milliseconds since the Unix epoch, for display only (nothing is
    /// decided by it).
    pub time_ms: u64,
    /// The node that recorded it.
    pub node: NodeId,
    /// A stable name, the same as the log line's `event` field (`election_started`,
    /// `leader_elected`, `leader_known`, `step_down`, …).
    pub kind: &'static str,
    /// The event's fields, as in the log line.
    pub fields: BTreeMap<&'static str, Value>,
    /// What happened, in words.
    pub text: String,
}

struct Ring {
    records: VecDeque<EventRecord>,
    next_seq: u64,
    /// Pre-vote rounds lost since a leader was last known or a real election started: a
    /// node that cannot win pre-votes every election timeout, and only the first round of
    /// such a streak is news (as in the log).
    pre_vote_streak: bool,
}

/// The ring and the broadcast; one per node, shared by the driver and the HTTP handlers.
pub struct Journal {
    ring: Mutex<Ring>,
    live: broadcast::Sender<EventRecord>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Journal { .. }")
    }
}

impl Default for Journal {
    fn default() -> Journal {
        Journal {
            ring: Mutex::new(Ring {
                records: VecDeque::with_capacity(EVENTS_RING_MAX),
                next_seq: 1,
                pre_vote_streak: false,
            }),
            live: broadcast::channel(EVENTS_BROADCAST_MAX).0,
        }
    }
}

/// What a page gets when it connects: the records it has not seen, then the live ones.
pub struct Subscription {
    /// Records from the ring after the one the page saw last, oldest first.
    pub backlog: Vec<EventRecord>,
    /// Records from now on. Those with a `seq` at or below the backlog's last are
    /// duplicates and are skipped by the reader.
    pub live: broadcast::Receiver<EventRecord>,
}

/// The driver's sink: it records what the driver saw, if it is something the page shows.
impl EventSink for Journal {
    /// Called on the driver thread: takes one uncontended lock and never waits for a reader.
    fn note(&self, node: NodeId, event: &Event) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let Some((kind, fields, text)) = describe(node, event, &mut ring.pre_vote_streak) else {
            return;
        };
        let record = EventRecord {
            seq: ring.next_seq,
            time_ms: now_ms(),
            node,
            kind,
            fields,
            text,
        };
        ring.next_seq += 1;
        if ring.records.len() == EVENTS_RING_MAX {
            ring.records.pop_front();
        }
        ring.records.push_back(record.clone());
        // Sent under the lock, so that a subscriber (which takes the lock too) sees each
        // record exactly once: in its backlog or on its receiver. No receiver is fine.
        let _ = self.live.send(record);
    }
}

impl Journal {
    /// The records after `after` (0: all the ring holds) and a receiver for the next ones.
    pub fn subscribe(&self, after: u64) -> Subscription {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let live = self.live.subscribe();
        let backlog = ring
            .records
            .iter()
            .filter(|r| r.seq > after)
            .cloned()
            .collect();
        Subscription { backlog, live }
    }

    /// The records the ring holds now, oldest first.
    pub fn recent(&self) -> Vec<EventRecord> {
        self.subscribe(0).backlog
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

type Described = (&'static str, BTreeMap<&'static str, Value>, String);

/// The page's view of a driver event: kind, fields and words (the driver's, as in the log
/// line: `Event::kind`, `Event::worded`), or `None` for what only the metrics count
/// (latencies, election leader changes) and for the repeats of a pre-vote streak.
fn describe(node: NodeId, event: &Event, pre_vote_streak: &mut bool) -> Option<Described> {
    let mut fields = BTreeMap::new();
    match event {
        Event::Committed { .. }
        | Event::Renewed { .. }
        | Event::LeaseAgeAtRenewal { .. }
        | Event::ElectionLeaderChanged => return None,
        // The driver reports a leader won or learned of as `Event::LeaderKnown`.
        Event::Core(NodeEvent::BecameLeader { .. } | NodeEvent::LeaderKnown { .. }) => return None,
        Event::Core(NodeEvent::ElectionStarted { term, pre_vote }) => {
            if *pre_vote && *pre_vote_streak {
                return None;
            }
            if !pre_vote {
                *pre_vote_streak = false;
            }
            fields.insert("term", Value::from(*term));
            fields.insert("pre_vote", Value::from(*pre_vote));
        }
        Event::Core(NodeEvent::PreVoteLost { term }) => {
            if std::mem::replace(pre_vote_streak, true) {
                return None;
            }
            fields.insert("term", Value::from(*term));
        }
        Event::Core(NodeEvent::LeaderGone { term, leader }) => {
            fields.insert("term", Value::from(*term));
            fields.insert("leader", Value::from(*leader));
        }
        Event::LeaderKnown {
            term,
            leader,
            leaderless_us,
        } => {
            *pre_vote_streak = false;
            fields.insert("term", Value::from(*term));
            fields.insert("leader", Value::from(*leader));
            if let Some(us) = leaderless_us {
                fields.insert("leaderless_ms", Value::from(*us as f64 / 1000.0));
            }
        }
        Event::Core(NodeEvent::SteppedDown { term, reason }) => {
            fields.insert("term", Value::from(*term));
            fields.insert("reason", Value::from(reason.name()));
            match reason {
                StepDownReason::Transferred { to } | StepDownReason::TransferTimedOut { to } => {
                    fields.insert("to", Value::from(*to));
                }
                StepDownReason::HigherTerm { term } => {
                    fields.insert("seen_term", Value::from(*term));
                }
                StepDownReason::Removed | StepDownReason::LostQuorum => {}
            }
        }
        Event::Core(NodeEvent::MembershipChanged { to, .. }) => {
            fields.insert("voters", ids_value(&to.voters));
            fields.insert("voters_outgoing", ids_value(&to.voters_outgoing));
            fields.insert("learners", ids_value(&to.learners));
            fields.insert("joint", Value::from(to.is_joint()));
        }
        Event::SessionExpired { session } | Event::SessionReleased { session } => {
            fields.insert("session", Value::from(*session));
        }
        Event::FencedRejection {
            key,
            election,
            token,
            current,
            ..
        } => {
            // Keys and election names are the clients' strings: they travel as JSON
            // strings and the page sets them as text, never as markup. Values are not shown.
            fields.insert("key", Value::from(key.as_str()));
            fields.insert("election", Value::from(election.as_str()));
            fields.insert("token", Value::from(*token));
            if let Some(current) = current {
                fields.insert("current", Value::from(*current));
            }
        }
    }
    fields.insert("node", Value::from(node));
    let words = format!("node {node}: {}", event.worded(node));
    Some((event.kind(node), fields, words))
}

fn ids_value(set: &BTreeSet<NodeId>) -> Value {
    Value::from(set.iter().copied().collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader_known(term: u64, leader: NodeId) -> Event {
        Event::LeaderKnown {
            term,
            leader,
            leaderless_us: Some(1_500),
        }
    }

    #[test]
    fn the_ring_keeps_the_last_records_and_a_subscriber_sees_each_once() {
        let journal = Journal::default();
        for term in 1..=(EVENTS_RING_MAX as u64 + 10) {
            journal.note(1, &leader_known(term, 2));
        }
        let recent = journal.recent();
        assert_eq!(recent.len(), EVENTS_RING_MAX);
        assert_eq!(recent[0].seq, 11, "the oldest records were dropped");
        let last = recent.last().expect("records").seq;
        assert_eq!(last, EVENTS_RING_MAX as u64 + 10);

        let mut sub = journal.subscribe(last - 2);
        assert_eq!(
            sub.backlog.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![last - 1, last],
            "a reconnecting page gets only what it has not seen"
        );
        journal.note(1, &leader_known(999, 1));
        let live = sub.live.try_recv().expect("a live record");
        assert_eq!(live.seq, last + 1);
        assert_eq!(live.kind, "leader_elected");
        assert_eq!(
            live.text,
            "node 1: became leader of term 999 after 1.5 ms without a leader"
        );
    }

    #[test]
    fn only_what_the_page_shows_is_recorded_and_pre_vote_streaks_once() {
        let journal = Journal::default();
        journal.note(3, &Event::Committed { latency_us: 10 });
        journal.note(3, &Event::ElectionLeaderChanged);
        assert!(
            journal.recent().is_empty(),
            "latencies are the charts' business"
        );

        for _ in 0..5 {
            journal.note(
                3,
                &Event::Core(NodeEvent::ElectionStarted {
                    term: 4,
                    pre_vote: true,
                }),
            );
            journal.note(3, &Event::Core(NodeEvent::PreVoteLost { term: 4 }));
        }
        let kinds: Vec<_> = journal.recent().iter().map(|r| r.kind).collect();
        assert_eq!(kinds, vec!["election_started", "pre_vote_lost"]);

        journal.note(3, &leader_known(5, 1));
        journal.note(
            3,
            &Event::Core(NodeEvent::ElectionStarted {
                term: 6,
                pre_vote: true,
            }),
        );
        journal.note(
            3,
            &Event::Core(NodeEvent::SteppedDown {
                term: 6,
                reason: StepDownReason::HigherTerm { term: 7 },
            }),
        );
        let recent = journal.recent();
        let kinds: Vec<_> = recent.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            vec![
                "election_started",
                "pre_vote_lost",
                "leader_known",
                "election_started",
                "step_down"
            ],
            "a known leader ends the streak"
        );
        let step_down = recent.last().expect("a step-down");
        assert_eq!(step_down.fields["reason"], Value::from("higher-term"));
        assert_eq!(step_down.fields["seen_term"], Value::from(7));
    }
}
