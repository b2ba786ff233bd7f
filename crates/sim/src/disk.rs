//! A node's simulated disk: a durable part and an unsynced part.
//!
//! Writes land in the unsynced part; `fsync` moves them to the durable part. A crash drops
//! the unsynced part, except that a crash *between write and fsync* may keep a prefix of the
//! unsynced writes, the last of them torn (only a prefix of its entries kept), as a real disk
//! that reorders nothing but loses power mid-write would.
//!
//! `tenure_core::storage::Storage::persist` documents the order snapshot, entries, hard
//! state ([`WalLayout::StateLast`]). With that order a crash between the entries and the hard
//! state leaves entries of a term newer than the persisted term, and `Node::new` currently
//! refuses such a disk as corrupt (a core bug: raising the term to the last entry's term with
//! no vote would be safe, since a vote of that term was never sent). Until the core accepts
//! it, the simulator's default layout ([`WalLayout::TermFirst`]) writes the term and vote
//! first, then the snapshot and entries, and the whole hard state (with the commit index)
//! last: no crash can then leave entries newer than the persisted term, nor a persisted commit
//! index over entries that were not written. `--wal-layout state-last` reproduces the
//! recovery failure; `--wal-layout state-first` shows why the commit index must come after
//! the entries (a torn write leaves a stale conflicting tail under it, which is then applied).

use tenure_core::types::{Entry, HardState, Index, Recovered, Snapshot};

use crate::rng::SimRng;

/// A broken storage contract: the node asked to persist something inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// Entries that do not continue the stored log.
    #[error("entries start at index {first} but the stored log ends at {last}: a gap")]
    Gap {
        /// First index written.
        first: Index,
        /// Last stored index.
        last: Index,
    },
    /// Entries written out of order within one write.
    #[error("entries of one write are not contiguous at index {0}")]
    NotContiguous(Index),
    /// A background snapshot recorded at or below the stored snapshot's index: its node
    /// cannot have adopted it.
    #[error("a background snapshot at {index} was recorded over the stored one at {stored}")]
    SnapshotNotNewer {
        /// The background snapshot's index.
        index: Index,
        /// The stored snapshot's index (written, durable or not).
        stored: Index,
    },
}

/// One write of a Ready's persistent part.
#[derive(Clone, Debug)]
enum Write {
    /// Term and vote only; the commit index stays as it was.
    TermVote(HardState),
    Snapshot(Snapshot),
    Entries(Vec<Entry>),
    HardState(HardState),
}

/// What survives on the disk.
#[derive(Clone, Debug, Default)]
struct Stored {
    hard_state: HardState,
    snapshot: Option<Snapshot>,
    /// Entries after the snapshot, contiguous.
    entries: Vec<Entry>,
}

impl Stored {
    fn snapshot_index(&self) -> Index {
        self.snapshot.as_ref().map_or(0, |s| s.index)
    }

    fn last_index(&self) -> Index {
        self.snapshot_index() + self.entries.len() as Index
    }

    fn apply(&mut self, write: Write) -> Result<(), StorageError> {
        match write {
            Write::HardState(hs) => self.hard_state = hs,
            Write::TermVote(hs) => {
                self.hard_state.term = hs.term;
                self.hard_state.vote = hs.vote;
            }
            Write::Snapshot(snapshot) => {
                // Exactly `Storage::persist`'s rule (checked by the conformance suite): keep
                // the tail only if an entry at the snapshot's index has the snapshot's term.
                let base = self.snapshot_index();
                let same = snapshot.index > base
                    && self
                        .entries
                        .get((snapshot.index - base - 1) as usize)
                        .is_some_and(|e| e.term == snapshot.term);
                if same {
                    self.entries.drain(..(snapshot.index - base) as usize);
                } else {
                    self.entries.clear();
                }
                self.snapshot = Some(snapshot);
            }
            Write::Entries(entries) => {
                let base = self.snapshot_index();
                let mut expected: Option<Index> = None;
                for entry in entries {
                    if let Some(next) = expected {
                        if entry.index != next {
                            return Err(StorageError::NotContiguous(entry.index));
                        }
                    }
                    expected = Some(entry.index + 1);
                    if entry.index <= base {
                        continue;
                    }
                    if entry.index > self.last_index() + 1 {
                        return Err(StorageError::Gap {
                            first: entry.index,
                            last: self.last_index(),
                        });
                    }
                    self.entries.truncate((entry.index - base - 1) as usize);
                    self.entries.push(entry);
                }
            }
        }
        Ok(())
    }
}

