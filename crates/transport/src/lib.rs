//! tenure-transport: the TCP transport between tenure server nodes.
//!
//! It carries [`tenure_core::message::Message`]s between the nodes of one cluster. It is
//! deliberately a *lossy* transport: Raft tolerates lost messages and retransmits, so
//! [`TransportHandle::send`] never waits. It drops (and counts) a message when the peer's
//! bounded queue is full or the peer is not connected, rather than stall the consensus task.
//!
//! # Shape
//!
//! ```text
//!  consensus task ──send()──► per-peer bounded queue ──► writer task ──TCP──► peer's acceptor
//!  consensus task ◄──inbound bounded channel◄── reader task per accepted connection ◄──TCP── peer's writer
//! ```
//!
//! Each node dials every peer for its *outbound* traffic and accepts connections for its
//! *inbound* traffic, so frames flow one way on each connection (dialer → acceptor). A
//! writer dials with exponential backoff and jitter, sends a [`Hello`], then writes batches
//! of frames; when the connection fails it discards what was queued (stale by then) and
//! reconnects. A reader checks the hello, then decodes frames. A connection that sends
//! anything invalid is logged (`tracing::warn!`, with the remote address and the error)
//! and closed; the node keeps serving everyone else and never panics on input.
//!
//! [`Transport::start`] takes an already bound [`tokio::net::TcpListener`] so that tests
//! can bind port 0, or ([`Incoming::Handed`]) the peer connections of a port it shares with
//! the client API, sorted by the port's owner.
//!
//! # Frame format (protocol version 1)
//!
//! Every frame, in both the handshake and the message stream:
//!
//! | offset | size | field    | meaning                                                        |
//! |-------:|-----:|----------|----------------------------------------------------------------|
//! | 0      | 4    | magic    | the ASCII bytes `TNR1`                                         |
//! | 4      | 1    | version  | protocol version, `1` ([`PROTOCOL_VERSION`])                   |
//! | 5      | 1    | flags    | bit 0 ([`FLAG_HELLO`]): payload is a [`Hello`]; bits 1–7 must be 0 |
//! | 6      | 4    | length   | payload length in bytes, unsigned big-endian                   |
//! | 10     | 4    | checksum | CRC-32C (Castagnoli, as in iSCSI and the WAL) of the payload, big-endian |
//! | 14     | len  | payload  | bincode 1 (fixed-width little-endian integers, no trailing bytes) of a [`Message`](tenure_core::message::Message), or of a [`Hello`] when flag bit 0 is set |
//!
//! The header is [`HEADER_BYTES`] (14) bytes. `14 + length` must not exceed the receiver's
//! `frame_bytes_max` (default [`FRAME_BYTES_MAX_DEFAULT`], 16 MiB), and the hello frame
//! must not exceed [`HELLO_FRAME_BYTES_MAX`] (1 KiB). The decoder checks the magic, version,
//! flags and length as soon as their bytes arrive, before it reserves room for a payload,
//! so a lying length costs the receiver nothing. Errors are typed ([`CodecError`]):
//! `BadMagic`, `UnsupportedVersion`, `UnknownFlags`, `TooLarge`, `ChecksumMismatch`,
//! `Malformed` (the payload is not valid bincode of the expected type), `UnexpectedFrame`.
//!
//! # Handshake
//!
//! The first frame on a connection is a hello (flag bit 0) from the dialer: its cluster id,
//! its node id and its protocol version. The acceptor closes the connection, with a log
//! line, unless the hello arrives within `handshake_timeout`, the cluster id equals its
//! own, the node id is one of its configured peers, and the version is 1. The acceptor
//! never writes; the dialer learns of a refusal when the connection closes. After the
//! hello, every frame must be a message with `to` equal to the acceptor's id and `from`
//! equal to the hello's node id; others are dropped, counted and logged (once per
//! connection). A newer connection from the same peer replaces (closes) the older one.
//!
//! # Limits
//!
//! Every queue, frame, batch and connection count has a named limit in
//! [`TransportConfig`], checked by [`TransportConfig::validate`]. Memory per inbound
//! connection is bounded by `frame_bytes_max` plus one read chunk, and by
//! [`HELLO_FRAME_BYTES_MAX`] before the handshake, so strangers can make a node hold at
//! most `connections_max` small buffers.
//!
//! # Testing hooks and metrics
//!
//! [`TransportHandle::set_blocked`] drops all traffic to and from chosen peers at this
//! node, for partition tests. [`TransportHandle::metrics`] and
//! [`TransportHandle::peer_states`] expose counters for the server to export.
#![deny(missing_docs)]

pub mod addr;
mod backoff;
pub mod cert_files;
#[cfg(feature = "certs")]
pub mod certs;
pub mod codec;
pub mod config;
pub mod error;
pub mod http;
mod inbound;
mod incoming;
pub mod metrics;
mod outbound;
pub mod tls;
mod transport;

pub use addr::{AddrError, HostPort};
pub use codec::{
    encode_frame, encode_hello, encode_message_into, CodecError, Frame, FrameDecoder, Hello,
    FLAG_HELLO, FRAME_BYTES_MAX_DEFAULT, HEADER_BYTES, HELLO_FRAME_BYTES_MAX, MAGIC,
    PROTOCOL_VERSION,
};
pub use config::TransportConfig;
pub use error::{ConfigError, Result, SendError, TransportError};
pub use incoming::Incoming;
pub use metrics::{PeerState, TransportMetrics};
pub use tls::{node_name, ClientAuth, PeerTls, TlsError, TlsFiles, TlsMaterial};
pub use transport::{
    hello_name, PeerChange, PeerEvent, Transport, TransportHandle, PEER_EVENTS_MAX,
};
