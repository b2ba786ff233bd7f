//! `tenure nemesis`: a real 3- or 5-node cluster of `tenure server` processes on loopback,
//! real gRPC clients, faults from a seeded schedule, and checkers over the recorded history.
//!
//! Layout: [`cluster`] (the processes, the block hook, `/status`), [`workload`] (the
//! clients), [`faults`] (the schedule and each fault), [`history`] (operations and their
//! outcomes), [`linear`] (Wing–Gong linearizability, per key and per election), [`checks`]
//! (fencing, single holder, convergence). [`run`] puts them together and [`Report`] says
//! what happened.
//!
//! A run stops by itself: the workload and the schedule end at the deadline, every request
//! has a timeout, and healing and the final checks have deadlines. It addresses 127.0.0.1
//! only, its server processes die with it (PR_SET_PDEATHSIG), and its temporary directory is
//! deleted at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tenure_proto::Reason;

pub mod checks;
pub mod cli;
pub mod cluster;
pub mod faults;
pub mod history;
pub mod hostile;
pub mod linear;
pub mod workload;

use checks::{NodeFinal, Verdict};
use cluster::{Cluster, ServerOptions};
use faults::{FaultKind, Nemesis};
use history::{Clock, Kind, Op, Outcome, Recorder, Value};
use workload::{Client, Nodes};

/// What a run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// The `tenure` binary (runs `tenure server`).
    pub bin: PathBuf,
    /// Seed of the fault schedule and of every client's choices.
    pub seed: u64,
    /// 3 or 5.
    pub nodes: usize,
    /// How long faults and the workload run (healing and checking come after).
    pub duration: Duration,
    /// Which faults the schedule draws from.
    pub faults: Vec<FaultKind>,
    /// The servers' `snapshot_threshold_entries`.
    pub snapshot_threshold_entries: u64,
    /// Elections (each with its own fenced key).
    pub elections: usize,
    /// Candidate clients per election.
    pub candidates: usize,
    /// The servers run with fast election (their default); `false` starts them with
    /// `--no-fast-election`.
    pub fast_election: bool,
    /// TLS between the nodes and on the client and HTTP ports, clients authenticated by
    /// certificate.
    pub tls: bool,
    /// Anonymous connection, body and slow-header floods against every node for the whole
    /// run ([`hostile`]); needs `tls`.
    pub hostile: bool,
    /// Session TTLs of 2–5 s instead of 0.6–1.5 s (implied by `hostile`; given alone, the
    /// hostile run's baseline).
    pub long_ttls: bool,
    /// `TENURE_INJECT_BUG` for the servers, if any.
    pub inject_bug: Option<String>,
    /// Keep the temporary directory (logs, data) for a post-mortem.
    pub keep_dir: bool,
    /// Write the whole history here, one operation per line.
    pub history_file: Option<PathBuf>,
}

impl Options {
    /// The command that replays this run's schedule.
    pub fn replay_command(&self) -> String {
        let faults: Vec<&str> = self.faults.iter().map(|k| k.name()).collect();
        let faults = if faults.is_empty() {
            "--no-faults".to_string()
        } else {
            format!("--faults {}", faults.join(","))
        };
        let mut cmd = format!(
            "tenure nemesis --seed {} --nodes {} --duration {} {faults} --snapshot-threshold-entries {} --elections {} --candidates {}",
            self.seed,
            self.nodes,
            self.duration.as_secs(),
            self.snapshot_threshold_entries,
            self.elections,
            self.candidates,
        );
        if !self.fast_election {
            cmd.push_str(" --no-fast-election");
        }
        if self.tls {
            cmd.push_str(" --tls");
        }
        if self.hostile {
            cmd.push_str(" --hostile");
        } else if self.long_ttls {
            cmd.push_str(" --long-ttls");
        }
        if let Some(b) = &self.inject_bug {
            let _ = write!(cmd, " --inject-bug {b}");
        }
        cmd
    }
}

