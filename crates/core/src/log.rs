//! The in-memory Raft log: a snapshot boundary followed by contiguous entries, with the
//! positions that say what is durable, committed and applied.

use core::cell::Cell;
use std::collections::BTreeSet;

use crate::types::{Entry, Index, Membership, Payload, Term};

/// The log as the node sees it.
///
/// Invariant: `entries[k].index == snapshot_index + 1 + k`; terms never decrease along the log.
/// Invariant: `snapshot_index <= applied <= committed <= last_index()`.
/// Invariant: `applied <= persisted` (only durable entries are applied) and
/// `persisted <= last_index()`.
/// Invariant: `membership_indices` lists exactly the entries holding a membership.
#[derive(Clone, Debug, Default)]
pub struct RaftLog {
    snapshot_index: Index,
    snapshot_term: Term,
    entries: Vec<Entry>,
    /// Indices of the entries that hold a membership, so that finding the latest one does
    /// not walk a long log after every append.
    membership_indices: BTreeSet<Index>,
    /// Entries up to here are durable on this node's disk.
    persisted: Index,
    /// First index not yet handed to the driver for persistence.
    unstable_from: Index,
    /// Highest index known committed.
    pub(crate) committed: Index,
    /// Highest index applied to the state machine.
    pub(crate) applied: Index,
    /// Bumped by every change to `entries` or the snapshot boundary, so that
    /// `check_invariants` walks the entries only when they changed.
    shape_version: u64,
    /// The `shape_version` whose entries `check_invariants` last walked.
    shape_checked: Cell<Option<u64>>,
}

impl RaftLog {
    /// A log restored from disk: everything in it is durable already.
    pub fn restored(snapshot_index: Index, snapshot_term: Term, entries: Vec<Entry>) -> RaftLog {
        let last = snapshot_index + entries.len() as Index;
        let membership_indices = membership_indices_of(&entries).collect();
        RaftLog {
            snapshot_index,
            snapshot_term,
            entries,
            membership_indices,
            persisted: last,
            unstable_from: last + 1,
            committed: snapshot_index,
            applied: snapshot_index,
            shape_version: 0,
            shape_checked: Cell::new(None),
        }
    }

    /// Index of the last snapshot (0 if none).
    pub fn snapshot_index(&self) -> Index {
        self.snapshot_index
    }

    /// Term of the last snapshot.
    pub fn snapshot_term(&self) -> Term {
        self.snapshot_term
    }

    /// Last index in the log (the snapshot's if no entries follow it).
    pub fn last_index(&self) -> Index {
        self.snapshot_index + self.entries.len() as Index
    }

    /// Term of the last entry.
    pub fn last_term(&self) -> Term {
        self.entries.last().map_or(self.snapshot_term, |e| e.term)
    }

    /// A counter that changes whenever the entries or the snapshot boundary change, for
    /// callers that cache something computed from them.
    pub fn shape_version(&self) -> u64 {
        self.shape_version
    }

    /// Highest durable index.
    pub fn persisted(&self) -> Index {
        self.persisted
    }

    /// The term at `index`, if the log still knows it (compacted indexes other than the
    /// snapshot's own are unknown).
    pub fn term(&self, index: Index) -> Option<Term> {
        if index == self.snapshot_index {
            return Some(self.snapshot_term);
        }
        if index < self.snapshot_index || index > self.last_index() {
            return None;
        }
        Some(self.entries[(index - self.snapshot_index - 1) as usize].term)
    }

    /// The entry at `index`, if present (not compacted).
    pub fn entry(&self, index: Index) -> Option<&Entry> {
        if index <= self.snapshot_index || index > self.last_index() {
            return None;
        }
        Some(&self.entries[(index - self.snapshot_index - 1) as usize])
    }

    /// All entries after the snapshot.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Up to `max` entries starting at `from` (which must be after the snapshot).
    pub fn slice(&self, from: Index, max: usize) -> Vec<Entry> {
        assert!(from > self.snapshot_index, "slice from {from} is compacted");
        let start = (from - self.snapshot_index - 1) as usize;
        let end = start.saturating_add(max).min(self.entries.len());
        if start >= end {
            return Vec::new();
        }
        self.entries[start..end].to_vec()
    }

