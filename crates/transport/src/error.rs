//! The transport's error types.

use std::io;
use std::time::Duration;

use tenure_core::types::NodeId;

use crate::codec::CodecError;

/// The crate's result type.
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// Why the transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The configuration is invalid.
    #[error("invalid transport configuration: {0}")]
    Config(#[from] ConfigError),
    /// [`crate::Transport::start`] was called outside a Tokio runtime.
    #[error("the transport must be started from within a Tokio runtime")]
    NoRuntime,
    /// The listener's local address could not be read.
    #[error("cannot read the listener's address: {0}")]
    LocalAddr(#[source] io::Error),
}

/// A configuration field out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The cluster id is empty or too long for the handshake.
    #[error("cluster_id must be 1..={max} bytes, got {len}")]
    ClusterIdLength {
        /// Its length in bytes.
        len: usize,
        /// The longest allowed.
        max: usize,
    },
    /// With TLS on, the cluster id must fit in a certificate's DNS name.
    #[error("cluster_id {cluster_id:?} cannot be used with TLS: it must be 1 to 63 lowercase letters, digits and inner hyphens")]
    ClusterIdNotDnsLabel {
        /// The cluster id.
        cluster_id: String,
    },
    /// The node's own id is listed among its peers.
    #[error("peers must not contain this node's own id {id}")]
    SelfInPeers {
        /// This node's id.
        id: NodeId,
    },
    /// `frame_bytes_max` is below the handshake frame cap or above what the header can say.
    #[error("frame_bytes_max must be in {min}..={max}, got {value}")]
    FrameBytesMax {
        /// The value given.
        value: usize,
        /// Smallest allowed.
        min: usize,
        /// Largest allowed.
        max: usize,
    },
    /// A limit or timeout that must be positive is zero.
    #[error("{name} must not be zero")]
    Zero {
        /// The field's name.
        name: &'static str,
    },
    /// `reconnect_backoff_min` exceeds `reconnect_backoff_max`.
    #[error("reconnect_backoff_min {min:?} exceeds reconnect_backoff_max {max:?}")]
    BackoffInverted {
        /// The minimum given.
        min: Duration,
        /// The maximum given.
        max: Duration,
    },
    /// Fewer connection slots than peers.
    #[error("connections_max {connections_max} is below the number of peers {peers}")]
    ConnectionsMaxBelowPeers {
        /// The limit given.
        connections_max: usize,
        /// How many peers are configured.
        peers: usize,
    },
}

/// Why [`crate::TransportHandle::send`] dropped a message.
///
/// Informational: the message is gone and counted in the metrics; Raft's retransmission
/// recovers. Callers on the consensus path usually ignore it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// `to` is not a configured peer.
    #[error("node {to} is not a configured peer")]
    UnknownPeer {
        /// The addressee.
        to: NodeId,
    },
    /// `from` is not this node; the receiver would reject the message anyway.
    #[error("message from {from} cannot be sent by node {id}")]
    NotFromThisNode {
        /// The message's sender field.
        from: NodeId,
        /// This node's id.
        id: NodeId,
    },
    /// The peer is blocked by [`crate::TransportHandle::set_blocked`].
    #[error("traffic to node {to} is blocked")]
    Blocked {
        /// The addressee.
        to: NodeId,
    },
    /// There is no connection to the peer right now.
    #[error("node {to} is not connected")]
    PeerDown {
        /// The addressee.
        to: NodeId,
    },
    /// The peer's outbound queue is full.
    #[error("outbound queue to node {to} is full")]
    QueueFull {
        /// The addressee.
        to: NodeId,
    },
    /// The transport has shut down.
    #[error("the transport has shut down")]
    ShutDown,
}

/// Why an inbound connection was refused during its handshake. Logged, never returned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// The socket failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The first frame could not be decoded.
    #[error("bad frame: {0}")]
    Codec(#[from] CodecError),
    /// The connection closed before a whole hello arrived.
    #[error("connection closed before the hello")]
    ClosedEarly,
    /// No hello within the handshake timeout.
    #[error("no hello within {0:?}")]
    Timeout(Duration),
    /// The TLS handshake failed (no certificate, one the CA did not sign, expired, …).
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The certificate is valid but not for the node the hello claims to be.
    #[error("the certificate does not name node {node_id} of this cluster ({why})")]
    CertificateMismatch {
        /// The id the hello claimed.
        node_id: NodeId,
        /// What the name check said.
        why: String,
    },
    /// The dialer belongs to another cluster.
    #[error(
        "cluster id {found:?} does not match ours {expected:?} (a cluster restored or \
         recovered into generation N is named ID@gN: its members refuse every other \
         generation's)"
    )]
    ClusterMismatch {
        /// Ours.
        expected: String,
        /// Theirs.
        found: String,
    },
    /// The dialer's id is not one of our peers (or is our own).
    #[error("node {node_id} is not a configured peer")]
    UnknownPeer {
        /// The id the dialer claimed.
        node_id: NodeId,
    },
    /// The hello names a protocol version we do not speak.
    #[error("hello names protocol version {found}, this node speaks {expected}")]
    VersionMismatch {
        /// Ours.
        expected: u8,
        /// Theirs.
        found: u8,
    },
}
