//! The record format: pure functions from values to bytes and back, no IO.
//!
//! A record is `[len: u32 LE][crc: u32 LE][payload: len bytes]`, where `crc` is the CRC-32C
//! (Castagnoli) of the payload and the payload is `[version: u8][kind: u8][body]`, the body
//! being the kind's struct in bincode (fixed-width little-endian integers). The crate docs
//! hold the full specification.

use serde::{Deserialize, Serialize};
use tenure_core::types::{Entry, HardState, Index, Snapshot, Term};

/// The format version this build writes, and the only one it reads.
pub const FORMAT_VERSION: u8 = 1;
/// Bytes before the payload: length and checksum.
pub const RECORD_HEADER_BYTES: usize = 8;
/// Bytes of version and kind at the start of every payload.
const PAYLOAD_PREFIX_BYTES: usize = 2;
/// An upper bound on everything in a persist record except its entries: the record
/// header, version, kind, the fixed fields, the optional snapshot operation, the optional
/// hard state and the entry count. Used to split a persist into records before encoding.
pub const PART_OVERHEAD_BYTES_MAX: usize = 128;

/// Record kinds. Kept as plain bytes so that an unknown kind is an error, not a panic.
pub mod kind {
    /// [`super::SegmentHeader`]: the first record of every segment.
    pub const SEGMENT_HEADER: u8 = 1;
    /// [`super::PersistPart`]: one `persist` call, or one part of it.
    pub const PERSIST: u8 = 2;
    /// [`super::SnapshotFile`]: the only record of a snapshot file.
    pub const SNAPSHOT_FILE: u8 = 3;
}

/// Names a snapshot file and what it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapRef {
    /// The file's sequence number: `snap-<file_seq>.snap`.
    pub file_seq: u64,
    /// The snapshot's last index.
    pub index: Index,
    /// The term at that index.
    pub term: Term,
}

/// The first record of every segment: the state that replay starts from when the segments
/// before this one have been compacted away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentHeader {
    /// Must equal the number in the file's name; catches a renamed or misplaced file.
    pub segment_seq: u64,
    /// Sequence number of the last complete persist before this segment.
    pub persist_seq: u64,
    /// Hard state as of the segment's creation.
    pub hard_state: HardState,
    /// The current snapshot as of the segment's creation.
    pub snapshot: Option<SnapRef>,
}

/// A snapshot as an operation on the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapOp {
    /// The snapshot file.
    pub snap: SnapRef,
    /// Whether the log held the snapshot's (index, term) when it was persisted, so the tail
    /// after it stays. Recorded rather than recomputed because the segment holding that
    /// entry may be compacted away before replay.
    pub keep_tail: bool,
}

/// One `persist` call or one part of it: written as [`PersistPartRef`] (borrowing the
/// entries), read back as [`PersistPart`] (owning them), in one field order.
#[derive(Debug, Serialize, Deserialize)]
pub struct Part<E> {
    /// Persist calls are numbered 1, 2, … with no gaps.
    pub persist_seq: u64,
    /// Parts of one persist are numbered 0, 1, … in one segment.
    pub part: u32,
    /// True on the part that completes the persist; only then does replay apply it.
    pub last: bool,
    /// Only on part 0.
    pub snapshot: Option<SnapOp>,
    /// Only on the last part.
    pub hard_state: Option<HardState>,
    /// Whether `entries` starts the persist's entries (and so first discards stored entries
    /// at its first index and after) or continues them (appends only).
    pub entries_start: bool,
    /// Entries of this part.
    pub entries: E,
}

/// A part as written.
pub type PersistPartRef<'a> = Part<&'a [Entry]>;

/// A part as read back.
pub type PersistPart = Part<Vec<Entry>>;

/// The content of a snapshot file, as written.
#[derive(Serialize)]
pub struct SnapshotFileRef<'a> {
    /// Must equal the number in the file's name.
    pub file_seq: u64,
    /// The snapshot.
    pub snapshot: &'a Snapshot,
}

