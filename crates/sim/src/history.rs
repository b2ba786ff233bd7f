//! Cluster-wide facts the world accumulates for the checkers: the committed log's fingerprints
//! and the canonical applied sequence.
//!
//! These are records, not judgements: the first node to report an index defines the record,
//! and the checkers compare every later report against it.

use std::collections::BTreeMap;

use tenure_core::node::Applied;
use tenure_core::sm::LeaderChange;
use tenure_core::types::Index;

use crate::mirror::{ChainedEntry, EntryKind};
use crate::observe::CanonicalEntry;

/// Records kept for the whole run.
#[derive(Debug, Default)]
pub struct History {
    /// Fingerprints of committed entries, index `i` at position `i - 1`, as first reported.
    committed: Vec<ChainedEntry>,
    /// Applied commands not yet in the canonical sequence, keyed by index.
    pending: BTreeMap<Index, CanonicalEntry>,
    /// Next index of the canonical sequence.
    next_canonical: Index,
}

impl History {
    /// An empty history.
    pub fn new() -> History {
        History {
            committed: Vec::new(),
            pending: BTreeMap::new(),
            next_canonical: 1,
        }
    }

    /// Highest index known committed.
    pub fn committed_index(&self) -> Index {
        self.committed.len() as Index
    }

    /// The committed entry at `index`, if known.
    pub fn committed(&self, index: Index) -> Option<&ChainedEntry> {
        if index == 0 {
            return None;
        }
        self.committed.get((index - 1) as usize)
    }

    /// Chain hash of the committed prefix ending at `index`, used to anchor a mirror at a
    /// snapshot.
    pub fn anchor(&self, index: Index) -> Option<u64> {
        if index == 0 {
            return Some(crate::mirror::CHAIN_ORIGIN);
        }
        self.committed(index).and_then(|e| e.chain)
    }

    /// Records newly committed entries reported by one node. Entries beyond the end of the
    /// record extend it only if contiguous; anything already recorded is left to the checkers.
    pub fn record_committed(&mut self, entries: &[ChainedEntry]) {
        for e in entries {
            let next = self.committed.len() as Index + 1;
            if e.index == next {
                self.committed.push(*e);
            } else if e.index == 0 || e.index > next {
                // A node whose commit jumped past entries it never held (after a snapshot)
                // reports nothing for them; someone else recorded or will record them.
                continue;
            } else if let Some(existing) = self.committed.get_mut((e.index - 1) as usize) {
                if existing.chain.is_none() && existing.term == e.term {
                    existing.chain = e.chain;
                }
            }
        }
    }

    /// Feeds one node's applied commands; returns the canonical entries that became known,
    /// in index order.
    pub fn feed_applied(
        &mut self,
        applied: &[Applied],
        leader_changes: &[LeaderChange],
    ) -> Vec<CanonicalEntry> {
        for a in applied {
            if a.index < self.next_canonical || self.pending.contains_key(&a.index) {
                continue;
            }
            let changes = leader_changes
                .iter()
                .filter(|c| c.index == a.index)
                .cloned()
                .collect();
            self.pending.insert(
                a.index,
                CanonicalEntry {
                    index: a.index,
                    term: a.term,
                    command: a.command.clone(),
                    request: a.request,
                    replay_of: a.first_applied,
                    response: a.response.clone(),
                    leader_changes: changes,
                },
            );
        }
        self.drain()
    }

    /// Moves the canonical sequence forward over known committed entries.
    pub fn drain(&mut self) -> Vec<CanonicalEntry> {
        let mut out = Vec::new();
        loop {
            let next = self.next_canonical;
            if let Some(entry) = self.pending.remove(&next) {
                out.push(entry);
            } else {
                match self.committed(next).map(|e| e.kind) {
                    Some(EntryKind::Noop) | Some(EntryKind::Membership) => {}
                    // A committed command nobody reported yet, or an index not known
                    // committed: wait.
                    Some(EntryKind::Command) | None => break,
                }
            }
            self.next_canonical += 1;
        }
        out
    }

    /// Next index the canonical sequence waits for.
    pub fn next_canonical(&self) -> Index {
        self.next_canonical
    }
}
