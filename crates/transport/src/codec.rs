//! Framing: pure functions from messages to bytes and back. No IO happens here.
//!
//! The frame layout is specified in the crate documentation ([`crate`]). Encoding checks
//! the size cap before it allocates; the incremental [`FrameDecoder`] validates the magic,
//! the version, the flags and the length cap as soon as those header bytes have arrived,
//! before it reserves any room for the payload, so an untrusted length never drives an
//! allocation larger than the cap.
//!
//! After [`FrameDecoder::decode`] returns an error the stream is out of sync and must be
//! abandoned: the transport closes the connection.

use bytes::{Buf, BytesMut};
use serde::{Deserialize, Serialize};
use tenure_core::message::Message;
use tenure_core::types::NodeId;

use bincode::Options;

/// The first four bytes of every frame. The trailing `1` is part of the magic, not the
/// version: the version has its own byte so that a later version can keep this magic.
pub const MAGIC: [u8; 4] = *b"TNR1";

/// The only wire protocol version this build speaks (frame header byte 4, and the
/// `protocol_version` of [`Hello`]).
pub const PROTOCOL_VERSION: u8 = 1;

/// Size of the fixed frame header: magic (4), version (1), flags (1), payload length (4),
/// payload checksum (4).
pub const HEADER_BYTES: usize = 14;

/// Default cap on a whole frame, header included. Large enough for any snapshot the core
/// produces at tenure's intended state sizes; small enough that a lying length costs little.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

/// Cap on the handshake frame. A connection that has not yet proven which cluster and
/// node it belongs to may make the acceptor buffer at most this much.
pub const HELLO_FRAME_BYTES_MAX: usize = 1024;

/// Longest accepted cluster id, in bytes of UTF-8.
pub const CLUSTER_ID_BYTES_MAX: usize = 255;

/// Flag bit: the payload is a [`Hello`] rather than a [`Message`].
pub const FLAG_HELLO: u8 = 0b0000_0001;

/// Every flag bit this version understands; a frame with any other bit set is rejected.
const FLAGS_KNOWN: u8 = FLAG_HELLO;

/// The largest `frame_bytes_max` that the 32-bit length field can express.
pub const FRAME_BYTES_MAX_LIMIT: usize = HEADER_BYTES + u32::MAX as usize;

/// The first frame on every connection, sent by the dialer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Which cluster the dialer belongs to; a node never talks to another cluster's node
    /// even if an address is misconfigured.
    pub cluster_id: String,
    /// The dialer's id; the acceptor checks it against its peer list and then requires
    /// every message on the connection to come `from` this id.
    pub node_id: NodeId,
    /// The dialer's protocol version, repeated inside the payload so that the handshake
    /// states it explicitly even if a future version changes the header layout.
    pub protocol_version: u8,
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A handshake frame (flag [`FLAG_HELLO`] set).
    Hello(Hello),
    /// A Raft message (no flag set).
    Message(Message),
}

impl Frame {
    /// A short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello(_) => "Hello",
            Frame::Message(_) => "Message",
        }
    }
}

/// Why bytes could not be turned into a frame, or a frame into bytes.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The frame does not start with [`MAGIC`]: the sender is not a tenure node (or the
    /// stream is out of sync).
    #[error("bad magic: expected {:02x?}, found {found:02x?}", MAGIC)]
    BadMagic {
        /// The bytes found where the magic should be (up to four).
        found: Vec<u8>,
    },
    /// The header names a protocol version this build does not speak.
    #[error(
        "unsupported protocol version {found} (this node speaks {})",
        PROTOCOL_VERSION
    )]
    UnsupportedVersion {
        /// The version byte found.
        found: u8,
    },
    /// The header has flag bits set that this version does not define.
    #[error("unknown flags {flags:#010b}")]
    UnknownFlags {
        /// The flags byte found.
        flags: u8,
    },
    /// The frame (header included) would exceed the cap.
    #[error("frame of {len} bytes exceeds the cap of {max} bytes")]
    TooLarge {
        /// Length of the whole frame, header included.
        len: usize,
        /// The cap in force.
        max: usize,
    },
    /// The payload's CRC-32C does not match the header: corruption in transit or a buggy peer.
    #[error("payload checksum mismatch: header says {expected:#010x}, payload has {actual:#010x}")]
    ChecksumMismatch {
        /// Checksum carried in the header.
        expected: u32,
        /// Checksum computed over the payload received.
        actual: u32,
    },
    /// The payload passed the checksum but is not a valid encoding of what the flags say.
    #[error("malformed payload: {0}")]
    Malformed(#[source] bincode::Error),
    /// A well-formed frame of a kind not expected here (a hello after the handshake, or a
    /// message where a hello was expected).
    #[error("unexpected {found} frame, expected {expected}")]
    UnexpectedFrame {
        /// The kind of frame expected.
        expected: &'static str,
        /// The kind of frame found.
        found: &'static str,
    },
}

