//! One writer task per peer: dial with backoff, say hello, write batches of frames.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use tenure_core::message::Message;
use tenure_core::types::NodeId;
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::time::{timeout, Instant};
use tracing::{debug, info, warn};

use crate::addr::HostPort;
use crate::backoff::Backoff;
use crate::codec::{encode_hello, encode_message_into, Hello, PROTOCOL_VERSION};
use crate::metrics::PeerShared;
use crate::transport::{shutdown_requested, Limits, PeerEvent, PeerIo, Shared};

/// What a writer needs besides its queue and the shutdown signal.
pub(crate) struct OutboundCtx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) peer_id: NodeId,
    pub(crate) peer: Arc<PeerShared>,
    pub(crate) limits: Limits,
    /// Jitter for the reconnect backoff.
    pub(crate) rng: ChaCha8Rng,
}

/// Why a connection ended.
enum Ended {
    /// Shutdown was requested or every handle is gone: the writer stops.
    Stop,
    /// The connection failed; the writer reconnects.
    Lost(io::Error),
}

/// After a connection that lived ends, this many more dials follow at once when one fails
/// without a refusal. A process that exits closes its connections first and its listener a
/// moment later: a dial in between completes in the kernel and is then reset, which proves
/// nothing, and only the dial after it is refused. Without these, that refusal (what lets a
/// follower of a dead leader campaign at once, fast election) would wait a whole backoff.
const QUICK_REDIALS: u32 = 3;
/// The pause before each of those dials: long enough for the exiting process's listener to
/// close, short beside the election timeout.
const QUICK_REDIAL_PAUSE: Duration = Duration::from_millis(1);

/// Reads nothing useful: the acceptor never writes, so any read completing means the
/// connection was closed (or the peer is not speaking our protocol).
const PROBE_BYTES: usize = 64;

/// The writer task: connect, serve until the connection fails, back off, repeat.
pub(crate) async fn run(
    mut ctx: OutboundCtx,
    mut queue: mpsc::Receiver<Message>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(
        ctx.limits.reconnect_backoff_min,
        ctx.limits.reconnect_backoff_max,
    );
    let mut ever_connected = false;
    // Log the first failure of a streak loudly and the retries quietly, so that a peer that
    // is down for an hour does not fill the log.
    let mut failures_in_a_row: u64 = 0;
    let mut quick_redials = 0;
    loop {
        let stamp = ctx.shared.stamp.load(Ordering::Acquire);
        let connected = tokio::select! {
            _ = shutdown_requested(&mut shutdown) => return,
            result = connect(&ctx) => result,
        };
        let refused = matches!(&connected, Err(Dial { refused: true, .. }));
        match connected {
            Ok(stream) => {
                if ever_connected {
                    ctx.peer.reconnects.inc();
                    ctx.shared.counters.reconnects.inc();
                }
                ctx.peer.connects.inc();
                ever_connected = true;
                failures_in_a_row = 0;
                ctx.peer.outbound_connected.store(true, Ordering::Release);
                info!(node = ctx.shared.id, peer = ctx.peer_id, addr = %ctx.peer.addr, "connected to peer");
                let since = Instant::now();
                let ended = serve(&ctx, stream, &mut queue, &mut shutdown).await;
                ctx.peer.outbound_connected.store(false, Ordering::Release);
                discard_queued(&ctx, &mut queue);
                match ended {
                    Ended::Stop => return,
                    Ended::Lost(e) => {
                        warn!(node = ctx.shared.id, peer = ctx.peer_id, addr = %ctx.peer.addr, error = %e, "connection to peer lost; reconnecting");
                    }
                }
                ctx.shared.peer_event(PeerEvent::Closed(ctx.peer_id));
                // A connection that lived long is evidence the peer is healthy again; one
                // that dies at once (say, refused at the handshake) must not make us spin.
                if since.elapsed() >= ctx.limits.reconnect_backoff_max {
                    backoff.reset();
                }
                // Redial at once after a connection that lived at least the shortest
                // backoff (so that one refused at the handshake cannot make us spin): if the
                // peer's process exited, its port now refuses the dial, and that refusal is
                // what lets a follower of a dead leader campaign without waiting (fast
                // election).
                if since.elapsed() >= ctx.limits.reconnect_backoff_min {
                    quick_redials = QUICK_REDIALS;
                    continue;
                }
            }
            Err(Dial { error: e, .. }) => {
                if refused {
                    ctx.shared.peer_event(PeerEvent::Refused {
                        peer: ctx.peer_id,
                        stamp,
                    });
                }
                ctx.shared.counters.connect_failures.inc();
                ctx.peer.connect_failures.inc();
                failures_in_a_row += 1;
                if failures_in_a_row == 1 {
                    warn!(node = ctx.shared.id, peer = ctx.peer_id, addr = %ctx.peer.addr, error = %e, "cannot connect to peer; retrying with backoff");
                } else {
                    debug!(node = ctx.shared.id, peer = ctx.peer_id, addr = %ctx.peer.addr, error = %e, attempt = failures_in_a_row, "cannot connect to peer");
                }
            }
        }
        // A connection of a process that is exiting, reset right after its dial: dial
        // again at once (a refused dial is an answer, and backs off as usual).
        let delay = if quick_redials > 0 && !refused {
            quick_redials -= 1;
            QUICK_REDIAL_PAUSE
        } else {
            quick_redials = 0;
            backoff.next_delay(&mut ctx.rng)
        };
        tokio::select! {
            _ = shutdown_requested(&mut shutdown) => return,
            () = tokio::time::sleep(delay) => {}
            // The peer just connected to us: it is back, dial at once.
            () = ctx.peer.peer_is_up.notified(), if !ctx.peer.outbound_connected.load(Ordering::Acquire) => {
                backoff.reset();
            }
        }
    }
}

