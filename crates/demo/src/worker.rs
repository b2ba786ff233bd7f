//! `tenure demo-worker` (hidden): one replica of the demo's nightly-report job.
//!
//! It holds a session (lease) that it keeps alive, campaigns for the election, and while it
//! leads it "computes" reports and appends them to a ledger kept in one fenced key. It tells
//! the controller what happens through `EVENT` lines on stdout (see [`super::protocol`]);
//! details go to stderr, which the controller sends to a log file.
//!
//! The worker is honest about its lease the way DESIGN.md rule 4 asks: it believes it leads
//! only until `send time of the last acknowledged keepalive + TTL − drift margin` on its own
//! monotonic clock, and checks that before each report. But it then computes for a while and
//! writes without checking again — the gap between check and write that every real program
//! has, and that a process pause (the demo's SIGSTOP) stretches past the lease. Fencing is
//! what makes that gap harmless: the write carries the token and the store refuses it once a
//! newer token has written.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use tenure_proto::v1;
use tenure_proto::v1::elections_client::ElectionsClient;
use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
use tenure_proto::v1::sessions_client::SessionsClient;
use tenure_proto::Reason;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::client::{current_token, describe, reason, Nodes};
use super::protocol::{event_line, next_report, parse_ledger, Row};

/// Arguments of the hidden `tenure demo-worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// This worker's number (1, 2, 3), written into the ledger rows.
    #[arg(long)]
    id: u64,
    /// The nodes' client (gRPC) addresses, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// The cluster's certificates (`tenure certs` layout, client `demo`).
    #[arg(long)]
    tls_dir: std::path::PathBuf,
    /// The election to campaign for.
    #[arg(long, default_value = "nightly-report")]
    election: String,
    /// The fenced key that holds the ledger.
    #[arg(long, default_value = "nightly-report/ledger")]
    key: String,
    /// Session TTL in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// How long "computing" one report takes, in milliseconds.
    #[arg(long, default_value_t = 300)]
    compute_ms: u64,
    /// Pause between reports, in milliseconds.
    #[arg(long, default_value_t = 200)]
    gap_ms: u64,
}

/// The client's drift bound (DESIGN.md: clock rates differ by less than 1%).
const DRIFT_PERCENT: u64 = 1;
/// Fixed part of the drift margin, for scheduling noise on the holder.
const MARGIN_FIXED: Duration = Duration::from_millis(20);
/// How long one request may keep retrying across nodes before the worker gives up on it.
const REQUEST_BUDGET: Duration = Duration::from_secs(5);
/// Period of the `alive` event that shows the controller a session keeps renewing.
const ALIVE_EVERY: Duration = Duration::from_millis(500);

/// Print one event line; if the controller is gone, so is the worker's purpose.
fn emit(kind: &str, fields: &[(&str, String)]) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{}", event_line(kind, fields))
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// A line for the worker's log (stderr), stamped with the time since the worker started.
macro_rules! log {
    ($w:expr, $($arg:tt)*) => {
        eprintln!("{:>9.3}s worker {}: {}", $w.started.elapsed().as_secs_f64(), $w.id, format!($($arg)*))
    };
}

/// What the worker knows about its own lease.
#[derive(Debug)]
struct Lease {
    session: u64,
    /// The TTL the server granted.
    ttl: Duration,
    /// `ttl × 2 × drift + fixed`: how much earlier than the server the holder stops believing.
    margin: Duration,
    /// Until when the holder may believe it holds the lease; `None` before the first ack.
    valid_until: Option<Instant>,
    /// Receive time of the last acknowledgement, for the gap reported after a reconnect.
    last_ack_received: Option<Instant>,
}

impl Lease {
    fn new(session: u64, ttl: Duration) -> Lease {
        let margin = ttl * 2 * DRIFT_PERCENT as u32 / 100 + MARGIN_FIXED;
        Lease {
            session,
            ttl,
            margin,
            valid_until: None,
            last_ack_received: None,
        }
    }

    fn valid(&self) -> bool {
        self.valid_until.is_some_and(|t| Instant::now() < t)
    }

    /// An acknowledgement of the keepalive sent at `sent`.
    fn acked(&mut self, sent: Instant, ttl: Duration) {
        let until = sent + ttl.min(self.ttl) - self.margin;
        self.valid_until = Some(self.valid_until.map_or(until, |t| t.max(until)));
        self.last_ack_received = Some(Instant::now());
    }
}

