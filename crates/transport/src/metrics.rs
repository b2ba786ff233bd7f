//! Counters the server exports: plain atomics inside, plain snapshots outside.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crate::addr::HostPort;

/// A monotonically increasing counter. Relaxed ordering: counters are read for reporting,
/// never to synchronize anything.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Transport-wide counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) frames_sent: Counter,
    pub(crate) bytes_sent: Counter,
    pub(crate) frames_received: Counter,
    pub(crate) bytes_received: Counter,
    pub(crate) dropped_queue_full: Counter,
    pub(crate) dropped_peer_down: Counter,
    pub(crate) dropped_blocked: Counter,
    pub(crate) dropped_unknown_peer: Counter,
    pub(crate) dropped_too_large: Counter,
    pub(crate) dropped_misaddressed: Counter,
    pub(crate) decode_errors: Counter,
    pub(crate) handshake_failures: Counter,
    pub(crate) connections_rejected: Counter,
    pub(crate) connect_failures: Counter,
    pub(crate) reconnects: Counter,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> TransportMetrics {
        TransportMetrics {
            frames_sent: self.frames_sent.get(),
            bytes_sent: self.bytes_sent.get(),
            frames_received: self.frames_received.get(),
            bytes_received: self.bytes_received.get(),
            dropped_queue_full: self.dropped_queue_full.get(),
            dropped_peer_down: self.dropped_peer_down.get(),
            dropped_blocked: self.dropped_blocked.get(),
            dropped_unknown_peer: self.dropped_unknown_peer.get(),
            dropped_too_large: self.dropped_too_large.get(),
            dropped_misaddressed: self.dropped_misaddressed.get(),
            decode_errors: self.decode_errors.get(),
            handshake_failures: self.handshake_failures.get(),
            connections_rejected: self.connections_rejected.get(),
            connect_failures: self.connect_failures.get(),
            reconnects: self.reconnects.get(),
        }
    }
}

/// A snapshot of the transport-wide counters; every field only grows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportMetrics {
    /// Message frames written to peers.
    pub frames_sent: u64,
    /// Bytes of those frames, headers included.
    pub bytes_sent: u64,
    /// Message frames read from peers and decoded (delivered or not).
    pub frames_received: u64,
    /// Bytes of those frames, headers included.
    pub bytes_received: u64,
    /// Messages dropped because the peer's outbound queue was full.
    pub dropped_queue_full: u64,
    /// Messages dropped because the peer was not connected (including those still queued
    /// when a connection was lost).
    pub dropped_peer_down: u64,
    /// Messages dropped, in either direction, because the peer is blocked.
    pub dropped_blocked: u64,
    /// Messages whose addressee is not a configured peer, or not sent by this node.
    pub dropped_unknown_peer: u64,
    /// Messages that could not be framed: larger than `frame_bytes_max` (or, which would be
    /// a bug, not serializable).
    pub dropped_too_large: u64,
    /// Received messages not addressed to this node or not from the handshake's node.
    pub dropped_misaddressed: u64,
    /// Inbound connections closed because a frame after the handshake failed to decode.
    pub decode_errors: u64,
    /// Inbound connections closed during the handshake (bad frame, wrong cluster, unknown
    /// node, wrong version, timeout).
    pub handshake_failures: u64,
    /// Inbound connections closed on accept because `connections_max` were open.
    pub connections_rejected: u64,
    /// Outbound connect attempts (including the hello) that failed.
    pub connect_failures: u64,
    /// Outbound connections established to a peer after its first one.
    pub reconnects: u64,
}

impl TransportMetrics {
    /// Messages dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped_queue_full
            + self.dropped_peer_down
            + self.dropped_blocked
            + self.dropped_unknown_peer
            + self.dropped_too_large
            + self.dropped_misaddressed
    }
}