/// A failed connection attempt.
struct Dial {
    error: io::Error,
    /// The TCP connect itself was refused on every address of the peer (nothing listens
    /// there), as opposed to timing out, failing to resolve, or failing later.
    refused: bool,
}

impl From<io::Error> for Dial {
    fn from(error: io::Error) -> Dial {
        Dial {
            error,
            refused: false,
        }
    }
}

/// Dials the peer, runs the TLS handshake if TLS is on (checking that the peer's
/// certificate names it), and sends the hello, within the connect and write timeouts.
async fn connect(ctx: &OutboundCtx) -> Result<Box<dyn PeerIo>, Dial> {
    let stream = timeout(ctx.limits.connect_timeout, dial(&ctx.peer.addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    // Raft messages are latency-sensitive and this writer batches on its own.
    stream.set_nodelay(true)?;
    let mut stream: Box<dyn PeerIo> = match &ctx.shared.tls {
        None => Box::new(stream),
        Some(tls) => {
            let name = crate::tls::peer_server_name(&ctx.shared.cluster_id, ctx.peer_id)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            let tls_stream = timeout(
                ctx.limits.connect_timeout,
                tls.connector.connect(name, stream),
            )
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
            .map_err(|e| io::Error::new(e.kind(), format!("TLS handshake failed: {e}")))?;
            let chain = tls_stream
                .get_ref()
                .1
                .peer_certificates()
                .unwrap_or_default();
            crate::tls::check_node_certificate(
                chain,
                &tls.roots,
                &ctx.shared.cluster_id,
                ctx.peer_id,
            )
            .map_err(|why| {
                io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("peer {} is not the node it should be: {why}", ctx.peer_id),
                )
            })?;
            Box::new(tls_stream)
        }
    };
    let hello = encode_hello(&Hello {
        cluster_id: ctx.shared.hello_name.clone(),
        node_id: ctx.shared.id,
        protocol_version: PROTOCOL_VERSION,
    })
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    timeout(ctx.limits.write_timeout, async {
        stream.write_all(&hello).await?;
        stream.flush().await
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "hello write timed out"))??;
    Ok(stream)
}

/// Resolves `addr` now (a name is looked up on every dial, so a peer that moved to a new IP
/// address under its name is found again) and connects to the first of its addresses that
/// accepts, in the resolver's order. Refused only if every address refused.
async fn dial(addr: &HostPort) -> Result<TcpStream, Dial> {
    let mut last = None;
    let mut refused = true;
    for a in addr.resolve().await? {
        match TcpStream::connect(a).await {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                refused &= e.kind() == io::ErrorKind::ConnectionRefused;
                last = Some(io::Error::new(e.kind(), format!("{a}: {e}")));
            }
        }
    }
    match last {
        Some(error) => Err(Dial { error, refused }),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        )
        .into()),
    }
}

