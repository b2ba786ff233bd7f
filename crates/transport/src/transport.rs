//! Starting the transport, and the handle the server holds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tenure_core::message::Message;
use tenure_core::types::NodeId;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::addr::HostPort;
use crate::config::TransportConfig;
use crate::error::{Result, SendError, TransportError};
use crate::inbound::{self, InboundCtx};
use crate::metrics::{Counters, PeerShared, PeerState, TransportMetrics};
use crate::outbound::{self, OutboundCtx};

/// Most connection events ([`PeerEvent`]) waiting for the node; more are dropped (and
/// logged): an event lost costs a fast election its speed, never its safety.
pub const PEER_EVENTS_MAX: usize = 1024;

/// What a writer saw happen to its connection to a peer, in the order it happened, for
/// fast election (`Config::fast_election`, docs/GUARANTEES.md "Fast election").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerEvent {
    /// An established outbound connection to the peer ended (closed or reset by the far
    /// side, or failed); the writer redials at once. Proves nothing on its own.
    Closed(NodeId),
    /// A dial to the peer was refused at the TCP level on every address its name resolves
    /// to (a reset answering the SYN): nothing listens on its peer port. `stamp` is the
    /// value of [`TransportHandle::set_event_stamp`] when the dial started.
    Refused {
        /// The peer dialed.
        peer: NodeId,
        /// The owner's stamp as of the dial's start.
        stamp: u64,
    },
}

