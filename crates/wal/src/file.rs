//! [`FileStorage`]: the write-ahead log and snapshots on files, with fsync.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::storage::{BackgroundSnapshots, SnapshotWriter, Storage};
use tenure_core::types::{Entry, HardState, Index, Recovered, Snapshot, Term};

use crate::error::{Result, WalError};
use crate::fs::{FileSystem, LogFile, OsFs};
use crate::options::WalOptions;
use crate::record::{self, kind, PersistPartRef, SegmentHeader, SnapOp, SnapRef, SnapshotFileRef};
use crate::replay::{self, segment_name, snapshot_name, Repair, TMP_SUFFIX};
use crate::tracked::{Slot, TrackedLog};

/// How long the log's fsyncs took, for the server's fsync-latency metric.
///
/// Counts the one `fdatasync` of the segment that every non-empty
/// [`Storage::persist`] ends with: the wait a Ready pays before its messages may leave
/// ([`Storage::persist_commit`] writes without one; the fsync a rotation gives its records
/// is counted too). Snapshot files and directory fsyncs are not included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsyncStats {
    /// Number of persist fsyncs since the storage was opened.
    pub count: u64,
    /// Their total duration (divide by `count` for the mean).
    pub total: Duration,
    /// The latest one.
    pub last: Duration,
    /// The slowest one.
    pub max: Duration,
    /// Bytes written to segments by persists since the storage was opened.
    pub bytes_written: u64,
}

/// The crash-safe implementation of [`Storage`] on a directory of files. See the crate docs
/// for the format and the recovery rules.
///
/// Invariant: `hard_state`, `snapshot`, `entries` and `persist_seq` describe exactly what
/// replaying the directory would give (they are updated only after an fsync returned).
/// Invariant: `active_seq` is the newest segment and the only one written to.
///
/// All of its IO goes through `F` ([`OsFs`] in a server; the simulator's disk is the same
/// code over [`MemFs`](crate::MemFs), which it crashes).
#[derive(Debug)]
pub struct FileStorage<F: FileSystem = OsFs> {
    fs: F,
    dir: PathBuf,
    options: WalOptions,
    /// Held open for its advisory lock; closing it releases the directory. Shared with the
    /// [`FileSnapshotWriter`]s handed out, so that the directory stays locked (no other open
    /// removes their temporary file or reuses their file number) until they are done.
    lock: Arc<F::Lock>,
    /// Tells this handle's [`WrittenSnapshot`]s from another open's.
    handle: u64,
    /// The newest segment, opened for appending.
    active: F::File,
    active_seq: u64,
    /// Length of the active segment, to know when to rotate.
    active_bytes: u64,
    /// Every segment on disk, so that compaction knows what to remove.
    segments: BTreeSet<u64>,
    hard_state: HardState,
    snapshot: Option<SnapRef>,
    /// Positions of stored entries: decides whether a snapshot keeps the tail, and which
    /// segments compaction may remove.
    entries: TrackedLog<()>,
    persist_seq: u64,
    next_snapshot_seq: u64,
    /// What `open` read, handed out by the first `recover` so that startup reads once.
    recovered: Option<Recovered>,
    /// What recovery repaired, for the operator's log.
    repaired: Option<String>,
    /// Set when a write or fsync failed: the disk's content is then unknown.
    poisoned: Option<String>,
    fsync: FsyncStats,
    /// The active segment holds bytes written since its last fsync (a commit index stored
    /// by `persist_commit`): synced before the segment is left behind by a rotation, so
    /// that only the newest segment's tail can ever be lost.
    unsynced: bool,
    /// The thread removing the files the last recorded background snapshot made dead (see
    /// [`FileStorage::finish_removals`]).
    removals: Option<std::thread::JoinHandle<()>>,
    /// With [`WalOptions::bug_discard_before_record`] (tests only): the background snapshot
    /// a writer finished, which the next persist refers to before it is recorded.
    #[cfg(feature = "inject-bugs")]
    bug_written_early: Arc<std::sync::Mutex<Option<SnapRef>>>,
}

/// Numbers the handles `open` makes, for [`FileStorage::record_snapshot`]'s check.
static HANDLES: AtomicU64 = AtomicU64::new(1);

/// The snapshot part of one persist: the file the log will refer to, and its bytes unless a
/// [`FileSnapshotWriter`] wrote that file already.
struct SnapshotPart {
    snap: SnapRef,
    bytes: Option<Vec<u8>>,
}

