//! A node's simulated disk: the server's own write-ahead log ([`tenure_wal::FileStorage`],
//! the same code: format, write order, fsyncs, segment rotation, compaction, background
//! snapshot files, recovery from a torn tail) over an in-memory file system
//! ([`tenure_wal::MemFs`]) that the simulator crashes.
//!
//! A crash at an arbitrary moment ([`Disk::crash`]) loses whatever was not fsynced, as a power
//! loss does. A crash *between write and fsync* ([`Disk::crash_torn`]) lets the file system
//! keep a random part of the unsynced bytes (a prefix, sometimes as zeros) and a random prefix
//! of the directory changes not yet fsynced; the log must then recover to the state after some
//! persist it wrote, never less than the last one it acknowledged. A restart opens the log
//! again ([`Disk::open`]), repairs a torn tail exactly as a server would, and hands the node
//! what it recovered.
//!
//! On top, the disk checks what a node asks it to write (entries contiguous, no gap after the
//! log), so that a simulator bug surfaces as an error rather than an odd log.

use std::path::{Path, PathBuf};

use tenure_core::storage::Storage as _;
use tenure_core::types::{Entry, HardState, Index, Recovered, Snapshot};
use tenure_wal::{
    CrashChoices, CrashReport, FileSnapshotWriter, FileStorage, LoseEverythingUnsynced, MemFs,
    WalError, WalOptions, WrittenSnapshot,
};

use crate::rng::SimRng;

/// A broken storage contract (the node asked to persist something inconsistent), or the log
/// refused.
#[derive(Debug, thiserror::Error)]
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
    /// The write-ahead log failed or refused (a background snapshot not newer than the stored
    /// one, a log that does not recover, ...).
    #[error(transparent)]
    Wal(#[from] WalError),
}

/// What a crash between write and fsync left behind, for the trace.
pub type TornWrite = CrashReport;

/// Segments small enough that a simulated run rotates and compacts them all the time.
const SEGMENT_BYTES: u64 = 16 << 10;

/// A node's disk.
#[derive(Debug)]
pub struct Disk {
    fs: MemFs,
    options: WalOptions,
    /// The open log while the node's process runs; `None` from a crash to the next open.
    log: Option<FileStorage<MemFs>>,
    /// What the last open repaired, for the trace.
    repaired: Option<String>,
}

impl Default for Disk {
    fn default() -> Disk {
        Disk::new(WalOptions::default())
    }
}

/// The log's directory on the simulated file system (one file system per node).
fn dir() -> PathBuf {
    PathBuf::from("/var/lib/tenure")
}

/// A crash's choices, drawn from the run's generator.
struct RandomLoss<'a>(&'a mut SimRng);

impl CrashChoices for RandomLoss<'_> {
    fn unsynced_bytes(&mut self, _: &Path, unsynced: usize) -> (usize, bool) {
        let keep = match self.0.below(4) {
            0 => 0,
            1 => unsynced,
            _ => self.0.below(unsynced as u64 + 1) as usize,
        };
        (keep, self.0.chance(0.1))
    }

    fn directory_changes(&mut self, pending: usize) -> usize {
        self.0.below(pending as u64 + 1) as usize
    }
}

impl Disk {
    /// An empty disk, its log open, with `options` but small segments.
    pub fn new(options: WalOptions) -> Disk {
        let options = WalOptions {
            segment_bytes_max: SEGMENT_BYTES,
            ..options
        };
        let mut disk = Disk {
            fs: MemFs::new(),
            options,
            log: None,
            repaired: None,
        };
        disk.open().expect("an empty log opens");
        disk
    }

    /// Options for `--inject-bug snapshot-recorded-before-written`: the log records a
    /// background snapshot whose file was never made durable (the write-ahead log's own test
    /// switch: its writer skips the fsyncs). `None` in a build without the `inject-bugs`
    /// feature.
    pub fn options_recording_snapshots_early() -> Option<WalOptions> {
        let mut options = WalOptions::default();
        options
            .inject_snapshot_file_not_durable()
            .then_some(options)
    }

    /// Opens the log (again, after a crash), repairing a torn tail as a server would, and
    /// returns what it holds.
    pub fn open(&mut self) -> Result<Recovered, StorageError> {
        self.log = None;
        let mut log = FileStorage::open_in(self.fs.clone(), &dir(), self.options)?;
        self.repaired = log.repaired().map(str::to_string);
        let recovered = log.recover()?;
        self.log = Some(log);
        Ok(recovered)
    }

    /// What the last open cut from a torn tail, if anything.
    pub fn repaired(&self) -> Option<&str> {
        self.repaired.as_deref()
    }

    fn log(&mut self) -> &mut FileStorage<MemFs> {
        self.log
            .as_mut()
            .expect("the disk is written only while its node runs (opened since its crash)")
    }