/// A node's disk.
#[derive(Clone, Debug, Default)]
pub struct Disk {
    layout: WalLayout,
    durable: Stored,
    unsynced: Vec<Write>,
    /// `--inject-bug snapshot-recorded-before-written`: the index of a snapshot the log
    /// refers to whose file is not yet durable; a crash loses the file.
    snapshot_file_pending: Option<Index>,
}

/// How the driver lays a Ready's persistent parts out on the disk, which decides what a crash
/// between write and fsync can leave behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalLayout {
    /// Term and vote, snapshot, entries, then the commit index (the default; see the module
    /// documentation for why).
    #[default]
    TermFirst,
    /// Snapshot, entries, then the whole hard state (etcd's WAL order). A crash can leave
    /// entries of a term newer than the persisted term.
    StateLast,
    /// The whole hard state, snapshot, then entries. A crash can leave a persisted commit
    /// index over a stale conflicting tail that a torn write failed to replace.
    StateFirst,
}

impl WalLayout {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            WalLayout::TermFirst => "term-first",
            WalLayout::StateLast => "state-last",
            WalLayout::StateFirst => "state-first",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Result<WalLayout, String> {
        [
            WalLayout::TermFirst,
            WalLayout::StateLast,
            WalLayout::StateFirst,
        ]
        .into_iter()
        .find(|l| l.name() == name)
        .ok_or_else(|| {
            format!("unknown WAL layout {name:?}; valid: term-first, state-last, state-first")
        })
    }
}

/// What a crash between write and fsync left behind, for the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornWrite {
    /// Writes pending at the crash.
    pub pending: usize,
    /// Writes that survived whole.
    pub kept_whole: usize,
    /// Entries kept from a torn entries write, if one was torn.
    pub torn_entries_kept: Option<usize>,
}

impl Disk {
    /// Queues the persistent parts of a Ready, in write-ahead-log order.
    pub fn write(
        &mut self,
        snapshot: Option<Snapshot>,
        entries: Vec<Entry>,
        hard_state: Option<HardState>,
    ) {
        let (first, last) = match (self.layout, hard_state) {
            (_, None) => (None, None),
            (WalLayout::TermFirst, Some(hs)) => {
                (Some(Write::TermVote(hs)), Some(Write::HardState(hs)))
            }
            (WalLayout::StateLast, Some(hs)) => (None, Some(Write::HardState(hs))),
            (WalLayout::StateFirst, Some(hs)) => (Some(Write::HardState(hs)), None),
        };
        self.unsynced.extend(first);
        if let Some(s) = snapshot {
            self.unsynced.push(Write::Snapshot(s));
        }
        if !entries.is_empty() {
            self.unsynced.push(Write::Entries(entries));
        }
        self.unsynced.extend(last);
    }

    /// An empty disk whose driver uses `layout`.
    pub fn new(layout: WalLayout) -> Disk {
        Disk {
            layout,
            ..Disk::default()
        }
    }

    /// Makes every queued write durable.
    pub fn fsync(&mut self) -> Result<(), StorageError> {
        for write in std::mem::take(&mut self.unsynced) {
            self.durable.apply(write)?;
        }
        Ok(())
    }

    /// Power loss between write and fsync: a random prefix of the queued writes survives and
    /// the next one may survive in part (a prefix of its entries; a torn snapshot or hard
    /// state fails its checksum and is lost whole).
    pub fn crash_torn(&mut self, rng: &mut SimRng) -> Result<TornWrite, StorageError> {
        let pending = std::mem::take(&mut self.unsynced);
        let kept_whole = rng.below(pending.len() as u64 + 1) as usize;
        let mut outcome = TornWrite {
            pending: pending.len(),
            kept_whole,
            torn_entries_kept: None,
        };
        for (i, write) in pending.into_iter().enumerate() {
            if i < kept_whole {
                self.durable.apply(write)?;
            } else {
                if let Write::Entries(mut entries) = write {
                    let keep = rng.below(entries.len() as u64) as usize;
                    entries.truncate(keep);
                    outcome.torn_entries_kept = Some(keep);
                    if !entries.is_empty() {
                        self.durable.apply(Write::Entries(entries))?;
                    }
                }
                break;
            }
        }
        Ok(outcome)
    }

