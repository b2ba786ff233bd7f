//! Reading a WAL directory back: list its files, replay its segments in order, tell a torn
//! tail (repairable) from damage (refuse), and load the current snapshot. Nothing here
//! writes; the repair it finds is carried out by [`crate::FileStorage::open`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tenure_core::types::{Entry, HardState, Snapshot};

use crate::error::{Result, WalError};
use crate::fs::FileSystem;
use crate::options::WalOptions;
use crate::record::{
    self, Body, DecodeError, PersistPart, SegmentHeader, SnapRef, FORMAT_VERSION,
    RECORD_HEADER_BYTES,
};
use crate::tracked::{Slot, TrackedLog};

/// Name of the segment file with this sequence number.
pub fn segment_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

/// Name of the snapshot file with this sequence number.
pub fn snapshot_name(seq: u64) -> String {
    format!("snap-{seq:020}.snap")
}

/// Suffix of files being written that are not part of the log until renamed.
pub const TMP_SUFFIX: &str = ".tmp";

fn parse_seq(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The files of a WAL directory, by kind. Other files are left alone.
#[derive(Debug, Default)]
pub struct Listing {
    /// Segment files by sequence number.
    pub segments: BTreeMap<u64, PathBuf>,
    /// Snapshot files by sequence number.
    pub snapshots: BTreeMap<u64, PathBuf>,
    /// Unfinished files of an interrupted write.
    pub temporaries: Vec<PathBuf>,
}

/// List the WAL files in `dir`.
pub fn list<F: FileSystem>(fs: &F, dir: &Path) -> Result<Listing> {
    let mut listing = Listing::default();
    for name in fs.list(dir).map_err(WalError::io("list", dir))? {
        let name = name.as_str();
        let path = dir.join(name);
        if let Some(seq) = parse_seq(name, "wal-", ".log") {
            listing.segments.insert(seq, path);
        } else if let Some(seq) = parse_seq(name, "snap-", ".snap") {
            listing.snapshots.insert(seq, path);
        } else if name.ends_with(TMP_SUFFIX)
            && (name.starts_with("snap-") || name.starts_with("wal-"))
        {
            listing.temporaries.push(path);
        }
    }
    Ok(listing)
}

/// What recovery must change on disk before the log can be appended to again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Cut the last segment at `len` bytes: everything after is a torn write.
    Truncate {
        /// The segment.
        path: PathBuf,
        /// Its length after the cut.
        len: u64,
        /// What was wrong at `len`, for the record.
        why: String,
    },
    /// Remove the last segment: even its header is torn.
    Remove {
        /// The segment.
        path: PathBuf,
        /// Its sequence number.
        seq: u64,
        /// What was wrong, for the record.
        why: String,
    },
}

/// A directory's content, replayed.
#[derive(Debug)]
pub struct Replayed {
    /// The files found.
    pub listing: Listing,
    /// Hard state after the last complete persist.
    pub hard_state: HardState,
    /// The current snapshot's file, if any.
    pub snapshot_ref: Option<SnapRef>,
    /// The current snapshot, loaded and checked.
    pub snapshot: Option<Snapshot>,
    /// Stored entries with their segments.
    pub entries: TrackedLog<Entry>,
    /// Number of the last complete persist.
    pub persist_seq: u64,
    /// Length of each segment that stays (a torn last segment counts as repaired).
    pub segment_bytes: BTreeMap<u64, u64>,
    /// The torn tail found, if any.
    pub repair: Option<Repair>,
}

/// The state replay carries from record to record.
struct State {
    hard_state: HardState,
    snapshot: Option<SnapRef>,
    entries: TrackedLog<Entry>,
    persist_seq: u64,
}

/// A persist whose parts have been read but whose last part has not (yet).
struct Pending {
    seq: u64,
    start: usize,
    parts: Vec<PersistPart>,
}

/// How one segment ended.
enum SegmentEnd {
    /// Every byte is a record.
    Clean,
    /// A torn write starts at this offset (0: the header itself is torn).
    Torn { at: usize, why: String },
}