impl FileStorage {
    /// Open (or create) the log in `dir`: take the directory's lock, replay it, cut a torn
    /// tail, and remove leftovers of interrupted writes. Fails with [`WalError::Corrupt`] or
    /// [`WalError::UnsupportedVersion`] without changing anything when the log is damaged
    /// anywhere but a torn tail, and with [`WalError::Locked`] when another process has it.
    pub fn open(dir: &Path, options: WalOptions) -> Result<FileStorage> {
        FileStorage::open_in(OsFs, dir, options)
    }
}

impl<F: FileSystem> FileStorage<F> {
    /// [`FileStorage::open`] on the file system `fs`.
    pub fn open_in(fs: F, dir: &Path, options: WalOptions) -> Result<FileStorage<F>> {
        options.validate()?;
        fs.prepare_dir(dir)?;
        let lock = fs.lock_dir(dir)?;
        let replayed = replay::replay(&fs, dir, &options)?;

        // Nothing below runs unless the whole directory replayed, so a damaged log is left
        // exactly as found.
        let mut dir_changed = false;
        let repaired = match &replayed.repair {
            None => None,
            Some(Repair::Truncate { path, len, why }) => {
                fs.truncate(path, *len)
                    .map_err(WalError::io("truncate", path))?;
                Some(format!(
                    "cut a torn write at the end of {} at byte {len}: {why}",
                    path.display()
                ))
            }
            Some(Repair::Remove { path, why, .. }) => {
                fs.remove(path).map_err(WalError::io("remove", path))?;
                dir_changed = true;
                Some(format!(
                    "removed {}, whose header was torn while it was created: {why}",
                    path.display()
                ))
            }
        };
        for path in &replayed.listing.temporaries {
            fs.remove(path).map_err(WalError::io("remove", path))?;
            dir_changed = true;
        }
        let current_snapshot = replayed.snapshot_ref.map(|s| s.file_seq);
        for (&seq, path) in &replayed.listing.snapshots {
            if Some(seq) != current_snapshot {
                fs.remove(path).map_err(WalError::io("remove", path))?;
                dir_changed = true;
            }
        }
        let next_snapshot_seq = replayed
            .listing
            .snapshots
            .keys()
            .next_back()
            .copied()
            .max(current_snapshot)
            .map_or(1, |s| s + 1);

        let entries = replayed.entries.positions();
        let mut segments: BTreeSet<u64> = replayed.segment_bytes.keys().copied().collect();
        let (active, active_seq, active_bytes) = match replayed.segment_bytes.last_key_value() {
            Some((&seq, &bytes)) => {
                let path = dir.join(segment_name(seq));
                let file = fs.open_append(&path).map_err(WalError::io("open", &path))?;
                (file, seq, bytes)
            }
            None => {
                // A new log (or one whose only segment was torn while being created).
                let seq = 1;
                let header = SegmentHeader {
                    segment_seq: seq,
                    persist_seq: replayed.persist_seq,
                    hard_state: replayed.hard_state,
                    snapshot: replayed.snapshot_ref,
                };
                let mut buf = Vec::new();
                encode_header(&mut buf, &header, &options)?;
                let path = dir.join(segment_name(seq));
                let mut file = fs
                    .create_new(&path)
                    .map_err(WalError::io("create", &path))?;
                file.write_all(&buf).map_err(WalError::io("write", &path))?;
                file.sync_data().map_err(WalError::io("fsync", &path))?;
                segments.insert(seq);
                dir_changed = true;
                (file, seq, buf.len() as u64)
            }
        };

        let recovered = Recovered {
            hard_state: replayed.hard_state,
            snapshot: replayed.snapshot,
            entries: replayed.entries.into_values().collect(),
        };
        let mut storage = FileStorage {
            fs,
            dir: dir.to_path_buf(),
            options,
            lock: Arc::new(lock),
            handle: HANDLES.fetch_add(1, Ordering::Relaxed),
            active,
            active_seq,
            active_bytes,
            segments,
            hard_state: recovered.hard_state,
            snapshot: replayed.snapshot_ref,
            entries,
            persist_seq: replayed.persist_seq,
            next_snapshot_seq,
            recovered: Some(recovered),
            repaired,
            poisoned: None,
            fsync: FsyncStats::default(),
            unsynced: false,
            removals: None,
            #[cfg(feature = "inject-bugs")]
            bug_written_early: Arc::default(),
        };
        // A crash between a snapshot and its compaction leaves dead segments behind.
        dir_changed |= storage.remove_dead_segments()?;
        if dir_changed {
            storage.sync_dir()?;
        }
        Ok(storage)
    }