/// What a run found.
pub struct Report {
    /// The options it ran with.
    pub options: Options,
    /// The history.
    pub history: Vec<Op>,
    /// Faults applied, in order.
    pub faults: Vec<faults::Applied>,
    /// Raft leaderships seen (term, leader) by polling every node's `/status`, from the start
    /// to the end of the run (before healing and the final phase).
    pub raft_leaderships: BTreeSet<(u64, u64)>,
    /// Each checker's verdict.
    pub verdicts: Vec<Verdict>,
    /// What the network-namespace probe found.
    pub netem: String,
    /// Wall time of the whole run.
    pub wall: Duration,
    /// Problems of the harness itself (healing did not finish, …), which make the run fail.
    pub harness_errors: Vec<String>,
    /// Node log tails, when something failed.
    pub log_tails: String,
    /// What the hostile load did and saw (`--hostile`).
    pub hostile: Option<HostileReport>,
    /// Sessions the workload lost while it still renewed them
    /// ([`workload::leases_lost`]): 0 in a run without faults.
    pub leases_lost: u64,
}

/// What `--hostile` measured.
#[derive(Clone, Debug, Default)]
pub struct HostileReport {
    /// Anonymous TLS connections opened.
    pub connections_opened: u64,
    /// Anonymous connections a node refused or closed.
    pub connections_closed: u64,
    /// Calls with unfinished bodies answered (at the headers).
    pub bodies_answered: u64,
    /// Slow-header connections cut off.
    pub slow_headers_cut: u64,
    /// `/health` asked over every node, and not answered 200.
    pub health_checks: u64,
    /// Of those, not answered 200.
    pub health_failures: u64,
    /// The first few of those, in words.
    pub health_failed: Vec<String>,
    /// Answered 200, but after more than a second.
    pub health_slow: u64,
    /// Resident memory growth of each node over the run, the largest (MiB).
    pub memory_growth_mib_max: u64,
    /// What the greedy tenant got: sessions, KeepAlive streams, Observe streams,
    /// elections, keys; and its requests refused `quota-exceeded`.
    pub greedy: [u64; 6],
}

