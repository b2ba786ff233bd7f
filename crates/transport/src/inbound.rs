//! The acceptor, and one reader task per accepted connection.
//!
//! A reader checks the hello, then decodes frames and hands messages to the consensus
//! task. Anything wrong with a connection (garbage, a bad checksum, an oversize length, a
//! wrong cluster, an unknown node) is logged with the remote address and closes that one
//! connection; the acceptor and every other connection carry on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use tenure_core::message::Message;
use tenure_core::types::NodeId;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};
use tracing::{debug, info, warn};

use crate::codec::{
    CodecError, Frame, FrameDecoder, Hello, HELLO_FRAME_BYTES_MAX, PROTOCOL_VERSION,
};
use crate::error::HandshakeError;
use crate::metrics::PeerShared;
use crate::transport::{shutdown_requested, Limits, Shared};

/// Room kept free in a connection's read buffer before each read.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Pause after a failed `accept` (say, out of file descriptors) so that the loop does not
/// spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// What every reader shares.
pub(crate) struct InboundCtx {
    shared: Arc<Shared>,
    inbound_tx: mpsc::Sender<Message>,
    limits: Limits,
    /// One permit per open inbound connection, `connections_max` in all.
    slots: Arc<Semaphore>,
    connections_max: usize,
    registry: Mutex<Registry>,
}

/// The newest handshaken connection of each peer. A peer that reconnects replaces its old
/// connection, which is then closed: after a crash or a network cut the old one may be
/// half-open and would otherwise hold a slot and a task forever, because a reader cannot
/// tell a silent peer from a dead one.
#[derive(Default)]
struct Registry {
    next_connection_id: u64,
    /// Dropping the sender tells the connection's reader to close.
    newest: BTreeMap<NodeId, (u64, oneshot::Sender<()>)>,
}

impl InboundCtx {
    pub(crate) fn new(
        shared: Arc<Shared>,
        inbound_tx: mpsc::Sender<Message>,
        limits: Limits,
        connections_max: usize,
    ) -> Arc<InboundCtx> {
        Arc::new(InboundCtx {
            shared,
            inbound_tx,
            limits,
            slots: Arc::new(Semaphore::new(connections_max)),
            connections_max,
            registry: Mutex::new(Registry::default()),
        })
    }

    fn check_hello(&self, hello: &Hello) -> Result<Arc<PeerShared>, HandshakeError> {
        if hello.protocol_version != PROTOCOL_VERSION {
            return Err(HandshakeError::VersionMismatch {
                expected: PROTOCOL_VERSION,
                found: hello.protocol_version,
            });
        }
        if hello.cluster_id != self.shared.hello_name {
            return Err(HandshakeError::ClusterMismatch {
                expected: self.shared.hello_name.clone(),
                found: hello.cluster_id.clone(),
            });
        }
        // Our own id is never in `peers` (the config forbids it), so a node that dials
        // itself is refused here too.
        self.shared
            .peers()
            .get(&hello.node_id)
            .cloned()
            .ok_or(HandshakeError::UnknownPeer {
                node_id: hello.node_id,
            })
    }

    /// Records a new connection from `node`, closing the one it replaces.
    fn register(
        self: &Arc<Self>,
        node: NodeId,
        peer: Arc<PeerShared>,
    ) -> (Registration, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let id = registry.next_connection_id;
        registry.next_connection_id += 1;
        // The replaced sender is dropped here, which wakes the old reader.
        registry.newest.insert(node, (id, tx));
        peer.inbound_connections.fetch_add(1, Ordering::Relaxed);
        let registration = Registration {
            ctx: Arc::clone(self),
            node,
            id,
            peer,
        };
        (registration, rx)
    }
}

/// Undoes [`InboundCtx::register`] when the reader ends, however it ends.
struct Registration {
    ctx: Arc<InboundCtx>,
    node: NodeId,
    id: u64,
    peer: Arc<PeerShared>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.peer
            .inbound_connections
            .fetch_sub(1, Ordering::Relaxed);
        let mut registry = self
            .ctx
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if registry
            .newest
            .get(&self.node)
            .is_some_and(|(id, _)| *id == self.id)
        {
            registry.newest.remove(&self.node);
        }
    }
}

