//! Client connections on the gRPC and HTTP ports, bounded and released.
//!
//! Each port admits at most `max` connections, and at most `per_ip_max` from one address; a
//! connection that says nothing within the handshake timeout, or that moves no byte either
//! way for the idle timeout, is closed. A refused connection is closed at once and counted.
//! So idle sockets cannot use up a node's file descriptors, and a node that does run out
//! of slots says so (its `/health` fails) instead of looking well while it turns clients
//! away.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tenure_transport::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Who ended a client connection first, as its socket saw it: the question fate-sharing
/// sessions ask of a KeepAlive stream whose connection ended (docs/GUARANTEES.md
/// "Fate-sharing sessions"). Only an end of file or a reset read from the socket is the
/// peer's; the server's own idle timeout, a shutdown it began, a connection it dropped, and
/// any error it cannot attribute are its own. The first end noted stays.
#[derive(Debug, Default)]
pub struct ConnEnd(AtomicU8);

impl ConnEnd {
    const OPEN: u8 = 0;
    const BY_PEER: u8 = 1;
    const HERE: u8 = 2;

    fn note(&self, end: u8) {
        let _ = self
            .0
            .compare_exchange(ConnEnd::OPEN, end, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether the peer ended the connection (its end of file or its reset was read before
    /// this server ended the connection in any way).
    pub fn by_peer(&self) -> bool {
        self.0.load(Ordering::SeqCst) == ConnEnd::BY_PEER
    }
}

/// An error of a socket read or write that says the peer ended the connection.
fn peer_ended(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

/// The live connections of one port by their peer's address, each with its [`ConnEnd`],
/// so that a gRPC handler (which knows its peer's address) can ask how its connection
/// ended. An address names one live connection at a time.
#[derive(Clone, Debug, Default)]
pub struct ConnEnds(Arc<Mutex<HashMap<SocketAddr, Arc<ConnEnd>>>>);

impl ConnEnds {
    /// The end record of the live connection from `peer`.
    pub fn of(&self, peer: SocketAddr) -> Option<Arc<ConnEnd>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&peer)
            .cloned()
    }

    fn insert(&self, peer: SocketAddr) -> Arc<ConnEnd> {
        let end = Arc::new(ConnEnd::default());
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer, Arc::clone(&end));
        end
    }

    fn remove(&self, peer: SocketAddr, end: &Arc<ConnEnd>) {
        let mut conns = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if conns.get(&peer).is_some_and(|e| Arc::ptr_eq(e, end)) {
            conns.remove(&peer);
        }
    }
}

/// What one port allows.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// Connections open at once from one IP address.
    pub per_ip_max: usize,
    /// How long a new connection may take to send its first byte.
    pub handshake: Duration,
    /// How long a connection may move no byte in either direction.
    pub idle: Duration,
}

/// One port's counters (shared with the metrics).
#[derive(Debug, Default)]
pub struct PortMetrics {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections refused (a limit reached).
    pub refused: AtomicU64,
    /// Connections closed for saying nothing in time, or for idling.
    pub timed_out: AtomicU64,
}

/// A port's admission state.
#[derive(Clone)]
pub struct Gate {
    limits: Limits,
    slots: Arc<Semaphore>,
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    metrics: Arc<PortMetrics>,
    /// The last accept failed (out of file descriptors, most likely).
    accept_failing: Arc<std::sync::atomic::AtomicBool>,
    /// How each live connection ended, by its peer's address.
    ends: ConnEnds,
}

impl Gate {
    /// A gate with `limits`, counting into `metrics`.
    pub fn new(limits: Limits, metrics: Arc<PortMetrics>) -> Gate {
        Gate {
            slots: Arc::new(Semaphore::new(limits.max)),
            limits,
            per_ip: Arc::new(Mutex::new(HashMap::new())),
            metrics,
            accept_failing: Arc::default(),
            ends: ConnEnds::default(),
        }
    }

    /// How this port's live connections end (see [`ConnEnd`]).
    pub fn ends(&self) -> ConnEnds {
        self.ends.clone()
    }