    /// Raft §5.4.1: is a log ending at (`index`, `term`) at least as up to date as ours?
    pub fn is_up_to_date(&self, index: Index, term: Term) -> bool {
        term > self.last_term() || (term == self.last_term() && index >= self.last_index())
    }

    /// Append an entry created by this node as leader.
    pub fn append(&mut self, entry: Entry) {
        assert_eq!(
            entry.index,
            self.last_index() + 1,
            "leader append out of order"
        );
        assert!(
            entry.term >= self.last_term(),
            "leader append with older term"
        );
        if matches!(entry.payload, Payload::Membership(_)) {
            self.membership_indices.insert(entry.index);
        }
        self.entries.push(entry);
        self.shape_version += 1;
    }

    /// The latest membership in the log (after the snapshot) and its index, if it has one.
    pub fn last_membership(&self) -> Option<(Index, &Membership)> {
        let index = *self.membership_indices.last()?;
        match &self.entry(index)?.payload {
            Payload::Membership(m) => Some((index, m)),
            _ => None,
        }
    }

    /// Appends `entries` at the end of the log.
    fn extend(&mut self, entries: &[Entry]) {
        self.membership_indices
            .extend(membership_indices_of(entries));
        self.entries.extend_from_slice(entries);
        self.shape_version += 1;
    }

    /// Store entries from a leader after the log-matching check passed at `prev`.
    /// Returns the index of the last entry now known to match the leader's log.
    ///
    /// Entries already present with the same term are kept (they may be durable and even
    /// applied); the first entry whose term differs truncates the log from there (Raft §5.3).
    pub fn append_from_leader(&mut self, prev: Index, entries: &[Entry]) -> Index {
        let mut last_match = prev;
        for (k, e) in entries.iter().enumerate() {
            debug_assert_eq!(e.index, prev + 1 + k as Index);
            if e.index <= self.snapshot_index {
                last_match = e.index;
                continue;
            }
            match self.term(e.index) {
                Some(t) if t == e.term => last_match = e.index,
                Some(_) => {
                    assert!(
                        e.index > self.committed,
                        "leader overwrote committed entry {} (committed {})",
                        e.index,
                        self.committed
                    );
                    self.truncate_from(e.index);
                    self.extend(&entries[k..]);
                    return prev + entries.len() as Index;
                }
                None => {
                    self.extend(&entries[k..]);
                    return prev + entries.len() as Index;
                }
            }
        }
        last_match
    }

    /// The injected `truncate_matching_entries` bug: drop everything after `prev` and append
    /// `entries`, whether or not they already matched. Never below the commit index (that
    /// would trip this log's own invariants rather than show what the bug does to the
    /// cluster: entries this node acknowledged disappear).
    pub fn replace_after(&mut self, prev: Index, entries: &[Entry]) -> Index {
        let from = (prev + 1).max(self.committed + 1);
        let skip = (from - prev - 1) as usize;
        if skip >= entries.len() || from <= self.snapshot_index {
            return self.append_from_leader(prev, entries);
        }
        if from <= self.last_index() {
            self.truncate_from(from);
        }
        self.extend(&entries[skip..]);
        prev + entries.len() as Index
    }

    fn truncate_from(&mut self, index: Index) {
        let keep = (index - self.snapshot_index - 1) as usize;
        self.entries.truncate(keep);
        self.membership_indices.split_off(&index);
        self.shape_version += 1;
        self.persisted = self.persisted.min(index - 1);
        self.unstable_from = self.unstable_from.min(index);
    }

    /// First index of `term` in the log going back from `index` (for reject hints).
    pub fn first_index_of_term(&self, index: Index, term: Term) -> Index {
        let mut i = index;
        while i > self.snapshot_index + 1 && self.term(i - 1) == Some(term) {
            i -= 1;
        }
        i
    }

