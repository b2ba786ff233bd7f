//! `tenure demo`: the product's story, on real processes, in under a minute.
//!
//! It starts a 3-node cluster (child processes of this executable, on loopback, with
//! temporary data directories) and three replicas of a "nightly report" job (hidden
//! `tenure demo-worker` processes, see [`worker`]). The replicas campaign for
//! `nightly-report`; the leader appends reports to a ledger kept in one fenced key. Then the
//! controller injects two faults and narrates what happens:
//!
//! - **(a)** the leading worker is frozen with SIGSTOP while it computes a report, past its
//!   lease; a standby takes over with a higher fencing token; the frozen worker is resumed,
//!   finishes its report with the old token, and the store rejects it (`stale-token`);
//! - **(b)** the Raft leader node is killed with SIGKILL; the survivors elect a new one, the
//!   workers' sessions survive, writes go on; the killed node restarts and catches up.
//!
//! Finally it reads the ledger back and prints a verdict: reports written, duplicates (must
//! be 0), stale writes rejected (must be ≥ 1), failover times, whether the killed node caught
//! up. Exit status 0 only if all of that holds; 1 otherwise; 130 on Ctrl-C.
//!
//! The controller is single-threaded: one loop reads worker events (stdout lines, stamped on
//! arrival) and polls each node's status; every scenario step is "wait, with a deadline,
//! until the events and statuses show X". Nothing assumes an ordering it did not wait for.
//!
//! The CLI parses `tenure demo`'s arguments into [`Options`] and calls [`run`] with the
//! `tenure` binary, which runs the servers (`tenure server`) and the workers (the hidden
//! `tenure demo-worker`, whose command line [`worker::WorkerArgs`] this crate both writes and
//! reads).

#![deny(missing_docs)]

mod procs;
mod protocol;
pub mod worker;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use tenure::channel::LeaderChannel;
use tenure_proto::v1;
use tenure_transport::certs::files;
use tenure_transport::http::HttpClient;
use tokio::sync::mpsc;

use procs::{Procs, WorkerLine};
use protocol::{duplicates, parse_ledger, runs, Event, Row};

/// `println!` that ignores a closed stdout (`tenure demo | head`): the demo then still runs to
/// its end and cleans up, instead of panicking half-way.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// The election the workers campaign for.
const ELECTION: &str = "nightly-report";
/// The fenced key holding the ledger.
const LEDGER_KEY: &str = "nightly-report/ledger";
/// Cluster size.
const NODES: usize = 3;
/// Worker replicas.
const WORKERS: u64 = 3;
/// Exit status when the verdict fails.
const EXIT_FAILED: u8 = 1;
/// Exit status on Ctrl-C.
const EXIT_INTERRUPTED: u8 = 130;
/// How often node statuses are polled normally, and while a failover is timed.
const POLL_NORMAL: Duration = Duration::from_millis(100);
const POLL_FAST: Duration = Duration::from_millis(20);
/// Bound on one status request (a node that is down refuses at once on loopback).
const STATUS_TIMEOUT: Duration = Duration::from_millis(300);

/// How the demo runs: a 3-node cluster, three worker replicas, a frozen leader and a killed
/// node.
#[derive(Clone, Debug)]
pub struct Options {
    /// Session TTL of the workers, in milliseconds.
    pub ttl_ms: u64,
    /// How long a worker computes one report, in milliseconds (the gap between its lease
    /// check and its write).
    pub compute_ms: u64,
    /// After the verdict, keep the cluster running this many seconds (to look at /metrics
    /// and /status); Ctrl-C ends it early.
    pub hold_secs: u64,
    /// Keep the temporary directory (data and logs) after exit; it is always kept when the
    /// demo fails.
    pub keep: bool,
}

impl Default for Options {
    /// The story as told: a 1 s lease and 300 ms of computing per report.
    fn default() -> Options {
        Options {
            ttl_ms: 1000,
            compute_ms: 300,
            hold_secs: 0,
            keep: false,
        }
    }
}

/// Run the demo with `tenure_bin` as the servers' and workers' executable; the exit status
/// is 0 when the verdict holds, 1 when it does not, 130 on Ctrl-C.
pub fn run(args: Options, tenure_bin: PathBuf) -> ExitCode {
    // One thread is plenty for the controller, and it makes PR_SET_PDEATHSIG (tied to the
    // thread that spawned a child) follow the process's lifetime.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(demo(args, tenure_bin))
}