    /// Whether a new connection would find a slot now (and the port can accept at all).
    pub fn has_room(&self) -> bool {
        self.slots.available_permits() > 0 && !self.accept_failing.load(Relaxed)
    }

    /// Admit a connection from `peer`, or say which limit stops it.
    fn admit(&self, peer: SocketAddr) -> Result<Admission, &'static str> {
        let permit = Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| "connection limit reached")?;
        let ip = peer.ip();
        {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(|p| p.into_inner());
            let n = per_ip.entry(ip).or_insert(0);
            if *n >= self.limits.per_ip_max {
                return Err("per-address connection limit reached");
            }
            *n += 1;
        }
        self.metrics.open.fetch_add(1, Relaxed);
        Ok(Admission {
            _permit: permit,
            ip,
            gate: self.clone(),
        })
    }

    /// Accepts on `listener` (a port of its own, or this protocol's share of a shared
    /// one), admits, waits (in a task per connection) for each one's first byte, and hands
    /// on the connections that are within every limit.
    pub fn serve(self, listener: impl Into<Incoming>) -> mpsc::Receiver<(Conn, SocketAddr)> {
        let mut listener = listener.into();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    // The shared port has closed.
                    None => return,
                    Some(Ok(accepted)) => {
                        self.accept_failing.store(false, Relaxed);
                        accepted
                    }
                    Some(Err(e)) => {
                        // Out of file descriptors, most likely: back off, keep serving.
                        self.accept_failing.store(true, Relaxed);
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let admission = match self.admit(peer) {
                    Ok(admission) => admission,
                    Err(why) => {
                        self.metrics.refused.fetch_add(1, Relaxed);
                        tracing::warn!(%peer, "refusing client connection: {why}");
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (tx, gate) = (tx.clone(), self.clone());
                tokio::spawn(async move {
                    // `peek` waits for a byte that really arrived (readiness alone may be
                    // reported early), and leaves it for the protocol.
                    let mut first = [0u8; 1];
                    match tokio::time::timeout(gate.limits.handshake, stream.peek(&mut first)).await
                    {
                        Ok(Ok(n)) if n > 0 => {
                            let conn = Conn::new(stream, admission, gate.limits.idle, peer);
                            let _ = tx.send((conn, peer)).await;
                        }
                        // Closed before a word, or failed.
                        Ok(_) => {}
                        Err(_) => {
                            gate.metrics.timed_out.fetch_add(1, Relaxed);
                            tracing::debug!(%peer, "client sent nothing in time; closed");
                        }
                    }
                });
            }
        });
        rx
    }
}

/// A connection's place at its gate, given back when it closes.
struct Admission {
    _permit: OwnedSemaphorePermit,
    ip: IpAddr,
    gate: Gate,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut per_ip = self.gate.per_ip.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                per_ip.remove(&self.ip);
            }
        }
        self.gate.metrics.open.fetch_sub(1, Relaxed);
    }
}

/// An admitted client connection: closed (an error on read) once it has moved no byte for
/// its idle timeout. It notes who ended it first ([`ConnEnd`]).
pub struct Conn {
    stream: TcpStream,
    admission: Admission,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    peer: SocketAddr,
    end: Arc<ConnEnd>,
}

impl Conn {
    fn new(stream: TcpStream, admission: Admission, idle: Duration, peer: SocketAddr) -> Conn {
        let end = admission.gate.ends.insert(peer);
        Conn {
            stream,
            admission,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            peer,
            end,
        }
    }