    /// The entries are in order and continue the log (written, durable or not) without a
    /// gap. With a snapshot in the same write, the end is the snapshot's index or the log's
    /// (whether it keeps the tail is the log's decision; this check only needs a bound).
    fn check(
        &mut self,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), StorageError> {
        for pair in entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(StorageError::NotContiguous(pair[1].index));
            }
        }
        if let Some(first) = entries.first() {
            let last = self.log().last_index();
            let end = snapshot.map_or(last, |s| s.index.max(last));
            if first.index > end + 1 {
                return Err(StorageError::Gap {
                    first: first.index,
                    last: end,
                });
            }
        }
        Ok(())
    }

    /// Writes the persistent parts of a Ready without the fsync (a persist with a snapshot
    /// is fsynced anyway, as the log does).
    pub fn write(
        &mut self,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
        hard_state: Option<&HardState>,
    ) -> Result<(), StorageError> {
        self.check(snapshot, entries)?;
        Ok(self.log().write(hard_state, snapshot, entries)?)
    }

    /// Makes every write durable.
    pub fn fsync(&mut self) -> Result<(), StorageError> {
        Ok(self.log().sync()?)
    }

    /// Power loss between write and fsync: the file system keeps a random part of what was
    /// not fsynced (see the module documentation).
    pub fn crash_torn(&mut self, rng: &mut SimRng) -> TornWrite {
        self.log = None;
        self.fs.crash(&mut RandomLoss(rng))
    }

    /// Power loss at an arbitrary moment: whatever was not fsynced is lost.
    pub fn crash(&mut self) {
        self.log = None;
        self.fs.crash(&mut LoseEverythingUnsynced);
    }

    /// The process exits while the machine stays up: nothing written is lost.
    pub fn restart(&mut self) {
        self.log = None;
        self.fs.crash(&mut tenure_wal::KeepEverything);
    }

    /// The index of the newest snapshot written, durable or not: what the write-ahead log
    /// holds as its snapshot once a persist (or `write`) has returned.
    pub fn stored_snapshot_index(&mut self) -> Index {
        self.log().snapshot_index()
    }
}

/// The core's storage contract, for drivers and conformance tests that want it. The simulator's
/// driver itself calls [`Disk::write`] and [`Disk::fsync`] separately, so that it can crash in
/// between.
impl tenure_core::storage::Storage for Disk {
    type Error = StorageError;

    fn recover(&mut self) -> Result<Recovered, StorageError> {
        Ok(self.log().recover()?)
    }

    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), StorageError> {
        self.check(snapshot, entries)?;
        Ok(self.log().persist(hard_state, snapshot, entries)?)
    }

    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), StorageError> {
        Ok(self.log().persist_commit(hard_state)?)
    }

    fn write(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), StorageError> {
        Disk::write(self, snapshot, entries, hard_state)
    }

    fn sync(&mut self) -> Result<(), StorageError> {
        self.fsync()
    }
}

/// Background snapshots go through the write-ahead log's own three steps, files and all.
impl tenure_core::storage::BackgroundSnapshots for Disk {
    type Writer = FileSnapshotWriter<MemFs>;
    type Written = WrittenSnapshot;

    fn snapshot_writer(&mut self) -> FileSnapshotWriter<MemFs> {
        self.log().snapshot_writer()
    }

    fn record_snapshot(&mut self, written: WrittenSnapshot) -> Result<(), StorageError> {
        Ok(self.log().record_snapshot(written)?)
    }

    fn discard_snapshot(&mut self, written: WrittenSnapshot) -> Result<(), StorageError> {
        Ok(self.log().discard_snapshot(written)?)
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

    fn hs(commit: Index) -> HardState {
        HardState {
            term: 1,
            vote: Some(1),
            commit,
        }
    }

    #[test]
    fn a_commit_index_alone_is_not_fsynced_and_a_crash_loses_only_it() {
        let mut disk = Disk::default();
        disk.persist(Some(&hs(1)), None, &[entry(1, 1), entry(2, 1)])
            .expect("persist");
        disk.persist_commit(&hs(2)).expect("persist_commit");
        disk.crash();
        let r = disk.open().expect("reopen");
        assert_eq!((r.hard_state, r.entries.len()), (hs(1), 2));
        disk.persist_commit(&hs(2)).expect("persist_commit");
        disk.persist(None, None, &[entry(3, 1)]).expect("persist");
        disk.crash();
        assert_eq!(
            disk.open().expect("reopen").hard_state,
            hs(2),
            "the next persist made it durable"
        );
    }

    #[test]
    fn fsync_makes_writes_durable_and_crash_loses_unsynced() {
        let mut disk = Disk::default();
        disk.write(None, &[entry(1, 1), entry(2, 1)], Some(&hs(0)))
            .expect("write");
        disk.fsync().expect("fsync");
        disk.write(None, &[entry(3, 1)], None).expect("write");
        disk.crash();
        let r = disk.open().expect("reopen");
        assert_eq!(r.entries.len(), 2);
        assert_eq!(r.hard_state.vote, Some(1));
    }

    #[test]
    fn a_gap_or_a_reordered_batch_is_a_storage_error() {
        let mut disk = Disk::default();
        assert!(matches!(
            disk.write(None, &[entry(2, 1)], None),
            Err(StorageError::Gap { first: 2, last: 0 })
        ));
        assert!(matches!(
            disk.write(None, &[entry(1, 1), entry(3, 1)], None),
            Err(StorageError::NotContiguous(3))
        ));
    }

    #[test]
    fn a_torn_crash_recovers_a_whole_persist_never_a_part() {
        let mut rng = SimRng::new(7);
        let mut torn = 0;
        for _ in 0..200 {
            let mut disk = Disk::default();
            disk.persist(Some(&hs(0)), None, &[entry(1, 1)])
                .expect("persist");
            let batch: Vec<Entry> = (2..=40).map(|i| entry(i, 1)).collect();
            disk.write(None, &batch, Some(&hs(40))).expect("write");
            let report = disk.crash_torn(&mut rng);
            torn += usize::from(report.kept_bytes > 0 && report.kept_bytes < report.unsynced_bytes);
            let r = disk.open().expect("a torn tail is repaired");
            match r.entries.len() {
                1 => assert_eq!(r.hard_state, hs(0)),
                40 => assert_eq!(r.hard_state, hs(40)),
                n => panic!("{n} entries: half a persist survived"),
            }
        }
        assert!(torn > 20, "only {torn} crashes tore the write");
    }
}