    /// Last index holding `term`, if any (leader side of fast backtracking).
    pub fn last_index_of_term(&self, term: Term) -> Option<Index> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.term == term)
            .map(|e| e.index)
    }

    /// Entries not yet handed out for persistence, marking them handed out.
    pub fn take_unstable(&mut self) -> Vec<Entry> {
        let from = self.unstable_from.max(self.snapshot_index + 1);
        let out = if from <= self.last_index() {
            self.slice(from, usize::MAX)
        } else {
            Vec::new()
        };
        self.unstable_from = self.last_index() + 1;
        out
    }

    /// True if there are entries to persist.
    pub fn has_unstable(&self) -> bool {
        self.unstable_from.max(self.snapshot_index + 1) <= self.last_index()
    }

    /// Everything handed out so far is durable.
    pub fn mark_persisted(&mut self) {
        self.persisted = self.unstable_from - 1;
    }

    /// Discard entries up to `index` after a local snapshot there.
    pub fn compact(&mut self, index: Index) {
        assert!(index <= self.applied, "compacting unapplied entries");
        if index <= self.snapshot_index {
            return;
        }
        let term = self.term(index).expect("compaction point is in the log");
        let drop = (index - self.snapshot_index) as usize;
        self.entries.drain(..drop);
        self.membership_indices = self.membership_indices.split_off(&(index + 1));
        self.snapshot_index = index;
        self.snapshot_term = term;
        self.shape_version += 1;
    }

    /// Replace the whole log with a snapshot from the leader.
    pub fn restore(&mut self, index: Index, term: Term) {
        self.entries.clear();
        self.membership_indices.clear();
        self.shape_version += 1;
        self.snapshot_index = index;
        self.snapshot_term = term;
        self.committed = index;
        self.applied = index;
        // The snapshot is handed to the driver in the same `Ready` as the reply that
        // acknowledges it, and the driver persists before it sends, so counting it durable
        // now never lets anything leave the node early.
        self.persisted = index;
        self.unstable_from = index + 1;
    }

    /// Panics if a structural invariant does not hold.
    ///
    /// The walk over the entries runs only when they changed since the last check (every
    /// method that changes them bumps `shape_version`); the positions are checked always.
    pub fn check_invariants(&self) {
        if self.shape_checked.get() != Some(self.shape_version) {
            let mut previous_term = self.snapshot_term;
            for (k, e) in self.entries.iter().enumerate() {
                assert_eq!(
                    e.index,
                    self.snapshot_index + 1 + k as Index,
                    "log not contiguous"
                );
                if k == 0 {
                    assert!(e.term >= previous_term, "entry older than snapshot");
                } else {
                    assert!(e.term >= previous_term, "log terms decrease at {}", e.index);
                }
                previous_term = e.term;
            }
            assert!(
                membership_indices_of(&self.entries).eq(self.membership_indices.iter().copied()),
                "the index of membership entries is out of step with the log"
            );
            self.shape_checked.set(Some(self.shape_version));
        }
        self.check_positions();
    }

    /// The O(1) part of [`RaftLog::check_invariants`].
    ///
    /// Invariant: snapshot ≤ applied ≤ commit ≤ last index, and applied ≤ persisted ≤ last.
    pub fn check_positions(&self) {
        assert!(
            self.snapshot_index <= self.applied,
            "applied behind snapshot"
        );
        assert!(self.applied <= self.committed, "applied beyond commit");
        assert!(self.committed <= self.last_index(), "commit beyond log");
        assert!(self.applied <= self.persisted, "applied non-durable entry");
        assert!(self.persisted <= self.last_index(), "persisted beyond log");
    }
}

/// The indices of the entries among `entries` that hold a membership.
fn membership_indices_of(entries: &[Entry]) -> impl Iterator<Item = Index> + '_ {
    entries
        .iter()
        .filter(|e| matches!(e.payload, Payload::Membership(_)))
        .map(|e| e.index)
}
