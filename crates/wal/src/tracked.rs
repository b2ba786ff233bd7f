//! The log's entries as the disk holds them, with the segment each one lives in.
//!
//! One type serves both replay (carrying the decoded entries) and the open storage
//! (carrying nothing but positions), so the two cannot disagree about what a snapshot or a
//! conflicting append removes. The operations are those of
//! [`tenure_core::storage::apply_to_image`], except that whether a snapshot keeps the tail is
//! decided once, when it is persisted, and recorded (see [`crate::record::SnapOp`]).

use std::collections::VecDeque;

use tenure_core::types::{Index, Term};

/// One stored entry.
#[derive(Clone, Debug)]
pub struct Slot<T> {
    /// Its log index.
    pub index: Index,
    /// Its term.
    pub term: Term,
    /// The segment whose records wrote it: compaction keeps that segment while it lives.
    pub segment: u64,
    /// The entry itself during replay; `()` in the open storage.
    pub value: T,
}

/// Stored entries in the order they were written.
///
/// Invariant: `ascending` is true when the slots' indexes strictly increase (always, for
/// logs written by the Raft core). Then truncation and snapshots take the fast paths; the
/// general paths exist so that any sequence of persists matches `apply_to_image` exactly.
/// Invariant: `segment` never decreases along the slots (appends go to the newest segment and
/// removals keep a subsequence), so the first slot holds the oldest segment still needed.
#[derive(Clone, Debug)]
pub struct TrackedLog<T> {
    slots: VecDeque<Slot<T>>,
    ascending: bool,
}

impl<T> Default for TrackedLog<T> {
    fn default() -> Self {
        TrackedLog {
            slots: VecDeque::new(),
            ascending: true,
        }
    }
}

impl<T> TrackedLog<T> {
    /// Whether an entry with this index and term is stored.
    pub fn contains(&self, index: Index, term: Term) -> bool {
        if self.ascending {
            self.slots
                .binary_search_by_key(&index, |s| s.index)
                .is_ok_and(|at| self.slots[at].term == term)
        } else {
            self.slots
                .iter()
                .any(|s| s.index == index && s.term == term)
        }
    }

    /// A snapshot at `index` was persisted: keep only the entries after it, or none.
    pub fn apply_snapshot(&mut self, index: Index, keep_tail: bool) {
        if !keep_tail {
            self.slots.clear();
            self.ascending = true;
        } else if self.ascending {
            while self.slots.front().is_some_and(|s| s.index <= index) {
                self.slots.pop_front();
            }
        } else {
            self.slots.retain(|s| s.index > index);
            self.recheck_ascending();
        }
    }

    /// Entries starting at `first` are about to be appended: discard stored entries at
    /// `first` and after.
    pub fn truncate_from(&mut self, first: Index) {
        while self.slots.back().is_some_and(|s| s.index >= first) {
            self.slots.pop_back();
        }
        if !self.ascending {
            self.slots.retain(|s| s.index < first);
            self.recheck_ascending();
        }
    }

    /// Append one entry.
    pub fn push(&mut self, slot: Slot<T>) {
        if self.slots.back().is_some_and(|b| slot.index <= b.index) {
            self.ascending = false;
        }
        debug_assert!(self.slots.back().is_none_or(|b| b.segment <= slot.segment));
        self.slots.push_back(slot);
    }

    /// The index of the last entry written (the highest, for a log Raft wrote).
    pub fn last(&self) -> Option<Index> {
        self.slots.back().map(|s| s.index)
    }

    /// The oldest segment that still holds a stored entry.
    pub fn first_segment(&self) -> Option<u64> {
        self.slots.front().map(|s| s.segment)
    }

    /// The stored entries, in order.
    pub fn into_values(self) -> impl Iterator<Item = T> {
        self.slots.into_iter().map(|s| s.value)
    }

    /// The same positions without the values.
    pub fn positions(&self) -> TrackedLog<()> {
        TrackedLog {
            slots: self
                .slots
                .iter()
                .map(|s| Slot {
                    index: s.index,
                    term: s.term,
                    segment: s.segment,
                    value: (),
                })
                .collect(),
            ascending: self.ascending,
        }
    }

    fn recheck_ascending(&mut self) {
        self.ascending = self
            .slots
            .iter()
            .zip(self.slots.iter().skip(1))
            .all(|(a, b)| a.index < b.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(items: &[(Index, Term)]) -> TrackedLog<()> {
        let mut log = TrackedLog::default();
        for &(index, term) in items {
            log.push(Slot {
                index,
                term,
                segment: 1,
                value: (),
            });
        }
        log
    }

    fn indexes(log: &TrackedLog<()>) -> Vec<Index> {
        log.slots.iter().map(|s| s.index).collect()
    }

    #[test]
    fn snapshot_keeps_tail_or_clears() {
        let mut l = log(&[(1, 1), (2, 1), (3, 2), (4, 2)]);
        assert!(l.contains(3, 2));
        assert!(!l.contains(3, 1));
        l.apply_snapshot(2, true);
        assert_eq!(indexes(&l), vec![3, 4]);
        l.apply_snapshot(3, false);
        assert_eq!(indexes(&l), Vec::<Index>::new());
    }

    #[test]
    fn unordered_appends_follow_apply_to_image() {
        // Entries [5, 3] appended after 1..=4: retain < 5, then extend.
        let mut l = log(&[(1, 1), (2, 1), (3, 1), (4, 1)]);
        l.truncate_from(5);
        l.push(Slot {
            index: 5,
            term: 1,
            segment: 1,
            value: (),
        });
        l.push(Slot {
            index: 3,
            term: 2,
            segment: 1,
            value: (),
        });
        assert_eq!(indexes(&l), vec![1, 2, 3, 4, 5, 3]);
        assert!(l.contains(3, 2));
        l.truncate_from(4);
        assert_eq!(indexes(&l), vec![1, 2, 3, 3]);
        l.apply_snapshot(2, true);
        assert_eq!(indexes(&l), vec![3, 3]);
    }
}