/// Replay the directory. `Err` for damage, an unknown version, or an IO failure; a torn tail
/// in the last segment is reported in [`Replayed::repair`], not repaired.
pub fn replay<F: FileSystem>(fs: &F, dir: &Path, options: &WalOptions) -> Result<Replayed> {
    let listing = list(fs, dir)?;
    let mut state = State {
        hard_state: HardState::default(),
        snapshot: None,
        entries: TrackedLog::default(),
        persist_seq: 0,
    };
    let mut segment_bytes = BTreeMap::new();
    let mut repair = None;

    if listing.segments.is_empty() {
        if let Some((_, path)) = listing.snapshots.iter().next() {
            return Err(WalError::corrupt(
                path,
                0,
                "the directory holds snapshot files but no WAL segment (were the wal-*.log \
                 files removed?)",
            ));
        }
    }

    let mut previous: Option<u64> = None;
    let last_seq = listing.segments.keys().next_back().copied();
    for (&seq, path) in &listing.segments {
        if let Some(prev) = previous {
            if seq != prev + 1 {
                return Err(WalError::corrupt(
                    dir.join(segment_name(prev + 1)),
                    0,
                    format!(
                        "segment {} is missing: the log jumps from segment {prev} to segment {seq}",
                        prev + 1
                    ),
                ));
            }
        }
        let is_first = previous.is_none();
        previous = Some(seq);
        let is_last = Some(seq) == last_seq;
        let buf = fs.read(path).map_err(WalError::io("read", path))?;
        match replay_segment(&mut state, seq, path, &buf, is_first, is_last, options)? {
            SegmentEnd::Clean => {
                segment_bytes.insert(seq, buf.len() as u64);
            }
            SegmentEnd::Torn { at: 0, why } => {
                repair = Some(Repair::Remove {
                    path: path.clone(),
                    seq,
                    why,
                });
            }
            SegmentEnd::Torn { at, why } => {
                segment_bytes.insert(seq, at as u64);
                repair = Some(Repair::Truncate {
                    path: path.clone(),
                    len: at as u64,
                    why,
                });
            }
        }
    }

    let snapshot = match state.snapshot {
        Some(snap) => Some(load_snapshot(fs, dir, snap, options)?),
        None => None,
    };
    Ok(Replayed {
        listing,
        hard_state: state.hard_state,
        snapshot_ref: state.snapshot,
        snapshot,
        entries: state.entries,
        persist_seq: state.persist_seq,
        segment_bytes,
        repair,
    })
}