    /// Fsync the directory.
    fn sync_dir(&self) -> Result<()> {
        self.fs
            .sync_dir(&self.dir)
            .map_err(WalError::io("fsync directory", &self.dir))
    }

    /// The file system it works on.
    pub fn file_system(&self) -> &F {
        &self.fs
    }

    /// The directory this storage owns.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The options it was opened with.
    pub fn options(&self) -> &WalOptions {
        &self.options
    }

    /// Fsync timings since open.
    pub fn fsync_stats(&self) -> FsyncStats {
        self.fsync
    }

    /// What `open` had to repair (a torn write cut off the end of the log), for the
    /// operator's log; `None` after a clean shutdown or crash between persists.
    pub fn repaired(&self) -> Option<&str> {
        self.repaired.as_deref()
    }

    /// Whether the log holds anything: a term, vote or commit index, a snapshot, or entries.
    pub fn holds_state(&self) -> bool {
        self.hard_state != HardState::default()
            || self.snapshot.is_some()
            || self.entries.last().is_some()
    }

    /// The stored snapshot's index (written, durable or not), 0 without one.
    pub fn snapshot_index(&self) -> Index {
        self.snapshot.map_or(0, |s| s.index)
    }

    /// The last stored entry's index (written, durable or not), or the snapshot's without
    /// entries after it.
    pub fn last_index(&self) -> Index {
        self.entries.last().unwrap_or(0).max(self.snapshot_index())
    }

    /// Sequence numbers of the segment files on disk, oldest first.
    pub fn segments(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().copied()
    }

    /// Encode a persist into records, checking every limit, before anything is written.
    fn encode_persist(
        &self,
        persist_seq: u64,
        snapshot: Option<SnapOp>,
        hard_state: Option<&HardState>,
        entries: &[Entry],
    ) -> Result<Vec<u8>> {
        let entry_max = self.options.entry_bytes_max();
        let mut ranges = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (i, entry) in entries.iter().enumerate() {
            let n = record::body_bytes(entry);
            if n > entry_max {
                return Err(WalError::EntryTooLarge {
                    index: entry.index,
                    bytes: n,
                    max: entry_max,
                });
            }
            if bytes + n > entry_max && i > start {
                ranges.push(start..i);
                (start, bytes) = (i, 0);
            }
            bytes += n;
        }
        ranges.push(start..entries.len());

        let mut out = Vec::with_capacity(
            usize::try_from(bytes).unwrap_or(0) + ranges.len() * record::PART_OVERHEAD_BYTES_MAX,
        );
        let parts = ranges.len();
        for (part, range) in ranges.into_iter().enumerate() {
            let last = part + 1 == parts;
            let chunk = &entries[range];
            let body = PersistPartRef {
                persist_seq,
                part: u32::try_from(part)
                    .expect("parts are fewer than entries, themselves in memory"),
                last,
                snapshot: if part == 0 { snapshot } else { None },
                hard_state: if last { hard_state.copied() } else { None },
                entries_start: part == 0,
                entries: chunk,
            };
            record::encode(
                &mut out,
                kind::PERSIST,
                &body,
                self.options.record_bytes_max.into(),
            )
            .map_err(|bytes| WalError::EntryTooLarge {
                index: chunk.first().map_or(0, |e| e.index),
                bytes,
                max: entry_max,
            })?;
        }
        Ok(out)
    }