    /// The index of the newest snapshot written, durable or not: what the write-ahead log
    /// holds as its snapshot once a persist (or `write`) has returned.
    pub fn stored_snapshot_index(&self) -> Index {
        self.unsynced
            .iter()
            .filter_map(|w| match w {
                Write::Snapshot(s) => Some(s.index),
                _ => None,
            })
            .fold(self.durable.snapshot_index(), Index::max)
    }

    /// The injected bug `snapshot-recorded-before-written`: the log refers to a background
    /// snapshot (and discards the entries it covers) as soon as it is handed out, while its
    /// file is still being written. Until its record (`BackgroundSnapshots::record_snapshot`)
    /// says the file is done, a crash loses the file, and recovery finds the log without the
    /// snapshot or the entries.
    pub fn record_snapshot_before_written(&mut self, snapshot: Snapshot) {
        let index = snapshot.index;
        if index > self.stored_snapshot_index() {
            self.durable
                .apply(Write::Snapshot(snapshot))
                .expect("a snapshot write never breaks the log's contiguity");
            self.snapshot_file_pending = Some(index);
        }
    }

    /// Power loss at an arbitrary moment: unsynced writes are lost.
    pub fn crash(&mut self) {
        self.unsynced.clear();
        if let Some(index) = self.snapshot_file_pending.take() {
            if self.durable.snapshot_index() == index {
                // The log names a snapshot file that never became durable.
                self.durable.snapshot = None;
            }
        }
    }

    /// What a restarting node finds.
    pub fn recovered(&self) -> Recovered {
        Recovered {
            hard_state: self.durable.hard_state,
            snapshot: self.durable.snapshot.clone(),
            entries: self.durable.entries.clone(),
        }
    }
}

/// The core's storage contract, for drivers and conformance tests that want it. The simulator's
/// driver itself calls [`Disk::write`] and [`Disk::fsync`] separately, so that it can crash in
/// between.
impl tenure_core::storage::Storage for Disk {
    type Error = StorageError;

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        Ok(self.recovered())
    }

    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), StorageError> {
        self.write(snapshot.cloned(), entries.to_vec(), hard_state.copied());
        self.fsync()
    }

    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), StorageError> {
        // Written, not fsynced: a crash before the next fsync loses it.
        self.write(None, Vec::new(), Some(*hard_state));
        Ok(())
    }

    fn write(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), StorageError> {
        Disk::write(
            self,
            snapshot.cloned(),
            entries.to_vec(),
            hard_state.copied(),
        );
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        self.fsync()
    }
}

/// The simulator's disk takes background snapshots through the same three steps as the
/// write-ahead log (`tenure_core::storage::BackgroundSnapshots`), and its driver finishes them
/// with the server's own function (`tenure_driver::finish_background_snapshot`). The file is
/// the snapshot itself, held by the driver until it is recorded; a crash loses it.
impl tenure_core::storage::BackgroundSnapshots for Disk {
    type Writer = SnapshotWriter;
    type Written = Snapshot;

    fn snapshot_writer(&mut self) -> SnapshotWriter {
        SnapshotWriter
    }

    /// As the write-ahead log does: refused if the stored snapshot (written, durable or not)
    /// is at or past it; otherwise one persist that refers to it, fsynced with everything
    /// written before it.
    fn record_snapshot(&mut self, written: Snapshot) -> Result<(), StorageError> {
        if self.snapshot_file_pending == Some(written.index) {
            // Recorded before it was written (the injected bug); now the file is there too.
            self.snapshot_file_pending = None;
            return Ok(());
        }
        let stored = self.stored_snapshot_index();
        if written.index <= stored {
            return Err(StorageError::SnapshotNotNewer {
                index: written.index,
                stored,
            });
        }
        self.unsynced.push(Write::Snapshot(written));
        self.fsync()
    }