fn replay_segment(
    state: &mut State,
    seq: u64,
    path: &Path,
    buf: &[u8],
    is_first: bool,
    is_last: bool,
    options: &WalOptions,
) -> Result<SegmentEnd> {
    let max = options.record_bytes_max;
    let corrupt = |at: usize, why: String| WalError::corrupt(path, at as u64, why);
    let unsupported = |at: usize, version: u8| WalError::UnsupportedVersion {
        file: path.to_path_buf(),
        offset: at as u64,
        version,
        supported: FORMAT_VERSION,
    };

    // A bad record: a torn write if it is in the last segment and no record written after
    // it survives; damage otherwise.
    let bad = |at: usize, why: String, state: &State| -> Result<SegmentEnd> {
        if !is_last {
            return Err(corrupt(
                at,
                format!(
                    "{why}, in a segment that is not the last one (it was complete and \
                     fsynced before the next one was started), so this is not a torn write"
                ),
            ));
        }
        // Persist n+1 was the write in flight at the crash, so its parts may survive in any
        // order; a record of persist n+2 or later proves that this was acknowledged data.
        // Older records (stale blocks) prove nothing.
        let evidence_seq = state.persist_seq + 2;
        if let Some((later, later_seq)) = later_persist(buf, at + 1, evidence_seq, max) {
            return Err(corrupt(
                at,
                format!(
                    "{why}, yet an intact record of persist #{later_seq} follows at byte \
                     {later}, so this is damage inside the log, not a torn write at its end"
                ),
            ));
        }
        Ok(SegmentEnd::Torn { at, why })
    };

    // The header.
    let header_frame = match record::frame_at(buf, 0, max) {
        Ok(frame) => frame,
        Err(why) => {
            if !header_could_be_torn(buf) {
                return Err(corrupt(
                    0,
                    format!(
                        "bad segment header: {why}; the file does not look like a segment \
                         whose creation was cut short (a prefix of a header, or zeros), so it \
                         is left untouched"
                    ),
                ));
            }
            return bad(0, format!("bad segment header: {why}"), state);
        }
    };
    let header: SegmentHeader = match record::decode(&header_frame) {
        Ok(Body::SegmentHeader(h)) => h,
        Ok(other) => {
            return Err(corrupt(
                0,
                format!(
                    "the first record is not a segment header but {}",
                    describe(&other)
                ),
            ))
        }
        Err(e) => return Err(decode_error(e, 0, &corrupt, &unsupported)),
    };
    if header.segment_seq != seq {
        return Err(corrupt(
            0,
            format!(
                "the segment header says segment {} but the file name says {seq} (was the \
                 file renamed or copied from elsewhere?)",
                header.segment_seq
            ),
        ));
    }
    if is_first {
        state.hard_state = header.hard_state;
        state.snapshot = header.snapshot;
        state.persist_seq = header.persist_seq;
    } else if header.hard_state != state.hard_state
        || header.snapshot != state.snapshot
        || header.persist_seq != state.persist_seq
    {
        return Err(corrupt(
            0,
            format!(
                "the segment header (persist #{}, {:?}, snapshot {:?}) disagrees with the end \
                 of the previous segment (persist #{}, {:?}, snapshot {:?})",
                header.persist_seq,
                header.hard_state,
                header.snapshot,
                state.persist_seq,
                state.hard_state,
                state.snapshot
            ),
        ));
    }

    // The persists.
    let mut at = header_frame.end;
    let mut pending: Option<Pending> = None;
    while at < buf.len() {
        let frame = match record::frame_at(buf, at, max) {
            Ok(frame) => frame,
            Err(why) => {
                let torn_at = pending.as_ref().map_or(at, |p| p.start);
                return match bad(at, why, state)? {
                    SegmentEnd::Torn { why, .. } => Ok(SegmentEnd::Torn { at: torn_at, why }),
                    clean => Ok(clean),
                };
            }
        };
        let part = match record::decode(&frame) {
            Ok(Body::Persist(part)) => part,
            Ok(other) => {
                return Err(corrupt(
                    at,
                    format!("unexpected {} inside a segment", describe(&other)),
                ))
            }
            Err(e) => return Err(decode_error(e, at, &corrupt, &unsupported)),
        };
        match &mut pending {
            None => {
                if part.part != 0 || part.persist_seq != state.persist_seq + 1 {
                    return Err(corrupt(
                        at,
                        format!(
                            "expected part 0 of persist #{}, found part {} of persist #{}",
                            state.persist_seq + 1,
                            part.part,
                            part.persist_seq
                        ),
                    ));
                }
                pending = Some(Pending {
                    seq: part.persist_seq,
                    start: at,
                    parts: Vec::new(),
                });
            }
            Some(p) => {
                if part.persist_seq != p.seq || part.part as usize != p.parts.len() {
                    return Err(corrupt(
                        at,
                        format!(
                            "expected part {} of persist #{}, found part {} of persist #{}",
                            p.parts.len(),
                            p.seq,
                            part.part,
                            part.persist_seq
                        ),
                    ));
                }
            }
        }
        let last = part.last;
        let p = pending.as_mut().expect("set just above");
        p.parts.push(part);
        if last {
            let done = pending.take().expect("set just above");
            apply(state, seq, done);
        }
        at = frame.end;
    }
    match pending {
        None => Ok(SegmentEnd::Clean),
        Some(p) if is_last => Ok(SegmentEnd::Torn {
            at: p.start,
            why: format!("persist #{} is incomplete at the end of the log", p.seq),
        }),
        Some(p) => Err(corrupt(
            p.start,
            format!(
                "persist #{} is incomplete at the end of a segment that is not the last one",
                p.seq
            ),
        )),
    }
}

/// Apply one complete persist, in the order `Storage::persist` documents.
fn apply(state: &mut State, segment: u64, persist: Pending) {
    for part in persist.parts {
        if let Some(op) = part.snapshot {
            state.entries.apply_snapshot(op.snap.index, op.keep_tail);
            state.snapshot = Some(op.snap);
        }
        if part.entries_start {
            if let Some(first) = part.entries.first() {
                state.entries.truncate_from(first.index);
            }
        }
        for entry in part.entries {
            state.entries.push(Slot {
                index: entry.index,
                term: entry.term,
                segment,
                value: entry,
            });
        }
        if let Some(hs) = part.hard_state {
            state.hard_state = hs;
        }
    }
    state.persist_seq = persist.seq;
}

/// The first intact persist record at or after `from` numbered at least `min_seq`.
fn later_persist(buf: &[u8], from: usize, min_seq: u64, max: u32) -> Option<(usize, u64)> {
    let last_start = buf.len().checked_sub(RECORD_HEADER_BYTES)?;
    (from..=last_start).find_map(|at| {
        let frame = record::frame_at(buf, at, max).ok()?;
        match record::decode(&frame) {
            Ok(Body::Persist(p)) if p.persist_seq >= min_seq => Some((at, p.persist_seq)),
            _ => None,
        }
    })
}