/// The lease, even if a task panicked while holding it (its fields stay consistent: every
/// update is a single assignment).
fn lock(lease: &Mutex<Lease>) -> std::sync::MutexGuard<'_, Lease> {
    lease
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A granted session and the task keeping it alive.
struct HeldSession {
    lease: Arc<Mutex<Lease>>,
    /// Becomes true when the cluster says the session is gone.
    lost: watch::Receiver<bool>,
    keepalives: tokio::task::JoinHandle<()>,
}

struct Worker {
    id: u64,
    args: WorkerArgs,
    nodes: Nodes,
    started: Instant,
}

/// How a fenced write ended.
enum PutOutcome {
    Written { index: u64 },
    Stale { current: Option<u64> },
    Failed(String),
}

/// Run the worker until it is killed.
pub fn run(args: WorkerArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure demo-worker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Channels spawn their connection tasks on the runtime, even lazily connected ones.
    let _runtime_context = runtime.enter();
    let nodes = match Nodes::new(args.nodes.clone(), &args.tls_dir) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tenure demo-worker: {e:#}");
            return ExitCode::from(2);
        }
    };
    let worker = Worker {
        id: args.id,
        args,
        nodes,
        started: Instant::now(),
    };
    runtime.block_on(worker.main_loop());
    ExitCode::SUCCESS
}

impl Worker {
    async fn main_loop(self) {
        emit("started", &[("pid", std::process::id().to_string())]);
        loop {
            // One session per iteration: a worker that lost its session (expired while it
            // was frozen, or proven stale by the store) starts over as a fresh candidate.
            let Some(held) = self.start_session().await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            self.serve_session(&held.lease, held.lost).await;
            held.keepalives.abort();
            let session = lock(&held.lease).session;
            // Best effort: if the session is still alive somewhere, end it so that it does not
            // hold a place in the queue.
            let _ = tokio::time::timeout(
                Duration::from_secs(1),
                self.nodes.call(Duration::from_secs(1), |ch| async move {
                    SessionsClient::new(ch)
                        .revoke(v1::RevokeRequest {
                            session_id: session,
                            session_secret: tenure_proto::process_session_secret(),
                            ..Default::default()
                        })
                        .await
                }),
            )
            .await;
        }
    }

    /// Grant a session and start keeping it alive.
    async fn start_session(&self) -> Option<HeldSession> {
        let ttl_ms = self.args.ttl_ms;
        let granted = self
            .nodes
            .call(REQUEST_BUDGET, |ch| async move {
                SessionsClient::new(ch)
                    .grant(v1::GrantRequest {
                        ttl_ms,
                        session_secret: tenure_proto::process_session_secret(),
                        ..Default::default()
                    })
                    .await
            })
            .await;
        let g = match granted {
            Ok(g) => g,
            Err(e) => {
                log!(self, "grant failed: {}", describe(&e));
                return None;
            }
        };
        log!(
            self,
            "session {} granted, ttl {} ms",
            g.session_id,
            g.ttl_ms
        );
        emit(
            "session",
            &[
                ("id", g.session_id.to_string()),
                ("ttl_ms", g.ttl_ms.to_string()),
            ],
        );
        let lease = Arc::new(Mutex::new(Lease::new(
            g.session_id,
            Duration::from_millis(g.ttl_ms),
        )));
        let (lost_tx, lost_rx) = watch::channel(false);
        let task = keepalive_loop(
            self.id,
            self.nodes.clone(),
            lease.clone(),
            lost_tx,
            self.started,
        );
        let handle = tokio::spawn(task);
        Some(HeldSession {
            lease,
            lost: lost_rx,
            keepalives: handle,
        })
    }

    fn valid(lease: &Mutex<Lease>) -> bool {
        lock(lease).valid()
    }

