//! A fingerprint of each node's in-memory log, kept by the driver from the node's Ready.
//!
//! Each entry is reduced to its term, its kind and a *chain hash*: the hash of the entry and of
//! the chain hash of the entry before it. Two logs with the same chain hash at an index are
//! identical up to that index, which makes log matching and leader completeness O(1) checks.

use tenure_core::types::{Entry, Index, Payload, Term};

use crate::hash::{self, Fnv64};

/// Chain hash of the empty log prefix.
pub const CHAIN_ORIGIN: u64 = 0x005e_ed0f_1065;

/// What an entry carries, as far as the checkers care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A leader's no-op.
    Noop,
    /// A state machine command (reported in `AfterPersist::applied` when applied).
    Command,
    /// A membership configuration.
    Membership,
}

impl EntryKind {
    /// The kind of a payload.
    pub fn of(payload: &Payload) -> EntryKind {
        match payload {
            Payload::Noop => EntryKind::Noop,
            Payload::Command(_) | Payload::Request { .. } => EntryKind::Command,
            Payload::Membership(_) => EntryKind::Membership,
        }
    }
}

/// One entry's fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainedEntry {
    /// Its index.
    pub index: Index,
    /// Its term.
    pub term: Term,
    /// Chain hash up to and including it; `None` when the log's base (a snapshot whose chain
    /// hash the simulator never learnt) is unknown.
    pub chain: Option<u64>,
    /// What it carries.
    pub kind: EntryKind,
}

/// The chain hash of `entry` following `prev`.
pub fn chain_next(prev: u64, entry: &Entry) -> u64 {
    let mut h = Fnv64::from_state(prev);
    h.u64(entry.index);
    h.u64(entry.term);
    hash::payload(&mut h, &entry.payload);
    h.finish()
}

/// The fingerprint of one node's log after its latest snapshot.
#[derive(Clone, Debug)]
pub struct LogMirror {
    /// Index of the last entry covered by the snapshot (0 if none).
    base_index: Index,
    /// Term of that entry.
    base_term: Term,
    /// Chain hash at `base_index`, if known.
    base_chain: Option<u64>,
    /// Entries `base_index + 1 ..`, in order.
    entries: Vec<ChainedEntry>,
}

impl Default for LogMirror {
    fn default() -> LogMirror {
        LogMirror {
            base_index: 0,
            base_term: 0,
            base_chain: Some(CHAIN_ORIGIN),
            entries: Vec::new(),
        }
    }
}

/// The result of looking an index up in a mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The index is covered by the snapshot (its entry was committed and compacted).
    Compacted,
    /// The log does not reach the index.
    Missing,
    /// The entry at the index.
    Entry(ChainedEntry),
}

impl LogMirror {
    /// Index of the last entry (or of the snapshot if the log after it is empty).
    pub fn last_index(&self) -> Index {
        self.base_index + self.entries.len() as Index
    }

    /// Index covered by the snapshot.
    pub fn base_index(&self) -> Index {
        self.base_index
    }

    /// Looks up an index.
    pub fn get(&self, index: Index) -> Lookup {
        if index <= self.base_index {
            return Lookup::Compacted;
        }
        match self.entries.get((index - self.base_index - 1) as usize) {
            Some(e) => Lookup::Entry(*e),
            None => Lookup::Missing,
        }
    }

    /// Every entry in the mirror, in index order.
    pub fn entries(&self) -> &[ChainedEntry] {
        &self.entries
    }

    /// Applies `Persist::entries`: truncate at the first new index, then append. Returns the
    /// fingerprints of the appended entries. Entries at or below the snapshot are ignored, as
    /// storage ignores them.
    pub fn append(&mut self, new: &[Entry]) -> Vec<ChainedEntry> {
        let mut appended = Vec::with_capacity(new.len());
        for entry in new {
            if entry.index <= self.base_index {
                continue;
            }
            let keep = (entry.index - self.base_index - 1) as usize;
            self.entries.truncate(keep);
            let prev_chain = match self.entries.last() {
                Some(prev) if prev.index + 1 == entry.index => prev.chain,
                None if self.base_index + 1 == entry.index => self.base_chain,
                // A gap: the storage contract check reports it; the chain is unknown after it.
                _ => None,
            };
            let chained = ChainedEntry {
                index: entry.index,
                term: entry.term,
                chain: prev_chain.map(|p| chain_next(p, entry)),
                kind: EntryKind::of(&entry.payload),
            };
            self.entries.push(chained);
            appended.push(chained);
        }
        appended
    }

    /// Applies a snapshot: entries up to its index are dropped; entries after it are kept only
    /// if the entry at the snapshot's index has the snapshot's term (the storage rule written on
    /// `Persist::snapshot`). `anchor` is the chain hash at the snapshot's index, if known.
    pub fn install_snapshot(&mut self, index: Index, term: Term, anchor: Option<u64>) {
        if index <= self.base_index {
            return;
        }
        let own = match self.get(index) {
            Lookup::Entry(e) if e.term == term => Some(e),
            _ => None,
        };
        match own {
            Some(e) => {
                let drop = (index - self.base_index) as usize;
                self.entries.drain(..drop);
                self.base_chain = e.chain.or(anchor);
            }
            None => {
                self.entries.clear();
                self.base_chain = anchor;
            }
        }
        self.base_index = index;
        self.base_term = term;
    }

    /// A mirror of a log recovered from disk.
    pub fn recovered(snapshot: Option<(Index, Term, Option<u64>)>, entries: &[Entry]) -> LogMirror {
        let mut mirror = LogMirror::default();
        if let Some((index, term, anchor)) = snapshot {
            mirror.install_snapshot(index, term, anchor);
        }
        mirror.append(entries);
        mirror
    }
}