    fn discard_snapshot(&mut self, written: Snapshot) -> Result<(), StorageError> {
        if self.snapshot_file_pending == Some(written.index) {
            // The injected bug already made the log refer to it; the file stays.
            self.snapshot_file_pending = None;
        }
        Ok(())
    }
}

/// [`Disk`]'s writer of background snapshots: the snapshot is durable once written.
#[derive(Debug)]
pub struct SnapshotWriter;

impl tenure_core::storage::SnapshotWriter for SnapshotWriter {
    type Written = Snapshot;
    type Error = std::convert::Infallible;

    fn write(self, snapshot: &Snapshot) -> Result<Snapshot, Self::Error> {
        Ok(snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::types::Payload;

    fn entry(index: Index, term: u64) -> Entry {
        Entry {
            term,
            index,
            payload: Payload::Noop,
        }
    }

    #[test]
    fn a_commit_index_alone_is_not_fsynced_and_a_crash_loses_only_it() {
        use tenure_core::storage::Storage as _;
        let mut disk = Disk::default();
        let hs = |commit| HardState {
            term: 1,
            vote: Some(1),
            commit,
        };
        disk.persist(Some(&hs(1)), None, &[entry(1, 1), entry(2, 1)])
            .expect("persist");
        disk.persist_commit(&hs(2)).expect("persist_commit");
        assert_eq!(disk.recovered().hard_state, hs(1), "not durable yet");
        disk.crash();
        let r = disk.recovered();
        assert_eq!((r.hard_state, r.entries.len()), (hs(1), 2));
        disk.persist_commit(&hs(2)).expect("persist_commit");
        disk.persist(None, None, &[entry(3, 1)]).expect("persist");
        disk.crash();
        assert_eq!(
            disk.recovered().hard_state,
            hs(2),
            "the next persist made it durable"
        );
    }

    #[test]
    fn fsync_makes_writes_durable_and_crash_loses_unsynced() {
        let mut disk = Disk::default();
        disk.write(
            None,
            vec![entry(1, 1), entry(2, 1)],
            Some(HardState {
                term: 1,
                vote: Some(1),
                commit: 0,
            }),
        );
        disk.fsync().expect("contiguous");
        disk.write(None, vec![entry(3, 1)], None);
        disk.crash();
        let r = disk.recovered();
        assert_eq!(r.entries.len(), 2);
        assert_eq!(r.hard_state.vote, Some(1));
    }

    #[test]
    fn later_entries_truncate_conflicting_suffix() {
        let mut disk = Disk::default();
        disk.write(None, vec![entry(1, 1), entry(2, 1), entry(3, 1)], None);
        disk.fsync().expect("contiguous");
        disk.write(None, vec![entry(2, 2)], None);
        disk.fsync().expect("contiguous");
        let r = disk.recovered();
        assert_eq!(r.entries, vec![entry(1, 1), entry(2, 2)]);
    }

    #[test]
    fn a_gap_is_a_storage_error() {
        let mut disk = Disk::default();
        disk.write(None, vec![entry(2, 1)], None);
        assert!(matches!(
            disk.fsync(),
            Err(StorageError::Gap { first: 2, last: 0 })
        ));
    }

    #[test]
    fn torn_crash_keeps_a_prefix() {
        let mut rng = SimRng::new(7);
        for _ in 0..50 {
            let mut disk = Disk::default();
            disk.write(
                None,
                vec![entry(1, 1), entry(2, 1), entry(3, 1)],
                Some(HardState {
                    term: 1,
                    vote: None,
                    commit: 3,
                }),
            );
            disk.crash_torn(&mut rng).expect("contiguous");
            let r = disk.recovered();
            // Entries survive only after the term written before them, and the commit index
            // only after all the entries it covers.
            if !r.entries.is_empty() {
                assert_eq!(r.hard_state.term, 1);
            }
            if r.hard_state.commit == 3 {
                assert_eq!(r.entries.len(), 3);
            }
            for (i, e) in r.entries.iter().enumerate() {
                assert_eq!(e.index, i as u64 + 1);
            }
        }
    }
}
