//! The frame codec: round trips, each corruption's typed error, and random input.

mod common;

use bytes::BytesMut;
use common::framed;
use proptest::prelude::*;
use tenure_core::message::{Body, Message, RejectHint};
use tenure_core::sm::Command;
use tenure_core::types::{Entry, Membership, Payload, Snapshot};
use tenure_transport::{
    encode_frame, encode_hello, encode_message_into, CodecError, Frame, FrameDecoder, Hello,
    FRAME_BYTES_MAX_DEFAULT, HEADER_BYTES, HELLO_FRAME_BYTES_MAX, PROTOCOL_VERSION,
};

fn heartbeat(term: u64) -> Message {
    Message {
        from: 1,
        to: 2,
        term,
        body: Body::AppendEntries {
            prev_log_index: 3,
            prev_log_term: 2,
            entries: Vec::new(),
            leader_commit: 3,
            sent_tick: 17,
        },
    }
}

/// A heartbeat's frame with byte `at` replaced by `byte`.
fn corrupted(at: usize, byte: u8) -> Vec<u8> {
    let mut frame = encode_frame(&heartbeat(1)).expect("encodes");
    frame[at] = byte;
    frame
}

fn decode_all(bytes: &[u8]) -> Result<Option<Message>, CodecError> {
    FrameDecoder::default().decode(&mut BytesMut::from(bytes))
}

// ---- Strategies --------------------------------------------------------------------

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        any::<u64>().prop_map(|ttl_ticks| Command::Grant { ttl_ticks }),
        any::<u64>().prop_map(|session| Command::Revoke { session }),
        (
            "[a-z]{0,12}",
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(election, session, value)| Command::Campaign {
                election,
                session,
                value
            }),
        (
            "\\PC{0,12}",
            proptest::collection::vec(any::<u8>(), 0..32),
            "[a-z]{0,8}",
            any::<u64>()
        )
            .prop_map(|(key, value, election, token)| Command::FencedPut {
                key,
                value,
                election,
                token
            }),
        proptest::collection::vec((any::<u64>(), any::<u64>()), 0..4)
            .prop_map(|remaining| Command::Checkpoint { remaining }),
    ]
}

fn membership() -> impl Strategy<Value = Membership> {
    (
        proptest::collection::btree_set(0u64..8, 0..5),
        proptest::collection::btree_set(8u64..12, 0..3),
    )
        .prop_map(|(voters, learners)| Membership {
            voters,
            voters_outgoing: Default::default(),
            learners,
        })
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        any::<u64>(),
        any::<u64>(),
        prop_oneof![
            Just(Payload::Noop),
            command().prop_map(Payload::Command),
            membership().prop_map(Payload::Membership),
        ],
    )
        .prop_map(|(term, index, payload)| Entry {
            term,
            index,
            payload,
        })
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        (any::<u64>(), any::<u64>()).prop_map(|(last_log_index, last_log_term)| Body::PreVote {
            last_log_index,
            last_log_term
        }),
        any::<bool>().prop_map(|granted| Body::PreVoteResponse { granted }),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(last_log_index, last_log_term, transfer)| Body::RequestVote {
                last_log_index,
                last_log_term,
                transfer
            }
        ),
        any::<bool>().prop_map(|granted| Body::RequestVoteResponse { granted }),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::collection::vec(entry(), 0..6),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(prev_log_index, prev_log_term, entries, leader_commit, sent_tick)| {
                    Body::AppendEntries {
                        prev_log_index,
                        prev_log_term,
                        entries,
                        leader_commit,
                        sent_tick,
                    }
                }
            ),
        (
            any::<bool>(),
            any::<u64>(),
            proptest::option::of((proptest::option::of(any::<u64>()), any::<u64>())),
            any::<u64>()
        )
            .prop_map(|(success, match_index, hint, sent_tick)| {
                Body::AppendEntriesResponse {
                    success,
                    match_index,
                    hint: hint.map(|(conflict_term, conflict_index)| RejectHint {
                        conflict_term,
                        conflict_index,
                    }),
                    sent_tick,
                }
            }),
        (
            any::<u64>(),
            any::<u64>(),
            membership(),
            proptest::collection::vec(any::<u8>(), 0..256),
            any::<u64>()
        )
            .prop_map(
                |(index, term, membership, data, sent_tick)| Body::InstallSnapshot {
                    snapshot: Snapshot {
                        index,
                        term,
                        membership,
                        data
                    },
                    sent_tick,
                }
            ),
        Just(Body::TimeoutNow),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (any::<u64>(), any::<u64>(), any::<u64>(), body()).prop_map(|(from, to, term, body)| Message {
        from,
        to,
        term,
        body,
    })
}

