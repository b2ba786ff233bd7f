//! Client connections on the gRPC and HTTP ports, bounded and released.
//!
//! Each port admits at most `max` connections, and at most `per_ip_max` from one address
//! (never more than half the port's slots); a connection that says nothing within the
//! handshake timeout, or that moves no byte either way for the idle timeout, is closed. A
//! refused connection is closed at once and counted. So idle sockets cannot use up a node's
//! file descriptors, and a node that does run out of slots says so (its `/health` fails)
//! instead of looking well while it turns clients away.
//!
//! With authentication on ([`AuthLimits`], the gRPC port), a new connection first takes a
//! slot of a small pool of *unauthenticated* connections (with its own per-address cap) and
//! must authenticate within a deadline: the first request with valid credentials
//! ([`crate::api::admission`]) moves it into the `max` slots of authenticated connections, under
//! its principal's cap, and the last `operator_reserve` of those only admins and observers
//! may take. An anonymous flood can fill the unauthenticated pool, never the authenticated
//! one; HTTP/2 pings do not keep an unauthenticated connection past its deadline.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tenure_transport::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

pub use crate::metrics::PortMetrics;

/// Who ended a client connection first, as its socket saw it: the question fate-sharing
/// sessions ask of a KeepAlive stream whose connection ended (docs/GUARANTEES.md
/// "Fate-sharing sessions"). Only an end of file or a reset read from the socket is the
/// peer's; the server's own idle timeout, a shutdown it began, a connection it dropped, and
/// any error it cannot attribute are its own. The first end noted stays.
///
/// It also holds the connection's slot at its gate: unauthenticated, or authenticated as a
/// principal ([`ConnEnd::promote`]).
#[derive(Default)]
pub struct ConnEnd {
    end: AtomicU8,
    slot: Mutex<Slot>,
    /// The gate's shared state, to move the slot (none for a record made outside a gate).
    gate: Option<Gate>,
}

impl std::fmt::Debug for ConnEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnEnd")
            .field("end", &self.end)
            .field("slot", &*self.slot())
            .finish_non_exhaustive()
    }
}

/// A connection's slot at its gate.
#[derive(Debug, Default)]
enum Slot {
    /// Released (the connection is gone), or never held.
    #[default]
    None,
    /// In the unauthenticated pool, from `ip`.
    Unauthenticated {
        _permit: OwnedSemaphorePermit,
        ip: IpAddr,
    },
    /// In the authenticated pool, as `principal` (none without authentication).
    Authenticated {
        _permit: OwnedSemaphorePermit,
        principal: Option<String>,
    },
}

/// What [`ConnEnd::promote`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Promotion {
    /// Moved into the authenticated pool.
    Done,
    /// It was there already.
    Already,
    /// A limit stops it (said in the text); the connection stays unauthenticated.
    Refused(String),
}

impl ConnEnd {
    const OPEN: u8 = 0;
    const BY_PEER: u8 = 1;
    const HERE: u8 = 2;