    /// Campaign, lead while the lease holds, and return when the session is over (lost, or
    /// proven stale by a rejected write).
    async fn serve_session(&self, lease: &Arc<Mutex<Lease>>, mut lost: watch::Receiver<bool>) {
        let session = lock(lease).session;
        let mut announced_campaign = false;
        let mut led_with: Option<u64> = None;
        let mut fenced_with: Option<u64> = None;
        loop {
            // Only a holder that believes its lease campaigns or acts.
            while !Self::valid(lease) {
                if *lost.borrow() {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                    _ = lost.changed() => {}
                }
            }
            if !announced_campaign {
                emit("campaign", &[("session", session.to_string())]);
                announced_campaign = true;
            }
            let token = tokio::select! {
                t = self.campaign(session) => t,
                _ = lost.wait_for(|l| *l) => Err(true),
            };
            let token = match token {
                Ok(t) => t,
                Err(true) => return,
                Err(false) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let resumed = led_with == Some(token);
            led_with = Some(token);
            log!(
                self,
                "leads with token {token} (session {session}{})",
                if resumed { ", resumed" } else { "" }
            );
            emit(
                "leader",
                &[
                    ("token", token.to_string()),
                    ("session", session.to_string()),
                    ("resumed", u8::from(resumed).to_string()),
                ],
            );
            if fenced_with != Some(token) {
                // Raise the ledger's high-water mark to our token before doing any work, so
                // that a previous leader that wakes up late is refused from now on. (Without
                // this, its late write would land if it came before our first report.)
                match self.fence(token).await {
                    Ok(()) => {
                        fenced_with = Some(token);
                        emit("fenced", &[("token", token.to_string())]);
                    }
                    Err(PutOutcome::Stale { current }) => {
                        self.rejected(0, token, current);
                        return;
                    }
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            if !self.lead(token, lease).await {
                return;
            }
        }
    }

    /// Join the election (idempotent: a candidate already queued keeps its place) and wait
    /// until this session leads. Fails with `true` when the session is gone, `false` when
    /// the campaign should be retried later.
    async fn campaign(&self, session: u64) -> Result<u64, bool> {
        let election = self.args.election.clone();
        let value = format!("worker {}", self.id).into_bytes();
        loop {
            let i = self.nodes.guess();
            let req = v1::CampaignRequest {
                election: election.clone(),
                session_id: session,
                value: value.clone(),
                session_secret: tenure_proto::process_session_secret(),
                ..Default::default()
            };
            // No timeout: the call returns when this candidate leads, which may take long.
            // A node that dies breaks the connection, and then the campaign moves on.
            match ElectionsClient::new(self.nodes.channel(i))
                .campaign(req)
                .await
            {
                Ok(r) => return Ok(r.into_inner().token),
                Err(e) => {
                    log!(self, "campaign at {}: {}", self.nodes.addr(i), describe(&e));
                    if reason(&e) == Some(Reason::UnknownSession) {
                        return Err(true);
                    }
                    if !self.nodes.note_failure(i, &e) {
                        return Err(false);
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Write the ledger back unchanged with our token.
    async fn fence(&self, token: u64) -> Result<(), PutOutcome> {
        let ledger = match self.nodes.get(&self.args.key, REQUEST_BUDGET).await {
            Ok(v) => v.map(|v| v.value).unwrap_or_default(),
            Err(e) => return Err(PutOutcome::Failed(describe(&e))),
        };
        match self.put(ledger, token).await {
            PutOutcome::Written { .. } => Ok(()),
            other => Err(other),
        }
    }

    /// Compute and write reports while the lease holds. Returns false when the store proved
    /// that someone else leads (the session is then abandoned), true when only the lease
    /// lapsed (the session may still be alive: wait for it and campaign again).
    async fn lead(&self, token: u64, lease: &Mutex<Lease>) -> bool {
        loop {
            if !Self::valid(lease) {
                log!(
                    self,
                    "lease no longer valid: stops acting as leader (token {token})"
                );
                emit("lease-lapsed", &[("token", token.to_string())]);
                return true;
            }
            let ledger = match self.nodes.get(&self.args.key, REQUEST_BUDGET).await {
                Ok(v) => v.map(|v| v.value).unwrap_or_default(),
                Err(e) => {
                    log!(self, "reading the ledger failed: {}", describe(&e));
                    continue;
                }
            };
            let rows = match parse_ledger(&ledger) {
                Ok(r) => r,
                Err(e) => {
                    log!(self, "the ledger is corrupt, stopping: {e}");
                    emit("corrupt-ledger", &[]);
                    std::future::pending::<()>().await;
                    unreachable!("pending never completes");
                }
            };
            let report = next_report(&rows);
            emit(
                "computing",
                &[("report", report.to_string()), ("token", token.to_string())],
            );
            // The work, and the gap between the lease check above and the write below.
            tokio::time::sleep(Duration::from_millis(self.args.compute_ms)).await;
            let mut value = ledger;
            value.extend_from_slice(
                Row {
                    report,
                    worker: self.id,
                    token,
                }
                .line()
                .as_bytes(),
            );
            match self.put(value, token).await {
                PutOutcome::Written { index } => {
                    emit(
                        "write-ok",
                        &[
                            ("report", report.to_string()),
                            ("token", token.to_string()),
                            ("index", index.to_string()),
                        ],
                    );
                }
                PutOutcome::Stale { current } => {
                    self.rejected(report, token, current);
                    return false;
                }
                PutOutcome::Failed(why) => {
                    log!(self, "writing report {report} failed: {why}");
                    emit(
                        "write-failed",
                        &[("report", report.to_string()), ("token", token.to_string())],
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(self.args.gap_ms)).await;
        }
    }

    fn rejected(&self, report: u64, token: u64, current: Option<u64>) {
        let current = current.map_or("?".to_string(), |c| c.to_string());
        log!(self, "write with token {token} rejected: stale-token (current {current}); someone else leads");
        emit(
            "write-rejected",
            &[
                ("report", report.to_string()),
                ("token", token.to_string()),
                ("current", current),
                ("reason", Reason::StaleToken.to_string()),
            ],
        );
    }

    /// A fenced write of the whole ledger. A failure that leaves the outcome unknown (the
    /// node died or timed out after receiving it) is settled by reading the key back before
    /// trying again, so that a retry can never add a report twice.
    async fn put(&self, value: Vec<u8>, token: u64) -> PutOutcome {
        let deadline = Instant::now() + REQUEST_BUDGET;
        let mut last = String::new();
        while Instant::now() < deadline {
            let (i, r) = self
                .nodes
                .once(|ch| {
                    let req = v1::PutRequest {
                        key: self.args.key.clone(),
                        value: value.clone(),
                        election: self.args.election.clone(),
                        token,
                        ..Default::default()
                    };
                    async move { FencedKeysClient::new(ch).put(req).await }
                })
                .await;
            let e = match r {
                Ok(r) => return PutOutcome::Written { index: r.index },
                Err(e) => e,
            };
            last = describe(&e);
            match reason(&e) {
                // The key holds a newer token, or the election has a newer leader.
                Some(Reason::StaleToken) | Some(Reason::TokenSuperseded) => {
                    return PutOutcome::Stale {
                        current: current_token(&e),
                    }
                }
                // Refused before it was proposed (or its entry was replaced): nothing written.
                Some(Reason::NotLeader) => {
                    self.nodes.note_failure(i, &e);
                }
                Some(Reason::Unavailable) | None => {
                    self.nodes.note_failure(i, &e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    match self.nodes.get(&self.args.key, REQUEST_BUDGET).await {
                        Ok(Some(v)) if v.value == value && v.token == token => {
                            log!(self, "write of unknown outcome ({last}) is in the ledger");
                            return PutOutcome::Written { index: v.index };
                        }
                        Ok(_) => log!(
                            self,
                            "write of unknown outcome ({last}) is not in the ledger: retrying"
                        ),
                        Err(e) => log!(self, "cannot read the ledger back: {}", describe(&e)),
                    }
                }
                Some(_) => return PutOutcome::Failed(last),
            }
        }
        PutOutcome::Failed(last)
    }
}

/// Keep the session alive: one `KeepAlive` stream at the node believed to lead, a request
/// every TTL/4, each acknowledgement extending the lease from the request's send time.
/// Streams that break are reopened (following `not-leader` hints); `unknown-session` ends the
/// loop and sets `lost`.
async fn keepalive_loop(
    id: u64,
    nodes: Nodes,
    lease: Arc<Mutex<Lease>>,
    lost: watch::Sender<bool>,
    started: Instant,
) {
    let (session, ttl) = {
        let l = lock(&lease);
        (l.session, l.ttl)
    };
    let every = ttl / 4;
    let mut seq: u64 = 0;
    let mut first_ack = true;
    let mut last_alive = Instant::now();
    let log = |msg: String| {
        eprintln!(
            "{:>9.3}s worker {id}: {msg}",
            started.elapsed().as_secs_f64()
        )
    };
    loop {
        let i = nodes.guess();
        let (tx, rx) = mpsc::channel::<v1::KeepAliveRequest>(16);
        let mut sent: BTreeMap<u64, Instant> = BTreeMap::new();
        seq += 1;
        sent.insert(seq, Instant::now());
        let _ = tx.try_send(v1::KeepAliveRequest {
            session_id: session,
            seq,
            session_secret: tenure_proto::process_session_secret(),
        });
        let opened = tokio::time::timeout(
            super::client::ATTEMPT_TIMEOUT,
            SessionsClient::new(nodes.channel(i)).keep_alive(ReceiverStream::new(rx)),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(s)) => s.into_inner(),
            Ok(Err(e)) => {
                log(format!(
                    "keepalive stream at {}: {}",
                    nodes.addr(i),
                    describe(&e)
                ));
                if reason(&e) == Some(Reason::UnknownSession) {
                    let _ = lost.send(true);
                    emit(
                        "session-lost",
                        &[
                            ("session", session.to_string()),
                            ("reason", Reason::UnknownSession.to_string()),
                        ],
                    );
                    return;
                }
                nodes.note_failure(i, &e);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(_) => {
                log(format!("keepalive stream at {}: no answer", nodes.addr(i)));
                nodes.advance(i);
                continue;
            }
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // The first tick is immediate: the request above covers it.
        let stream_opened = Instant::now();
        let mut acked_here = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    // A stream whose requests go unanswered for half a TTL is stuck (a
                    // node that lost its quorum): try elsewhere while the lease still holds.
                    let quiet_since = lock(&lease).last_ack_received.filter(|_| acked_here).unwrap_or(stream_opened);
                    if quiet_since.elapsed() > ttl / 2 {
                        log(format!("keepalives at {} unanswered for {:?}: reconnecting", nodes.addr(i), quiet_since.elapsed()));
                        nodes.advance(i);
                        break;
                    }
                    seq += 1;
                    sent.insert(seq, Instant::now());
                    let request = v1::KeepAliveRequest {
                        session_id: session,
                        seq,
                        session_secret: tenure_proto::process_session_secret(),
                    };
                    if tx.send(request).await.is_err() {
                        break;
                    }
                    if last_alive.elapsed() >= ALIVE_EVERY {
                        last_alive = Instant::now();
                        let l = lock(&lease);
                        let age = l.last_ack_received.map_or(u128::MAX, |t| t.elapsed().as_millis());
                        emit("alive", &[("session", session.to_string()), ("ack_age_ms", age.to_string()), ("valid", u8::from(l.valid()).to_string())]);
                    }
                }
                msg = stream.message() => match msg {
                    Ok(Some(ack)) => {
                        let Some(sent_at) = sent.remove(&ack.seq) else { continue };
                        // Older unanswered requests will not be answered on their own now.
                        sent.retain(|s, _| *s > ack.seq);
                        let gap = {
                            let mut l = lock(&lease);
                            let gap = l.last_ack_received.map(|t| t.elapsed());
                            l.acked(sent_at, Duration::from_millis(ack.ttl_ms));
                            gap
                        };
                        if !acked_here {
                            acked_here = true;
                            let gap_ms = gap.map_or(0, |g| g.as_millis());
                            emit("keepalive", &[
                                ("session", session.to_string()),
                                ("node", nodes.addr(i).to_string()),
                                ("first", u8::from(first_ack).to_string()),
                                ("gap_ms", gap_ms.to_string()),
                            ]);
                            log(format!("keepalives for session {session} acknowledged by {} (gap {gap_ms} ms)", nodes.addr(i)));
                            first_ack = false;
                        }
                    }
                    Ok(None) => {
                        log(format!("keepalive stream at {} ended", nodes.addr(i)));
                        nodes.advance(i);
                        break;
                    }
                    Err(e) => {
                        log(format!("keepalive at {}: {}", nodes.addr(i), describe(&e)));
                        if reason(&e) == Some(Reason::UnknownSession) {
                            let _ = lost.send(true);
                            emit("session-lost", &[("session", session.to_string()), ("reason", Reason::UnknownSession.to_string())]);
                            return;
                        }
                        nodes.note_failure(i, &e);
                        break;
                    }
                },
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
