//! `tenure demo-worker` (hidden): one replica of the demo's nightly-report job, written the
//! way an application uses the product: on the `tenure` client library.
//!
//! It campaigns for the election with [`Client::join`] (the library grants the session and
//! keeps it alive), waits for its [`tenure::Leadership`], and while it leads it "computes"
//! reports and appends them to a ledger kept in one fenced key. It tells the controller what
//! happens through `EVENT` lines on stdout (see `super::protocol`); details go to stderr,
//! which the controller sends to a log file.
//!
//! The worker is honest about its lease the way DESIGN.md rule 4 asks: it acts only while
//! [`tenure::Leadership::is_valid`] (the send time of the last acknowledged keepalive + TTL −
//! drift margin on its own monotonic clock), and checks that before each report. But it then
//! computes for a while and writes without checking again — the gap between check and write
//! that every real program has, and that a process pause (the demo's SIGSTOP) stretches past
//! the lease. Fencing is what makes that gap harmless: the write carries the token and the
//! store refuses it once a newer token has written.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tenure::{CampaignOptions, Client, Error, Leadership, Lost};
use tenure_core::drift::{holder_margin, CLIENT_SCHEDULING_ALLOWANCE};
use tenure_proto::Reason;

use super::procs::cluster_url;
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

/// Period of the `alive` event that shows the controller a session keeps renewing.
const ALIVE_EVERY: Duration = Duration::from_millis(500);
/// Pause before trying again after the cluster could not be reached.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

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
        eprintln!("{:>9.3}s worker {}: {}", $w.started.elapsed().as_secs_f64(), $w.args.id, format!($($arg)*))
    };
}

struct Worker {
    args: WorkerArgs,
    client: Client,
    started: Instant,
}

/// Why a worker stopped acting as leader.
enum Ended {
    /// Its lease ran out on its own clock; the session may still be alive.
    Lapsed,
    /// The store refused its token: someone else leads.
    Stale,
}

/// How a fenced write ended.
enum PutOutcome {
    Written { index: u64 },
    Stale { current: u64 },
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
    let url = cluster_url(&args.nodes, &args.tls_dir);
    let client = match runtime.block_on(Client::connect(&url)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tenure demo-worker: {e}");
            return ExitCode::from(2);
        }
    };
    let worker = Worker {
        args,
        client,
        started: Instant::now(),
    };
    runtime.block_on(worker.main_loop());
    ExitCode::SUCCESS
}

impl Worker {
    fn options(&self) -> CampaignOptions {
        CampaignOptions {
            ttl: Duration::from_millis(self.args.ttl_ms),
            ..Default::default()
        }
    }