fn describe(body: &Body) -> &'static str {
    match body {
        Body::SegmentHeader(_) => "a segment header",
        Body::Persist(_) => "a persist record",
        Body::SnapshotFile(_) => "a snapshot file record",
    }
}

fn decode_error(
    e: DecodeError,
    at: usize,
    corrupt: &dyn Fn(usize, String) -> WalError,
    unsupported: &dyn Fn(usize, u8) -> WalError,
) -> WalError {
    match e {
        DecodeError::Version(v) => unsupported(at, v),
        DecodeError::Kind(k) => corrupt(at, format!("unknown record kind {k}")),
        DecodeError::Body(why) => corrupt(
            at,
            format!("the record's checksum is valid but its body does not decode: {why}"),
        ),
    }
}

/// Read and check the snapshot file `snap` names.
pub fn load_snapshot<F: FileSystem>(
    fs: &F,
    dir: &Path,
    snap: SnapRef,
    options: &WalOptions,
) -> Result<Snapshot> {
    let path = dir.join(snapshot_name(snap.file_seq));
    let corrupt = |offset: u64, why: String| WalError::corrupt(&path, offset, why);
    let bytes = match fs.len(&path) {
        Ok(len) => len,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(
                0,
                format!(
                    "the snapshot file at index {} term {} that the log refers to is missing",
                    snap.index, snap.term
                ),
            ))
        }
        Err(e) => return Err(WalError::io("stat", &path)(e)),
    };
    if bytes > u64::from(options.snapshot_bytes_max) {
        return Err(corrupt(
            0,
            format!(
                "the snapshot file is {bytes} bytes, more than snapshot_bytes_max ({})",
                options.snapshot_bytes_max
            ),
        ));
    }
    let buf = fs.read(&path).map_err(WalError::io("read", &path))?;
    let frame =
        record::frame_at(&buf, 0, options.snapshot_bytes_max).map_err(|why| corrupt(0, why))?;
    if frame.end != buf.len() {
        return Err(corrupt(
            frame.end as u64,
            format!(
                "{} unexpected bytes after the snapshot",
                buf.len() - frame.end
            ),
        ));
    }
    let file = match record::decode(&frame) {
        Ok(Body::SnapshotFile(file)) => file,
        Ok(other) => {
            return Err(corrupt(
                0,
                format!("expected a snapshot, found {}", describe(&other)),
            ))
        }
        Err(DecodeError::Version(version)) => {
            return Err(WalError::UnsupportedVersion {
                file: path.clone(),
                offset: 0,
                version,
                supported: FORMAT_VERSION,
            })
        }
        Err(DecodeError::Kind(k)) => return Err(corrupt(0, format!("unknown record kind {k}"))),
        Err(DecodeError::Body(why)) => {
            return Err(corrupt(0, format!("the snapshot does not decode: {why}")))
        }
    };
    if file.file_seq != snap.file_seq
        || file.snapshot.index != snap.index
        || file.snapshot.term != snap.term
    {
        return Err(corrupt(
            0,
            format!(
                "the file holds snapshot #{} at index {} term {}, but the log refers to \
                 snapshot #{} at index {} term {}",
                file.file_seq,
                file.snapshot.index,
                file.snapshot.term,
                snap.file_seq,
                snap.index,
                snap.term
            ),
        ));
    }
    Ok(file.snapshot)
}

/// The longest segment header record a writer produces: the record header, version and
/// kind, and a bincode `SegmentHeader` (two sequence numbers, a hard state, an optional
/// snapshot reference), with room to spare.
const SEGMENT_HEADER_RECORD_BYTES_MAX: usize = 256;

/// Whether bytes that do not hold an intact segment header can be what a crash leaves of a
/// segment being created: the header and the first persist go out in one write, and a disk
/// writes a sector whole or not at all, so what is left is a prefix of that write (shorter
/// than the header record it announces) or blocks that were never written (zeros). Anything
/// else — a complete header record with a bad checksum, a length no header has, random
/// bytes — is not a torn write, and recovery must not remove the file.
fn header_could_be_torn(buf: &[u8]) -> bool {
    if buf.iter().all(|&b| b == 0) {
        return true;
    }
    if buf.len() < record::RECORD_HEADER_BYTES {
        return true;
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    let plausible = len + record::RECORD_HEADER_BYTES <= SEGMENT_HEADER_RECORD_BYTES_MAX;
    plausible && record::RECORD_HEADER_BYTES + len > buf.len()
}