    /// Write one encoded persist (after its snapshot file, if any), fsynced unless `sync` is
    /// false ([`Storage::write`], [`Storage::persist_commit`]); start a new segment first if
    /// the active one is full. Any error here poisons the storage (the caller's business).
    fn write_persist(
        &mut self,
        snapshot_file: Option<(u64, &[u8])>,
        wal: &[u8],
        sync: bool,
    ) -> Result<()> {
        if let Some((seq, bytes)) = snapshot_file {
            write_snapshot_file(&self.fs, &self.dir, seq, bytes, true)?;
        }
        let rotate = self.active_bytes >= self.options.segment_bytes_max;
        if rotate && self.unsynced {
            let path = self.dir.join(segment_name(self.active_seq));
            let took = timed_sync(&self.active, &path)?;
            self.note_fsync(took, 0);
            self.unsynced = false;
        }
        if rotate {
            let seq = self.active_seq + 1;
            let header = SegmentHeader {
                segment_seq: seq,
                persist_seq: self.persist_seq,
                hard_state: self.hard_state,
                snapshot: self.snapshot,
            };
            let mut buf = Vec::with_capacity(wal.len() + 128);
            encode_header(&mut buf, &header, &self.options)?;
            buf.extend_from_slice(wal);
            let path = self.dir.join(segment_name(seq));
            let mut file = self
                .fs
                .create_new(&path)
                .map_err(WalError::io("create", &path))?;
            self.segments.insert(seq);
            file.write_all(&buf).map_err(WalError::io("write", &path))?;
            let took = timed_sync(&file, &path)?;
            self.sync_dir()?;
            self.note_fsync(took, buf.len());
            self.active = file;
            self.active_seq = seq;
            self.active_bytes = buf.len() as u64;
        } else {
            let path = self.dir.join(segment_name(self.active_seq));
            self.active
                .write_all(wal)
                .map_err(WalError::io("write", &path))?;
            if sync {
                let took = timed_sync(&self.active, &path)?;
                self.note_fsync(took, wal.len());
                self.unsynced = false;
            } else {
                self.fsync.bytes_written += wal.len() as u64;
                self.unsynced = true;
            }
            self.active_bytes += wal.len() as u64;
        }
        Ok(())
    }

    fn note_fsync(&mut self, took: Duration, bytes: usize) {
        self.fsync.count += 1;
        self.fsync.total += took;
        self.fsync.last = took;
        self.fsync.max = self.fsync.max.max(took);
        self.fsync.bytes_written += bytes as u64;
    }

    /// Forget segments that hold no stored entry and precede the first one that does, and
    /// return their numbers for removal. Replay can start from any segment's header, so
    /// only the state in later segments matters.
    fn dead_segments(&mut self) -> Vec<u64> {
        let first_live = self
            .entries
            .first_segment()
            .unwrap_or(self.active_seq)
            .min(self.active_seq);
        let dead: Vec<u64> = self.segments.range(..first_live).copied().collect();
        for seq in &dead {
            self.segments.remove(seq);
        }
        dead
    }

    /// Remove the dead segments now. Returns whether a file was removed (the caller fsyncs
    /// the directory).
    fn remove_dead_segments(&mut self) -> Result<bool> {
        let dead = self.dead_segments();
        for seq in &dead {
            let path = self.dir.join(segment_name(*seq));
            self.fs
                .remove(&path)
                .map_err(WalError::io("remove", &path))?;
        }
        Ok(!dead.is_empty())
    }

    /// Wait until the files that compaction after a recorded background snapshot removes
    /// on a thread of its own are gone. Dropping the storage waits too.
    pub fn finish_removals(&mut self) {
        if let Some(thread) = self.removals.take() {
            let _ = thread.join();
        }
    }

