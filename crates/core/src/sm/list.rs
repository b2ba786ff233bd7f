//! Paged listings of the applied state, for operators (`tenure elections`, `tenure sessions`)
//! and the dashboard.
//!
//! A listing reads the state machine as this replica has applied it: no log entry, no
//! quorum round, so a follower may lag. Pages are in key order (election name, session id)
//! and each starts strictly after a key the caller passes, the last key of the previous
//! page. That key is a *position*, not a reference: it need not exist (an election name
//! nobody used, a session that ended between two pages), and a page then starts at the next
//! key after it. So a walk over all pages sees every entry that lived throughout the walk
//! exactly once, in order, however the state changes in between.

use super::machine::{Election, Session};
use super::{FencedValue, LeaderInfo, SessionId, SessionInfo, StateMachine};

/// Entries in a page when the caller asks for none in particular (`limit` 0).
pub const LIST_PAGE_DEFAULT: usize = 100;
/// Most entries in one page; a larger `limit` is capped to this (not refused), so that one
/// request cannot make a replica copy its whole state at once.
pub const LIST_PAGE_MAX: usize = 1_000;

/// The page size a request for `limit` entries gets: the default for 0, else at most
/// [`LIST_PAGE_MAX`].
pub fn page_limit(limit: usize) -> usize {
    match limit {
        0 => LIST_PAGE_DEFAULT,
        n => n.min(LIST_PAGE_MAX),
    }
}

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The entries, in key order.
    pub items: Vec<T>,
    /// Whether entries follow the last one (ask again with its key as `after`).
    pub more: bool,
}

/// One election as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionSummary {
    /// Its name.
    pub name: String,
    /// Who leads it, with the current token; `None` when its queue is empty.
    pub leader: Option<LeaderInfo>,
    /// The latest token it issued (the leader's when it has one; never reset).
    pub token: u64,
    /// Sessions queued behind the leader, in queue order (the leader not included).
    pub candidates: Vec<SessionId>,
}

/// One session as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// Its id.
    pub id: SessionId,
    /// Its lease bookkeeping (TTL, last recorded remaining time).
    pub info: SessionInfo,
    /// The elections it leads or is queued in, by name.
    pub elections: Vec<String>,
}

impl StateMachine {
    /// One page of fenced keys whose names start with `prefix`, in name order, starting
    /// strictly after `after` (anything below `prefix`, such as "", starts at the first),
    /// at most `limit` ([`page_limit`]): for the dashboard's list of `tenure cron` ledgers.
    pub fn keys_page(
        &self,
        prefix: &str,
        after: &str,
        limit: usize,
    ) -> Page<(String, FencedValue)> {
        use std::ops::Bound;
        let limit = page_limit(limit);
        let start = if after < prefix {
            Bound::Included(prefix)
        } else {
            Bound::Excluded(after)
        };
        let mut range = self
            .state
            .data
            .fenced
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix));
        let items = range
            .by_ref()
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Page {
            items,
            more: range.next().is_some(),
        }
    }

    /// Elections by name, starting strictly after `after` ("" = from the first), at most
    /// [`page_limit`]`(limit)` of them.
    pub fn elections_page(&self, after: &str, limit: usize) -> Page<ElectionSummary> {
        use std::ops::Bound;
        let limit = page_limit(limit);
        let start = if after.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(after)
        };
        let mut range = self
            .state
            .data
            .elections
            .range::<str, _>((start, Bound::Unbounded));
        let items = range
            .by_ref()
            .take(limit)
            .map(|(name, e)| summarize_election(name, e))
            .collect();
        Page {
            items,
            more: range.next().is_some(),
        }
    }

    /// Sessions by id, starting strictly after `after` (0 = from the first), at most
    /// [`page_limit`]`(limit)` of them.
    pub fn sessions_page(&self, after: SessionId, limit: usize) -> Page<SessionSummary> {
        use std::ops::Bound;
        let limit = page_limit(limit);
        let mut range = self
            .state
            .data
            .sessions
            .range((Bound::Excluded(after), Bound::Unbounded));
        let items = range
            .by_ref()
            .take(limit)
            .map(|(id, s)| summarize_session(*id, s))
            .collect();
        Page {
            items,
            more: range.next().is_some(),
        }
    }
}

fn summarize_election(name: &str, e: &Election) -> ElectionSummary {
    ElectionSummary {
        name: name.to_owned(),
        leader: e.leader(),
        token: e.token,
        candidates: e.queue.iter().skip(1).map(|c| c.session).collect(),
    }
}