/// Accepts connections until shutdown, then waits for every reader to finish. Dropping the
/// listener on return closes the port.
pub(crate) async fn run_acceptor(
    mut listener: crate::Incoming,
    ctx: Arc<InboundCtx>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut readers = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown_requested(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                // The shared port that handed connections over has closed.
                None => break,
                Some(Ok((stream, addr))) => match Arc::clone(&ctx.slots).try_acquire_owned() {
                    Ok(permit) => {
                        let ctx = Arc::clone(&ctx);
                        let shutdown = shutdown.clone();
                        readers.spawn(async move {
                            serve_connection(&ctx, stream, addr, shutdown).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        ctx.shared.counters.connections_rejected.inc();
                        warn!(node = ctx.shared.id, peer_addr = %addr, connections_max = ctx.connections_max, "closing inbound connection: connections_max reached");
                        drop(stream);
                    }
                },
                Some(Err(e)) => {
                    warn!(node = ctx.shared.id, error = %e, "accept failed");
                    tokio::select! {
                        _ = shutdown_requested(&mut shutdown) => break,
                        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                    }
                }
            },
            // Reap finished readers so that the set does not grow without bound.
            Some(joined) = readers.join_next(), if !readers.is_empty() => {
                if let Err(e) = joined {
                    warn!(node = ctx.shared.id, error = %e, "inbound connection task failed");
                }
            }
        }
    }
    drop(listener);
    while let Some(joined) = readers.join_next().await {
        if let Err(e) = joined {
            warn!(node = ctx.shared.id, error = %e, "inbound connection task failed");
        }
    }
}

/// Serves one inbound connection; returning closes it. With TLS on, the TLS handshake
/// (which requires a certificate from the cluster's CA) completes before any frame is
/// read, and the TLS handshake and the hello share one `handshake_timeout`.
async fn serve_connection(
    ctx: &Arc<InboundCtx>,
    stream: TcpStream,
    addr: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let deadline = Instant::now() + ctx.limits.handshake_timeout;
    let Some(tls) = &ctx.shared.tls else {
        return serve_stream(ctx, stream, None, addr, deadline, shutdown).await;
    };
    let accepted = tokio::select! {
        _ = shutdown_requested(&mut shutdown) => return,
        accepted = timeout_at(deadline, tls.acceptor.accept(stream)) => accepted,
    };
    let failure = match accepted {
        Ok(Ok(stream)) => {
            let chain = stream
                .get_ref()
                .1
                .peer_certificates()
                .filter(|chain| !chain.is_empty())
                .map(|chain| chain.to_vec());
            match chain {
                Some(chain) => {
                    let checked = Some((chain, Arc::clone(&tls.roots)));
                    return serve_stream(ctx, stream, checked, addr, deadline, shutdown).await;
                }
                // The verifier requires a certificate, so this does not happen; refuse anyway.
                None => HandshakeError::Tls("no client certificate".into()),
            }
        }
        Ok(Err(e)) => HandshakeError::Tls(e.to_string()),
        Err(_) => HandshakeError::Timeout(ctx.limits.handshake_timeout),
    };
    ctx.shared.counters.handshake_failures.inc();
    warn!(node = ctx.shared.id, peer_addr = %addr, error = %failure, "closing inbound connection: handshake failed");
}