// ---- Properties --------------------------------------------------------------------

proptest! {
    #[test]
    fn round_trip(m in message()) {
        let frame = encode_frame(&m).expect("encodes");
        let mut buf = BytesMut::from(&frame[..]);
        prop_assert_eq!(FrameDecoder::default().decode(&mut buf).expect("decodes"), Some(m));
        prop_assert!(buf.is_empty(), "the whole frame is consumed");
    }

    /// Frames cut into arbitrary chunks, as a socket delivers them, decode to the same
    /// messages in the same order.
    #[test]
    fn incremental_decoding_of_a_stream(
        messages in proptest::collection::vec(message(), 1..8),
        cuts in proptest::collection::vec(1usize..64, 1..64),
    ) {
        let mut stream = Vec::new();
        for m in &messages {
            encode_message_into(m, FRAME_BYTES_MAX_DEFAULT, &mut stream).expect("encodes");
        }
        let mut decoder = FrameDecoder::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut rest = &stream[..];
        let mut cuts = cuts.into_iter().cycle();
        while !rest.is_empty() {
            let n = cuts.next().expect("cycle").min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(m) = decoder.decode(&mut buf).expect("valid stream") {
                got.push(m);
            }
        }
        prop_assert_eq!(got, messages);
        prop_assert!(buf.is_empty());
    }

    /// Fuzz-style: arbitrary bytes never panic and never decode forever.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let mut buf = BytesMut::from(&bytes[..]);
        let mut decoder = FrameDecoder::new(4096);
        for _ in 0..bytes.len() + 1 {
            match decoder.decode_frame(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// Random bytes behind a valid header (so they reach the checksum and the payload
    /// decoder) never panic either.
    #[test]
    fn random_payload_behind_valid_header_never_panics(
        payload in proptest::collection::vec(any::<u8>(), 0..512),
        hello_flag in any::<bool>(),
    ) {
        let frame = framed(u8::from(hello_flag), &payload);
        let _ = FrameDecoder::default().decode_frame(&mut BytesMut::from(&frame[..]));
    }

    /// Any single corrupted byte of a frame is detected: decoding never yields a message
    /// (the hello flag, if flipped on, makes it an unexpected hello at best).
    #[test]
    fn any_corrupted_byte_is_detected(m in message(), at in any::<prop::sample::Index>(), xor in 1u8..=255) {
        let mut frame = encode_frame(&m).expect("encodes");
        let at = at.index(frame.len());
        frame[at] ^= xor;
        let result = decode_all(&frame);
        prop_assert!(
            !matches!(result, Ok(Some(_))),
            "corrupting byte {} with {:#04x} went unnoticed: {:?}", at, xor, result
        );
    }
}

// ---- Each corruption's typed error -------------------------------------------------

#[test]
fn wrong_magic_is_bad_magic() {
    let frame = corrupted(0, b'X');
    assert!(matches!(decode_all(&frame), Err(CodecError::BadMagic { found }) if found == b"XNR1"));
    // Detected from the very first byte, without waiting for a whole header.
    assert!(matches!(decode_all(b"G"), Err(CodecError::BadMagic { .. })));
    assert!(matches!(
        decode_all(b"TNX"),
        Err(CodecError::BadMagic { .. })
    ));
}

#[test]
fn unknown_version_is_unsupported_version() {
    let frame = corrupted(4, 2);
    assert!(matches!(
        decode_all(&frame),
        Err(CodecError::UnsupportedVersion { found: 2 })
    ));
    assert!(matches!(
        decode_all(&frame[..5]),
        Err(CodecError::UnsupportedVersion { found: 2 })
    ));
}

#[test]
fn unknown_flag_bits_are_unknown_flags() {
    assert!(matches!(
        decode_all(&corrupted(5, 0b1000_0000)),
        Err(CodecError::UnknownFlags { flags: 0b1000_0000 })
    ));
}

#[test]
fn oversize_length_is_too_large_before_any_allocation() {
    let mut header = encode_frame(&heartbeat(1)).expect("encodes")[..HEADER_BYTES].to_vec();
    header[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
    let mut buf = BytesMut::from(&header[..10]); // not even the checksum yet
    let capacity_before = buf.capacity();
    let err = FrameDecoder::new(1 << 20)
        .decode(&mut buf)
        .expect_err("too large");
    assert!(
        matches!(err, CodecError::TooLarge { len, max } if len == HEADER_BYTES + u32::MAX as usize && max == 1 << 20),
        "{err}"
    );
    assert_eq!(
        buf.capacity(),
        capacity_before,
        "nothing reserved for a refused frame"
    );
}

#[test]
fn frame_exactly_at_the_cap_is_accepted_and_one_byte_more_is_not() {
    let frame = encode_frame(&heartbeat(1)).expect("encodes");
    let exact = frame.len();
    assert!(FrameDecoder::new(exact)
        .decode(&mut BytesMut::from(&frame[..]))
        .expect("fits")
        .is_some());
    assert!(matches!(
        FrameDecoder::new(exact - 1).decode(&mut BytesMut::from(&frame[..])),
        Err(CodecError::TooLarge { .. })
    ));
    let mut out = Vec::new();
    encode_message_into(&heartbeat(1), exact, &mut out).expect("fits");
    assert!(matches!(
        encode_message_into(&heartbeat(1), exact - 1, &mut Vec::new()),
        Err(CodecError::TooLarge { len, max }) if len == exact && max == exact - 1
    ));
}

#[test]
fn encoding_a_message_over_the_default_cap_fails() {
    let m = common::snapshot_message(1, 2, vec![0; FRAME_BYTES_MAX_DEFAULT]);
    assert!(
        matches!(encode_frame(&m), Err(CodecError::TooLarge { max, .. }) if max == FRAME_BYTES_MAX_DEFAULT)
    );
}

#[test]
fn flipped_payload_bit_is_checksum_mismatch() {
    let mut frame = encode_frame(&heartbeat(1)).expect("encodes");
    frame[HEADER_BYTES + 3] ^= 0x10;
    assert!(matches!(
        decode_all(&frame),
        Err(CodecError::ChecksumMismatch { .. })
    ));
    let mut frame = encode_frame(&heartbeat(1)).expect("encodes");
    frame[12] ^= 0x01; // the checksum field itself
    assert!(matches!(
        decode_all(&frame),
        Err(CodecError::ChecksumMismatch { .. })
    ));
}

#[test]
fn checksummed_garbage_is_malformed() {
    for payload in [&[][..], &[0xff; 7][..], &[0u8; 3][..]] {
        assert!(
            matches!(
                decode_all(&framed(0, payload)),
                Err(CodecError::Malformed(_))
            ),
            "{payload:?}"
        );
    }
}

#[test]
fn trailing_bytes_inside_a_payload_are_malformed() {
    // A valid message with one extra byte inside the frame: lengths must agree exactly.
    let frame = encode_frame(&heartbeat(1)).expect("encodes");
    let mut payload = frame[HEADER_BYTES..].to_vec();
    payload.push(0);
    let bad = framed(frame[5], &payload);
    assert!(matches!(decode_all(&bad), Err(CodecError::Malformed(_))));
}

#[test]
fn a_lying_length_inside_the_payload_does_not_allocate_it() {
    // An AppendEntries whose entry count claims u64::MAX entries in a 60-byte payload.
    let frame = encode_frame(&heartbeat(1)).expect("encodes");
    let mut payload = frame[HEADER_BYTES..].to_vec();
    // from, to, term (3 x u64), variant tag (u32), prev_log_index, prev_log_term, then
    // the entries' length.
    let at = 3 * 8 + 4 + 2 * 8;
    payload[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let bad = framed(frame[5], &payload);
    assert!(matches!(decode_all(&bad), Err(CodecError::Malformed(_))));
}

#[test]
fn hello_where_a_message_is_expected_is_unexpected_frame() {
    let hello = common::hello("c", 1);
    assert!(matches!(
        decode_all(&hello),
        Err(CodecError::UnexpectedFrame {
            expected: "Message",
            found: "Hello"
        })
    ));
    let frame = FrameDecoder::new(HELLO_FRAME_BYTES_MAX)
        .decode_frame(&mut BytesMut::from(&hello[..]))
        .expect("decodes");
    assert!(matches!(frame, Some(Frame::Hello(h)) if h.node_id == 1));
}

#[test]
fn hello_too_long_for_the_handshake_cap_is_refused() {
    let hello = Hello {
        cluster_id: "x".repeat(2 * HELLO_FRAME_BYTES_MAX),
        node_id: 1,
        protocol_version: PROTOCOL_VERSION,
    };
    assert!(matches!(
        encode_hello(&hello),
        Err(CodecError::TooLarge { .. })
    ));
}

#[test]
fn errors_read_well() {
    let mut frame = encode_frame(&heartbeat(1)).expect("encodes");
    frame[4] = 9;
    let err = decode_all(&frame).expect_err("bad version");
    assert_eq!(
        err.to_string(),
        "unsupported protocol version 9 (this node speaks 1)"
    );
    frame[0] = b'Z';
    let err = decode_all(&frame).expect_err("bad magic");
    assert_eq!(
        err.to_string(),
        "bad magic: expected [54, 4e, 52, 31], found [5a, 4e, 52, 31]"
    );
}