    /// `persist`, `write` and `persist_commit`: refused once poisoned and nothing for
    /// nothing; else encode the snapshot file (if any) under the next file number, then
    /// [`FileStorage::append_persist`], with the fsync if `sync`.
    fn persist_inner(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
        sync: bool,
    ) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(WalError::Poisoned(why.clone()));
        }
        if hard_state.is_none() && snapshot.is_none() && entries.is_empty() {
            return Ok(());
        }
        // Encode and check everything first: input over a limit fails with nothing written.
        let snapshot = match snapshot {
            None => None,
            Some(s) => {
                let seq = self.next_snapshot_seq;
                let bytes = encode_snapshot_file(seq, s, &self.options)?;
                Some(SnapshotPart {
                    snap: SnapRef {
                        file_seq: seq,
                        index: s.index,
                        term: s.term,
                    },
                    bytes: Some(bytes),
                })
            }
        };
        #[cfg(feature = "inject-bugs")]
        let snapshot = snapshot.or_else(|| self.bug_take_written_early());
        self.append_persist(hard_state, snapshot, entries, sync, Removal::Now)
    }

    /// Append one persist: the snapshot part (its file written first if the part brings the
    /// bytes; a file a [`FileSnapshotWriter`] wrote is only referred to), the entries, the
    /// hard state; then, after a snapshot, compaction. Shared by every persist and by
    /// [`BackgroundSnapshots::record_snapshot`]. A failure once anything was written poisons
    /// the storage.
    fn append_persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<SnapshotPart>,
        entries: &[Entry],
        sync: bool,
        removal: Removal,
    ) -> Result<()> {
        let op = snapshot.as_ref().map(|part| SnapOp {
            snap: part.snap,
            keep_tail: self.entries.contains(part.snap.index, part.snap.term),
        });
        let persist_seq = self.persist_seq + 1;
        let wal = self.encode_persist(persist_seq, op, hard_state, entries)?;

        self.recovered = None;
        if let Some(op) = op {
            self.next_snapshot_seq = self.next_snapshot_seq.max(op.snap.file_seq + 1);
        }
        let file = snapshot
            .as_ref()
            .and_then(|part| Some((part.snap.file_seq, part.bytes.as_deref()?)));
        // A persist with a snapshot is fsynced even for `write`: compaction below removes the
        // previous snapshot file and the covered segments, which the log must no longer need.
        let written = self.write_persist(file, &wal, sync || op.is_some());
        if let Err(e) = written {
            self.poisoned = Some(e.to_string());
            return Err(e);
        }

        // Written (and durable unless `sync` was false): the in-memory picture follows, in
        // persist's order.
        let previous_snapshot = self.snapshot;
        if let Some(op) = op {
            self.entries.apply_snapshot(op.snap.index, op.keep_tail);
            self.snapshot = Some(op.snap);
        }
        if let Some(first) = entries.first() {
            self.entries.truncate_from(first.index);
        }
        for entry in entries {
            self.entries.push(Slot {
                index: entry.index,
                term: entry.term,
                segment: self.active_seq,
                value: (),
            });
        }
        if let Some(hs) = hard_state {
            self.hard_state = *hs;
        }
        self.persist_seq = persist_seq;

        // Compaction: the old snapshot file and the segments the new snapshot covers.
        if op.is_some() {
            let cleaned = self.compact(previous_snapshot, removal);
            if let Err(e) = cleaned {
                self.poisoned = Some(e.to_string());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Remove the previous snapshot file (if it is not the current one) and the segments the
    /// log no longer needs, then fsync the directory: now, or on a thread of its own. Nothing
    /// refers to these files any more, and `open` removes any that a crash (or a failed
    /// removal in the background) left behind, so when they go is only a matter of space.
    fn compact(&mut self, previous_snapshot: Option<SnapRef>, removal: Removal) -> Result<()> {
        let mut dead = Vec::new();
        if let Some(old) = previous_snapshot {
            if Some(old.file_seq) != self.snapshot.map(|s| s.file_seq) {
                dead.push(self.dir.join(snapshot_name(old.file_seq)));
            }
        }
        for seq in self.dead_segments() {
            dead.push(self.dir.join(segment_name(seq)));
        }
        if dead.is_empty() {
            return Ok(());
        }
        if removal == Removal::Background && self.fs.removes_in_background() {
            self.finish_removals();
            let (fs, dir, lock, paths) = (
                self.fs.clone(),
                self.dir.clone(),
                Arc::clone(&self.lock),
                dead.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name("tenure-wal-removal".into())
                .spawn(move || {
                    // Holding the lock: the directory is not opened again until this is done.
                    let _lock = lock;
                    let _ = remove_files(&fs, &dir, &paths);
                });
            if let Ok(thread) = spawned {
                self.removals = Some(thread);
                return Ok(());
            }
        }
        remove_files(&self.fs, &self.dir, &dead)
    }
}

/// When compaction removes the files it made dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    /// Before the persist returns.
    Now,
    /// On a thread of its own: for [`BackgroundSnapshots::record_snapshot`], whose caller
    /// is the driver's thread (unlinking a few 64 MiB segments and a large snapshot file
    /// takes about 100 ms).
    Background,
}

/// Remove `paths`, then fsync `dir`.
fn remove_files<F: FileSystem>(fs: &F, dir: &Path, paths: &[PathBuf]) -> Result<()> {
    for path in paths {
        fs.remove(path).map_err(WalError::io("remove", path))?;
    }
    fs.sync_dir(dir)
        .map_err(WalError::io("fsync directory", dir))
}

impl<F: FileSystem> Drop for FileStorage<F> {
    fn drop(&mut self) {
        self.finish_removals();
    }
}

impl<F: FileSystem> Storage for FileStorage<F> {
    type Error = WalError;

    /// What the directory holds. The first call after [`FileStorage::open`] returns what
    /// open replayed; later calls replay the directory again.
    fn recover(&mut self) -> Result<Recovered> {
        if let Some(why) = &self.poisoned {
            return Err(WalError::Poisoned(why.clone()));
        }
        if let Some(recovered) = self.recovered.take() {
            return Ok(recovered);
        }
        // Replay reads the directory: not while dead files are still being removed.
        self.finish_removals();
        let replayed = replay::replay(&self.fs, &self.dir, &self.options)?;
        if let Some(repair) = replayed.repair {
            let (path, why) = match repair {
                Repair::Truncate { path, why, .. } | Repair::Remove { path, why, .. } => {
                    (path, why)
                }
            };
            return Err(WalError::corrupt(
                path,
                0,
                format!(
                    "{why}: a torn write in a log that this process holds open and fsynced \
                     (was the directory changed by something else?)"
                ),
            ));
        }
        Ok(Recovered {
            hard_state: replayed.hard_state,
            snapshot: replayed.snapshot,
            entries: replayed.entries.into_values().collect(),
        })
    }

    fn persist(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<()> {
        self.persist_inner(hard_state, snapshot, entries, true)
    }

    /// Appends the hard state's record without an fsync; the next persist's fsync (or the
    /// rotation that leaves this segment behind) makes it durable. A crash before that cuts
    /// it as a torn tail at the next open.
    fn persist_commit(&mut self, hard_state: &HardState) -> Result<()> {
        self.persist_inner(Some(hard_state), None, &[], false)
    }

    /// Appends the persist's records without the fsync, so that a leader can replicate the
    /// entries while [`Storage::sync`] runs. Unsynced bytes live only in the active segment's
    /// tail (a rotation fsyncs the segment it leaves), so a crash before the sync cuts them
    /// as a torn tail at the next open, as it would a `persist` interrupted before its fsync.
    fn write(
        &mut self,
        hard_state: Option<&HardState>,
        snapshot: Option<&Snapshot>,
        entries: &[Entry],
    ) -> Result<()> {
        self.persist_inner(hard_state, snapshot, entries, false)
    }

    /// One `fdatasync` of the active segment if it holds unsynced bytes (counted in
    /// [`FsyncStats`]); nothing otherwise.
    fn sync(&mut self) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(WalError::Poisoned(why.clone()));
        }
        if !self.unsynced {
            return Ok(());
        }
        let path = self.dir.join(segment_name(self.active_seq));
        match timed_sync(&self.active, &path) {
            Ok(took) => {
                self.note_fsync(took, 0);
                self.unsynced = false;
                Ok(())
            }
            Err(e) => {
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }
}

/// [`FileStorage`]'s writer of background snapshots (step 2 of [`BackgroundSnapshots`]):
/// the directory, the file number [`BackgroundSnapshots::snapshot_writer`] reserved and the
/// limits; nothing borrowed from the storage. It shares the directory's lock, so the
/// directory cannot be opened again until the writer is done or dropped.
#[derive(Debug)]
pub struct FileSnapshotWriter<F: FileSystem = OsFs> {
    fs: F,
    dir: PathBuf,
    seq: u64,
    options: WalOptions,
    handle: u64,
    _lock: Arc<F::Lock>,
    /// With [`WalOptions::bug_discard_before_record`]: where to hand the file to the log.
    #[cfg(feature = "inject-bugs")]
    bug_written_early: Option<Arc<std::sync::Mutex<Option<SnapRef>>>>,
}

/// A snapshot file that a [`FileSnapshotWriter`] wrote and made durable, not yet referred to
/// by the log: what [`BackgroundSnapshots::record_snapshot`] takes.
#[derive(Debug)]
pub struct WrittenSnapshot {
    snap: SnapRef,
    handle: u64,
}

impl WrittenSnapshot {
    /// The snapshot's index.
    pub fn index(&self) -> Index {
        self.snap.index
    }

    /// The snapshot's term.
    pub fn term(&self) -> Term {
        self.snap.term
    }
}

impl<F: FileSystem> SnapshotWriter for FileSnapshotWriter<F> {
    type Written = WrittenSnapshot;
    type Error = WalError;

    /// Writes `snap-<seq>.snap` exactly as a persist does (the same function): encoded and
    /// checked against `snapshot_bytes_max` first ([`WalError::SnapshotTooLarge`] with nothing
    /// written), then to a temporary file in fdatasynced pieces, renamed, the directory
    /// fsynced. A failure leaves the storage as it was, and no file but possibly the
    /// temporary one, which the next `open` removes.
    fn write(self, snapshot: &Snapshot) -> Result<WrittenSnapshot> {
        let bytes = encode_snapshot_file(self.seq, snapshot, &self.options)?;
        let durable = self.options.snapshot_file_made_durable();
        write_snapshot_file(&self.fs, &self.dir, self.seq, &bytes, durable)?;
        let snap = SnapRef {
            file_seq: self.seq,
            index: snapshot.index,
            term: snapshot.term,
        };
        #[cfg(feature = "inject-bugs")]
        if let Some(early) = &self.bug_written_early {
            *early.lock().expect("held only to swap a value") = Some(snap);
        }
        Ok(WrittenSnapshot {
            snap,
            handle: self.handle,
        })
    }
}

impl<F: FileSystem> BackgroundSnapshots for FileStorage<F> {
    type Writer = FileSnapshotWriter<F>;
    type Written = WrittenSnapshot;

    /// Reserves the next snapshot file number; a snapshot persisted meanwhile (a leader's)
    /// takes a later one. Writes nothing.
    fn snapshot_writer(&mut self) -> FileSnapshotWriter<F> {
        let seq = self.next_snapshot_seq;
        self.next_snapshot_seq += 1;
        FileSnapshotWriter {
            fs: self.fs.clone(),
            dir: self.dir.clone(),
            seq,
            options: self.options,
            handle: self.handle,
            _lock: Arc::clone(&self.lock),
            #[cfg(feature = "inject-bugs")]
            bug_written_early: self
                .options
                .bug_discard_before_record
                .then(|| Arc::clone(&self.bug_written_early)),
        }
    }

    /// A snapshot past the stored one's index (its node adopted it): one persist that refers
    /// to the written file, with `keep_tail` decided now as `persist` decides it, fdatasynced,
    /// then the same compaction as a persist with a snapshot (the previous snapshot file, the
    /// segments it covers wholly), whose files are removed on a thread of their own. A
    /// snapshot at or below the stored one's index is the caller's bug
    /// ([`WalError::SnapshotNotNewer`]): nothing is written, and the file stays until the next
    /// `open` removes it as unreferenced. Any other failure poisons the storage.
    ///
    /// Panics if `written` came from a writer of another handle (the directory reopened in
    /// between, which removed the file as unreferenced).
    fn record_snapshot(&mut self, written: WrittenSnapshot) -> Result<()> {
        self.check_handle(&written)?;
        #[cfg(feature = "inject-bugs")]
        if self.bug_recorded_early(&written) {
            return Ok(());
        }
        let stored = self.snapshot.map_or(0, |s| s.index);
        if written.snap.index <= stored && !self.bug_record_stale_snapshot() {
            return Err(WalError::SnapshotNotNewer {
                index: written.snap.index,
                stored,
            });
        }
        let part = SnapshotPart {
            snap: written.snap,
            bytes: None,
        };
        self.append_persist(None, Some(part), &[], true, Removal::Background)
    }

    /// The node did not adopt the snapshot: its file is removed, and nothing else changes. A
    /// failure to remove it poisons the storage, as any failed change to the directory does.
    fn discard_snapshot(&mut self, written: WrittenSnapshot) -> Result<()> {
        self.check_handle(&written)?;
        #[cfg(feature = "inject-bugs")]
        if self.bug_recorded_early(&written) {
            // The bug already made the log refer to it; the file must stay.
            return Ok(());
        }
        let path = self.dir.join(snapshot_name(written.snap.file_seq));
        if let Err(e) = self.fs.remove(&path) {
            let e = WalError::io("remove", &path)(e);
            self.poisoned = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }
}

impl<F: FileSystem> FileStorage<F> {
    /// A poisoned handle refuses; a snapshot written for another open of the directory is a
    /// bug of the caller's (that open removed the file as unreferenced).
    fn check_handle(&self, written: &WrittenSnapshot) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(WalError::Poisoned(why.clone()));
        }
        assert_eq!(
            written.handle,
            self.handle,
            "a snapshot written for another open of {} (file {})",
            self.dir.display(),
            written.snap.file_seq
        );
        Ok(())
    }
}

/// The injected bugs of the background path (tests only).
impl<F: FileSystem> FileStorage<F> {
    #[cfg(feature = "inject-bugs")]
    fn bug_record_stale_snapshot(&self) -> bool {
        self.options.bug_record_stale_snapshot
    }

    #[cfg(not(feature = "inject-bugs"))]
    fn bug_record_stale_snapshot(&self) -> bool {
        false
    }

    /// [`WalOptions::bug_discard_before_record`]: the snapshot a writer finished, for the
    /// next persist to refer to (unless a later one was stored meanwhile).
    #[cfg(feature = "inject-bugs")]
    fn bug_take_written_early(&mut self) -> Option<SnapshotPart> {
        let snap = self
            .bug_written_early
            .lock()
            .expect("held only to swap a value")
            .take()?;
        (snap.index > self.snapshot.map_or(0, |s| s.index))
            .then_some(SnapshotPart { snap, bytes: None })
    }

    /// [`WalOptions::bug_discard_before_record`]: whether a persist already referred to
    /// `written`, so that recording it has nothing left to do.
    #[cfg(feature = "inject-bugs")]
    fn bug_recorded_early(&mut self, written: &WrittenSnapshot) -> bool {
        if !self.options.bug_discard_before_record {
            return false;
        }
        self.bug_written_early
            .lock()
            .expect("held only to swap a value")
            .take();
        self.snapshot.map(|s| s.file_seq) == Some(written.snap.file_seq)
    }
}

/// A snapshot file's one record, checked against `snapshot_bytes_max` before anything is
/// allocated or written.
fn encode_snapshot_file(seq: u64, snapshot: &Snapshot, options: &WalOptions) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let body = SnapshotFileRef {
        file_seq: seq,
        snapshot,
    };
    let max = u64::from(options.snapshot_bytes_max);
    record::encode(&mut buf, kind::SNAPSHOT_FILE, &body, max).map_err(|bytes| {
        WalError::SnapshotTooLarge {
            index: snapshot.index,
            bytes,
            max,
        }
    })?;
    Ok(buf)
}

/// A snapshot file goes to disk in pieces of at most this size, each fdatasynced before the
/// next is written: the log's own small fsyncs on the same file system then never wait
/// behind a large snapshot's dirty pages (ext4 flushes them with its journal commit).
const SNAPSHOT_PIECE_BYTES: usize = 8 << 20;

/// Write `snap-<seq>.snap` durably, for a persist and for a [`FileSnapshotWriter`] alike: to
/// `snap-<seq>.snap.tmp` in fdatasynced pieces of [`SNAPSHOT_PIECE_BYTES`], fsynced whole,
/// renamed, the directory fsynced (the log will refer to the name). A failure removes the
/// temporary file if it can (else `open` does).
/// (`durable` is false only with the injected bug `bug_snapshot_file_not_durable`.)
fn write_snapshot_file<F: FileSystem>(
    fs: &F,
    dir: &Path,
    seq: u64,
    bytes: &[u8],
    durable: bool,
) -> Result<()> {
    let name = snapshot_name(seq);
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let path = dir.join(name);
    let written = (|| {
        let mut file = fs
            .create_truncate(&tmp)
            .map_err(WalError::io("create", &tmp))?;
        let mut pieces = bytes.chunks(SNAPSHOT_PIECE_BYTES).peekable();
        while let Some(piece) = pieces.next() {
            file.write_all(piece).map_err(WalError::io("write", &tmp))?;
            if pieces.peek().is_some() && durable {
                file.sync_data().map_err(WalError::io("fdatasync", &tmp))?;
            }
        }
        if durable {
            file.sync_all().map_err(WalError::io("fsync", &tmp))?;
        }
        drop(file);
        fs.rename(&tmp, &path).map_err(WalError::io("rename", &tmp))
    })();
    if written.is_err() {
        let _ = fs.remove(&tmp);
    }
    written?;
    if !durable {
        return Ok(());
    }
    fs.sync_dir(dir)
        .map_err(WalError::io("fsync directory", dir))
}

fn encode_header(out: &mut Vec<u8>, header: &SegmentHeader, options: &WalOptions) -> Result<()> {
    record::encode(
        out,
        kind::SEGMENT_HEADER,
        header,
        options.record_bytes_max.into(),
    )
    .map(|_| ())
    .map_err(|bytes| {
        WalError::Options(format!(
            "record_bytes_max ({}) cannot hold a {bytes}-byte segment header",
            options.record_bytes_max
        ))
    })
}

/// Fsync a segment's data (and the size that makes it readable), timed for the metrics.
fn timed_sync(file: &impl LogFile, path: &Path) -> Result<Duration> {
    let started = Instant::now();
    file.sync_data().map_err(WalError::io("fsync", path))?;
    Ok(started.elapsed())
}