/// Serves one connection after its TLS handshake, if any: the hello, then frames.
/// `certs` is the dialer's verified chain and the CA when TLS is on.
async fn serve_stream<S: AsyncRead + Unpin>(
    ctx: &Arc<InboundCtx>,
    mut stream: S,
    certs: Option<(
        Vec<rustls::pki_types::CertificateDer<'static>>,
        Arc<rustls::RootCertStore>,
    )>,
    addr: SocketAddr,
    deadline: Instant,
    mut shutdown: watch::Receiver<bool>,
) {
    let node = ctx.shared.id;
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let handshake_timeout = ctx.limits.handshake_timeout;
    let hello = tokio::select! {
        _ = shutdown_requested(&mut shutdown) => return,
        read = timeout_at(deadline, read_hello(&mut stream, &mut buf)) => {
            match read {
                Ok(result) => result,
                Err(_) => Err(HandshakeError::Timeout(handshake_timeout)),
            }
        }
    };
    let checked = hello.and_then(|hello| {
        let peer = ctx.check_hello(&hello)?;
        if let Some((chain, roots)) = &certs {
            crate::tls::check_node_certificate(chain, roots, &ctx.shared.cluster_id, hello.node_id)
                .map_err(|why| HandshakeError::CertificateMismatch {
                    node_id: hello.node_id,
                    why,
                })?;
        }
        Ok((peer, hello))
    });
    let (hello, peer) = match checked {
        Ok((peer, hello)) => (hello, peer),
        Err(e) => {
            ctx.shared.counters.handshake_failures.inc();
            warn!(node, peer_addr = %addr, error = %e, "closing inbound connection: handshake failed");
            return;
        }
    };
    let from = hello.node_id;
    let (_registration, mut replaced) = ctx.register(from, Arc::clone(&peer));
    peer.peer_is_up.notify_one();
    debug!(node, peer = from, peer_addr = %addr, "inbound connection from peer");

    let mut decoder = FrameDecoder::new(ctx.limits.frame_bytes_max);
    let mut misaddressed_logged = false;
    loop {
        // Deliver every whole frame already buffered (some may have come with the hello).
        loop {
            let before = buf.len();
            let message = match decoder.decode(&mut buf) {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(e) => {
                    ctx.shared.counters.decode_errors.inc();
                    warn!(node, peer = from, peer_addr = %addr, error = %e, "closing inbound connection: bad frame");
                    return;
                }
            };
            let bytes = (before - buf.len()) as u64;
            ctx.shared.counters.frames_received.inc();
            ctx.shared.counters.bytes_received.add(bytes);
            peer.frames_received.inc();
            peer.bytes_received.add(bytes);
            if message.to != node || message.from != from {
                ctx.shared.counters.dropped_misaddressed.inc();
                peer.dropped.inc();
                // Once per connection: a confused peer would otherwise flood the log.
                if !misaddressed_logged {
                    misaddressed_logged = true;
                    warn!(node, peer = from, peer_addr = %addr, msg_from = message.from, msg_to = message.to, kind = message.body.kind(), "dropping misaddressed message (further ones on this connection are dropped silently)");
                }
                continue;
            }
            if peer.is_blocked_in() {
                ctx.shared.counters.dropped_blocked.inc();
                peer.dropped.inc();
                continue;
            }
            // Waiting here when the consensus task is behind stops this connection's reads,
            // so TCP pushes back on the sender rather than this node buffering without bound.
            tokio::select! {
                _ = shutdown_requested(&mut shutdown) => return,
                _ = &mut replaced => return,
                sent = ctx.inbound_tx.send(message) => if sent.is_err() {
                    // The consensus task dropped its receiver: nobody wants messages.
                    return;
                },
            }
        }
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES {
            buf.reserve(READ_CHUNK_BYTES);
        }
        tokio::select! {
            _ = shutdown_requested(&mut shutdown) => return,
            _ = &mut replaced => {
                info!(node, peer = from, peer_addr = %addr, "closing inbound connection replaced by a newer one from the same peer");
                return;
            }
            read = stream.read_buf(&mut buf) => match read {
                Ok(0) => {
                    if buf.is_empty() {
                        debug!(node, peer = from, peer_addr = %addr, "peer closed inbound connection");
                    } else {
                        warn!(node, peer = from, peer_addr = %addr, pending_bytes = buf.len(), "peer closed inbound connection in the middle of a frame");
                    }
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(node, peer = from, peer_addr = %addr, error = %e, "inbound connection failed");
                    return;
                }
            },
        }
    }
}

/// Reads until the first frame is complete and returns it if it is a hello.
async fn read_hello<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Hello, HandshakeError> {
    // A small cap: the dialer has not said who it is yet.
    let mut decoder = FrameDecoder::new(HELLO_FRAME_BYTES_MAX);
    loop {
        match decoder.decode_frame(buf)? {
            Some(Frame::Hello(hello)) => return Ok(hello),
            Some(frame) => {
                return Err(CodecError::UnexpectedFrame {
                    expected: "Hello",
                    found: frame.kind(),
                }
                .into())
            }
            None => {}
        }
        if stream.read_buf(buf).await? == 0 {
            return Err(HandshakeError::ClosedEarly);
        }
    }
}