/// State shared by the handle and every task. Tasks hold this, never the handle's inner
/// state, so that dropping the last handle really does stop them.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This node's id.
    pub(crate) id: NodeId,
    /// This cluster's id, for TLS names.
    pub(crate) cluster_id: String,
    /// What the handshake names: the cluster id, and its generation if not 0
    /// ([`hello_name`]).
    pub(crate) hello_name: String,
    /// Transport-wide counters.
    pub(crate) counters: Counters,
    /// The peers: those configured at start, plus those added since with
    /// [`TransportHandle::set_peer`], minus those removed with
    /// [`TransportHandle::remove_peer`]. The acceptor admits only these.
    pub(crate) peers: RwLock<BTreeMap<NodeId, Arc<PeerShared>>>,
    /// Mutual TLS, if on.
    pub(crate) tls: Option<crate::tls::PeerTls>,
    /// Connection events for the node, once it asked for them
    /// ([`TransportHandle::take_peer_events`]).
    pub(crate) events: OnceLock<mpsc::Sender<PeerEvent>>,
    /// The owner's stamp for refusals ([`TransportHandle::set_event_stamp`]).
    pub(crate) stamp: AtomicU64,
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
            hello_name: hello_name(&config.cluster_id, config.generation),
            cluster_id: config.cluster_id,
            counters: Counters::default(),
            peers: RwLock::new(BTreeMap::new()),
            tls: config.tls,
            events: OnceLock::new(),
            stamp: AtomicU64::new(0),
        });
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (inbound_tx, inbound_rx) = mpsc::channel(config.inbound_queue_max);

        let mut tasks = Vec::with_capacity(config.peers.len() + 1);
        let spawner = Spawner {
            runtime: runtime.clone(),
            limits,
            rng_seed: config.rng_seed,
            outbound_queue_max: config.outbound_queue_max,
        };
        let mut writers = BTreeMap::new();
        for (&peer_id, addr) in &config.peers {
            let (writer, task) = spawner.spawn(&shared, peer_id, addr.clone());
            writers.insert(peer_id, writer);
            tasks.push(task);
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
            peers = config.peers.len(),
            tls = shared.tls.is_some(),
            "transport started"
        );
        let handle = TransportHandle {
            inner: Arc::new(HandleInner {
                shared,
                local_addr,
                writers: RwLock::new(writers),
                spawner,
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
    /// One writer per peer: its bounded queue and its stop signal.
    writers: RwLock<BTreeMap<NodeId, Writer>>,
    /// What starting a writer for a peer added at run time needs.
    spawner: Spawner,
    /// Set to `true` to stop every task; dropping it (with the last handle) does the same.
    shutdown_tx: watch::Sender<bool>,
    /// The acceptor and the writers (of removed peers too), awaited by `shutdown`.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl TransportHandle {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.shared.id
    }

    /// The receiver of this transport's connection events (closed connections and refused
    /// dials, per peer, in order), for fast election; the transport reports none until this
    /// is called, and `None` if it was called before.
    pub fn take_peer_events(&self) -> Option<mpsc::Receiver<PeerEvent>> {
        let (tx, rx) = mpsc::channel(PEER_EVENTS_MAX);
        self.inner.shared.events.set(tx).ok().map(|()| rx)
    }

    /// Sets the stamp that each later dial carries into its [`PeerEvent::Refused`]: the
    /// node's follow epoch, so that it can tell a refusal of a dial that started before its
    /// leader changed.
    pub fn set_event_stamp(&self, stamp: u64) {
        self.inner.shared.stamp.store(stamp, Ordering::Release);
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
        let writers = self
            .inner
            .writers
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(Writer { peer, queue, .. }) = writers.get(&to) else {
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
        for (id, peer) in self.inner.shared.peers().iter() {
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
            .peers()
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
            .peers()
            .iter()
            .map(|(&id, peer)| {
                let queue_len = self
                    .inner
                    .writers
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&id)
                    .map_or(0, |w| w.queue.max_capacity() - w.queue.capacity());
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
        for writer in self
            .inner
            .writers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
        {
            writer.stop.send_replace(true);
        }
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

impl Shared {
    /// Hands `event` to the node without waiting; drops it if the node is that far behind.
    pub(crate) fn peer_event(&self, event: PeerEvent) {
        let Some(events) = self.events.get() else {
            return;
        };
        if let Err(mpsc::error::TrySendError::Full(event)) = events.try_send(event) {
            warn!(
                node = self.id,
                ?event,
                "connection event dropped: the node is behind"
            );
        }
    }

    /// The current peers (read-locked).
    pub(crate) fn peers(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<NodeId, Arc<PeerShared>>> {
        self.peers.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One peer's writer, as the handle holds it.
#[derive(Debug)]
struct Writer {
    peer: Arc<PeerShared>,
    /// Read by the writer task.
    queue: mpsc::Sender<Message>,
    /// Set (or dropped) to stop the writer: on shutdown, and when the peer is removed.
    stop: watch::Sender<bool>,
}

/// Starts writers, at start and for peers added later.
#[derive(Debug)]
struct Spawner {
    runtime: tokio::runtime::Handle,
    limits: Limits,
    rng_seed: u64,
    outbound_queue_max: usize,
}

impl Spawner {
    /// Registers `peer_id` at `addr` with the acceptor and starts its writer.
    fn spawn(
        &self,
        shared: &Arc<Shared>,
        peer_id: NodeId,
        addr: HostPort,
    ) -> (Writer, JoinHandle<()>) {
        let peer = Arc::new(PeerShared::new(addr));
        let (queue, rx) = mpsc::channel(self.outbound_queue_max);
        let (stop, stop_rx) = watch::channel(false);
        let ctx = OutboundCtx {
            shared: Arc::clone(shared),
            peer_id,
            peer: Arc::clone(&peer),
            limits: self.limits,
            // Mixing in the peer id gives each writer its own jitter sequence.
            rng: ChaCha8Rng::seed_from_u64(
                self.rng_seed ^ peer_id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ),
        };
        let task = self.runtime.spawn(outbound::run(ctx, rx, stop_rx));
        shared
            .peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(peer_id, Arc::clone(&peer));
        (Writer { peer, queue, stop }, task)
    }
}

/// What [`TransportHandle::set_peer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerChange {
    /// The peer was new: its writer started dialing.
    Added,
    /// The peer was known at another address: its connection was dropped and the new
    /// address is dialed.
    Moved,
    /// The peer was known at this address: nothing changed.
    Unchanged,
}

impl TransportHandle {
    /// Makes `id` a peer reachable at `addr` (a member added at run time): the acceptor
    /// admits its connections from now on and a writer dials it. A peer already known at
    /// `addr` is left alone; one known at another address is redialed there.
    ///
    /// Refuses this node's own id, and works only while the transport runs.
    pub fn set_peer(
        &self,
        id: NodeId,
        addr: HostPort,
    ) -> std::result::Result<PeerChange, SendError> {
        if id == self.inner.shared.id {
            return Err(SendError::NotFromThisNode { from: id, id });
        }
        if *self.inner.shutdown_tx.borrow() {
            return Err(SendError::ShutDown);
        }
        let mut writers = self
            .inner
            .writers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let change = match writers.get(&id) {
            Some(w) if w.peer.addr == addr => return Ok(PeerChange::Unchanged),
            Some(_) => PeerChange::Moved,
            None => PeerChange::Added,
        };
        let (writer, task) = self
            .inner
            .spawner
            .spawn(&self.inner.shared, id, addr.clone());
        if let Some(old) = writers.insert(id, writer) {
            old.stop.send_replace(true);
        }
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
        info!(node = self.inner.shared.id, peer = id, %addr, ?change, "peer set");
        Ok(change)
    }

    /// Forgets peer `id` (a member removed at run time): its writer stops and its
    /// connections are no longer admitted. Connections it already has stay until they
    /// close. Returns whether it was a peer.
    pub fn remove_peer(&self, id: NodeId) -> bool {
        let removed = self
            .inner
            .writers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        self.inner
            .shared
            .peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
        match removed {
            Some(writer) => {
                writer.stop.send_replace(true);
                info!(node = self.inner.shared.id, peer = id, "peer removed");
                true
            }
            None => false,
        }
    }

    /// The current peers and the addresses they are dialed at.
    pub fn peers(&self) -> BTreeMap<NodeId, HostPort> {
        self.inner
            .shared
            .peers()
            .iter()
            .map(|(&id, p)| (id, p.addr.clone()))
            .collect()
    }
}

/// The cluster name a handshake carries: `cluster_id` in generation 0 (as before
/// generations existed, so a cluster that was never restored talks to older members), and
/// `cluster_id@gN` in generation N: a member of one generation refuses every other's.
pub fn hello_name(cluster_id: &str, generation: u64) -> String {
    match generation {
        0 => cluster_id.to_string(),
        g => format!("{cluster_id}@g{g}"),
    }
}
