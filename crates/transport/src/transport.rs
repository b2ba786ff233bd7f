//! Starting the transport, and the handle the server holds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tenure_core::message::Message;
use tenure_core::types::NodeId;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::TransportConfig;
use crate::error::{Result, SendError, TransportError};
use crate::inbound::{self, InboundCtx};
use crate::metrics::{Counters, PeerShared, PeerState, TransportMetrics};
use crate::outbound::{self, OutboundCtx};

/// State shared by the handle and every task. Tasks hold this, never the handle's inner
/// state, so that dropping the last handle really does stop them.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This node's id.
    pub(crate) id: NodeId,
    /// This cluster's id, for the handshake.
    pub(crate) cluster_id: String,
    /// Transport-wide counters.
    pub(crate) counters: Counters,
    /// The configured peers; the set never changes after start.
    pub(crate) peers: BTreeMap<NodeId, Arc<PeerShared>>,
    /// Mutual TLS, if on.
    pub(crate) tls: Option<crate::tls::PeerTls>,
}

/// The limits and timeouts the tasks need, copied out of the configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) frame_bytes_max: usize,
    pub(crate) batch_bytes_max: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) write_timeout: Duration,
    pub(crate) reconnect_backoff_min: Duration,
    pub(crate) reconnect_backoff_max: Duration,
}

/// A peer connection's byte stream: plain TCP or TLS over it.
pub(crate) trait PeerIo:
    tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin
{
}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> PeerIo for T {}

/// Resolves once shutdown is requested or every handle is gone (the sender dropped).
pub(crate) async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which is a shutdown too.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// The TCP transport between tenure server nodes. See the crate documentation.
#[derive(Debug)]
pub struct Transport;