/// Writes queued messages until the connection fails or the writer must stop.
async fn serve(
    ctx: &OutboundCtx,
    stream: Box<dyn PeerIo>,
    queue: &mut mpsc::Receiver<Message>,
    shutdown: &mut watch::Receiver<bool>,
) -> Ended {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut probe = [0u8; PROBE_BYTES];
    let mut batch = Vec::new();
    loop {
        let first = tokio::select! {
            _ = shutdown_requested(shutdown) => return Ended::Stop,
            message = queue.recv() => match message {
                Some(message) => message,
                None => return Ended::Stop,
            },
            read = reader.read(&mut probe) => {
                return Ended::Lost(match read {
                    Ok(0) => io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection"),
                    Ok(_) => io::Error::new(io::ErrorKind::InvalidData, "peer wrote on a one-way connection"),
                    Err(e) => e,
                });
            }
        };
        // Gather everything already queued, up to the batch cap, into one write.
        batch.clear();
        let mut frames = 0u64;
        let mut next = Some(first);
        while let Some(message) = next.take() {
            if add_to_batch(ctx, &message, &mut batch) {
                frames += 1;
            }
            if batch.len() < ctx.limits.batch_bytes_max {
                next = queue.try_recv().ok();
            }
        }
        if batch.is_empty() {
            continue;
        }
        let written = tokio::select! {
            _ = shutdown_requested(shutdown) => return Ended::Stop,
            written = write_batch(&mut writer, &batch, ctx) => written,
        };
        if let Err(e) = written {
            // The frames of this batch may or may not have arrived; Raft copes either way.
            return Ended::Lost(e);
        }
        let bytes = batch.len() as u64;
        ctx.peer.frames_sent.add(frames);
        ctx.peer.bytes_sent.add(bytes);
        ctx.shared.counters.frames_sent.add(frames);
        ctx.shared.counters.bytes_sent.add(bytes);
    }
}

/// Encodes `message` onto the batch unless it must be dropped; returns whether it was added.
fn add_to_batch(ctx: &OutboundCtx, message: &Message, batch: &mut Vec<u8>) -> bool {
    // Blocking may have started after the message was queued.
    if ctx.peer.is_blocked_out() {
        ctx.shared.counters.dropped_blocked.inc();
        ctx.peer.dropped.inc();
        return false;
    }
    match encode_message_into(message, ctx.limits.frame_bytes_max, batch) {
        Ok(()) => true,
        Err(e) => {
            // Oversize is the only failure a `Message` can meet; a serializer error
            // would be a bug, and is counted with it rather than hidden.
            ctx.shared.counters.dropped_too_large.inc();
            ctx.peer.dropped.inc();
            warn!(node = ctx.shared.id, peer = ctx.peer_id, kind = message.body.kind(), error = %e, "dropping a message that cannot be framed");
            false
        }
    }
}

async fn write_batch(
    writer: &mut WriteHalf<Box<dyn PeerIo>>,
    batch: &[u8],
    ctx: &OutboundCtx,
) -> io::Result<()> {
    // TLS buffers records; the flush puts them on the wire (a no-op for plain TCP).
    timeout(ctx.limits.write_timeout, async {
        writer.write_all(batch).await?;
        writer.flush().await
    })
    .await
    .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "write timed out"))?
}

/// Drops what is still queued for a lost connection: by the time a new one is up these
/// messages are stale, and Raft will send fresh ones.
fn discard_queued(ctx: &OutboundCtx, queue: &mut mpsc::Receiver<Message>) {
    let mut dropped = 0;
    while queue.try_recv().is_ok() {
        dropped += 1;
    }
    if dropped > 0 {
        ctx.shared.counters.dropped_peer_down.add(dropped);
        ctx.peer.dropped.add(dropped);
    }
}
