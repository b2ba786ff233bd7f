//! tenure-wal: the crash-safe, on-disk [`Storage`] of a tenure server.
//!
//! [`FileStorage`] keeps one node's Raft state — hard state (term, vote, commit), log
//! entries and the latest snapshot — in a directory, and makes every
//! [`Storage::persist`] durable with one `fdatasync` before it returns, so that the
//! driver may then send the Ready's messages (DESIGN rules 1 and 2: a vote, or an
//! acknowledgement of entries, promises they are on stable storage). Group commit is
//! the caller's business: one Ready, however many entries, is one persist and one fsync.
//! `persist` blocks the calling thread for that fsync; an async driver calls it from a
//! thread that may block.
//!
//! ```no_run
//! use tenure_core::storage::Storage;
//! use tenure_wal::{FileStorage, WalOptions};
//!
//! # fn main() -> tenure_wal::Result<()> {
//! let mut storage = FileStorage::open("/var/lib/tenure/node-1".as_ref(), WalOptions::default())?;
//! let recovered = storage.recover()?; // build the node from this
//! # let ready = tenure_core::node::Ready::default();
//! let p = &ready.persist;
//! storage.persist(p.hard_state.as_ref(), p.snapshot.as_ref(), &p.entries)?;
//! // only now send ready.then.messages
//! # let _ = recovered; Ok(())
//! # }
//! ```
//!
//! The same contract is checked against every implementation (this one, `MemStorage`, the
//! simulator's disk) by the [`conformance`] suite.
//!
//! Every byte goes through a [`FileSystem`]: [`OsFs`] for a server, [`MemFs`] for the
//! simulator and crash tests, an in-memory one whose [`MemFs::crash`] keeps only what a
//! journaling file system guarantees after a power loss (and a chosen part of the rest), so
//! that the simulator runs this very code, write order and recovery included.
//!
//! # On-disk format (version 1)
//!
//! A directory holds:
//!
//! - `LOCK` — an advisory `flock` held while a [`FileStorage`] (or a [`FileSnapshotWriter`]
//!   it handed out) has the directory open; it holds the owner's pid. A second opener gets
//!   [`WalError::Locked`].
//! - `wal-<seq>.log` — log segments, `<seq>` a 20-digit zero-padded counter from 1; no
//!   gaps. Only the newest is appended to; the next persist after it reaches
//!   [`WalOptions::segment_bytes_max`] starts the next one.
//! - `snap-<seq>.snap` — snapshot files, `<seq>` likewise. Only the one the log refers to
//!   is kept.
//! - `*.tmp` — a file being written; removed on open.
//!
//! Every file is a sequence of **records**:
//!
//! ```text
//! record  = len:u32le  crc:u32le  payload[len]       crc = CRC-32C (Castagnoli) of payload
//! payload = version:u8 (=1)  kind:u8  body           body = bincode 1, fixed-width little-endian
//! ```
//!
//! with `2 <= len` and `8 + len <= record_bytes_max` (`snapshot_bytes_max` for snapshot
//! files). Kinds and bodies (field order as listed; `Option` is a 0/1 byte then the value;
//! `Vec` a u64 count then the items; `HardState`, `Entry`, `Snapshot` as `tenure-core`'s
//! serde derives encode them):
//!
//! | kind | body | where |
//! |---|---|---|
//! | 1 segment header | `segment_seq u64, persist_seq u64, hard_state HardState, snapshot Option<SnapRef>` | first record of every segment: the state as of its creation |
//! | 2 persist part | `persist_seq u64, part u32, last bool, snapshot Option<SnapOp>, hard_state Option<HardState>, entries_start bool, entries Vec<Entry>` | all later records of a segment |
//! | 3 snapshot file | `file_seq u64, snapshot Snapshot` | the only record of a `.snap` file |
//!
//! where `SnapRef = (file_seq u64, index u64, term u64)` names a snapshot file and
//! `SnapOp = (snap SnapRef, keep_tail bool)`.
//!
//! One `persist` call is one record, or several consecutive **parts** of one
//! `persist_seq` (numbered from 0, the last flagged `last`) when its entries exceed a
//! record; part 0 carries the snapshot, the last part the hard state. Persists are
//! numbered 1, 2, … without gaps, and a persist never spans segments. A persist is applied
//! only once its last part is read, so a crash mid-persist loses it whole rather than
//! half-applying it.
//!
//! **Replay** starts from the first segment's header (hard state, snapshot reference,
//! persist number; no entries) and applies each complete persist in the order
//! [`Storage::persist`] documents: the snapshot (if `keep_tail`, keep stored entries after
//! its index, else none — decided and recorded when it was written, because the entry it
//! matched may live in a segment compacted away since), then the entries (part with
//! `entries_start`: discard stored entries at its first index and after; then append),
//! then the hard state. The result equals [`tenure_core::storage::apply_to_image`] over
//! every persist ever made; the conformance suite checks this on random sequences. Later
//! segments' headers must agree with the state replayed so far.
//!
//! **Writing a persist:** encode and check every limit (an oversize entry or snapshot fails
//! with nothing written); if there is a snapshot, write `snap-<seq>.snap.tmp` in pieces of
//! at most 8 MiB, each `fdatasync`ed before the next (so that the log's own small fsyncs on
//! the same file system never wait behind a large snapshot's dirty pages), fsync it, rename
//! it, fsync the directory; start a new segment if the active one is full (header and
//! persist in one write); `write` the records; `fdatasync` the segment (plus the directory
//! for a new segment; [`Storage::write`] and [`Storage::persist_commit`] leave this fsync to
//! the next one, except for a persist with a snapshot, which is always fsynced). Then, if
//! there was a snapshot, remove the previous snapshot file and every segment older than the
//! oldest one holding a stored entry, and fsync the directory (**compaction**). A failed
//! write or fsync poisons the handle: every later call fails until the directory is
//! reopened.
//!
//! **A snapshot written in the background** ([`BackgroundSnapshots`]: the node's own
//! snapshots, ~110 MB at a million sessions, whose write and fsync must not stall the
//! driver's thread) takes the same steps, split in three, with no change to the format:
//!
//! 1. [`BackgroundSnapshots::snapshot_writer`] (driver's thread) reserves the next snapshot
//!    file number and writes nothing; a snapshot persisted meanwhile (a leader's) takes a
//!    later number. The [`FileSnapshotWriter`] holds the directory, that number, the limits
//!    and a share of the directory's lock (no other open can remove its temporary file or
//!    reuse its number while it lives).
//! 2. [`FileSnapshotWriter::write`](tenure_core::storage::SnapshotWriter::write) (any
//!    thread, while persists go on) writes `snap-<seq>.snap` with the very function a persist
//!    uses, above: limit checked first, pieces, fsync, rename, directory fsync. The file is
//!    then durable, but nothing in the log refers to it. A failure leaves the storage as it
//!    was (not poisoned) and no file but possibly the `.tmp`.
//! 3. On the driver's thread, the node decides first whether the snapshot is still current
//!    (`tenure_driver::finish_background_snapshot`: a leader's snapshot it accepted may not
//!    be persisted yet, so only the node knows). If it adopted it,
//!    [`BackgroundSnapshots::record_snapshot`] appends one persist whose part 0 refers to the
//!    file (the same `SnapOp`, `keep_tail` decided then as a persist decides it),
//!    fdatasyncs it, and compacts as above: only now are the covered entries, the previous
//!    snapshot file and the covered segments discarded — the files on a thread of their own,
//!    since unlinking a few 64 MiB segments and a large snapshot takes about 100 ms
//!    ([`FileStorage::finish_removals`] waits for it; drop and `recover` do too; `open`
//!    removes whatever a crash left behind). A record at or below the stored snapshot's index
//!    is refused ([`WalError::SnapshotNotNewer`]; nothing written): the node cannot have
//!    adopted it. If the node did not adopt it, [`BackgroundSnapshots::discard_snapshot`]
//!    removes the file. A failure poisons the handle, as a failed persist does.
//!
//! A crash at any point is safe because the log is the only thing that makes a snapshot
//! file current. Before step 3's fdatasync the log refers to the previous snapshot and still
//! holds every entry the new one covers (nothing was compacted), so recovery returns exactly
//! what it would have without the writer, and `open` removes the unreferenced file (or its
//! `.tmp`) like any leftover. After the fdatasync the file it refers to was already durable
//! (renamed and directory fsynced in step 2), so replay finds it. The conformance suite's
//! background checks say the same against the model; with the `inject-bugs` feature,
//! `tests/conformance.rs` shows they catch a log that discards the covered entries before
//! the record, and one that records a snapshot overtaken by a later one.
//!
//! **Recovery** ([`FileStorage::open`]) decides between a torn write and damage:
//!
//! - A bad record (short header, length out of bounds, checksum mismatch) in the **last**
//!   segment, after which no intact record of persist `n+2` or later exists (`n` = the
//!   last complete persist; persist `n+1` was the write in flight, its parts may have
//!   reached the disk in any order) is a **torn write**: the segment is cut at the start
//!   of persist `n+1` and fsynced (a segment whose header is torn is removed), and the log
//!   continues from persist `n`. [`FileStorage::repaired`] says what was cut. A header
//!   counts as torn only if what is there could be left by a crash while the segment was
//!   created: a prefix of a header record (shorter than the length it announces, for a
//!   length a header can have) or zeros. Random bytes, or a whole header with a bad
//!   checksum, are damage: refused, and the file is kept as it is.
//! - Anything else is **damage** and open fails with [`WalError::Corrupt`] (file, byte
//!   offset, reason) without changing a byte: a bad record in a non-last segment or with a
//!   later persist after it, an incomplete persist in a non-last segment, a missing
//!   segment number, a header that disagrees with the file name or the previous segment,
//!   an out-of-sequence persist, a body that does not decode, a missing or damaged
//!   snapshot file.
//! - An intact record of another format version fails with
//!   [`WalError::UnsupportedVersion`]; it is never cut off.
//! - Leftover `*.tmp` files, snapshot files the log does not refer to, and segments
//!   compaction had not yet removed are removed.
//!
//! Limits of what recovery can tell: damage to the very last complete persist (and to
//! nothing after it) looks exactly like a torn write, so that persist is dropped rather
//! than reported — fsynced data silently damaged on the medium at the log's tail is
//! indistinguishable from a write cut by a crash. Records are assumed not to be damaged by
//! later appends to the same file (sector-atomic writes). The bincode encoding of `Entry`
//! and `Snapshot` follows `tenure-core`'s types: changing them requires a new format
//! version.
//!
//! # Measuring fsync latency
//!
//! ```text
//! cargo run --release -p tenure-wal --example fsync_latency -- [DIR] [--count N]
//! ```
//!
//! persists `N` (default 2000) one-entry batches into a fresh log in a temporary directory
//! under `DIR` (default: the current directory; use the disk the server will use, not a
//! tmpfs) and prints the median, p99 and max of `persist` (write + fdatasync).
//!
//! [`Storage`]: tenure_core::storage::Storage
//! [`BackgroundSnapshots`]: tenure_core::storage::BackgroundSnapshots
//! [`BackgroundSnapshots::snapshot_writer`]: tenure_core::storage::BackgroundSnapshots::snapshot_writer
//! [`BackgroundSnapshots::record_snapshot`]: tenure_core::storage::BackgroundSnapshots::record_snapshot
//! [`BackgroundSnapshots::discard_snapshot`]: tenure_core::storage::BackgroundSnapshots::discard_snapshot
//! [`Storage::persist`]: tenure_core::storage::Storage::persist
//! [`Storage::write`]: tenure_core::storage::Storage::write
//! [`Storage::persist_commit`]: tenure_core::storage::Storage::persist_commit
#![deny(missing_docs)]

pub mod conformance;
mod error;
mod file;
mod fs;
mod options;
mod record;
mod replay;
mod tracked;

pub use error::{Result, WalError};
pub use file::{FileSnapshotWriter, FileStorage, FsyncStats, WrittenSnapshot};
pub use fs::{
    CrashChoices, CrashReport, FileSystem, KeepEverything, LogFile, LoseEverythingUnsynced,
    MemFile, MemFs, MemLock, OsFs, LOCK_FILE,
};
pub use options::{WalOptions, RECORD_BYTES_MIN};
pub use record::FORMAT_VERSION;
