//! What a node needs from its disk, as a trait shared by every driver: the server's
//! write-ahead log implements it on files, the simulator's disk in memory with crash faults,
//! and [`MemStorage`] plainly. One conformance suite (`tenure_wal::conformance`) runs against
//! every implementation, so they all mean the same thing by "persisted".
//!
//! The trait is declared here, in the pure core, because it is part of the contract written
//! on [`crate::node::Ready`]; nothing here performs IO.

use crate::types::{Entry, HardState, Recovered, Snapshot};

/// Durable storage for one node.
pub trait Storage {
    /// Why storage failed. A failed `persist` leaves the node unable to continue safely:
    /// the driver must stop it rather than send the Ready's messages.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Everything persisted so far, as the node needs it to restart.
    fn recover(&mut self) -> Result<Recovered, Self::Error>;

    /// The core never persists a snapshot at or below the index of the one already stored
    /// (compaction and installs only move forward), so the "other term" case below only
    /// arises for a snapshot from a leader whose log diverged from ours.
    ///
    /// Make one Ready's persistent parts durable, in this order: the snapshot (discarding
    /// stored entries up to its index, or all of them if the stored entry at its index has
    /// another term), then the entries (discarding stored entries at `entries[0].index` and
    /// after, then appending), then the hard state. Returns only once all of it would survive
    /// a crash (fsync).
    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), Self::Error>;

    /// Store `hard_state`, which differs from the stored one in its commit index only
    /// (a Ready whose `must_sync` is false). It need not be durable on return: a crash may
    /// lose it (and anything else not yet durable), never what an earlier call made durable,
    /// and the next [`Storage::persist`] makes it durable along with its own parts. Losing
    /// a commit index is safe: a restarted node learns it again from its log and its leader.
    /// The default makes it durable anyway.
    fn persist_commit(&mut self, hard_state: &HardState) -> Result<(), Self::Error> {
        self.persist(Some(hard_state), None, &[])
    }

    /// The first half of [`Storage::persist`], for pipelined persistence (a leader that
    /// replicates a Ready's entries while its own fsync runs, Raft dissertation §10.2.1):
    /// store the same parts with the same meaning, without waiting for them to be durable.
    /// Until the next [`Storage::sync`] (or `persist`) returns, a crash may lose this write
    /// (whole, or a torn suffix of it as a torn tail), never what an earlier call made
    /// durable. `write` then `sync` is `persist`. The default writes durably at once.
    fn write(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), Self::Error> {
        self.persist(hard_state, snapshot, entries)
    }

    /// Make everything stored so far durable (the fsync that [`Storage::write`] left out).
    /// The default has nothing to do, because its `write` and `persist_commit` are durable.
    fn sync(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// Storage that writes the node's own snapshots off the driver's thread (the server's WAL),
/// so that a large snapshot's write and fsync never stall the node. Three steps:
///
/// 1. [`BackgroundSnapshots::snapshot_writer`], on the driver's thread: reserves a place for
///    one snapshot. Changes nothing stored.
/// 2. [`SnapshotWriter::write`], on any thread, while `persist` calls go on: makes the
///    snapshot's bytes durable, but not yet part of what [`Storage::recover`] returns. A
///    crash before step 3 loses this snapshot, and nothing else: every entry it covers is
///    still stored.
/// 3. On the driver's thread, once the node has decided whether the snapshot is still the
///    newest it knows ([`crate::node::Node::snapshot_taken`]; the node alone decides, because
///    a leader's snapshot it accepted may not be persisted yet):
///    [`BackgroundSnapshots::record_snapshot`] if it adopted it — what
///    `persist(None, Some(snapshot), &[])` does (durable on return; the entries the snapshot
///    covers discarded, or all of them if the stored entry at its index has another term) —
///    or [`BackgroundSnapshots::discard_snapshot`] if it did not.
///
/// A writer that is dropped or fails leaves nothing that `recover` would return.
pub trait BackgroundSnapshots: Storage {
    /// Step 2's worker.
    type Writer: SnapshotWriter<Written = Self::Written>;
    /// What step 2 produced, for step 3.
    type Written: Send + 'static;

    /// Step 1.
    fn snapshot_writer(&mut self) -> Self::Writer;

    /// Step 3 for a snapshot the node adopted: it is now the stored one. A snapshot at or
    /// below the stored one's index cannot have been adopted (the node's snapshot is never
    /// behind the stored one), so it is refused with an error and nothing is written: the
    /// caller broke the contract, and its node must stop.
    fn record_snapshot(&mut self, written: Self::Written) -> Result<(), Self::Error>;

    /// Step 3 for a snapshot the node did not adopt (a newer one, a leader's, got there
    /// first): what was written is removed, and nothing stored changes.
    fn discard_snapshot(&mut self, written: Self::Written) -> Result<(), Self::Error>;
}

/// Writes one snapshot durably, on any thread (step 2 of [`BackgroundSnapshots`]).
pub trait SnapshotWriter: Send + 'static {
    /// What [`BackgroundSnapshots::record_snapshot`] takes.
    type Written: Send + 'static;
    /// Why the write failed; the storage itself is unaffected.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Make `snapshot` durable outside the log.
    fn write(self, snapshot: &Snapshot) -> Result<Self::Written, Self::Error>;
}