/// The bincode configuration of the payload: fixed-width little-endian integers, no
/// trailing bytes allowed. Encoder and decoder must agree, so both go through here.
fn payload_options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

/// Encodes `message` as one frame, with the default cap [`FRAME_BYTES_MAX_DEFAULT`].
pub fn encode_frame(message: &Message) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_message_into(message, FRAME_BYTES_MAX_DEFAULT, &mut out)?;
    Ok(out)
}

/// Encodes `hello` as one handshake frame (capped at [`HELLO_FRAME_BYTES_MAX`]).
pub fn encode_hello(hello: &Hello) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    encode_payload_into(hello, FLAG_HELLO, HELLO_FRAME_BYTES_MAX, &mut out)?;
    Ok(out)
}

/// Appends the frame of `message` to `out`, refusing frames longer than `frame_bytes_max`.
///
/// On error `out` is left exactly as it was, so a writer batching several frames into one
/// buffer can skip a bad message and keep the others.
pub fn encode_message_into(
    message: &Message,
    frame_bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    encode_payload_into(message, 0, frame_bytes_max, out)
}

fn encode_payload_into<T: Serialize>(
    value: &T,
    flags: u8,
    frame_bytes_max: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let max = frame_bytes_max.min(FRAME_BYTES_MAX_LIMIT);
    // Size first, so that nothing is allocated or appended for an oversize frame.
    let payload_len = payload_options()
        .serialized_size(value)
        .map_err(CodecError::Malformed)?;
    let frame_len = usize::try_from(payload_len)
        .ok()
        .and_then(|len| len.checked_add(HEADER_BYTES))
        .unwrap_or(usize::MAX);
    if frame_len > max {
        return Err(CodecError::TooLarge {
            len: frame_len,
            max,
        });
    }
    // `frame_len <= FRAME_BYTES_MAX_LIMIT`, so the payload length fits the u32 field.
    let payload_len_u32 = u32::try_from(payload_len).map_err(|_| CodecError::TooLarge {
        len: frame_len,
        max,
    })?;
    let start = out.len();
    out.reserve(frame_len);
    out.extend_from_slice(&MAGIC);
    out.push(PROTOCOL_VERSION);
    out.push(flags);
    out.extend_from_slice(&payload_len_u32.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // checksum, filled in below
    if let Err(e) = payload_options().serialize_into(&mut *out, value) {
        out.truncate(start);
        return Err(CodecError::Malformed(e));
    }
    let payload_start = start + HEADER_BYTES;
    let crc = crc32c::crc32c(&out[payload_start..]);
    out[payload_start - 4..payload_start].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Incremental frame decoder over a growing byte buffer.
///
/// Feed it whatever the socket produced; it takes whole frames off the front of the
/// buffer and leaves partial ones in place.
#[derive(Clone, Debug)]
pub struct FrameDecoder {
    /// Cap on a whole frame, header included.
    frame_bytes_max: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new(FRAME_BYTES_MAX_DEFAULT)
    }
}

impl FrameDecoder {
    /// A decoder that rejects frames longer than `frame_bytes_max` (header included).
    pub fn new(frame_bytes_max: usize) -> FrameDecoder {
        FrameDecoder {
            frame_bytes_max: frame_bytes_max.min(FRAME_BYTES_MAX_LIMIT),
        }
    }

    /// The cap this decoder enforces.
    pub fn frame_bytes_max(&self) -> usize {
        self.frame_bytes_max
    }

    /// Takes one [`Message`] frame off the front of `buf`.
    ///
    /// `Ok(None)` means more bytes are needed (nothing was consumed). A hello frame is an
    /// error here ([`CodecError::UnexpectedFrame`]): the handshake happens once, first.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Message>, CodecError> {
        match self.decode_frame(buf)? {
            None => Ok(None),
            Some(Frame::Message(message)) => Ok(Some(message)),
            Some(frame @ Frame::Hello(_)) => Err(CodecError::UnexpectedFrame {
                expected: "Message",
                found: frame.kind(),
            }),
        }
    }

    /// Takes one frame of either kind off the front of `buf`.
    ///
    /// Header fields are checked as soon as their bytes are present, so garbage is
    /// rejected without waiting for a whole header and an oversize length is rejected
    /// before any room is reserved for its payload.
    pub fn decode_frame(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, CodecError> {
        let have = buf.len();
        let magic_seen = have.min(MAGIC.len());
        if buf[..magic_seen] != MAGIC[..magic_seen] {
            return Err(CodecError::BadMagic {
                found: buf[..magic_seen].to_vec(),
            });
        }
        if have > 4 && buf[4] != PROTOCOL_VERSION {
            return Err(CodecError::UnsupportedVersion { found: buf[4] });
        }
        if have > 5 && buf[5] & !FLAGS_KNOWN != 0 {
            return Err(CodecError::UnknownFlags { flags: buf[5] });
        }
        if have < 10 {
            return Ok(None);
        }
        let payload_len = u32::from_be_bytes([buf[6], buf[7], buf[8], buf[9]]) as usize;
        // Cannot overflow: `payload_len <= u32::MAX` and `usize` is at least 32 bits wide
        // on every platform tokio supports; saturate anyway rather than trust that.
        let frame_len = payload_len.saturating_add(HEADER_BYTES);
        if frame_len > self.frame_bytes_max {
            return Err(CodecError::TooLarge {
                len: frame_len,
                max: self.frame_bytes_max,
            });
        }
        if have < frame_len {
            // The length is within the cap, so reserving the rest of the frame is bounded.
            buf.reserve(frame_len - have);
            return Ok(None);
        }
        let flags = buf[5];
        let expected = u32::from_be_bytes([buf[10], buf[11], buf[12], buf[13]]);
        let payload = &buf[HEADER_BYTES..frame_len];
        let actual = crc32c::crc32c(payload);
        if actual != expected {
            return Err(CodecError::ChecksumMismatch { expected, actual });
        }
        // The bincode limit bounds what a lying length inside the payload (a Vec or String
        // length) can make the deserializer allocate.
        let options = payload_options().with_limit(payload_len as u64);
        let frame = if flags & FLAG_HELLO != 0 {
            Frame::Hello(
                options
                    .deserialize(payload)
                    .map_err(CodecError::Malformed)?,
            )
        } else {
            Frame::Message(
                options
                    .deserialize(payload)
                    .map_err(CodecError::Malformed)?,
            )
        };
        buf.advance(frame_len);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::message::Body;

    fn heartbeat() -> Message {
        Message {
            from: 1,
            to: 2,
            term: 7,
            body: Body::AppendEntries {
                prev_log_index: 10,
                prev_log_term: 6,
                entries: Vec::new(),
                leader_commit: 9,
                sent_tick: 99,
            },
        }
    }

    #[test]
    fn header_layout_is_as_documented() {
        let frame = encode_frame(&heartbeat()).expect("encodes");
        assert_eq!(&frame[0..4], b"TNR1");
        assert_eq!(frame[4], 1, "version");
        assert_eq!(frame[5], 0, "flags of a message frame");
        let len = u32::from_be_bytes([frame[6], frame[7], frame[8], frame[9]]) as usize;
        assert_eq!(len, frame.len() - HEADER_BYTES);
        let crc = u32::from_be_bytes([frame[10], frame[11], frame[12], frame[13]]);
        assert_eq!(crc, crc32c::crc32c(&frame[HEADER_BYTES..]));
    }

    #[test]
    fn partial_input_consumes_nothing() {
        let frame = encode_frame(&heartbeat()).expect("encodes");
        for cut in 0..frame.len() {
            let mut buf = BytesMut::from(&frame[..cut]);
            let got = FrameDecoder::default()
                .decode(&mut buf)
                .expect("valid prefix");
            assert_eq!(got, None, "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn encode_refuses_oversize_and_leaves_buffer_untouched() {
        let mut out = vec![1, 2, 3];
        let err = encode_message_into(&heartbeat(), HEADER_BYTES + 4, &mut out)
            .expect_err("too small a cap");
        assert!(matches!(err, CodecError::TooLarge { max, .. } if max == HEADER_BYTES + 4));
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn hello_round_trip() {
        let hello = Hello {
            cluster_id: "billing".into(),
            node_id: 3,
            protocol_version: PROTOCOL_VERSION,
        };
        let mut buf = BytesMut::from(&encode_hello(&hello).expect("encodes")[..]);
        assert_eq!(buf[5], FLAG_HELLO);
        let frame = FrameDecoder::new(HELLO_FRAME_BYTES_MAX)
            .decode_frame(&mut buf)
            .expect("decodes");
        assert_eq!(frame, Some(Frame::Hello(hello)));
        assert!(buf.is_empty());
    }
}