    fn note(&self, end: u8) {
        let _ = self
            .end
            .compare_exchange(ConnEnd::OPEN, end, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Whether the peer ended the connection (its end of file or its reset was read before
    /// this server ended the connection in any way).
    pub fn by_peer(&self) -> bool {
        self.end.load(Ordering::SeqCst) == ConnEnd::BY_PEER
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the connection has authenticated (or needs not).
    pub fn authenticated(&self) -> bool {
        matches!(*self.slot(), Slot::Authenticated { .. })
    }

    /// Move an unauthenticated connection into the authenticated pool as `principal` (an
    /// `operator` may take the reserved slots), unless a limit stops it.
    pub fn promote(&self, principal: &str, operator: bool) -> Promotion {
        let Some(gate) = &self.gate else {
            return Promotion::Already;
        };
        let mut slot = self.slot();
        let Slot::Unauthenticated { ip, .. } = *slot else {
            return Promotion::Already;
        };
        match gate.authenticated_slot(principal, operator) {
            Ok(permit) => {
                // The unauthenticated permit goes back with the old value.
                *slot = Slot::Authenticated {
                    _permit: permit,
                    principal: Some(principal.to_string()),
                };
                gate.unauthenticated_left(ip);
                Promotion::Done
            }
            Err(why) => {
                gate.metrics.refused_authenticated.fetch_add(1, Relaxed);
                Promotion::Refused(why)
            }
        }
    }

    /// Give the slot back (the connection is gone).
    fn release(&self) {
        let old = std::mem::take(&mut *self.slot());
        let Some(gate) = &self.gate else {
            return;
        };
        match old {
            Slot::Unauthenticated { ip, .. } => gate.unauthenticated_left(ip),
            Slot::Authenticated {
                principal: Some(principal),
                ..
            } => gate.principal_left(&principal),
            _ => {}
        }
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

    fn insert(&self, peer: SocketAddr, slot: Slot, gate: Gate) -> Arc<ConnEnd> {
        let end = Arc::new(ConnEnd {
            end: AtomicU8::new(ConnEnd::OPEN),
            slot: Mutex::new(slot),
            gate: Some(gate),
        });
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
    /// Admission of connections before they authenticate; `None`: no authentication (every
    /// connection takes one of the `max` slots at once).
    pub auth: Option<AuthLimits>,
    /// A connection whose client has sent bytes and been sent nothing back for this long is
    /// closed (the HTTP port: headers that never end, or end a byte at a time); `None`: no
    /// such limit (the gRPC port, whose streams legitimately send without answers).
    pub answer_within: Option<Duration>,
}

/// What a port allows connections that have not authenticated yet, and principals.
#[derive(Clone, Debug)]
pub struct AuthLimits {
    /// Unauthenticated connections open at once (a pool of their own).
    pub unauthenticated_max: usize,
    /// Unauthenticated connections open at once from one IP address.
    pub unauthenticated_per_ip_max: usize,
    /// How long a connection may stay unauthenticated before it is closed.
    pub deadline: Duration,
    /// Authenticated slots only admins and observers may take (of `max`).
    pub operator_reserve: usize,
    /// Authenticated connections of one principal at once.
    pub per_principal_max: usize,
}

/// A port's admission state.
#[derive(Clone)]
pub struct Gate {
    limits: Limits,
    slots: Arc<Semaphore>,
    /// The unauthenticated pool (with authentication on).
    unauthenticated: Arc<Semaphore>,
    /// Connections per address: all of them, and the unauthenticated ones.
    per_ip: Arc<Mutex<HashMap<IpAddr, (usize, usize)>>>,
    /// Authenticated connections per principal.
    per_principal: Arc<Mutex<HashMap<String, usize>>>,
    metrics: Arc<PortMetrics>,
    /// The last accept failed (out of file descriptors, most likely).
    accept_failing: Arc<std::sync::atomic::AtomicBool>,
    /// How each live connection ended, by its peer's address.
    ends: ConnEnds,
}

impl Gate {
    /// A gate with `limits`, counting into `metrics`.
    pub fn new(mut limits: Limits, metrics: Arc<PortMetrics>) -> Gate {
        // One address never holds more than half the port.
        limits.per_ip_max = limits.per_ip_max.min(limits.max.div_ceil(2)).max(1);
        let unauthenticated = limits.auth.as_ref().map_or(0, |a| a.unauthenticated_max);
        Gate {
            slots: Arc::new(Semaphore::new(limits.max)),
            unauthenticated: Arc::new(Semaphore::new(unauthenticated)),
            limits,
            per_ip: Arc::new(Mutex::new(HashMap::new())),
            per_principal: Arc::new(Mutex::new(HashMap::new())),
            metrics,
            accept_failing: Arc::default(),
            ends: ConnEnds::default(),
        }
    }

    /// How this port's live connections end (see [`ConnEnd`]).
    pub fn ends(&self) -> ConnEnds {
        self.ends.clone()
    }

    /// Whether an authenticated client that is not an operator would find a slot now (and
    /// the port can accept at all). Unauthenticated connections do not count: an anonymous
    /// flood fills its own pool, never this one.
    pub fn has_room(&self) -> bool {
        let reserve = self.limits.auth.as_ref().map_or(0, |a| a.operator_reserve);
        self.slots.available_permits() > reserve && !self.accept_failing.load(Relaxed)
    }

    /// Admit a connection from `peer`, or say which limit stops it.
    fn admit(&self, peer: SocketAddr) -> Result<Admission, &'static str> {
        let auth = self.limits.auth.as_ref();
        let (pool, full) = match auth {
            Some(_) => (
                &self.unauthenticated,
                "unauthenticated connection limit reached",
            ),
            None => (&self.slots, "connection limit reached"),
        };
        let permit = Arc::clone(pool).try_acquire_owned().map_err(|_| full)?;
        let ip = peer.ip();
        {
            let mut per_ip = self.per_ip.lock().unwrap_or_else(|p| p.into_inner());
            let (all, unauthenticated) = per_ip.entry(ip).or_insert((0, 0));
            if *all >= self.limits.per_ip_max {
                return Err("per-address connection limit reached");
            }
            if auth.is_some_and(|a| *unauthenticated >= a.unauthenticated_per_ip_max) {
                return Err("per-address unauthenticated connection limit reached");
            }
            *all += 1;
            if auth.is_some() {
                *unauthenticated += 1;
            }
        }
        self.metrics.open.fetch_add(1, Relaxed);
        let slot = match auth {
            Some(_) => {
                self.metrics.unauthenticated_open.fetch_add(1, Relaxed);
                Slot::Unauthenticated {
                    _permit: permit,
                    ip,
                }
            }
            None => Slot::Authenticated {
                _permit: permit,
                principal: None,
            },
        };
        Ok(Admission {
            slot: Some(slot),
            ip,
            gate: self.clone(),
        })
    }

    /// A slot of the authenticated pool for `principal`, within its cap and (unless an
    /// `operator`) outside the operators' reserve.
    fn authenticated_slot(
        &self,
        principal: &str,
        operator: bool,
    ) -> Result<OwnedSemaphorePermit, String> {
        let Some(auth) = &self.limits.auth else {
            return Err("this port does not authenticate".into());
        };
        let mut per_principal = self.per_principal.lock().unwrap_or_else(|p| p.into_inner());
        let held = per_principal.get(principal).copied().unwrap_or(0);
        if held >= auth.per_principal_max {
            return Err(format!(
                "principal {principal:?} already holds {held} connections to this node, its cap \
                 (connections_per_principal_max)"
            ));
        }
        if !operator && self.slots.available_permits() <= auth.operator_reserve {
            return Err(format!(
                "every connection slot of this node is taken but the {} kept for admins and \
                 observers (connections_max)",
                auth.operator_reserve
            ));
        }
        let permit = Arc::clone(&self.slots)
            .try_acquire_owned()
            .map_err(|_| "every connection slot of this node is taken (connections_max)")?;
        *per_principal.entry(principal.to_string()).or_insert(0) += 1;
        Ok(permit)
    }

    /// An unauthenticated connection from `ip` authenticated or went away.
    fn unauthenticated_left(&self, ip: IpAddr) {
        self.metrics.unauthenticated_open.fetch_sub(1, Relaxed);
        let mut per_ip = self.per_ip.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, unauthenticated)) = per_ip.get_mut(&ip) {
            *unauthenticated -= 1;
        }
    }

    fn principal_left(&self, principal: &str) {
        let mut per_principal = self.per_principal.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per_principal.get_mut(principal) {
            *n -= 1;
            if *n == 0 {
                per_principal.remove(principal);
            }
        }
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
                            let conn = Conn::new(stream, admission, &gate.limits, peer);
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

/// A connection's place at its gate, given back when it closes: its address's count here,
/// its slot in the connection's [`ConnEnd`] once it has one.
struct Admission {
    slot: Option<Slot>,
    ip: IpAddr,
    gate: Gate,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(Slot::Unauthenticated { ip, .. }) = self.slot.take() {
            // Never became a connection (closed before its first byte).
            self.gate.unauthenticated_left(ip);
        }
        // After the connection's own release (`Conn` drops its `ConnEnd` slot first).
        let mut per_ip = self.gate.per_ip.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((all, _)) = per_ip.get_mut(&self.ip) {
            *all -= 1;
            if *all == 0 {
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
    /// When it must have authenticated (authentication on, not yet authenticated).
    auth_deadline: Option<Pin<Box<Sleep>>>,
    /// [`Limits::answer_within`].
    answer_within: Option<Duration>,
    /// When bytes read since the last write must have been answered.
    answer_deadline: Option<Pin<Box<Sleep>>>,
    peer: SocketAddr,
    end: Arc<ConnEnd>,
}

impl Conn {
    fn new(stream: TcpStream, mut admission: Admission, limits: &Limits, peer: SocketAddr) -> Conn {
        let slot = admission.slot.take().unwrap_or_default();
        let end = admission
            .gate
            .ends
            .insert(peer, slot, admission.gate.clone());
        Conn {
            stream,
            admission,
            idle: limits.idle,
            deadline: Box::pin(tokio::time::sleep(limits.idle)),
            auth_deadline: limits
                .auth
                .as_ref()
                .map(|a| Box::pin(tokio::time::sleep(a.deadline))),
            answer_within: limits.answer_within,
            answer_deadline: None,
            peer,
            end,
        }
    }

    /// Whether the client has waited past [`Limits::answer_within`] with what it sent
    /// unanswered (registering for a wake-up when it will have).
    fn unanswered_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.answer_deadline.as_mut() else {
            return false;
        };
        if std::future::Future::poll(deadline.as_mut(), cx).is_ready() {
            self.admission.gate.metrics.timed_out.fetch_add(1, Relaxed);
            self.end.note(ConnEnd::HERE);
            return true;
        }
        false
    }

    /// Whether the connection is past its deadline to authenticate (registering for a
    /// wake-up when it will be); once authenticated, never.
    fn unauthenticated_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.auth_deadline.as_mut() else {
            return false;
        };
        if self.end.authenticated() {
            self.auth_deadline = None;
            return false;
        }
        if std::future::Future::poll(deadline.as_mut(), cx).is_ready() {
            let metrics = &self.admission.gate.metrics;
            metrics.timed_out.fetch_add(1, Relaxed);
            metrics.unauthenticated_timed_out.fetch_add(1, Relaxed);
            self.end.note(ConnEnd::HERE);
            return true;
        }
        false
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
        self.end.release();
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
        if self.unauthenticated_too_long(cx) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "client connection did not authenticate in time",
            )));
        }
        if self.unanswered_too_long(cx) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "client request not complete in time",
            )));
        }
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        match Pin::new(&mut self.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                match &result {
                    Ok(()) if buf.filled().len() > before => {
                        self.moved();
                        if let (Some(within), None) = (self.answer_within, &self.answer_deadline) {
                            self.answer_deadline = Some(Box::pin(tokio::time::sleep(within)));
                        }
                    }
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
                    self.answer_deadline = None;
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