/// Per-peer live state and counters.
#[derive(Debug)]
pub(crate) struct PeerShared {
    pub(crate) addr: HostPort,
    pub(crate) outbound_connected: AtomicBool,
    pub(crate) inbound_connections: AtomicUsize,
    /// Messages to the peer are dropped (test hook).
    pub(crate) blocked_out: AtomicBool,
    /// Messages from the peer are dropped (test hook).
    pub(crate) blocked_in: AtomicBool,
    pub(crate) frames_sent: Counter,
    pub(crate) bytes_sent: Counter,
    pub(crate) frames_received: Counter,
    pub(crate) bytes_received: Counter,
    pub(crate) dropped: Counter,
    pub(crate) reconnects: Counter,
    pub(crate) connects: Counter,
    pub(crate) connect_failures: Counter,
    /// Signalled when the peer connects to us: it is up again, so a writer waiting out a
    /// reconnect backoff towards it should dial now rather than leave the link one-way
    /// (a vote request that arrives but whose answer cannot leave) for up to the backoff.
    pub(crate) peer_is_up: tokio::sync::Notify,
}

impl PeerShared {
    pub(crate) fn new(addr: HostPort) -> PeerShared {
        PeerShared {
            addr,
            outbound_connected: AtomicBool::new(false),
            inbound_connections: AtomicUsize::new(0),
            blocked_out: AtomicBool::new(false),
            blocked_in: AtomicBool::new(false),
            frames_sent: Counter::default(),
            bytes_sent: Counter::default(),
            frames_received: Counter::default(),
            bytes_received: Counter::default(),
            dropped: Counter::default(),
            reconnects: Counter::default(),
            connects: Counter::default(),
            connect_failures: Counter::default(),
            peer_is_up: tokio::sync::Notify::new(),
        }
    }

    /// Whether messages to the peer are dropped.
    pub(crate) fn is_blocked_out(&self) -> bool {
        self.blocked_out.load(Ordering::Relaxed)
    }

    /// Whether messages from the peer are dropped.
    pub(crate) fn is_blocked_in(&self) -> bool {
        self.blocked_in.load(Ordering::Relaxed)
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.outbound_connected.load(Ordering::Acquire)
    }

    pub(crate) fn snapshot(&self, queue_len: usize) -> PeerState {
        PeerState {
            addr: self.addr.clone(),
            outbound_connected: self.is_connected(),
            inbound_connections: self.inbound_connections.load(Ordering::Relaxed),
            blocked: self.is_blocked_out() && self.is_blocked_in(),
            blocked_out: self.is_blocked_out(),
            blocked_in: self.is_blocked_in(),
            queue_len,
            frames_sent: self.frames_sent.get(),
            bytes_sent: self.bytes_sent.get(),
            frames_received: self.frames_received.get(),
            bytes_received: self.bytes_received.get(),
            dropped: self.dropped.get(),
            reconnects: self.reconnects.get(),
            connects: self.connects.get(),
            connect_failures: self.connect_failures.get(),
        }
    }
}

/// A snapshot of one peer's connection state and counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerState {
    /// Where this node dials the peer (a name is resolved on every dial).
    pub addr: HostPort,
    /// Whether this node's connection to the peer is up (hello sent, not yet failed).
    /// Messages sent while it is down are dropped.
    pub outbound_connected: bool,
    /// Inbound connections from the peer that passed the handshake (normally 0 or 1; 2
    /// briefly while a reconnect replaces a stale connection).
    pub inbound_connections: usize,
    /// Whether traffic with the peer is blocked in both directions (see
    /// [`crate::TransportHandle::set_blocked`]).
    pub blocked: bool,
    /// Whether messages to the peer are dropped (see
    /// [`crate::TransportHandle::set_blocked_directed`]).
    pub blocked_out: bool,
    /// Whether messages from the peer are dropped.
    pub blocked_in: bool,
    /// Messages waiting in the peer's outbound queue.
    pub queue_len: usize,
    /// Message frames written to the peer.
    pub frames_sent: u64,
    /// Bytes written to the peer.
    pub bytes_sent: u64,
    /// Message frames decoded from the peer.
    pub frames_received: u64,
    /// Bytes of those frames.
    pub bytes_received: u64,
    /// Messages to or from the peer dropped for any reason.
    pub dropped: u64,
    /// Outbound connections to the peer established after the first.
    pub reconnects: u64,
    /// Outbound connections to the peer established (hello sent), the first included.
    pub connects: u64,
    /// Outbound connect attempts to the peer (including the TLS handshake and hello) that
    /// failed.
    pub connect_failures: u64,
}