/// [`SnapshotFileRef`] as read back.
#[derive(Debug, Deserialize)]
pub struct SnapshotFile {
    /// See [`SnapshotFileRef::file_seq`].
    pub file_seq: u64,
    /// See [`SnapshotFileRef::snapshot`].
    pub snapshot: Snapshot,
}

/// A decoded record body.
#[derive(Debug)]
pub enum Body {
    /// See [`SegmentHeader`].
    SegmentHeader(SegmentHeader),
    /// See [`PersistPart`].
    Persist(PersistPart),
    /// See [`SnapshotFile`].
    SnapshotFile(SnapshotFile),
}

fn bincode_options() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
}

/// Append one record of `kind` holding `body` to `out`. Returns the record's size, or
/// `Err(size)` (leaving `out` as it was) when the record would exceed `record_bytes_max`.
pub fn encode(
    out: &mut Vec<u8>,
    kind: u8,
    body: &impl Serialize,
    record_bytes_max: u64,
) -> Result<u64, u64> {
    use bincode::Options;
    let body_bytes = bincode_options()
        .serialized_size(body)
        .expect("the log's own types always serialize with bincode");
    let payload_bytes = body_bytes + PAYLOAD_PREFIX_BYTES as u64;
    let record_bytes = payload_bytes + RECORD_HEADER_BYTES as u64;
    if record_bytes > record_bytes_max || payload_bytes > u64::from(u32::MAX) {
        return Err(record_bytes);
    }
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    out.push(FORMAT_VERSION);
    out.push(kind);
    bincode_options()
        .serialize_into(&mut *out, body)
        .expect("serializing into a Vec cannot fail once its size is known");
    let payload = &out[start + RECORD_HEADER_BYTES..];
    debug_assert_eq!(payload.len() as u64, payload_bytes);
    let crc = crc32c::crc32c(payload);
    out[start..start + 4].copy_from_slice(&(payload_bytes as u32).to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(record_bytes)
}

/// Encoded size of a value in a record body (for splitting a persist into parts).
pub fn body_bytes(value: &impl Serialize) -> u64 {
    use bincode::Options;
    bincode_options()
        .serialized_size(value)
        .expect("the log's own types always serialize with bincode")
}

/// A record whose framing and checksum are intact.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    /// Format version byte.
    pub version: u8,
    /// Kind byte.
    pub kind: u8,
    /// The body, still encoded.
    pub body: &'a [u8],
    /// Offset just past the record.
    pub end: usize,
}

/// Read the record starting at `at`, checking its length bounds and checksum. `Err` says
/// why the bytes there are not a record. Never allocates: the length is only compared and
/// used to slice `buf`.
pub fn frame_at(buf: &[u8], at: usize, record_bytes_max: u32) -> Result<Frame<'_>, String> {
    let rest = buf.get(at..).unwrap_or(&[]);
    if rest.len() < RECORD_HEADER_BYTES {
        return Err(format!(
            "incomplete record header ({} of {RECORD_HEADER_BYTES} bytes)",
            rest.len()
        ));
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    let stored_crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if (len as usize) < PAYLOAD_PREFIX_BYTES {
        return Err(format!(
            "record length {len} is below the minimum of {PAYLOAD_PREFIX_BYTES}"
        ));
    }
    if u64::from(len) + RECORD_HEADER_BYTES as u64 > u64::from(record_bytes_max) {
        return Err(format!(
            "record length {len} exceeds record_bytes_max ({record_bytes_max})"
        ));
    }
    let available = rest.len() - RECORD_HEADER_BYTES;
    if len as usize > available {
        return Err(format!(
            "record length {len} runs past the end of the file ({available} bytes left)"
        ));
    }
    let payload = &rest[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len as usize];
    let crc = crc32c::crc32c(payload);
    if crc != stored_crc {
        return Err(format!(
            "checksum mismatch (stored {stored_crc:08x}, computed {crc:08x})"
        ));
    }
    Ok(Frame {
        version: payload[0],
        kind: payload[1],
        body: &payload[PAYLOAD_PREFIX_BYTES..],
        end: at + RECORD_HEADER_BYTES + len as usize,
    })
}