impl Report {
    /// Whether every checker passed and the harness worked.
    pub fn ok(&self) -> bool {
        self.verdicts.iter().all(Verdict::ok) && self.harness_errors.is_empty()
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let o = &self.options;
        let _ = writeln!(
            out,
            "tenure nemesis: seed {}, {} nodes, {} s {}, snapshot threshold {} entries, {} elections x {} candidates{}{}",
            o.seed,
            o.nodes,
            o.duration.as_secs(),
            match (o.faults.is_empty(), o.hostile) {
                (true, false) => "without faults",
                (true, true) => "of hostile load, without faults",
                (false, false) => "of faults",
                (false, true) => "of faults and hostile load",
            },
            o.snapshot_threshold_entries,
            o.elections,
            o.candidates,
            match (o.fast_election, o.tls) {
                (true, true) => ", TLS",
                (true, false) => "",
                (false, true) => ", without fast election, TLS",
                (false, false) => ", without fast election",
            },
            o.inject_bug
                .as_ref()
                .map(|b| format!(", servers with TENURE_INJECT_BUG={b}"))
                .unwrap_or_default()
        );
        let _ = writeln!(out, "network namespaces: {}", self.netem);
        let _ = writeln!(out, "\noperations by kind and outcome:");
        let mut table: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
        // How long each answered operation took, from send to answer (microseconds).
        let mut took: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for op in &self.history {
            let row = table.entry(op.kind.name()).or_default();
            row[match op.outcome {
                Outcome::Ok(_) => 0,
                Outcome::Fail { .. } => 1,
                Outcome::Indeterminate { .. } => 2,
            }] += 1;
            if let Outcome::Ok(_) = op.outcome {
                took.entry(op.kind.name())
                    .or_default()
                    .push(op.complete.saturating_sub(op.invoke));
            }
        }
        let _ = writeln!(
            out,
            "  {:<20} {:>8} {:>8} {:>14} {:>11} {:>11}",
            "kind", "ok", "fail", "indeterminate", "ok p50 ms", "ok p99 ms"
        );
        let quantile = |v: &mut Vec<u64>, q: f64| -> String {
            if v.is_empty() {
                return "-".into();
            }
            v.sort_unstable();
            let at = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
            format!("{:.1}", v[at] as f64 / 1000.0)
        };
        let mut total = [0usize; 3];
        for (k, r) in &table {
            let mut t = took.remove(k).unwrap_or_default();
            let (p50, p99) = (quantile(&mut t, 0.50), quantile(&mut t, 0.99));
            let _ = writeln!(
                out,
                "  {k:<20} {:>8} {:>8} {:>14} {p50:>11} {p99:>11}",
                r[0], r[1], r[2]
            );
            for i in 0..3 {
                total[i] += r[i];
            }
        }
        let _ = writeln!(
            out,
            "  {:<20} {:>8} {:>8} {:>14}",
            "total", total[0], total[1], total[2]
        );
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for op in &self.history {
            if let Outcome::Fail { reason, .. } = &op.outcome {
                *reasons.entry(reason.as_str()).or_default() += 1;
            }
        }
        let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(out, "  definite failures by reason: {}", reasons.join(", "));
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for f in &self.faults {
            *by_kind.entry(f.kind.name()).or_default() += 1;
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "\nfaults ({}): {}",
            self.faults.len(),
            kinds.join(", ")
        );
        for f in &self.faults {
            let _ = writeln!(
                out,
                "  [{:7.3}s..{:7.3}s] {:<10} {}",
                f.from as f64 / 1e6,
                f.to as f64 / 1e6,
                f.kind.name(),
                f.what
            );
        }
        let mut election_leaders: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        for op in &self.history {
            match (&op.kind, &op.outcome) {
                (Kind::Campaign { election, .. }, Outcome::Ok(Value::Token(t)))
                | (Kind::Leader { election }, Outcome::Ok(Value::Leader(Some((_, t))))) => {
                    election_leaders.entry(election).or_default().insert(*t);
                }
                _ => {}
            }
        }
        let el: Vec<String> = election_leaders
            .iter()
            .map(|(e, ts)| format!("{e} {}", ts.len()))
            .collect();
        let _ = writeln!(
            out,
            "\nleader changes: Raft {} during the run (distinct term/leader pairs seen: {}); elections (distinct tokens seen): {}",
            self.raft_leaderships.len().saturating_sub(1),
            self.raft_leaderships.len(),
            el.join(", ")
        );
        let _ = writeln!(
            out,
            "leases lost: {} (sessions that ended or lapsed while their holder renewed them)",
            self.leases_lost
        );
        if let Some(h) = &self.hostile {
            let _ = writeln!(
                out,
                "\nhostile load: {} anonymous connections opened, {} refused or closed by the \
                 nodes; {} unfinished bodies answered at their headers; {} slow-header \
                 connections cut off\n/health: {} of {} checks not 200 ({} answered 200 after \
                 more than 1 s); node memory growth: at most {} MiB",
                h.connections_opened,
                h.connections_closed,
                h.bodies_answered,
                h.slow_headers_cut,
                h.health_failures,
                h.health_checks,
                h.health_slow,
                h.memory_growth_mib_max
            );
            for failed in &h.health_failed {
                let _ = writeln!(out, "  /health failed: {failed}");
            }
            let [sessions, keepalives, observes, elections, keys, refused] = h.greedy;
            let _ = writeln!(
                out,
                "greedy tenant: {sessions} sessions, {elections} elections and {keys} keys of \
                 1 KiB held, {keepalives} KeepAlive and {observes} Observe streams opened; \
                 {refused} requests refused quota-exceeded"
            );
        }
        let _ = writeln!(out, "\nverdicts:");
        for v in &self.verdicts {
            let _ = writeln!(
                out,
                "  {:<18} {:<9} ({})",
                v.name,
                if v.ok() { "ok" } else { "VIOLATION" },
                v.checked
            );
            for u in &v.unknown {
                let _ = writeln!(out, "    inconclusive: {u}");
            }
            for x in &v.violations {
                let _ = writeln!(out, "    {x}");
            }
        }
        for e in &self.harness_errors {
            let _ = writeln!(out, "  harness: {e}");
        }
        let _ = writeln!(out, "\nwall time {:.1} s", self.wall.as_secs_f64());
        if !self.ok() {
            if !self.log_tails.is_empty() {
                let _ = writeln!(out, "\n{}", self.log_tails);
            }
            let _ = writeln!(out, "FAILED; replay with: {}", o.replay_command());
        } else {
            let _ = writeln!(out, "PASSED ({})", o.replay_command());
        }
        out
    }
}