fn summarize_session(id: SessionId, s: &Session) -> SessionSummary {
    SessionSummary {
        id,
        info: s.info.clone(),
        elections: s.elections.iter().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sm::{Command, Response, SmLimits};

    /// A state machine with `sessions` sessions (ids 1..=sessions) and one election per
    /// name, each led by session 1 with session 2 queued behind it.
    fn machine(sessions: u64, elections: &[&str]) -> StateMachine {
        let mut sm = StateMachine::new(SmLimits::default());
        let mut index = 0;
        for _ in 0..sessions {
            index += 1;
            let r = sm.apply(index, &Command::Grant { ttl_ticks: 50 });
            assert_eq!(
                r,
                Response::Granted {
                    session: index,
                    ttl_ticks: 50
                }
            );
        }
        for name in elections {
            for session in [1, 2] {
                index += 1;
                let campaign = Command::Campaign {
                    election: (*name).to_owned(),
                    session,
                    value: b"v".to_vec(),
                };
                let r = sm.apply(index, &campaign);
                assert!(!matches!(r, Response::Rejected(_)), "{r:?}");
            }
        }
        sm
    }

    fn names(page: &Page<ElectionSummary>) -> Vec<&str> {
        page.items.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn limits_default_and_cap() {
        assert_eq!(page_limit(0), LIST_PAGE_DEFAULT);
        assert_eq!(page_limit(7), 7);
        assert_eq!(page_limit(LIST_PAGE_MAX), LIST_PAGE_MAX);
        assert_eq!(page_limit(usize::MAX), LIST_PAGE_MAX);
        let sm = machine(LIST_PAGE_MAX as u64 + 5, &[]);
        let page = sm.sessions_page(0, 0);
        assert_eq!(page.items.len(), LIST_PAGE_DEFAULT);
        assert!(page.more);
        let page = sm.sessions_page(0, 1_000_000);
        assert_eq!(page.items.len(), LIST_PAGE_MAX);
        assert!(page.more);
    }

    #[test]
    fn elections_walk_every_page_once_in_order() {
        let all = ["a", "b", "b\u{0}", "bb", "c", "z"];
        let sm = machine(2, &all);
        let mut seen = Vec::new();
        let mut after = String::new();
        loop {
            let page = sm.elections_page(&after, 2);
            assert!(page.items.len() <= 2);
            seen.extend(names(&page).into_iter().map(str::to_owned));
            if !page.more {
                break;
            }
            after = page
                .items
                .last()
                .expect("a page with more is full")
                .name
                .clone();
        }
        assert_eq!(seen, all);
        // An exactly full last page says there is no more.
        let page = sm.elections_page("bb", 2);
        assert_eq!(names(&page), ["c", "z"]);
        assert!(!page.more);
    }

    #[test]
    fn an_after_that_names_nothing_is_a_position() {
        let sm = machine(2, &["apple", "melon", "pear"]);
        // Between two names, before the first, after the last: no error, just a position.
        assert_eq!(names(&sm.elections_page("banana", 10)), ["melon", "pear"]);
        assert_eq!(
            names(&sm.elections_page("\u{0}", 10)),
            ["apple", "melon", "pear"]
        );
        let past = sm.elections_page("zzz", 10);
        assert!(past.items.is_empty() && !past.more);
        let sm = machine(5, &[]);
        let ids: Vec<u64> = sm.sessions_page(3, 10).items.iter().map(|s| s.id).collect();
        assert_eq!(ids, [4, 5]);
        let past = sm.sessions_page(u64::MAX, 10);
        assert!(past.items.is_empty() && !past.more);
    }

    #[test]
    fn summaries_say_who_leads_and_who_waits() {
        let sm = machine(3, &["e"]);
        let page = sm.elections_page("", 0);
        let e = &page.items[0];
        assert_eq!(e.leader.as_ref().map(|l| l.session), Some(1));
        assert_eq!(e.token, 1);
        assert_eq!(e.candidates, [2]);
        let sessions = sm.sessions_page(0, 0).items;
        assert_eq!(sessions.len(), 3);
        assert_eq!(sessions[0].elections, ["e"]);
        assert_eq!(sessions[1].elections, ["e"]);
        assert!(sessions[2].elections.is_empty());
        assert_eq!(sessions[2].info.ttl_ticks, 50);
    }

    #[test]
    fn an_empty_machine_lists_nothing() {
        let sm = machine(0, &[]);
        let page = sm.elections_page("", 0);
        assert!(page.items.is_empty() && !page.more);
        let page = sm.sessions_page(0, 0);
        assert!(page.items.is_empty() && !page.more);
    }
}