    async fn main_loop(self) {
        emit("started", &[("pid", std::process::id().to_string())]);
        let value = format!("worker {}", self.args.id).into_bytes();
        loop {
            // One session per iteration: a worker that lost its session (expired while it
            // was frozen, or proven stale by the store) starts over as a fresh candidate.
            let candidate = match self
                .client
                .join(&self.args.election, &value, self.options())
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    log!(self, "joining the election failed: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let session = candidate.session();
            log!(
                self,
                "session {session} granted, ttl {} ms",
                self.args.ttl_ms
            );
            emit(
                "session",
                &[
                    ("id", session.to_string()),
                    ("ttl_ms", self.args.ttl_ms.to_string()),
                ],
            );
            emit("campaign", &[("session", session.to_string())]);
            // A standby until it leads; the library keeps its session alive meanwhile, and
            // says until when, as for a leader.
            let ttl_ms = self.args.ttl_ms;
            let lease = candidate.lease();
            let wait = candidate.leadership();
            tokio::pin!(wait);
            let led = loop {
                tokio::select! {
                    r = &mut wait => break r,
                    _ = tokio::time::sleep(ALIVE_EVERY) => emit(
                        "alive",
                        &[
                            ("session", session.to_string()),
                            ("ack_age_ms", ack_age_ms(lease.valid_until(), ttl_ms).to_string()),
                            ("standby", "1".into()),
                        ],
                    ),
                }
            };
            match led {
                Ok(leadership) => self.serve(Arc::new(leadership)).await,
                Err(Error::SessionLost) => session_lost(session),
                Err(e) => {
                    log!(self, "waiting to lead failed: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            // Dropping the leadership (or the candidate) revokes the session, if it is
            // still alive somewhere, so that it does not hold a place in the queue.
        }
    }

    /// Lead while the lease holds; return when the session is over (lost, replaced, or
    /// proven stale by a rejected write).
    async fn serve(&self, leadership: Arc<Leadership>) {
        let (token, session) = (leadership.token(), leadership.session());
        let alive = tokio::spawn(report_alive(leadership.clone(), self.args.ttl_ms));
        let mut resumed = false;
        let mut fenced = false;
        loop {
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
            let go_on = match self.lead(&leadership, &mut fenced).await {
                Ended::Stale => false,
                // Only the lease lapsed: the session may still be alive. Lead again once a
                // keepalive is acknowledged, unless the session ends or another leads.
                Ended::Lapsed => self.valid_again(&leadership).await,
            };
            if !go_on {
                break;
            }
            resumed = true;
        }
        alive.abort();
    }

    /// Wait until the leadership is valid again (`true`), or can never be (`false`).
    async fn valid_again(&self, leadership: &Leadership) -> bool {
        loop {
            if leadership.is_valid() {
                return true;
            }
            // `lost` answers at once while the leadership is not valid.
            match tokio::time::timeout(Duration::ZERO, leadership.lost()).await {
                Ok(Lost::SessionEnded) => {
                    session_lost(leadership.session());
                    return false;
                }
                Ok(Lost::Replaced) => {
                    log!(self, "another leader was observed: gives the session up");
                    return false;
                }
                Ok(Lost::Expired) | Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// Raise the ledger's fence (once per token), then compute and write reports while the
    /// lease holds.
    async fn lead(&self, leadership: &Leadership, fenced: &mut bool) -> Ended {
        let token = leadership.token();
        loop {
            if !leadership.is_valid() {
                log!(
                    self,
                    "lease no longer valid: stops acting as leader (token {token})"
                );
                emit("lease-lapsed", &[("token", token.to_string())]);
                return Ended::Lapsed;
            }
            if !*fenced {
                // Raise the ledger's high-water mark to our token before doing any work, so
                // that a previous leader that wakes up late is refused from now on. (Without
                // this, its late write would land if it came before our first report.)
                match self.fence(token).await {
                    Ok(()) => {
                        *fenced = true;
                        emit("fenced", &[("token", token.to_string())]);
                    }
                    Err(PutOutcome::Stale { current }) => {
                        self.rejected(0, token, current);
                        return Ended::Stale;
                    }
                    Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
                }
                continue;
            }
            let ledger = match self.client.get(&self.args.key).await {
                Ok(v) => v.map(|v| v.value).unwrap_or_default(),
                Err(e) => {
                    log!(self, "reading the ledger failed: {e}");
                    tokio::time::sleep(RETRY_PAUSE).await;
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
                    worker: self.args.id,
                    token,
                }
                .line()
                .as_bytes(),
            );
            match self.put(value, token).await {
                PutOutcome::Written { index } => emit(
                    "write-ok",
                    &[
                        ("report", report.to_string()),
                        ("token", token.to_string()),
                        ("index", index.to_string()),
                    ],
                ),
                PutOutcome::Stale { current } => {
                    self.rejected(report, token, current);
                    return Ended::Stale;
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

    /// Write the ledger back unchanged with our token.
    async fn fence(&self, token: u64) -> Result<(), PutOutcome> {
        let ledger = match self.client.get(&self.args.key).await {
            Ok(v) => v.map(|v| v.value).unwrap_or_default(),
            Err(e) => return Err(PutOutcome::Failed(e.to_string())),
        };
        match self.put(ledger, token).await {
            PutOutcome::Written { .. } => Ok(()),
            other => Err(other),
        }
    }

    fn rejected(&self, report: u64, token: u64, current: u64) {
        log!(self, "write with token {token} rejected: stale-token (current {current}); someone else leads");
        emit(
            "write-rejected",
            &[
                ("report", report.to_string()),
                ("token", token.to_string()),
                ("current", current.to_string()),
                ("reason", Reason::StaleToken.to_string()),
            ],
        );
    }

    /// A fenced write of the whole ledger with `token`, judged by the store's token alone.
    ///
    /// It is the library's [`Client::fenced_put`], not [`Leadership::fenced_put`]: the
    /// latter carries a request id on the leader's session, and the write of a holder that
    /// was frozen past its lease must reach the token check (the story's `stale-token`)
    /// rather than be refused for the session it lost meanwhile. Without a request id, a
    /// write whose outcome is unknown ([`Error::Indeterminate`]) is settled by reading the
    /// key back before trying again, so that a retry can never add a report twice (every
    /// ledger value is unique: it grows by one report each time).
    async fn put(&self, value: Vec<u8>, token: u64) -> PutOutcome {
        let (key, election) = (&self.args.key, &self.args.election);
        let mut last = String::new();
        for _ in 0..3 {
            match self.client.fenced_put(key, &value, election, token).await {
                Ok(index) => return PutOutcome::Written { index },
                Err(Error::StaleToken { current }) => return PutOutcome::Stale { current },
                Err(e @ Error::Indeterminate(_)) => {
                    last = e.to_string();
                    match self.client.get(key).await {
                        Ok(Some(v)) if v.value == value && v.token == token => {
                            log!(self, "write of unknown outcome ({last}) is in the ledger");
                            return PutOutcome::Written { index: v.index };
                        }
                        Ok(_) => log!(
                            self,
                            "write of unknown outcome ({last}) is not in the ledger: retrying"
                        ),
                        Err(e) => log!(self, "cannot read the ledger back: {e}"),
                    }
                }
                // Not written (no leader in time, a refusal): the caller decides what next.
                Err(e) => return PutOutcome::Failed(e.to_string()),
            }
        }
        PutOutcome::Failed(last)
    }
}

/// The session is gone on the cluster's side (expired or revoked).
fn session_lost(session: u64) {
    emit(
        "session-lost",
        &[
            ("session", session.to_string()),
            ("reason", Reason::UnknownSession.to_string()),
        ],
    );
}

/// Every [`ALIVE_EVERY`], tell the controller how old the leader's last acknowledged
/// keepalive is: its send time is `valid_until − TTL + margin` (DESIGN rule 4, inverted with
/// the library's own margin).
/// How long ago the keepalive behind a lease valid until `valid_until` was sent: rule 4's
/// `sent + TTL − margin`, solved for `sent`.
fn ack_age_ms(valid_until: Instant, ttl_ms: u64) -> u128 {
    let ttl = Duration::from_millis(ttl_ms);
    let margin = holder_margin(
        ttl,
        CampaignOptions::default().drift,
        CLIENT_SCHEDULING_ALLOWANCE,
    );
    let sent = (valid_until + margin).checked_sub(ttl);
    sent.map_or(u128::MAX, |t| t.elapsed().as_millis())
}

async fn report_alive(leadership: Arc<Leadership>, ttl_ms: u64) {
    loop {
        tokio::time::sleep(ALIVE_EVERY).await;
        let age = ack_age_ms(leadership.valid_until(), ttl_ms);
        emit(
            "alive",
            &[
                ("session", leadership.session().to_string()),
                ("ack_age_ms", age.to_string()),
                ("valid", u8::from(leadership.is_valid()).to_string()),
            ],
        );
    }
}