/// Why an intact frame does not decode.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Written by another format version.
    Version(u8),
    /// Unknown kind under this version.
    Kind(u8),
    /// The body does not decode as its kind.
    Body(String),
}

/// Decode an intact frame's body.
pub fn decode(frame: &Frame<'_>) -> Result<Body, DecodeError> {
    use bincode::Options;
    if frame.version != FORMAT_VERSION {
        return Err(DecodeError::Version(frame.version));
    }
    // The limit makes bincode refuse any length prefix inside the body that claims more
    // bytes than the body has, before it allocates for it.
    let options = bincode_options().with_limit(frame.body.len() as u64);
    let body = match frame.kind {
        kind::SEGMENT_HEADER => options.deserialize(frame.body).map(Body::SegmentHeader),
        kind::PERSIST => options.deserialize(frame.body).map(Body::Persist),
        kind::SNAPSHOT_FILE => options.deserialize(frame.body).map(Body::SnapshotFile),
        other => return Err(DecodeError::Kind(other)),
    };
    body.map_err(|e| DecodeError::Body(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SegmentHeader {
        SegmentHeader {
            segment_seq: 7,
            persist_seq: 3,
            hard_state: HardState {
                term: 2,
                vote: Some(1),
                commit: 5,
            },
            snapshot: None,
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        let n = encode(&mut buf, kind::SEGMENT_HEADER, &header(), 1 << 20).unwrap();
        assert_eq!(n as usize, buf.len());
        let frame = frame_at(&buf, 0, 1 << 20).unwrap();
        assert_eq!(frame.end, buf.len());
        match decode(&frame).unwrap() {
            Body::SegmentHeader(h) => assert_eq!(h, header()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let mut buf = Vec::new();
        encode(&mut buf, kind::SEGMENT_HEADER, &header(), 1 << 20).unwrap();
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut damaged = buf.clone();
                damaged[i] ^= 1 << bit;
                assert!(
                    frame_at(&damaged, 0, 1 << 20).is_err(),
                    "flip at {i} bit {bit}"
                );
            }
        }
    }

    #[test]
    fn oversize_length_is_refused_before_reading() {
        let mut buf = vec![0u8; 16];
        buf[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let why = frame_at(&buf, 0, 4096).unwrap_err();
        assert!(why.contains("exceeds record_bytes_max"), "{why}");
    }

    #[test]
    fn too_large_record_is_not_encoded() {
        let mut buf = vec![1, 2, 3];
        let entries: Vec<Entry> = Vec::new();
        let part = PersistPartRef {
            persist_seq: 1,
            part: 0,
            last: true,
            snapshot: None,
            hard_state: None,
            entries_start: true,
            entries: &entries,
        };
        assert!(encode(&mut buf, kind::PERSIST, &part, 10).is_err());
        assert_eq!(buf, vec![1, 2, 3]);
    }

    #[test]
    fn part_overhead_bound_holds() {
        let part = PersistPartRef {
            persist_seq: u64::MAX,
            part: u32::MAX,
            last: true,
            snapshot: Some(SnapOp {
                snap: SnapRef {
                    file_seq: u64::MAX,
                    index: u64::MAX,
                    term: u64::MAX,
                },
                keep_tail: true,
            }),
            hard_state: Some(HardState {
                term: u64::MAX,
                vote: Some(u64::MAX),
                commit: u64::MAX,
            }),
            entries_start: true,
            entries: &[],
        };
        let total = body_bytes(&part) as usize + PAYLOAD_PREFIX_BYTES + RECORD_HEADER_BYTES;
        assert!(total <= PART_OVERHEAD_BYTES_MAX, "{total}");
    }

    #[test]
    fn unknown_version_and_kind_are_reported() {
        let mut buf = Vec::new();
        encode(&mut buf, 99, &header(), 1 << 20).unwrap();
        let frame = frame_at(&buf, 0, 1 << 20).unwrap();
        assert_eq!(decode(&frame).unwrap_err(), DecodeError::Kind(99));
        let frame = Frame {
            version: 2,
            ..frame
        };
        assert_eq!(decode(&frame).unwrap_err(), DecodeError::Version(2));
    }
}
