//! Transport configuration, validated before anything starts.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure_core::types::NodeId;

use crate::addr::HostPort;
use crate::codec::{
    CLUSTER_ID_BYTES_MAX, FRAME_BYTES_MAX_DEFAULT, FRAME_BYTES_MAX_LIMIT, HELLO_FRAME_BYTES_MAX,
};
use crate::error::ConfigError;

/// Default [`TransportConfig::outbound_queue_max`].
pub const OUTBOUND_QUEUE_MAX_DEFAULT: usize = 1024;
/// Default [`TransportConfig::inbound_queue_max`].
pub const INBOUND_QUEUE_MAX_DEFAULT: usize = 4096;
/// Default [`TransportConfig::batch_bytes_max`].
pub const BATCH_BYTES_MAX_DEFAULT: usize = 1024 * 1024;
/// Default [`TransportConfig::connections_max`].
pub const CONNECTIONS_MAX_DEFAULT: usize = 64;
/// Default [`TransportConfig::handshake_timeout`].
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// Default [`TransportConfig::connect_timeout`].
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Default [`TransportConfig::write_timeout`].
pub const WRITE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// Default [`TransportConfig::reconnect_backoff_min`].
pub const RECONNECT_BACKOFF_MIN_DEFAULT: Duration = Duration::from_millis(50);
/// Default [`TransportConfig::reconnect_backoff_max`].
pub const RECONNECT_BACKOFF_MAX_DEFAULT: Duration = Duration::from_secs(2);

/// Everything [`crate::Transport::start`] needs.
///
/// Build it with [`TransportConfig::new`], which fills every limit with its default, then
/// adjust fields as needed; [`TransportConfig::validate`] runs when the transport starts.
#[derive(Debug)]
pub struct TransportConfig {
    /// This node's id: sent in the handshake and required as `from` of every message sent
    /// and `to` of every message received.
    pub id: NodeId,
    /// The cluster's name. Nodes of different clusters refuse each other's connections, so
    /// a misconfigured address cannot merge two clusters.
    pub cluster_id: String,
    /// The cluster's generation (0 unless it was restored from a backup or recovered from a
    /// lost majority): the handshake names it, so members of different generations refuse
    /// each other ([`crate::codec::Hello::cluster_id`]).
    pub generation: u64,
    /// Where peers connect to. Passed in already bound so that tests (and the server's
    /// `--listen :0`) can bind port 0 and learn the port before peers are configured; or
    /// the peer connections of a port shared with the client API ([`Incoming::Handed`](crate::Incoming::Handed)).
    pub listener: crate::Incoming,
    /// Every other node and where it listens. Only these ids may connect, and only these
    /// ids can be sent to. Must not contain [`TransportConfig::id`]. A host name is
    /// resolved on every dial, so a peer that moves to a new IP address under its name is
    /// found again at its next reconnect.
    pub peers: BTreeMap<NodeId, HostPort>,
    /// Cap on one frame, header included, in both directions. Bounds the memory a peer can
    /// make this node buffer per connection; must fit the largest snapshot sent whole.
    pub frame_bytes_max: usize,
    /// Messages waiting for one peer's connection. When full, new messages to that peer are
    /// dropped, not waited for: Raft retransmits, and a blocked consensus task is worse.
    pub outbound_queue_max: usize,
    /// Messages received but not yet taken by the consensus task. When full, connections
    /// stop reading, so TCP pushes back on the senders (whose own queues then drop).
    pub inbound_queue_max: usize,
    /// Bytes of frames gathered into one socket write before it is issued. Batching many
    /// small messages into one write saves syscalls; the cap bounds the buffer.
    pub batch_bytes_max: usize,
    /// Inbound connections served at once; more are closed on accept. Bounds the tasks and
    /// buffers strangers can make this node hold.
    pub connections_max: usize,
    /// Time an inbound connection gets to send its hello; silent connections are closed.
    pub handshake_timeout: Duration,
    /// Time allowed for one outbound TCP connect before it counts as failed.
    pub connect_timeout: Duration,
    /// Time allowed for one batch write; a peer that stops reading for this long is
    /// treated as gone and reconnected.
    pub write_timeout: Duration,
    /// First delay before reconnecting to a peer; doubles per failure up to the max.
    pub reconnect_backoff_min: Duration,
    /// Longest delay between reconnect attempts.
    pub reconnect_backoff_max: Duration,
    /// Mutual TLS between peers ([`crate::tls`]). `None` is plaintext, which anyone who
    /// can reach the peer port can speak; the server allows it only on loopback or when
    /// told explicitly.
    pub tls: Option<crate::tls::PeerTls>,
    /// Seed for the reconnect jitter, so that runs can be reproduced; the default derives
    /// it from `id`, which already spreads nodes apart.
    pub rng_seed: u64,
}