/// Apply a Ready's persistent parts to an in-memory image of the disk, with exactly the
/// semantics [`Storage::persist`] documents. Shared by every in-memory storage.
pub fn apply_to_image(
    image: &mut Recovered,
    hard_state: Option<&HardState>,
    snapshot: Option<&Snapshot>,
    entries: &[Entry],
) {
    if let Some(s) = snapshot {
        let keep_tail = image
            .entries
            .iter()
            .any(|e| e.index == s.index && e.term == s.term);
        if keep_tail {
            image.entries.retain(|e| e.index > s.index);
        } else {
            image.entries.clear();
        }
        image.snapshot = Some(s.clone());
    }
    if let Some(first) = entries.first() {
        image.entries.retain(|e| e.index < first.index);
        image.entries.extend(entries.iter().cloned());
    }
    if let Some(hs) = hard_state {
        image.hard_state = *hs;
    }
}

/// Storage that keeps everything in memory: for tests and examples. It fails only when its
/// caller breaks the contract ([`SnapshotNotNewer`]).
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    image: Recovered,
}

impl MemStorage {
    /// An empty disk.
    pub fn new() -> MemStorage {
        MemStorage::default()
    }
}

/// A background snapshot was recorded although the stored snapshot is already at or past
/// its index: the caller recorded one its node did not adopt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a background snapshot at {index} was recorded, but the stored snapshot is at {stored}: only a snapshot the node adopted may be recorded")]
pub struct SnapshotNotNewer {
    /// The background snapshot's index.
    pub index: crate::types::Index,
    /// The stored snapshot's index.
    pub stored: crate::types::Index,
}

impl Storage for MemStorage {
    type Error = SnapshotNotNewer;

    fn recover(&mut self) -> Result<Recovered, Self::Error> {
        Ok(self.image.clone())
    }

    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<(), Self::Error> {
        apply_to_image(&mut self.image, hard_state, snapshot, entries);
        Ok(())
    }
}

/// [`MemStorage`]'s snapshot writer: holds the snapshot until it is recorded.
#[derive(Debug)]
pub struct MemSnapshotWriter;

impl SnapshotWriter for MemSnapshotWriter {
    type Written = Snapshot;
    type Error = std::convert::Infallible;

    fn write(self, snapshot: &Snapshot) -> Result<Snapshot, Self::Error> {
        Ok(snapshot.clone())
    }
}

impl BackgroundSnapshots for MemStorage {
    type Writer = MemSnapshotWriter;
    type Written = Snapshot;

    fn snapshot_writer(&mut self) -> MemSnapshotWriter {
        MemSnapshotWriter
    }

    fn record_snapshot(&mut self, written: Snapshot) -> Result<(), Self::Error> {
        let stored = self.image.snapshot.as_ref().map_or(0, |s| s.index);
        if written.index <= stored {
            return Err(SnapshotNotNewer {
                index: written.index,
                stored,
            });
        }
        apply_to_image(&mut self.image, None, Some(&written), &[]);
        Ok(())
    }

    fn discard_snapshot(&mut self, _written: Snapshot) -> Result<(), Self::Error> {
        Ok(())
    }
}