impl Transport {
    /// Validates `config`, then spawns the acceptor and one writer per peer on the current
    /// Tokio runtime.
    ///
    /// Returns the handle for sending, and the bounded stream of messages received from
    /// peers (every one addressed to this node, from the peer its connection's handshake
    /// named). Writers start dialing at once; messages sent before a peer's connection is
    /// up are dropped, as Raft expects of a lossy network.
    ///
    /// Must be called from within a Tokio runtime ([`TransportError::NoRuntime`] otherwise).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use tenure_core::message::{Body, Message};
    /// use tenure_transport::{Transport, TransportConfig};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// runtime.block_on(async {
    ///     let (l1, l2) = (
    ///         tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    ///         tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    ///     );
    ///     let (a1, a2) = (l1.local_addr()?, l2.local_addr()?);
    ///     let (one, _inbound1) =
    ///         Transport::start(TransportConfig::new(1, "demo", l1, BTreeMap::from([(2, a2)])))?;
    ///     let (_two, mut inbound2) =
    ///         Transport::start(TransportConfig::new(2, "demo", l2, BTreeMap::from([(1, a1)])))?;
    ///
    ///     // Sends are dropped until the connection is up; Raft would simply retry later.
    ///     while !one.peer_states()[&2].outbound_connected {
    ///         tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    ///     }
    ///     one.send(Message { from: 1, to: 2, term: 1, body: Body::TimeoutNow })?;
    ///     let received = inbound2.recv().await.expect("node 2 is running");
    ///     assert_eq!(received.body, Body::TimeoutNow);
    ///     one.shutdown().await;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn start(config: TransportConfig) -> Result<(TransportHandle, mpsc::Receiver<Message>)> {
        config.validate()?;
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TransportError::NoRuntime)?;
        let local_addr = config
            .listener
            .local_addr()
            .map_err(TransportError::LocalAddr)?;
        let limits = Limits {
            frame_bytes_max: config.frame_bytes_max,
            batch_bytes_max: config.batch_bytes_max,
            handshake_timeout: config.handshake_timeout,
            connect_timeout: config.connect_timeout,
            write_timeout: config.write_timeout,
            reconnect_backoff_min: config.reconnect_backoff_min,
            reconnect_backoff_max: config.reconnect_backoff_max,
        };
        let shared = Arc::new(Shared {
            id: config.id,
            cluster_id: config.cluster_id,
            counters: Counters::default(),
            peers: config
                .peers
                .iter()
                .map(|(&id, addr)| (id, Arc::new(PeerShared::new(addr.clone()))))
                .collect(),
            tls: config.tls,
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (inbound_tx, inbound_rx) = mpsc::channel(config.inbound_queue_max);

        let mut tasks = Vec::with_capacity(shared.peers.len() + 1);
        let mut outbound_queues = BTreeMap::new();
        for (&peer_id, peer) in &shared.peers {
            let (tx, rx) = mpsc::channel(config.outbound_queue_max);
            outbound_queues.insert(peer_id, tx);
            let ctx = OutboundCtx {
                shared: Arc::clone(&shared),
                peer_id,
                peer: Arc::clone(peer),
                limits,
                // Mixing in the peer id gives each writer its own jitter sequence.
                rng: ChaCha8Rng::seed_from_u64(
                    config.rng_seed ^ peer_id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
            };
            tasks.push(runtime.spawn(outbound::run(ctx, rx, shutdown_rx.clone())));
        }
        let ctx = InboundCtx::new(
            Arc::clone(&shared),
            inbound_tx,
            limits,
            config.connections_max,
        );
        tasks.push(runtime.spawn(inbound::run_acceptor(config.listener, ctx, shutdown_rx)));
        info!(
            node = shared.id,
            %local_addr,
            peers = shared.peers.len(),
            tls = shared.tls.is_some(),
            "transport started"
        );
        let handle = TransportHandle {
            inner: Arc::new(HandleInner {
                shared,
                local_addr,
                outbound_queues,
                shutdown_tx,
                tasks: Mutex::new(tasks),
            }),
        };
        Ok((handle, inbound_rx))
    }
}

/// The sending side of a running transport, and its controls and metrics.
///
/// Cheap to clone. Dropping the last clone stops every task of the transport, as
/// [`TransportHandle::shutdown`] does, without waiting for them.
#[derive(Clone, Debug)]
pub struct TransportHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug)]
struct HandleInner {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    /// One bounded queue per peer, read by that peer's writer task.
    outbound_queues: BTreeMap<NodeId, mpsc::Sender<Message>>,
    /// Set to `true` to stop every task; dropping it (with the last handle) does the same.
    shutdown_tx: watch::Sender<bool>,
    /// The acceptor and the writers, awaited by `shutdown`.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl TransportHandle {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.shared.id
    }

    /// The address the transport accepts peer connections on.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// Queues `message` for its addressee without waiting.
    ///
    /// The message is dropped (and counted) instead when the addressee is unknown or
    /// blocked, when there is no connection to it, or when its queue is full: blocking the
    /// consensus task on a slow peer would hurt more than the loss, which Raft repairs by
    /// retransmitting. The error says which; callers may ignore it.
    pub fn send(&self, message: Message) -> Result<(), SendError> {
        let shared = &self.inner.shared;
        let counters = &shared.counters;
        if *self.inner.shutdown_tx.borrow() {
            return Err(SendError::ShutDown);
        }
        if message.from != shared.id {
            counters.dropped_unknown_peer.inc();
            return Err(SendError::NotFromThisNode {
                from: message.from,
                id: shared.id,
            });
        }
        let to = message.to;
        let (Some(peer), Some(queue)) =
            (shared.peers.get(&to), self.inner.outbound_queues.get(&to))
        else {
            counters.dropped_unknown_peer.inc();
            return Err(SendError::UnknownPeer { to });
        };
        if peer.is_blocked_out() {
            counters.dropped_blocked.inc();
            peer.dropped.inc();
            return Err(SendError::Blocked { to });
        }
        if !peer.is_connected() {
            counters.dropped_peer_down.inc();
            peer.dropped.inc();
            return Err(SendError::PeerDown { to });
        }
        match queue.try_send(message) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                counters.dropped_queue_full.inc();
                peer.dropped.inc();
                Err(SendError::QueueFull { to })
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError::ShutDown),
        }
    }

    /// **Test hook** (fault injection): drops all traffic to and from `peers` at this
    /// node's transport, replacing any previous set. An empty set unblocks everyone.
    ///
    /// Messages to a blocked peer are dropped by [`TransportHandle::send`] (and by its
    /// writer if already queued); messages from it are dropped after decoding, before
    /// delivery. Connections stay up, so unblocking restores traffic at once. Blocking
    /// every peer of one node partitions it away; ids that are not peers are ignored.
    /// Meant for partition tests of the server, not for production use.
    pub fn set_blocked(&self, peers: BTreeSet<NodeId>) {
        self.set_blocked_directed(peers.clone(), peers);
    }

    /// **Test hook** (fault injection): like [`TransportHandle::set_blocked`], one
    /// direction at a time. Messages from the peers in `inbound` are dropped on arrival;
    /// messages to the peers in `outbound` are dropped before they leave. A peer in only
    /// one set sees a one-way link: this node hears it but cannot answer, or the reverse.
    /// Both sets replace any previous ones.
    pub fn set_blocked_directed(&self, inbound: BTreeSet<NodeId>, outbound: BTreeSet<NodeId>) {
        for (id, peer) in &self.inner.shared.peers {
            peer.blocked_in
                .store(inbound.contains(id), Ordering::Relaxed);
            peer.blocked_out
                .store(outbound.contains(id), Ordering::Relaxed);
        }
        if !inbound.is_empty() || !outbound.is_empty() {
            warn!(node = self.inner.shared.id, from = ?inbound, to = ?outbound, "test hook: traffic from and to peers blocked");
        }
    }

    /// The peers whose traffic is currently blocked in both directions.
    pub fn blocked(&self) -> BTreeSet<NodeId> {
        self.inner
            .shared
            .peers
            .iter()
            .filter(|(_, peer)| peer.is_blocked_in() && peer.is_blocked_out())
            .map(|(&id, _)| id)
            .collect()
    }

    /// A snapshot of the transport-wide counters.
    pub fn metrics(&self) -> TransportMetrics {
        self.inner.shared.counters.snapshot()
    }

    /// A snapshot of every peer's connection state and counters.
    pub fn peer_states(&self) -> BTreeMap<NodeId, PeerState> {
        self.inner
            .shared
            .peers
            .iter()
            .map(|(&id, peer)| {
                let queue_len = self
                    .inner
                    .outbound_queues
                    .get(&id)
                    .map_or(0, |queue| queue.max_capacity() - queue.capacity());
                (id, peer.snapshot(queue_len))
            })
            .collect()
    }

    /// Stops every task, closes every connection and the listener, and waits until all of
    /// that has happened (so the port can be bound again). Messages still queued are
    /// dropped, as a crash would; the inbound receiver yields what it holds, then `None`.
    /// Calling it again, or from another clone, returns at once.
    pub async fn shutdown(&self) {
        self.inner.shutdown_tx.send_replace(true);
        let tasks = std::mem::take(
            &mut *self
                .inner
                .tasks
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for task in tasks {
            if let Err(e) = task.await {
                warn!(node = self.inner.shared.id, error = %e, "transport task failed");
            }
        }
        info!(node = self.inner.shared.id, "transport shut down");
    }
}