impl TransportConfig {
    /// A configuration with every limit at its default. `peers` may be socket addresses or
    /// [`HostPort`]s (names resolved on every dial).
    pub fn new<A: Into<HostPort>>(
        id: NodeId,
        cluster_id: impl Into<String>,
        listener: impl Into<crate::Incoming>,
        peers: BTreeMap<NodeId, A>,
    ) -> TransportConfig {
        TransportConfig {
            id,
            cluster_id: cluster_id.into(),
            generation: 0,
            listener: listener.into(),
            peers: peers.into_iter().map(|(id, a)| (id, a.into())).collect(),
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            outbound_queue_max: OUTBOUND_QUEUE_MAX_DEFAULT,
            inbound_queue_max: INBOUND_QUEUE_MAX_DEFAULT,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            write_timeout: WRITE_TIMEOUT_DEFAULT,
            reconnect_backoff_min: RECONNECT_BACKOFF_MIN_DEFAULT,
            reconnect_backoff_max: RECONNECT_BACKOFF_MAX_DEFAULT,
            rng_seed: id ^ 0x7465_6e75_7265_0000, // "tenure" in ASCII, mixed with the id
            tls: None,
        }
    }

    /// Checks every field; the transport refuses to start on the first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster_id.is_empty() || self.cluster_id.len() > CLUSTER_ID_BYTES_MAX {
            return Err(ConfigError::ClusterIdLength {
                len: self.cluster_id.len(),
                max: CLUSTER_ID_BYTES_MAX,
            });
        }
        if self.tls.is_some() && !crate::tls::cluster_id_is_dns_label(&self.cluster_id) {
            return Err(ConfigError::ClusterIdNotDnsLabel {
                cluster_id: self.cluster_id.clone(),
            });
        }
        if self.peers.contains_key(&self.id) {
            return Err(ConfigError::SelfInPeers { id: self.id });
        }
        if !(HELLO_FRAME_BYTES_MAX..=FRAME_BYTES_MAX_LIMIT).contains(&self.frame_bytes_max) {
            return Err(ConfigError::FrameBytesMax {
                value: self.frame_bytes_max,
                min: HELLO_FRAME_BYTES_MAX,
                max: FRAME_BYTES_MAX_LIMIT,
            });
        }
        for (name, value) in [
            ("outbound_queue_max", self.outbound_queue_max),
            ("inbound_queue_max", self.inbound_queue_max),
            ("batch_bytes_max", self.batch_bytes_max),
            ("connections_max", self.connections_max),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        for (name, value) in [
            ("handshake_timeout", self.handshake_timeout),
            ("connect_timeout", self.connect_timeout),
            ("write_timeout", self.write_timeout),
            ("reconnect_backoff_min", self.reconnect_backoff_min),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Zero { name });
            }
        }
        if self.reconnect_backoff_min > self.reconnect_backoff_max {
            return Err(ConfigError::BackoffInverted {
                min: self.reconnect_backoff_min,
                max: self.reconnect_backoff_max,
            });
        }
        // Each peer holds one inbound connection, plus one more while a reconnect replaces
        // a stale one; fewer slots than peers would lock a healthy peer out.
        if self.connections_max < self.peers.len() {
            return Err(ConfigError::ConnectionsMaxBelowPeers {
                connections_max: self.connections_max,
                peers: self.peers.len(),
            });
        }
        Ok(())
    }
}