    fn moved(&mut self) {
        let next = Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// Whether the idle timeout has passed (registering for a wake-up when it will).
    fn idled_out(&mut self, cx: &mut Context<'_>) -> bool {
        if std::future::Future::poll(self.deadline.as_mut(), cx).is_ready() {
            self.admission.gate.metrics.timed_out.fetch_add(1, Relaxed);
            self.end.note(ConnEnd::HERE);
            return true;
        }
        false
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Dropped without an end noted: the server let go of it.
        self.end.note(ConnEnd::HERE);
        self.admission.gate.ends.remove(self.peer, &self.end);
    }
}

fn idle_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "client connection idle too long",
    )
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                match &result {
                    Ok(()) if buf.filled().len() > before => self.moved(),
                    // End of file: the peer closed its side (its process may be gone).
                    Ok(()) if room => self.end.note(ConnEnd::BY_PEER),
                    Ok(()) => {}
                    Err(e) if peer_ended(e) => self.end.note(ConnEnd::BY_PEER),
                    Err(_) => self.end.note(ConnEnd::HERE),
                }
                Poll::Ready(result)
            }
            Poll::Pending if self.idled_out(cx) => Poll::Ready(Err(idle_error())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.stream).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.idled_out(cx) => Poll::Ready(Err(idle_error())),
            Poll::Ready(Err(e)) => {
                self.end.note(if peer_ended(&e) {
                    ConnEnd::BY_PEER
                } else {
                    ConnEnd::HERE
                });
                Poll::Ready(Err(e))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // The server closes its side: whatever the peer does next answers that.
        self.end.note(ConnEnd::HERE);
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// An axum listener fed by a task that accepts (and, for TLS, shakes hands) on its own:
/// what the HTTP port serves, plain ([`Conn`]) or over TLS.
pub struct ChannelListener<Io> {
    ready: mpsc::Receiver<(Io, SocketAddr)>,
    local: SocketAddr,
}

impl<Io> ChannelListener<Io> {
    /// A listener for connections that arrive on `ready`, bound to `local`.
    pub fn new(ready: mpsc::Receiver<(Io, SocketAddr)>, local: SocketAddr) -> Self {
        ChannelListener { ready, local }
    }
}

impl ChannelListener<Conn> {
    /// The plaintext HTTP port: `listener` served through `gate`.
    pub fn gated(listener: Incoming, gate: Gate) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(ChannelListener::new(gate.serve(listener), local))
    }
}

impl<Io> axum::serve::Listener for ChannelListener<Io>
where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = Io;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(ready) => ready,
            // The accepting task ended (the runtime is shutting down): wait for the
            // server's own shutdown to end this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, ChannelListener<Conn>>>
    for crate::http::HttpPeer
{
    fn connect_info(_: axum::serve::IncomingStream<'_, ChannelListener<Conn>>) -> Self {
        crate::http::HttpPeer::default()
    }
}

/// How long a leader's client port may stay full before it hands leadership on.
pub const STEP_DOWN_AFTER_FULL: Duration = Duration::from_secs(2);

/// While this node leads and its client port has stayed full (or unable to accept) for
/// [`STEP_DOWN_AFTER_FULL`], it hands Raft leadership to another voter: a leader no client
/// can reach leaves the cluster without a usable leader, although every node looks well.
pub fn step_down_when_full(
    gate: Gate,
    driver: crate::driver::DriverHandle,
    me: tenure_core::types::NodeId,
    timeout: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        let mut full_since: Option<Instant> = None;
        loop {
            every.tick().await;
            if gate.has_room() {
                full_since = None;
                continue;
            }
            let since = *full_since.get_or_insert_with(Instant::now);
            if since.elapsed() < STEP_DOWN_AFTER_FULL {
                continue;
            }
            let status = driver.published.borrow().status.clone();
            if status.role != tenure_core::node::Role::Leader {
                continue;
            }
            let Some(to) = status.membership.voters.iter().copied().find(|&v| v != me) else {
                continue;
            };
            tracing::warn!(
                node = me,
                to,
                "the client port has been full for {STEP_DOWN_AFTER_FULL:?}: handing leadership on"
            );
            let moved = driver
                .call(
                    |reply| crate::driver::ClientRequest::TransferLeader { to, reply },
                    timeout,
                )
                .await;
            if let Err(e) = moved {
                tracing::warn!(node = me, to, "handing leadership on failed: {e}");
            }
            full_since = Some(Instant::now());
        }
    })
}