async fn demo(args: Options, tenure_bin: PathBuf) -> ExitCode {
    let dir = match tempfile::Builder::new().prefix("tenure-demo-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tenure demo: cannot create a temporary directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut scene = match Scene::new(dir.path().to_path_buf(), &args, tenure_bin) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tenure demo: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    scene.intro();
    let mut outcome = Outcome::default();
    let finished = tokio::select! {
        r = scene.play(&mut outcome) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let code = match finished {
        None => {
            say!("\ninterrupted: stopping every process");
            EXIT_INTERRUPTED
        }
        Some(result) => {
            if let Err(e) = result {
                outcome.failures.push(format!("{e:#}"));
            }
            let passed = scene.verdict(&outcome).await;
            if args.hold_secs > 0 {
                scene.hold(Duration::from_secs(args.hold_secs)).await;
            }
            if passed {
                0
            } else {
                EXIT_FAILED
            }
        }
    };
    scene.procs.kill_workers();
    let killed = scene.procs.stop_servers(Duration::from_secs(3)).await;
    if !killed.is_empty() {
        say!("nodes {killed:?} did not stop within 3 s of SIGTERM and were killed");
    }
    drop(scene);
    if args.keep || code != 0 {
        let kept = dir.keep();
        say!("data and logs kept in {}", kept.display());
    }
    ExitCode::from(code)
}

/// What the scenario measured, for the verdict.
#[derive(Default)]
struct Outcome {
    /// Freeze of the leading worker → a standby leads with a higher token.
    worker_failover: Option<Duration>,
    /// SIGKILL of the Raft leader → a survivor leads.
    raft_failover: Option<Duration>,
    /// SIGKILL of the Raft leader → the next acknowledged fenced write.
    raft_first_write: Option<Duration>,
    /// Sessions alive at the kill, and those of them that were lost.
    sessions_at_kill: usize,
    sessions_lost: Vec<String>,
    /// The restarted node, how long it took to catch up, and the index it reached.
    caught_up: Option<(u64, Duration, u64)>,
    /// Steps that did not complete.
    failures: Vec<String>,
}

/// One worker event, stamped on arrival at the controller.
struct Seen {
    at: Instant,
    worker: u64,
    ev: Event,
}

/// The controller's view of the demo, and the processes it runs.
struct Scene {
    start: Instant,
    dir: PathBuf,
    ttl: Duration,
    compute_ms: u64,
    procs: Procs,
    /// The product's own client, over `channel`: who leads the election, the ledger.
    client: tenure::Client,
    /// The cluster through the client library's leader-following channel; each node's own
    /// status is asked of that node alone ([`LeaderChannel::node`]).
    channel: LeaderChannel,
    /// HTTPS to the nodes' HTTP ports.
    http: HttpClient,
    lines_tx: mpsc::UnboundedSender<WorkerLine>,
    lines: mpsc::UnboundedReceiver<WorkerLine>,
    /// Every worker event, in arrival order.
    events: Vec<Seen>,
    /// Latest status of each node (`None` while it does not answer).
    status: Vec<Option<v1::StatusResponse>>,
    /// The Raft leader last put on the timeline: node, term, when first seen.
    raft_leader: Option<(u64, u64, Instant)>,
    poll_every: Duration,
    next_poll: Instant,
    /// Each worker's current session.
    sessions: BTreeMap<u64, u64>,
    /// Set once the controller stopped the workers on purpose.
    workers_stopped: bool,
    /// Workers and nodes that exited on their own: the scenario cannot go on without them.
    crashed: Vec<String>,
}

impl Scene {
    fn new(dir: PathBuf, args: &Options, tenure_bin: PathBuf) -> anyhow::Result<Scene> {
        let procs = Procs::new(&dir, NODES, tenure_bin)?;
        let url = procs::cluster_url(&procs.client_addrs(), &procs.tls_dir);
        let channel = LeaderChannel::from_url(&url)
            .with_context(|| format!("the demo cluster's URL {url}"))?;
        let client = tenure::Client::with_channel(channel.clone());
        let http = http_client(&procs.tls_dir)?;
        let (lines_tx, lines) = mpsc::unbounded_channel();
        Ok(Scene {
            start: Instant::now(),
            dir,
            ttl: Duration::from_millis(args.ttl_ms),
            compute_ms: args.compute_ms,
            procs,
            client,
            channel,
            http,
            lines_tx,
            lines,
            events: Vec::new(),
            status: vec![None; NODES],
            raft_leader: None,
            poll_every: POLL_NORMAL,
            next_poll: Instant::now(),
            sessions: BTreeMap::new(),
            workers_stopped: false,
            crashed: Vec::new(),
        })
    }

    fn intro(&self) {
        say!("tenure demo: a 3-node cluster on loopback, three replicas of a nightly-report job, two faults.");
        say!();
        for s in &self.procs.servers {
            say!(
                "  node {}   grpc {}   https://{}/status   https://{}/metrics",
                s.id,
                s.addrs.client,
                s.addrs.http,
                s.addrs.http
            );
        }
        say!(
            "  TLS on:        mutual TLS between nodes; clients and HTTP over TLS (certificates in {})",
            self.procs.tls_dir.display()
        );
        say!(
            "  data and logs: {} (node-N.log, worker-N.log)",
            self.dir.display()
        );
        let http = self.procs.servers[0].addrs.http;
        let file = |name: String| self.procs.tls_dir.join(name).display().to_string();
        say!(
            "  watch live:    curl -s --cacert {} --cert {} --key {} https://{http}/metrics | grep -E '^tenure_(term|leader_changes|fenced|fsync)'",
            file(files::CA.to_string()),
            file(files::client(procs::DEMO_CLIENT)),
            file(files::client_key(procs::DEMO_CLIENT)),
        );
        say!("                 (any node; --hold SECS keeps the cluster up after the verdict)");
    }

    /// A timeline line, stamped with the time since the demo started.
    fn line(&self, at: Instant, tag: &str, msg: impl AsRef<str>) {
        let t = at.saturating_duration_since(self.start).as_secs_f64();
        say!("{t:>8.3}s  {tag:<6} {}", msg.as_ref());
    }

    fn now(&self, tag: &str, msg: impl AsRef<str>) {
        self.line(Instant::now(), tag, msg);
    }

    fn section(&self, title: &str) {
        say!("\n── {title} ──");
    }

    // ── Input: worker events and node statuses ──

    fn on_line(&mut self, (worker, at, line): WorkerLine) {
        let Some(line) = line else {
            if !self.workers_stopped {
                if let Some(w) = self.procs.workers.iter().find(|w| w.id == worker) {
                    self.line(
                        at,
                        "worker",
                        format!("worker {worker} exited (log: {})", w.log.display()),
                    );
                    self.crashed.push(format!(
                        "worker {worker} exited unexpectedly (log: {})",
                        w.log.display()
                    ));
                }
            }
            return;
        };
        let Some(ev) = Event::parse(&line) else {
            return;
        };
        let w = worker;
        let tok = ev.text("token");
        match ev.kind.as_str() {
            "started" => self.line(at, "worker", format!("worker {w} started (pid {})", ev.text("pid"))),
            "session" => {
                if let Some(id) = ev.num("id") {
                    self.sessions.insert(w, id);
                }
                self.line(at, "lease", format!("worker {w} holds session {} (TTL {} ms)", ev.text("id"), ev.text("ttl_ms")));
            }
            "campaign" => self.line(at, "worker", format!("worker {w} campaigns for {ELECTION} (a standby until it leads)")),
            "leader" if ev.text("resumed") == "1" => self.line(
                at,
                "leader",
                format!("worker {w} leads again with token {tok}: same session, its lease is valid again"),
            ),
            "leader" => self.line(at, "leader", format!("worker {w} leads {ELECTION} with token {tok}")),
            "fenced" => self.line(at, "fence", format!("worker {w} raises the ledger's fence to token {tok} before working")),
            "computing" => {
                self.line(at, "work", format!("worker {w} computing report {} (token {tok})", ev.text("report")))
            }
            "write-ok" => self.line(at, "write", format!("worker {w} wrote report {} with token {tok}", ev.text("report"))),
            "write-failed" => self.line(
                at,
                "write",
                format!("worker {w} could not write report {} (cluster unavailable; see its log)", ev.text("report")),
            ),
            "write-rejected" => {
                let what = match ev.num("report") {
                    Some(0) | None => "fence claim".to_string(),
                    Some(r) => format!("write of report {r}"),
                };
                self.line(
                    at,
                    "REJECT",
                    format!(
                        "worker {w}'s {what} with token {tok} rejected: {} (current {})",
                        ev.text("reason"),
                        ev.text("current")
                    ),
                );
            }
            "lease-lapsed" => self.line(
                at,
                "lease",
                format!("worker {w}'s lease ran out on its own clock: it stops acting as leader (token {tok})"),
            ),
            "session-lost" => self.line(
                at,
                "lease",
                format!("worker {w}'s session {} is gone (expired): it will rejoin with a new one", ev.text("session")),
            ),
            "corrupt-ledger" => self.line(at, "worker", format!("worker {w} found a corrupt ledger")),
            _ => {}
        }
        self.events.push(Seen { at, worker, ev });
    }

    /// The status of node index `i` itself (no redirect), bounded by [`STATUS_TIMEOUT`].
    async fn status_of(&self, i: usize) -> Option<v1::StatusResponse> {
        let node = self.channel.node(&self.procs.client_addrs()[i]).ok()?;
        let mut client = v1::cluster_client::ClusterClient::new(node);
        match tokio::time::timeout(STATUS_TIMEOUT, client.status(v1::StatusRequest {})).await {
            Ok(Ok(r)) => Some(r.into_inner()),
            _ => None,
        }
    }

    async fn poll(&mut self) {
        for i in 0..NODES {
            let id = i as u64 + 1;
            if let Some(status) = self.procs.server_exited(id) {
                let log = self.procs.servers[i].log.display().to_string();
                self.now(
                    "node",
                    format!("node {id} exited on its own ({status}; log: {log})"),
                );
                self.crashed.push(format!(
                    "node {id} exited unexpectedly ({status}; log: {log})"
                ));
            }
            self.status[i] = if self.procs.server_running(id) {
                self.status_of(i).await
            } else {
                None
            };
        }
        let at = Instant::now();
        let leader = tenure::admin::health::leader_claim(self.status.iter().flatten())
            .map(|s| (s.id, s.term));
        if let Some((id, term)) = leader {
            if self.raft_leader.map(|(i, t, _)| (i, t)) != Some((id, term)) {
                self.raft_leader = Some((id, term, at));
                self.line(at, "raft", format!("node {id} leads term {term}"));
            }
        }
    }

    /// Process events and statuses until `pred` holds, at most `timeout`.
    async fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&Scene) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(t) = pred(self) {
                return Ok(t);
            }
            if let Some(crash) = self.crashed.first() {
                bail!("{crash}");
            }
            let poll_at = tokio::time::Instant::from_std(self.next_poll);
            tokio::select! {
                line = self.lines.recv() => match line {
                    Some(l) => self.on_line(l),
                    None => bail!("the workers' output closed"),
                },
                _ = tokio::time::sleep_until(poll_at) => {
                    self.poll().await;
                    self.next_poll = Instant::now() + self.poll_every;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    bail!("gave up after {:.1} s waiting for {what}", timeout.as_secs_f64())
                }
            }
        }
    }

    /// Keep processing events until `until`.
    async fn pass_time(&mut self, until: Instant) -> anyhow::Result<()> {
        let timeout = until.saturating_duration_since(Instant::now());
        self.wait_for("time to pass", timeout + Duration::from_secs(1), |_| {
            (Instant::now() >= until).then_some(())
        })
        .await
    }

    /// Events from index `k` on.
    fn since(&self, k: usize) -> impl Iterator<Item = &Seen> {
        self.events[k.min(self.events.len())..].iter()
    }

    /// The worker holding the highest token announced so far: tokens only go up, so that
    /// is the latest leadership.
    fn top_leader(&self) -> Option<(u64, u64)> {
        self.events
            .iter()
            .filter(|s| s.ev.kind == "leader")
            .filter_map(|s| Some((s.worker, s.ev.num("token")?)))
            .max_by_key(|(_, t)| *t)
    }

    fn count_since(&self, k: usize, kind: &str) -> usize {
        self.since(k).filter(|s| s.ev.kind == kind).count()
    }

    // ── The scenario ──

    async fn play(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        self.section("the cluster starts");
        for id in 1..=NODES as u64 {
            let pid = self.procs.start_server(id)?;
            self.now("node", format!("node {id} started (pid {pid})"));
        }
        self.wait_for("a Raft leader", Duration::from_secs(20), |s| s.raft_leader)
            .await?;

        self.section("three replicas of the nightly-report job start");
        for id in 1..=WORKERS {
            let ttl_ms = self.ttl.as_millis() as u64;
            self.procs.start_worker(
                &self.dir,
                id,
                ttl_ms,
                self.compute_ms,
                self.lines_tx.clone(),
            )?;
        }
        self.wait_for("a worker to lead", Duration::from_secs(20), |s| {
            s.top_leader()
        })
        .await?;
        self.wait_for("three reports", Duration::from_secs(20), |s| {
            (s.count_since(0, "write-ok") >= 3).then_some(())
        })
        .await?;

        if let Err(e) = self.freeze_leader(out).await {
            out.failures.push(format!("(a) {e:#}"));
            for w in &mut self.procs.workers {
                if w.frozen {
                    let _ = tenure_procs::signal(w.pid, libc::SIGCONT);
                    w.frozen = false;
                }
            }
        }
        if let Err(e) = self.kill_raft_leader(out).await {
            out.failures.push(format!("(b) {e:#}"));
            self.poll_every = POLL_NORMAL;
        }

        self.section("business as usual");
        let k = self.events.len();
        self.wait_for("two more reports", Duration::from_secs(15), |s| {
            (s.count_since(k, "write-ok") >= 2).then_some(())
        })
        .await?;
        Ok(())
    }

    /// (a) Freeze the leading worker in the middle of a report, past its lease; check that a
    /// standby takes over with a higher token and that the late write is rejected.
    async fn freeze_leader(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        self.section("(a) the leading worker freezes in the middle of a report");
        let margin = self.ttl * 2 / 100 + Duration::from_millis(20);
        for attempt in 1..=3 {
            let (w, token) = self.top_leader().context("no worker leads")?;
            let k = self.events.len();
            let report = self
                .wait_for(
                    &format!("worker {w} to start a report"),
                    Duration::from_secs(10),
                    |s| {
                        s.since(k)
                            .find(|e| {
                                e.worker == w
                                    && e.ev.kind == "computing"
                                    && e.ev.num("token") == Some(token)
                            })
                            .and_then(|e| e.ev.num("report"))
                    },
                )
                .await?;
            let pid = self.procs.freeze(w);
            let frozen_at = Instant::now();
            self.now(
                "fault",
                format!("SIGSTOP worker {w} (pid {pid}) while it computes report {report}: a long GC pause, say"),
            );

            let (w2, token2, took_over) = self
                .wait_for(
                    "a standby to take over",
                    self.ttl * 4 + Duration::from_secs(10),
                    |s| {
                        s.since(k)
                            .find(|e| {
                                e.worker != w
                                    && e.ev.kind == "leader"
                                    && e.ev.num("token").is_some_and(|t| t > token)
                            })
                            .map(|e| (e.worker, e.ev.num("token").unwrap_or(0), e.at))
                    },
                )
                .await?;
            let failover = took_over.saturating_duration_since(frozen_at);
            out.worker_failover.get_or_insert(failover);
            self.now(
                "check",
                format!(
                    "worker {w2} took over {:.2} s after the freeze, token {token} → {token2} (TTL {} ms)",
                    failover.as_secs_f64(),
                    self.ttl.as_millis()
                ),
            );
            self.wait_for(
                &format!("worker {w2} to fence the ledger"),
                Duration::from_secs(10),
                |s| {
                    s.since(k)
                        .find(|e| {
                            e.worker == w2
                                && matches!(e.ev.kind.as_str(), "fenced" | "write-ok")
                                && e.ev.num("token") == Some(token2)
                        })
                        .map(|_| ())
                },
            )
            .await?;
            // Keep the freeze well past the lease, as a real pause would be.
            self.pass_time(frozen_at + self.ttl + margin + Duration::from_secs(1))
                .await?;
            let asked = tokio::time::timeout(Duration::from_secs(3), self.client.leader(ELECTION));
            match asked
                .await
                .unwrap_or_else(|_| Err(tenure::Error::Unavailable("no answer within 3 s".into())))
            {
                Ok(Some(l)) => self.now(
                    "check",
                    format!(
                        "the cluster says: {ELECTION} is led by {} (session {}) with token {}",
                        String::from_utf8_lossy(&l.value),
                        l.session,
                        l.token
                    ),
                ),
                Ok(None) => self.now(
                    "check",
                    format!("the cluster says: nobody leads {ELECTION}"),
                ),
                Err(e) => self.now("check", format!("cannot ask the cluster who leads: {e}")),
            }

            let k_cont = self.events.len();
            let pid = self.procs.thaw(w);
            self.now(
                "fault",
                format!("SIGCONT worker {w} (pid {pid}): it still believes it leads and finishes report {report} with token {token}"),
            );
            // A write that the worker finished before SIGSTOP took effect reached us before
            // SIGCONT (a stopped process does nothing), so its event is already here.
            let finished_early = self.since(k).take(k_cont - k).any(|e| {
                e.worker == w && e.ev.kind == "write-ok" && e.ev.num("report") == Some(report)
            });
            enum Late {
                Rejected,
                Accepted(u64),
                NoWrite,
            }
            let late = self
                .wait_for(
                    &format!("worker {w}'s late write"),
                    Duration::from_secs(10),
                    |s| {
                        s.since(k_cont).filter(|e| e.worker == w).find_map(|e| {
                            match e.ev.kind.as_str() {
                                "write-rejected" => Some(Late::Rejected),
                                "write-ok" => Some(Late::Accepted(e.ev.num("token").unwrap_or(0))),
                                "lease-lapsed" | "session" => Some(Late::NoWrite),
                                _ => None,
                            }
                        })
                    },
                )
                .await?;
            match late {
                Late::Rejected => {
                    self.wait_for(
                        &format!("worker {w} to rejoin"),
                        Duration::from_secs(10),
                        |s| {
                            s.since(k_cont)
                                .find(|e| e.worker == w && e.ev.kind == "campaign")
                                .map(|_| ())
                        },
                    )
                    .await?;
                    return Ok(());
                }
                Late::Accepted(t) if t < token2 => {
                    bail!("fencing failed: worker {w}'s write with token {t} was accepted after token {token2}")
                }
                Late::Accepted(_) | Late::NoWrite => {
                    let why = if finished_early {
                        format!(
                            "worker {w} had finished report {report} before the freeze took effect"
                        )
                    } else {
                        format!("worker {w} did not write after waking up")
                    };
                    self.now("note", format!("{why}: no late write this time (attempt {attempt} of 3), freezing the new leader"));
                }
            }
        }
        bail!("no freeze ended in a late write")
    }

    /// (b) Kill the Raft leader; time the failover; check the sessions; restart the node and
    /// wait until it catches up.
    async fn kill_raft_leader(&mut self, out: &mut Outcome) -> anyhow::Result<()> {
        self.section("(b) the Raft leader node is killed");
        let k0 = self.events.len();
        self.wait_for(
            "a report written before the kill",
            Duration::from_secs(15),
            |s| s.since(k0).find(|e| e.ev.kind == "write-ok").map(|_| ()),
        )
        .await?;
        self.poll_every = POLL_FAST;
        // The node that says, now, that it leads.
        let (victim, term, _) = self
            .wait_for("a Raft leader", Duration::from_secs(5), |s| {
                s.raft_leader.filter(|(id, _, _)| {
                    s.status[*id as usize - 1]
                        .as_ref()
                        .is_some_and(|st| st.role == "leader")
                })
            })
            .await?;
        let sessions = self.sessions.clone();
        let k = self.events.len();
        let pid = self
            .procs
            .kill_server(victim)
            .context("the Raft leader has no process")?;
        let killed_at = Instant::now();
        self.status[victim as usize - 1] = None;
        self.now(
            "fault",
            format!("SIGKILL node {victim} (pid {pid}), the Raft leader of term {term}"),
        );

        let (leader, new_term, elected_at) = self
            .wait_for("a new Raft leader", Duration::from_secs(15), |s| {
                s.raft_leader
                    .filter(|(id, t, _)| *id != victim && *t > term)
            })
            .await?;
        let failover = elected_at.saturating_duration_since(killed_at);
        out.raft_failover = Some(failover);
        self.now(
            "check",
            format!(
                "node {leader} leads term {new_term}, {:.3} s after the kill",
                failover.as_secs_f64()
            ),
        );
        let wrote_at = self
            .wait_for(
                "a fenced write after the kill",
                Duration::from_secs(15),
                |s| s.since(k).find(|e| e.ev.kind == "write-ok").map(|e| e.at),
            )
            .await?;
        out.raft_first_write = Some(wrote_at.saturating_duration_since(killed_at));
        self.now(
            "check",
            format!(
                "writes go on: first report acknowledged {:.3} s after the kill",
                wrote_at.saturating_duration_since(killed_at).as_secs_f64()
            ),
        );

        // Every session alive at the kill must be renewed by the new leader, or is reported
        // lost. Every worker's `alive` events, a leader's and a standby's, say when its last
        // acknowledged keepalive was sent: one sent after the kill is the proof.
        out.sessions_at_kill = sessions.len();
        let ttl = self.ttl;
        let settled = self
            .wait_for(
                "every worker to renew its session",
                ttl * 3 + Duration::from_secs(5),
                |s| {
                    let mut lost = Vec::new();
                    for (&w, &session) in &sessions {
                        let renewed = s.since(k).any(|e| {
                            e.worker == w
                                && e.ev.num("session") == Some(session)
                                && e.ev.kind == "alive"
                                && e.ev.num("ack_age_ms").is_some_and(|age| {
                                    e.at.checked_sub(Duration::from_millis(age))
                                        .is_some_and(|acked| acked > killed_at)
                                })
                        });
                        let gone = s.since(k).any(|e| {
                            e.worker == w
                                && e.ev.kind == "session-lost"
                                && e.ev.num("session") == Some(session)
                        });
                        if gone {
                            lost.push(format!("worker {w} (session {session})"));
                        } else if !renewed {
                            return None;
                        }
                    }
                    Some(lost)
                },
            )
            .await;
        match settled {
            Ok(lost) if lost.is_empty() => self.now(
                "check",
                format!("all {} sessions survived the failover: same session ids, renewed by node {leader}", sessions.len()),
            ),
            Ok(lost) => {
                self.now("check", format!("sessions lost in the failover: {}", lost.join(", ")));
                out.sessions_lost = lost;
            }
            Err(e) => {
                self.now("check", format!("could not confirm the sessions: {e:#}"));
                out.sessions_lost.push("unconfirmed".into());
            }
        }

        let pid = self.procs.start_server(victim)?;
        let restarted_at = Instant::now();
        self.now(
            "node",
            format!("node {victim} restarted (pid {pid}) on its own data directory"),
        );
        let target = self
            .status
            .get(leader as usize - 1)
            .cloned()
            .flatten()
            .map_or(0, |s| s.applied_index);
        let applied = self
            .wait_for(
                &format!("node {victim} to catch up"),
                Duration::from_secs(30),
                |s| {
                    let st = s.status[victim as usize - 1].as_ref()?;
                    (st.applied_index >= target && st.leader_id != 0 && st.leader_id != victim)
                        .then_some(st.applied_index)
                },
            )
            .await?;
        let took = restarted_at.elapsed();
        out.caught_up = Some((victim, took, applied));
        self.now(
            "check",
            format!(
                "node {victim} caught up in {:.2} s: applied index {applied} (the leader was at {target} when it restarted)",
                took.as_secs_f64()
            ),
        );
        self.poll_every = POLL_NORMAL;
        Ok(())
    }

    // ── The verdict ──

    /// Stop the workers, read the ledger back and judge. Returns whether the demo passed.
    async fn verdict(&mut self, out: &Outcome) -> bool {
        self.workers_stopped = true;
        self.procs.kill_workers();
        self.now("worker", "workers stopped");
        // Let a write that was in flight when the workers died land (or not) before reading.
        let _ = self
            .pass_time(Instant::now() + Duration::from_millis(300))
            .await;
        let ledger = tokio::time::timeout(Duration::from_secs(10), self.client.get(LEDGER_KEY))
            .await
            .unwrap_or_else(|_| Err(tenure::Error::Unavailable("no answer within 10 s".into())));
        let metrics = self.scrape_metrics().await;
        let mut failures = out.failures.clone();

        // `None` when the ledger could not be read: then nothing can be judged from it.
        let rows: Option<Vec<Row>> = match &ledger {
            Ok(Some(v)) => match parse_ledger(&v.value) {
                Ok(rows) => Some(rows),
                Err(e) => {
                    failures.push(format!("the ledger is corrupt: {e}"));
                    None
                }
            },
            Ok(None) => Some(Vec::new()),
            Err(e) => {
                failures.push(format!("cannot read the ledger: {e}"));
                None
            }
        };
        let readable = rows.is_some();
        let rows = rows.unwrap_or_default();
        let dups = duplicates(&rows);
        let rejected: Vec<&Seen> = self
            .events
            .iter()
            .filter(|e| e.ev.kind == "write-rejected")
            .collect();
        // Acknowledged writes that are not in the final ledger would be lost updates.
        let lost: Vec<String> = self
            .events
            .iter()
            .filter(|e| e.ev.kind == "write-ok")
            .filter_map(|e| {
                let (r, t) = (e.ev.num("report")?, e.ev.num("token")?);
                let row = Row {
                    report: r,
                    worker: e.worker,
                    token: t,
                };
                (readable && !rows.contains(&row))
                    .then(|| format!("report {r} by worker {} token {t}", e.worker))
            })
            .collect();

        say!("\n── verdict ──");
        let mut v = String::new();
        let written = if readable {
            rows.len().to_string()
        } else {
            "unknown (ledger unreadable)".into()
        };
        let _ = writeln!(v, "  reports written          {written}");
        if !rows.is_empty() {
            let who: Vec<String> = runs(&rows)
                .iter()
                .map(|(a, b, w, t)| {
                    if a == b {
                        format!("{a} by worker {w} (token {t})")
                    } else {
                        format!("{a}–{b} by worker {w} (token {t})")
                    }
                })
                .collect();
            let _ = writeln!(v, "                           {}", who.join(", "));
        }
        let _ = writeln!(v, "  duplicates               {dups}");
        let _ = writeln!(v, "  acknowledged but lost    {}", lost.len());
        let detail: Vec<String> = rejected
            .iter()
            .map(|e| {
                format!(
                    "worker {} token {} < current {}",
                    e.worker,
                    e.ev.text("token"),
                    e.ev.text("current")
                )
            })
            .collect();
        let _ = writeln!(
            v,
            "  stale writes rejected    {}{}",
            rejected.len(),
            if detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", detail.join("; "))
            }
        );
        let secs = |d: Option<Duration>| {
            d.map_or("n/a".to_string(), |d| format!("{:.3} s", d.as_secs_f64()))
        };
        let _ = writeln!(
            v,
            "  worker failover          {} (freeze → a standby leads with a higher token; TTL {} ms)",
            secs(out.worker_failover),
            self.ttl.as_millis()
        );
        let _ = writeln!(
            v,
            "  raft failover            {} (kill → a new Raft leader)",
            secs(out.raft_failover)
        );
        let _ = writeln!(
            v,
            "                           {} (kill → next acknowledged fenced write)",
            secs(out.raft_first_write)
        );
        let sessions = if out.sessions_at_kill == 0 {
            "n/a".to_string()
        } else if out.sessions_lost.is_empty() {
            format!(
                "yes ({} of {} sessions kept renewing)",
                out.sessions_at_kill, out.sessions_at_kill
            )
        } else {
            format!("no: {}", out.sessions_lost.join(", "))
        };
        let _ = writeln!(v, "  sessions survived        {sessions}");
        let caught = match out.caught_up {
            Some((id, d, applied)) => format!(
                "yes (node {id}, applied index {applied}, {:.2} s after restart)",
                d.as_secs_f64()
            ),
            None => "no".to_string(),
        };
        let _ = writeln!(v, "  killed node caught up    {caught}");
        match &metrics {
            Some((id, m)) => {
                let g = |name: &str| m.get(name).copied().unwrap_or(f64::NAN);
                let fsyncs = g("tenure_fsync_seconds_count");
                let fsync_mean_ms = if fsyncs > 0.0 {
                    g("tenure_fsync_seconds_sum") / fsyncs * 1000.0
                } else {
                    f64::NAN
                };
                let _ = writeln!(
                    v,
                    "  {:<25}term {}, leader changes {}, fenced-write rejections {}, session expiries {}, fsyncs {} (mean {:.2} ms)",
                    format!("metrics (node {id})"),
                    g("tenure_term"),
                    g("tenure_leader_changes_total"),
                    g("tenure_fenced_write_rejections_total"),
                    g("tenure_session_expiries_total"),
                    fsyncs,
                    fsync_mean_ms
                );
            }
            None => {
                let _ = writeln!(v, "  metrics                  could not scrape /metrics");
            }
        }
        if dups > 0 {
            failures.push(format!("{dups} duplicate reports"));
        }
        if !lost.is_empty() {
            failures.push(format!(
                "acknowledged writes missing from the ledger: {}",
                lost.join(", ")
            ));
        }
        if rejected.is_empty() {
            failures.push("no stale write was rejected".into());
        }
        if !out.sessions_lost.is_empty() {
            failures.push(format!(
                "sessions did not survive the Raft leader failover: {}",
                out.sessions_lost.join(", ")
            ));
        }
        if out.caught_up.is_none() && !failures.iter().any(|f| f.starts_with("(b)")) {
            failures.push("the killed node did not catch up".into());
        }
        let _ = std::io::Write::write_all(&mut std::io::stdout(), v.as_bytes());
        if failures.is_empty() {
            say!("  result                   PASS: nothing written twice, nothing stale accepted");
            true
        } else {
            say!("  result                   FAIL");
            for f in &failures {
                say!("    - {f}");
            }
            false
        }
    }

    /// `/metrics` of the current Raft leader (or any node that answers), parsed into
    /// `name → value` for the unlabelled samples.
    async fn scrape_metrics(&mut self) -> Option<(u64, BTreeMap<String, f64>)> {
        let mut order: Vec<u64> = (1..=NODES as u64).collect();
        if let Some((l, _, _)) = self.raft_leader {
            order.retain(|id| *id != l);
            order.insert(0, l);
        }
        for id in order {
            let http = self.procs.servers[id as usize - 1].addrs.http;
            if let Ok((200, text)) = self
                .http
                .get(http, "/metrics", Duration::from_secs(2))
                .await
            {
                let m = text
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .filter_map(|l| {
                        let (name, value) = l.split_once(' ')?;
                        Some((name.to_string(), value.trim().parse().ok()?))
                    })
                    .collect();
                return Some((id, m));
            }
        }
        None
    }

    /// Keep the cluster up for `how_long` (or until Ctrl-C).
    async fn hold(&mut self, how_long: Duration) {
        let http = self
            .procs
            .servers
            .iter()
            .find(|s| s.child.is_some())
            .map(|s| s.addrs.http);
        say!();
        if let Some(http) = http {
            say!(
                "holding the cluster for {} s (Ctrl-C to stop): curl -s http://{http}/metrics",
                how_long.as_secs()
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(how_long) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}

/// The demo's HTTPS client: it trusts the demo cluster's CA and presents the demo client's
/// certificate.
fn http_client(tls_dir: &std::path::Path) -> anyhow::Result<HttpClient> {
    tenure_procs::Certs::at(tls_dir).http(Some(procs::DEMO_CLIENT))
}