/// Run the nemesis. A run always ends by itself; `Err` only when the cluster could not be
/// started at all.
pub async fn run(options: Options) -> anyhow::Result<Report> {
    let started = Instant::now();
    let netem = cluster::probe_netem();
    let mut env = Vec::new();
    if let Some(b) = &options.inject_bug {
        env.push(("TENURE_INJECT_BUG".to_string(), b.clone()));
    }
    let server = ServerOptions {
        nodes: options.nodes,
        snapshot_threshold_entries: options.snapshot_threshold_entries,
        // Longer than the targeted fault's write may wait; every workload request gives up
        // long before, so a server-side timeout never answers a workload request.
        request_timeout_ms: 30_000,
        fast_election: options.fast_election,
        env,
        tls: options.tls,
        tenant_quotas: options.hostile,
    };
    let cluster =
        Cluster::start(&options.bin, server, options.keep_dir).context("start the cluster")?;
    let clock = Clock::start();
    let rec = Recorder::new(clock);
    let nodes = Nodes {
        channels: cluster.channels(),
    };
    let mut harness_errors = Vec::new();
    if cluster.wait_leader(Duration::from_secs(20)).await.is_none() {
        harness_errors.push("no leader within 20 s of starting".to_string());
    }

    // Raft leaderships, from every node's /status, until the end of the run.
    let leaderships: Arc<Mutex<BTreeSet<(u64, u64)>>> = Arc::default();
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut watchers = Vec::new();
    for (&id, a) in cluster.addrs() {
        let (http, seen, on) = (a.http, leaderships.clone(), watching.clone());
        let client = cluster.http_client();
        watchers.push(tokio::spawn(async move {
            while on.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok((200, body)) = client
                    .request(http, "GET", "/status", "", Duration::from_millis(300))
                    .await
                {
                    if let Ok(s) = serde_json::from_str::<tenure_procs::NodeStatus>(&body) {
                        if s.role == "leader" {
                            seen.lock().expect("no panics").insert((s.term, id));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }));
    }

    let deadline = clock.now() + options.duration.as_micros() as u64;
    let mut tasks = Vec::new();
    for e in 0..options.elections {
        let election = format!("e{e}");
        let key = format!("k{e}");
        for c in 0..options.candidates {
            let name = format!("{election}-c{c}");
            let client = Client::new(
                &name,
                rec.clone(),
                nodes.clone(),
                options.seed ^ ((e as u64) << 32 | c as u64).wrapping_mul(0x9E37_79B9),
            );
            // Under hostile load, TTLs of a few seconds, as services use: the run measures
            // whether holders keep their leases, not the edges of a sub-second lease (the
            // fault runs do that).
            let ttl_ms = if options.hostile || options.long_ttls {
                workload::HOSTILE_TTL_MS
            } else {
                workload::TTL_MS
            };
            tasks.push(tokio::spawn(workload::candidate(
                client,
                election.clone(),
                key.clone(),
                deadline,
                ttl_ms,
            )));
        }
        let client = Client::new(
            &format!("reader-{election}"),
            rec.clone(),
            nodes.clone(),
            options.seed ^ (0xabcd_0000 + e as u64),
        );
        tasks.push(tokio::spawn(workload::reader(
            client,
            election.clone(),
            key.clone(),
            deadline,
        )));
    }

    let mut nemesis = Nemesis {
        cluster,
        client: Client::new("nemesis", rec.clone(), nodes.clone(), options.seed),
        removed: BTreeSet::new(),
        applied: Vec::new(),
        snapshot_threshold: options.snapshot_threshold_entries,
    };
    let hostile = if options.hostile {
        Some(hostile::Hostile::start(&nemesis.cluster).context("start the hostile load")?)
    } else {
        None
    };
    // Enough steps for any duration: a step takes at least 300 ms.
    let steps = faults::schedule(
        options.seed,
        &options.faults,
        (options.duration.as_millis() / 300) as usize + 16,
    );
    // Let the workload start before the first fault.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut exits = Vec::new();
    for step in &steps {
        if clock.now() >= deadline || options.faults.is_empty() {
            break;
        }
        exits.extend(nemesis.cluster.exited_by_themselves());
        let before = nemesis.applied.len();
        if let Err(e) = nemesis.apply(step).await {
            harness_errors.push(format!("fault {}: {e:#}", step.kind));
            let _ = nemesis.cluster.heal().await;
        }
        // Progress for long runs, on stderr (the report goes to stdout at the end).
        if let Some(f) = nemesis.applied.get(before) {
            eprintln!(
                "[{:8.3}s] {:<10} {}",
                f.from as f64 / 1e6,
                f.kind.name(),
                f.what
            );
        }
        let left = deadline.saturating_sub(clock.now());
        tokio::time::sleep(Duration::from_micros(left.min(step.calm_ms * 1_000))).await;
    }
    if clock.now() < deadline {
        tokio::time::sleep(Duration::from_micros(deadline - clock.now())).await;
    }
    let hostile_report = match hostile {
        None => None,
        Some(h) => {
            let (counts, memory) = h.stop().await;
            use std::sync::atomic::Ordering::Relaxed;
            let health_failed = counts.health_failed.lock().expect("no panics").clone();
            Some(HostileReport {
                connections_opened: counts.connections_opened.load(Relaxed),
                connections_closed: counts.connections_closed.load(Relaxed),
                bodies_answered: counts.bodies_answered.load(Relaxed),
                slow_headers_cut: counts.slow_headers_cut.load(Relaxed),
                health_checks: counts.health_checks.load(Relaxed),
                health_failures: counts.health_failures.load(Relaxed),
                health_failed,
                health_slow: counts.health_slow.load(Relaxed),
                memory_growth_mib_max: memory
                    .values()
                    .map(|(first, most)| most.saturating_sub(*first) / 1024)
                    .max()
                    .unwrap_or(0),
                greedy: [
                    counts.greedy_sessions.load(Relaxed),
                    counts.greedy_keepalive_streams.load(Relaxed),
                    counts.greedy_observe_streams.load(Relaxed),
                    counts.greedy_elections.load(Relaxed),
                    counts.greedy_keys.load(Relaxed),
                    counts.greedy_refused.load(Relaxed),
                ],
            })
        }
    };

    // Heal, let the clients finish, then read everything once more.
    exits.extend(nemesis.cluster.exited_by_themselves());
    match nemesis.heal_all().await {
        Ok(true) => {}
        Ok(false) => harness_errors.push("removed members were not all added back".into()),
        Err(e) => harness_errors.push(format!("healing: {e:#}")),
    }
    for t in tasks {
        let _ = t.await;
    }
    // Leaderships are counted over the run (workload, faults, hostile load), not over the
    // final phase, which moves leadership to every node in turn on purpose.
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    for w in watchers {
        let _ = w.await;
    }
    let finals = final_phase(&mut nemesis, &options, &mut harness_errors).await;
    exits.extend(nemesis.cluster.exited_by_themselves());
    let history = rec.snapshot();
    if let Some(path) = &options.history_file {
        let text: String = history.iter().map(|op| format!("{op}\n")).collect();
        if let Err(e) = std::fs::write(path, text) {
            harness_errors.push(format!("cannot write {}: {e}", path.display()));
        }
    }
    let mut verdicts = Vec::new();
    let lin = linear::check_history(&history);
    verdicts.push(Verdict {
        name: "linearizability",
        checked: format!("{} keys and elections, each on its own", lin.objects),
        violations: lin.violations,
        unknown: lin.unknown,
    });
    verdicts.push(checks::fencing(&history));
    verdicts.push(checks::holders(&history));
    verdicts.push(checks::convergence(&finals));
    verdicts.push(Verdict {
        name: "processes",
        checked: "every server process exits only when the nemesis kills it".into(),
        violations: exits,
        unknown: Vec::new(),
    });
    let mut report = Report {
        options,
        history,
        faults: std::mem::take(&mut nemesis.applied),
        raft_leaderships: leaderships.lock().expect("no panics").clone(),
        leases_lost: workload::leases_lost(),
        verdicts,
        netem,
        wall: started.elapsed(),
        harness_errors,
        log_tails: String::new(),
        hostile: hostile_report,
    };
    if !report.ok() {
        for id in nemesis.cluster.ids() {
            let _ = writeln!(
                report.log_tails,
                "---- last lines of node {id}'s log\n{}",
                nemesis.cluster.log_tail(id, 15)
            );
        }
    }
    drop(nemesis);
    Ok(report)
}

/// After healing: final reads of every key and election, then convergence: every node's
/// `/status`, and the state each node serves once leadership is moved to it.
async fn final_phase(
    nemesis: &mut Nemesis,
    options: &Options,
    harness_errors: &mut Vec<String>,
) -> Vec<NodeFinal> {
    let mut keys: Vec<String> = (0..options.elections).map(|e| format!("k{e}")).collect();
    let mut elections: Vec<String> = (0..options.elections).map(|e| format!("e{e}")).collect();
    if options.faults.contains(&FaultKind::Targeted) {
        keys.push("nemesis-target-key".into());
        keys.push("nemesis-filler-key".into());
        elections.push("nemesis-target".into());
    }
    let ids = nemesis.cluster.ids();
    // The workload revoked its sessions; the rest expire within a TTL or two. Then the log is
    // quiet (no checkpoints) and the indices can be compared.
    let quiet = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut statuses: BTreeMap<u64, tenure_procs::NodeStatus> = BTreeMap::new();
    loop {
        statuses.clear();
        let mut sessions_left = false;
        for &id in &ids {
            if let Some(s) = nemesis.cluster.status(id, Duration::from_millis(500)).await {
                sessions_left |= s.sessions > 0;
                statuses.insert(id, s);
            }
        }
        let indices: BTreeSet<(u64, u64)> = statuses
            .values()
            .map(|s| (s.commit_index, s.applied_index))
            .collect();
        if statuses.len() == ids.len() && indices.len() == 1 && !sessions_left {
            break;
        }
        if tokio::time::Instant::now() >= quiet {
            harness_errors.push(format!(
                "the cluster did not settle within 30 s of healing (sessions left: {sessions_left})"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut finals: Vec<NodeFinal> = ids
        .iter()
        .map(|&id| NodeFinal {
            id,
            status: statuses.get(&id).map(|s| {
                (
                    s.commit_index,
                    s.applied_index,
                    s.term,
                    s.voters.iter().copied().collect(),
                )
            }),
            state: None,
        })
        .collect();
    // The state each node serves: move leadership to it, then read through it.
    let mut reader = Client::new(
        "final",
        nemesis.client.rec.clone(),
        Nodes {
            channels: nemesis.cluster.channels(),
        },
        options.seed ^ 0xf1a1,
    );
    let admin = match nemesis.cluster.admin() {
        Ok(a) => a,
        Err(e) => {
            harness_errors.push(format!(
                "the final read-out cannot administer the cluster: {e}"
            ));
            return finals;
        }
    };
    for f in &mut finals {
        // The library's transfer waits until the node leads in a later term.
        let mut led = false;
        for _ in 0..5 {
            match admin
                .transfer_leadership(Some(f.id), Duration::from_secs(3))
                .await
            {
                Ok(t) if t.leader == f.id => {
                    led = true;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(300)).await,
            }
        }
        if !led {
            continue;
        }
        let mut state = BTreeMap::new();
        let mut complete = true;
        for k in &keys {
            reader.pin(f.id);
            match reader.get(k).await {
                Outcome::Ok(Value::Read(v)) => {
                    state.insert(format!("key {k}"), format!("{v:?}"));
                }
                _ => complete = false,
            }
        }
        for e in &elections {
            reader.pin(f.id);
            match reader.leader(e).await {
                Outcome::Ok(Value::Leader(l)) => {
                    state.insert(format!("election {e}"), format!("{l:?}"));
                }
                // An election nobody campaigned in is the same on every node.
                Outcome::Fail {
                    reason: Reason::UnknownElection,
                    ..
                } => {
                    state.insert(format!("election {e}"), "unknown".into());
                }
                _ => complete = false,
            }
        }
        if complete {
            f.state = Some(state);
        }
    }
    finals
}
