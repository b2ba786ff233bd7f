//! The scenarios: what is timed, and how.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::ValueEnum;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::anyhow;
use tenure::{CampaignOptions, Client};
use tenure_core::drift::{holder_margin, DriftPpm, CLIENT_SCHEDULING_ALLOWANCE};

use crate::report::{Better, Report};
use crate::system::{
    self, poll, Cluster, Env, KeepaliveLoad, Profile, ReadKind, Reader, System, Unsupported, Writer,
};
use crate::{as_ms, BenchArgs};

/// A benchmark scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Scenario {
    /// Every scenario below.
    All,
    /// SIGKILL the leader → first acknowledged write on the survivors.
    CrashFailover,
    /// SIGSTOP the leader → first acknowledged write on the survivors; then SIGCONT.
    PauseFailover,
    /// Leadership transfer → first acknowledged write at the new leader.
    Handover,
    /// An election holder (client) dies → the next candidate leads (TTL 1 s and 10 s).
    Takeover,
    /// One client's durable write latency (for tenure, where its time goes, stage by stage,
    /// beside this machine's floor); throughput with 1, 16 and 256 clients.
    Write,
    /// Linearizable reads at the leader (tenure `Leader` and `Get`, etcd `Range`, ZooKeeper
    /// `sync` + `getData`): one client's latency; throughput with 1, 16 and 256 clients.
    Read,
    /// One session's renewal round trip, one in flight (for tenure, where its time goes);
    /// lease renewals per second with 10k leases.
    Keepalives,
    /// 10k and 100k elections held on one cluster: memory per node, idle CPU.
    Elections,
    /// 50 waiters: wake-ups per leader change.
    Herd,
    /// `tenure cron` on a one-second schedule, two replicas: how late each slot's command
    /// starts with a stable holder, and the first slot after the holder's process is killed
    /// (fate-sharing off and on). tenure and PostgreSQL (the backends with fenced keys).
    Cron,
    /// One client's write latency without and then under an anonymous connection flood
    /// (TLS connections without a client certificate, from eight addresses per node, each
    /// opened again as soon as it ends): the TLS systems only.
    Flood,
    /// Exercise every operation of each cluster once (for developing the harness).
    #[value(hide = true)]
    Probe,
}

pub(crate) async fn run(args: BenchArgs, tenure_bin: PathBuf) -> anyhow::Result<()> {
    let env = Env {
        tenure_bin,
        work_dir: crate::work_dir(&args.work_dir)?,
        services_script: args.services_script.clone(),
    };
    let systems = if args.systems.is_empty() {
        System::clusters()
    } else {
        args.systems.clone()
    };
    // Refuse a run that cannot start PostgreSQL before measuring anything else.
    if systems.contains(&System::Postgres) && args.replot.is_none() {
        crate::backend::services_script(&env)?;
    }
    let profiles = if args.profiles.is_empty() {
        vec![Profile::Defaults, Profile::Equalized]
    } else {
        args.profiles.clone()
    };
    if let Some(csv) = &args.replot {
        let plots = Report::read_csv(csv)?.plot(&args.out)?;
        for p in plots {
            println!("{}", p.display());
        }
        return Ok(());
    }
    if args.scenario.contains(&Scenario::Probe) {
        for &s in &systems {
            for &p in &profiles {
                probe(s, p, &env)
                    .await
                    .with_context(|| format!("probe {s} {p}"))?;
            }
        }
        return Ok(());
    }
    let trials = args.trials.map(|t| t as usize);
    let mut sizes = Sizes::new(args.quick, args.smoke, trials);
    sizes.settle = Duration::from_millis(args.settle_ms);
    if !args.elections.is_empty() {
        sizes.elections = args.elections.iter().map(|&n| n as usize).collect();
    }
    sizes.election_sessions = args.election_sessions as usize;
    sizes.takeover_ttls = args
        .takeover_ttl_ms
        .iter()
        .map(|&ms| Duration::from_millis(ms))
        .collect();
    // Every chosen scenario once, in the order of `Scenario`.
    let chosen: Vec<Scenario> = Scenario::value_variants()
        .iter()
        .copied()
        .filter(|s| !matches!(s, Scenario::All | Scenario::Probe))
        .filter(|s| args.scenario.contains(&Scenario::All) || args.scenario.contains(s))
        .collect();
    let tls_measured = chosen.iter().any(|&s| measures_tls(s));
    if !tls_measured && systems.iter().all(|s| s.tls()) {
        bail!(
            "{} {} measured in the write, keepalives and flood scenarios only",
            names(&systems),
            if systems.len() == 1 { "is" } else { "are" }
        );
    }
    if !chosen
        .iter()
        .any(|s| matches!(s, Scenario::CrashFailover | Scenario::PauseFailover))
        && systems.iter().all(|s| s.failover_only())
    {
        bail!(
            "{} {} measured in the crash-failover and pause-failover scenarios only",
            names(&systems),
            if systems.len() == 1 { "is" } else { "are" }
        );
    }
    if !chosen.contains(&Scenario::Takeover) && systems.iter().all(|s| s.backend_only()) {
        bail!(
            "{} {} measured in the takeover scenario only",
            names(&systems),
            if systems.len() == 1 { "is" } else { "are" }
        );
    }
    let tls_skipped = skip_line(
        &chosen,
        &systems,
        System::tls,
        "write, keepalives and flood",
    );
    let backends_skipped = skip_line(&chosen, &systems, System::backend_only, "takeover");
    let timeout_skipped = skip_line(
        &chosen,
        &systems,
        System::failover_only,
        "crash-failover and pause-failover",
    );
    println!(
        "tenure bench: {} on {} under {}{} ({} build{}); results in {}",
        names(&chosen),
        names(&systems),
        names(&profiles),
        if args.rounds > 1 {
            format!(", {} rounds", args.rounds)
        } else {
            String::new()
        },
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        if args.smoke {
            ", --smoke"
        } else if args.quick {
            ", --quick"
        } else {
            ""
        },
        args.out.display()
    );
    for line in tls_skipped
        .iter()
        .chain(&backends_skipped)
        .chain(&timeout_skipped)
    {
        println!("{line}");
    }
    let started = Instant::now();
    let mut report = Report::default();
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            eprintln!("tenure bench: round {round} of {}", args.rounds);
        }
        for &profile in &profiles {
            for &system in &systems {
                // A client backend has no timing profile: measured under the first only.
                if system.backend_only() && profile != profiles[0] {
                    continue;
                }
                let r = measure_system(&chosen, system, profile, &env, &sizes, &mut report).await;
                if let Err(e) = r {
                    eprintln!("tenure bench: {system} ({profile}) failed: {e:#}");
                    let round = if args.rounds > 1 {
                        format!(" in round {round}")
                    } else {
                        String::new()
                    };
                    report.note("all", system, profile, format!("failed{round}: {e:#}"));
                }
            }
        }
    }
    // Rounds after the first continue each cell's trial numbers.
    report.number_trials();
    let elapsed = started.elapsed();
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let mut table = report.markdown();
    if args.rounds > 1 {
        table.push_str(&format!(
            "\n{} rounds, the systems taking turns within each; every round's samples are pooled.\n",
            args.rounds
        ));
    }
    for line in tls_skipped
        .iter()
        .chain(&backends_skipped)
        .chain(&timeout_skipped)
    {
        table.push_str(&format!("\n{line}\n"));
    }
    println!("\n{table}");
    println!("took {:.1} min", elapsed.as_secs_f64() / 60.0);
    let md = args.out.join("results.md");
    std::fs::write(
        &md,
        format!(
            "{table}\n\n{} build; {} of benchmarking.\n",
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            format_duration(elapsed)
        ),
    )
    .with_context(|| format!("write {}", md.display()))?;
    report.write_csv(&args.out.join("samples.csv"))?;
    let plots = report.plot(&args.out)?;
    println!(
        "wrote {}, {} and {} plot(s)",
        md.display(),
        args.out.join("samples.csv").display(),
        plots.len()
    );
    if report.samples.is_empty() {
        bail!("nothing was measured");
    }
    Ok(())
}

/// The names of scenarios, systems or profiles as the command line spells them.
fn names<T: ValueEnum>(xs: &[T]) -> String {
    xs.iter()
        .filter_map(|x| x.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the TLS variants (`tenure-tls`, `etcd-tls`) are measured in `scenario`: TLS's
/// cost is a question of the request path (write latency and throughput, renewals), not of
/// failure detection or elections.
fn measures_tls(scenario: Scenario) -> bool {
    matches!(
        scenario,
        Scenario::Write | Scenario::Keepalives | Scenario::Flood
    )
}

/// What the output says when the systems of a kind (`kind`: the TLS variants, the client
/// backends) skip some of the chosen scenarios, being measured in `what` only.
fn skip_line(
    chosen: &[Scenario],
    systems: &[System],
    kind: fn(System) -> bool,
    what: &str,
) -> Option<String> {
    let these: Vec<System> = systems.iter().copied().filter(|&s| kind(s)).collect();
    let first = *these.first()?;
    let skipped: Vec<Scenario> = chosen
        .iter()
        .copied()
        .filter(|&s| !measured_in(first, s))
        .collect();
    if skipped.is_empty() {
        return None;
    }
    Some(format!(
        "{} ran in {what} only; not in {}.",
        names(&these),
        names(&skipped)
    ))
}

/// Whether `system` is measured in `scenario`: the TLS variants in the request path only
/// ([`measures_tls`]), the client backends in takeover only, every cluster in everything;
/// cron where the ledger can live (tenure, PostgreSQL).
fn measured_in(system: System, scenario: Scenario) -> bool {
    if scenario == Scenario::Cron {
        return matches!(system, System::Tenure | System::Postgres);
    }
    if scenario == Scenario::Flood {
        return system.tls() && !system.backend_only() && !system.failover_only();
    }
    if system.backend_only() {
        scenario == Scenario::Takeover
    } else if system.failover_only() {
        matches!(scenario, Scenario::CrashFailover | Scenario::PauseFailover)
    } else {
        measures_tls(scenario) || !system.tls()
    }
}

fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// `--takeover-ttl-ms`'s default.
const DEFAULT_TAKEOVER_TTLS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(10)];
/// `--election-sessions`' default.
const ELECTION_SESSIONS: usize = 100;
/// `--settle-ms`'s default.
const DEFAULT_SETTLE: Duration = Duration::from_millis(300);

/// How much of everything.
struct Sizes {
    /// Trials of crash failover, pause failover and hand-over.
    failover_trials: usize,
    /// Trials of holder takeover with the first TTL of `takeover_ttls`, and with each later.
    takeover_trials: (usize, usize),
    /// The same for the takeover whose holder's process is killed (more with the first TTL:
    /// its p99 is a target).
    killed_trials: (usize, usize),
    /// The session TTLs of holder takeover (`--takeover-ttl-ms`).
    takeover_ttls: Vec<Duration>,
    /// Stable running before each fault of the leader (`--settle-ms`).
    settle: Duration,
    /// Single-client latency: writes timed.
    write_count: usize,
    /// Single-client latency: reads timed, of each kind (enough for a p999 at full size).
    read_count: usize,
    /// Untimed reads before them, for at least this long (ZooKeeper's JVM compiles its read
    /// path only after some thousands of requests; 50 reads left the kind measured first
    /// twice as slow as the same read measured second).
    read_warmup: Duration,
    /// Throughput: how long each client count writes.
    throughput_window: Duration,
    throughput_clients: Vec<usize>,
    keepalive_leases: usize,
    keepalive_window: Duration,
    elections: Vec<usize>,
    /// Sessions holding them (`--election-sessions`).
    election_sessions: usize,
    /// How long idle CPU is sampled.
    cpu_window: Duration,
    herd_changes: usize,
    /// Holders killed in the cron scenario, per fate-sharing setting.
    cron_kills: usize,
}

impl Sizes {
    fn new(quick: bool, smoke: bool, trials: Option<usize>) -> Sizes {
        if smoke {
            Sizes {
                failover_trials: trials.unwrap_or(1),
                takeover_trials: (1, 0),
                killed_trials: (1, 0),
                takeover_ttls: DEFAULT_TAKEOVER_TTLS.to_vec(),
                settle: DEFAULT_SETTLE,
                write_count: 20,
                read_count: 20,
                read_warmup: Duration::from_millis(100),
                throughput_window: Duration::from_millis(500),
                throughput_clients: vec![1, 16],
                keepalive_leases: 100,
                keepalive_window: Duration::from_millis(500),
                elections: vec![1_000],
                election_sessions: ELECTION_SESSIONS,
                cpu_window: Duration::from_secs(1),
                herd_changes: 1,
                cron_kills: 1,
            }
        } else if quick {
            Sizes {
                failover_trials: trials.unwrap_or(5),
                takeover_trials: (trials.unwrap_or(3), 1),
                killed_trials: (trials.unwrap_or(10), 1),
                takeover_ttls: DEFAULT_TAKEOVER_TTLS.to_vec(),
                settle: DEFAULT_SETTLE,
                write_count: 200,
                read_count: 1_000,
                read_warmup: Duration::from_secs(2),
                throughput_window: Duration::from_secs(2),
                throughput_clients: vec![1, 16, 256],
                keepalive_leases: 1_000,
                keepalive_window: Duration::from_secs(2),
                elections: vec![10_000],
                election_sessions: ELECTION_SESSIONS,
                cpu_window: Duration::from_secs(3),
                herd_changes: 2,
                cron_kills: trials.unwrap_or(3),
            }
        } else {
            Sizes {
                failover_trials: trials.unwrap_or(50),
                takeover_trials: (trials.unwrap_or(50).min(20), 5),
                killed_trials: (trials.unwrap_or(50), 5),
                takeover_ttls: DEFAULT_TAKEOVER_TTLS.to_vec(),
                settle: DEFAULT_SETTLE,
                write_count: 2_000,
                read_count: 10_000,
                read_warmup: Duration::from_secs(3),
                throughput_window: Duration::from_secs(5),
                throughput_clients: vec![1, 16, 256],
                keepalive_leases: 10_000,
                keepalive_window: Duration::from_secs(5),
                elections: vec![10_000, 100_000],
                election_sessions: ELECTION_SESSIONS,
                cpu_window: Duration::from_secs(10),
                herd_changes: 5,
                cron_kills: trials.unwrap_or(50).min(10),
            }
        }
    }
}

/// Every chosen scenario on `system` under `profile`, each group on a fresh cluster.
async fn measure_system(
    chosen: &[Scenario],
    system: System,
    profile: Profile,
    env: &Env,
    sizes: &Sizes,
    report: &mut Report,
) -> anyhow::Result<()> {
    let has = |s: Scenario| chosen.contains(&s) && measured_in(system, s);
    let tag = format!("[{system} {profile}]");
    if system.backend_only() {
        if has(Scenario::Takeover) {
            let backend = crate::backend::Backend::start(system, env)?;
            eprintln!("{tag} takeover through {}", backend.url);
            takeover(system, profile, env, &backend.url, sizes, report)
                .await
                .context("takeover")?;
            report.note(
                "takeover",
                system,
                profile,
                "a client backend with no timing profile: measured under the first profile only"
                    .to_string(),
            );
        }
        if has(Scenario::Cron) {
            let backend = crate::backend::Backend::start(system, env)?;
            cron(system, profile, env, &backend.url, sizes, report)
                .await
                .context("cron")?;
        }
        return Ok(());
    }
    if has(Scenario::CrashFailover) || has(Scenario::PauseFailover) || has(Scenario::Handover) {
        let mut c = system::start(system, profile, env).await?;
        c.wait_stable(STABLE_WITHIN).await?;
        for (scenario, fault) in [
            (Scenario::CrashFailover, Fault::Crash),
            (Scenario::PauseFailover, Fault::Pause),
            (Scenario::Handover, Fault::Transfer),
        ] {
            if !has(scenario) {
                continue;
            }
            let name = scenario_name(scenario);
            let t = Instant::now();
            for trial in 0..sizes.failover_trials {
                match fault_trial(&mut c, fault, sizes.settle).await {
                    Ok((took, rounds)) => {
                        let said = rounds.map_or(String::new(), |r| {
                            format!(
                                " ({} election(s), {} pre-vote(s) lost)",
                                r.elections, r.pre_votes_lost
                            )
                        });
                        eprintln!(
                            "{tag} {name} {:>3}: {:>8.1} ms{said}",
                            trial + 1,
                            as_ms(took)
                        );
                        report.record(
                            name,
                            FAILOVER_METRIC,
                            "ms",
                            Better::Lower,
                            system,
                            profile,
                            [(trial, as_ms(took))],
                        );
                        if let Some(r) = rounds {
                            for (metric, value) in [
                                ("elections started per trial", r.elections),
                                ("pre-votes lost per trial", r.pre_votes_lost),
                                (
                                    "elections without a winner per trial",
                                    r.elections.saturating_sub(1),
                                ),
                            ] {
                                report.record(
                                    name,
                                    metric,
                                    "count",
                                    Better::Lower,
                                    system,
                                    profile,
                                    [(trial, value as f64)],
                                );
                            }
                        }
                    }
                    Err(e) if e.downcast_ref::<Unsupported>().is_some() => {
                        report.note(name, system, profile, format!("{e}"));
                        break;
                    }
                    Err(e) => return Err(e.context(format!("{name} trial {}", trial + 1))),
                }
            }
            let done = report.cell(name, FAILOVER_METRIC, system, profile).count();
            if done > 0 {
                let line = format!("{done} trials took {:.0} s", t.elapsed().as_secs_f64());
                eprintln!("{tag} {name}: {line}");
                report.note(name, system, profile, line);
            }
        }
    }
    if has(Scenario::Flood) {
        let c = system::start(system, profile, env).await?;
        c.wait_stable(STABLE_WITHIN).await?;
        flood(&*c, sizes, report).await.context("flood")?;
    }
    if has(Scenario::Takeover)
        || has(Scenario::Write)
        || has(Scenario::Read)
        || has(Scenario::Keepalives)
        || has(Scenario::Herd)
    {
        let c = system::start(system, profile, env).await?;
        c.wait_stable(STABLE_WITHIN).await?;
        if has(Scenario::Write) {
            write(&*c, sizes, report).await.context("write")?;
        }
        if has(Scenario::Read) {
            read(&*c, sizes, report).await.context("read")?;
        }
        if has(Scenario::Keepalives) {
            keepalives(&*c, sizes, report).await.context("keepalives")?;
        }
        if has(Scenario::Takeover) {
            takeover(system, profile, env, &c.url(), sizes, report)
                .await
                .context("takeover")?;
        }
        if has(Scenario::Herd) {
            herd(&*c, sizes, report).await.context("herd")?;
        }
    }
    if has(Scenario::Cron) {
        let c = system::start(system, profile, env).await?;
        c.wait_stable(STABLE_WITHIN).await?;
        cron(system, profile, env, &c.url(), sizes, report)
            .await
            .context("cron")?;
    }
    if has(Scenario::Elections) {
        for &n in &sizes.elections {
            let mut c = system::start(system, profile, env).await?;
            c.wait_stable(STABLE_WITHIN).await?;
            elections(&mut *c, n, sizes, report)
                .await
                .with_context(|| format!("{n} elections"))?;
        }
    }
    Ok(())
}

const STABLE_WITHIN: Duration = Duration::from_secs(90);

fn scenario_name(s: Scenario) -> &'static str {
    match s {
        Scenario::CrashFailover => "crash-failover",
        Scenario::PauseFailover => "pause-failover",
        Scenario::Handover => "handover",
        Scenario::Takeover => "takeover",
        Scenario::Write => "write",
        Scenario::Read => "read",
        Scenario::Keepalives => "keepalives",
        Scenario::Elections => "elections",
        Scenario::Herd => "herd",
        Scenario::Cron => "cron",
        Scenario::Flood => "flood",
        Scenario::All => "all",
        Scenario::Probe => "probe",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Crash,
    Pause,
    Transfer,
}

/// One fault of the leader, timed from the fault to the first write acknowledged by the
/// survivors (crash, pause) or by the new leader (transfer); then the cluster is made whole
/// and stable again.
/// The failover scenarios' timing, one sample per trial.
const FAILOVER_METRIC: &str = "fault → first acknowledged write";

/// What the survivors of one trial did to elect a leader (tenure only: read from their
/// `/metrics` before the fault and once the first write after it was acknowledged).
#[derive(Clone, Copy, Debug)]
struct Rounds {
    /// Real elections started (terms campaigned in), summed over the survivors.
    elections: u64,
    /// Pre-vote rounds lost, summed over the survivors.
    pre_votes_lost: u64,
}

/// The survivors' election counters, summed; `None` for a system without them.
async fn election_counters(c: &dyn Cluster, nodes: &[usize]) -> Option<(f64, f64)> {
    let (mut elections, mut lost) = (0.0, 0.0);
    for &i in nodes {
        let text = c.metrics(i).await.ok()??;
        elections += prometheus_value(&text, "tenure_elections_started_total")?;
        lost += prometheus_value(&text, "tenure_pre_votes_lost_total")?;
    }
    Some((elections, lost))
}

/// The highest Raft term any node reports; `None` for a system without the metric.
async fn highest_term(c: &dyn Cluster) -> Option<f64> {
    let mut highest: Option<f64> = None;
    for i in 0..c.len() {
        let text = c.metrics(i).await.ok()??;
        let term = prometheus_value(&text, "tenure_term")?;
        highest = Some(highest.map_or(term, |h: f64| h.max(term)));
    }
    highest
}

/// The value of an unlabelled sample `name` in a Prometheus text exposition.
fn prometheus_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

async fn fault_trial(
    c: &mut Box<dyn Cluster>,
    fault: Fault,
    settle: Duration,
) -> anyhow::Result<(Duration, Option<Rounds>)> {
    let leader = c.wait_stable(STABLE_WITHIN).await?;
    let n = c.len();
    let target = (leader + 1) % n;
    let via: Vec<usize> = match fault {
        Fault::Transfer => vec![target],
        _ => (0..n).filter(|&i| i != leader).collect(),
    };
    let w: Arc<dyn Writer> = Arc::from(c.writer(&via).await?);
    // Connect the writer to its nodes before the fault (the answer does not matter).
    let _ = w
        .put("tenure-bench-warm", b"w", Duration::from_millis(300))
        .await;
    tokio::time::sleep(settle).await;
    let pid = c
        .pid(leader)
        .ok_or_else(|| anyhow!("the leader has no process"))?;
    let survivors: Vec<usize> = (0..n).filter(|&i| i != leader).collect();
    let before = election_counters(c.as_ref(), &survivors).await;
    let t0 = Instant::now();
    match fault {
        Fault::Crash => c.kill(leader)?,
        Fault::Pause => tenure_procs::signal(pid, libc::SIGSTOP)?,
        Fault::Transfer => c.transfer(target).await?,
    }
    let took = first_ack(w, t0, Duration::from_secs(120)).await;
    let after = election_counters(c.as_ref(), &survivors).await;
    let rounds = before.zip(after).map(|((e0, l0), (e1, l1))| Rounds {
        elections: (e1 - e0).max(0.0) as u64,
        pre_votes_lost: (l1 - l0).max(0.0) as u64,
    });
    // Make the cluster whole again before reporting, also on failure.
    match fault {
        Fault::Crash => c.restart(leader)?,
        Fault::Pause => tenure_procs::signal(pid, libc::SIGCONT)?,
        Fault::Transfer => {}
    }
    let took = match took {
        Ok(took) => took,
        // Where leadership is now says whether a transfer took at all.
        Err(e) => bail!("{e:#}; the leader is now {:?}", c.leader().await),
    };
    if fault == Fault::Transfer {
        // The target acknowledged a write as leader; the other nodes learn of it with its
        // next message, so every node agreeing can take a moment. Another leader, or none
        // within the wait, is a failed transfer.
        let deadline = Instant::now() + STABLE_WITHIN;
        loop {
            let now = c.leader().await;
            if now == Some(target) {
                break;
            }
            if Instant::now() >= deadline {
                bail!("after the transfer to node {target} the leader is {now:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    c.wait_stable(STABLE_WITHIN).await?;
    Ok((took, rounds))
}

/// Send a write every 5 ms (each given 2 s) until one is acknowledged; the time from `t0`
/// to that acknowledgement. Overlapping attempts keep one request stuck at a dead node from
/// hiding the moment the cluster serves again.
async fn first_ack(w: Arc<dyn Writer>, t0: Instant, within: Duration) -> anyhow::Result<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut attempts = tokio::task::JoinSet::new();
    let mut k = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    // The last refusal, for the error when none is acknowledged.
    let last_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let r = loop {
        tokio::select! {
            at = rx.recv() => break at.map(|at| at - t0).ok_or_else(|| anyhow!("writer gone")),
            _ = tick.tick() => {
                if t0.elapsed() > within {
                    let last = last_error.lock().map(|e| e.clone()).unwrap_or_default();
                    break Err(anyhow!(
                        "no write acknowledged within {within:?} of the fault (the last refusal: {})",
                        last.as_deref().unwrap_or("none")
                    ));
                }
                if attempts.len() < 400 {
                    k += 1;
                    let (w, tx, last_error) = (w.clone(), tx.clone(), last_error.clone());
                    attempts.spawn(async move {
                        let v = format!("after-{k}");
                        match w.put("tenure-bench-failover", v.as_bytes(), Duration::from_secs(2)).await {
                            Ok(()) => {
                                let _ = tx.send(Instant::now());
                            }
                            Err(e) => {
                                if let Ok(mut last) = last_error.lock() {
                                    *last = Some(format!("{e:#}"));
                                }
                            }
                        }
                    });
                }
                while attempts.try_join_next().is_some() {}
            }
        }
    };
    attempts.abort_all();
    r
}

/// One client's latency, then throughput with 1, 16 and 256 clients.
async fn write(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let all: Vec<usize> = (0..c.len()).collect();
    let w = c.writer(&all).await?;
    for k in 0..50 {
        w.put(&format!("warm-{k}"), &[0; 64], Duration::from_secs(5))
            .await?;
    }
    let leader = c.leader().await;
    let before = scrape(c).await?;
    let mut lat = Vec::with_capacity(sizes.write_count);
    for k in 0..sizes.write_count {
        let t = Instant::now();
        w.put("latency", &[k as u8; 64], Duration::from_secs(5))
            .await
            .context("a timed write")?;
        lat.push(t.elapsed());
    }
    let after = scrape(c).await?;
    node_latencies(c, leader, &before, &after, report)?;
    if let Some(l) = leader {
        let mean = lat.iter().sum::<Duration>() / lat.len().max(1) as u32;
        if write_breakdown(system, profile, mean, l, &before, &after, report) {
            // Beside the breakdown, and only there: a floor has no ratio to etcd's.
            floor(system, profile, report)?;
        }
    }
    lat.sort();
    eprintln!(
        "[{system} {profile}] write latency: p50 {:.2} ms, max {:.2} ms over {}",
        as_ms(lat[lat.len() / 2]),
        as_ms(lat[lat.len() - 1]),
        lat.len()
    );
    report.record(
        "write",
        "one client, latency",
        "ms",
        Better::Lower,
        system,
        profile,
        lat.iter().map(|d| as_ms(*d)).enumerate(),
    );
    for &clients in &sizes.throughput_clients {
        let mut ops = Vec::with_capacity(clients);
        for i in 0..clients {
            let w: Arc<dyn Writer> = Arc::from(c.writer(&all).await?);
            w.put("warm", &[0; 64], Duration::from_secs(5)).await?;
            let key = format!("client-{i}");
            ops.push(move || {
                let (w, key) = (w.clone(), key.clone());
                async move { w.put(&key, &[1; 64], Duration::from_secs(5)).await }
            });
        }
        let load = run_load(ops, sizes.throughput_window).await?;
        let what = Throughput {
            scenario: "write",
            metric_prefix: "",
            noun: "write",
            clients,
        };
        what.record(&load, sizes.throughput_window, system, profile, report);
    }
    Ok(())
}

/// Writes of one client, one after another, until `count` are done and `window` has
/// passed: each one's latency.
async fn timed_writes(
    w: &dyn Writer,
    count: usize,
    window: Duration,
) -> anyhow::Result<Vec<Duration>> {
    let mut lat = Vec::with_capacity(count);
    let started = Instant::now();
    let mut k = 0usize;
    while k < count || started.elapsed() < window {
        k += 1;
        let t = Instant::now();
        w.put("latency", &[k as u8; 64], Duration::from_secs(5))
            .await
            .context("a timed write")?;
        lat.push(t.elapsed());
    }
    Ok(lat)
}

/// How long the flood scenario writes under the flood: longer than tenure's deadline for an
/// unauthenticated connection (10 s), so that the flood's reconnections are measured too.
const FLOOD_WINDOW: Duration = Duration::from_secs(15);

/// One client's write latency without a flood, then under the anonymous connection flood
/// of [`tenure_procs::flood`] against every node for [`FLOOD_WINDOW`], on the same cluster; and
/// whether the Raft leader changed meanwhile.
async fn flood(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let Some((targets, ca)) = c.flood_target() else {
        return Ok(());
    };
    let all: Vec<usize> = (0..c.len()).collect();
    let w = c.writer(&all).await?;
    for k in 0..50 {
        w.put(&format!("warm-{k}"), &[0; 64], Duration::from_secs(5))
            .await?;
    }
    let quiet = timed_writes(&*w, sizes.write_count, Duration::ZERO).await?;
    let leader_before = c.leader().await;
    let attack = tenure_procs::flood::Flood::start(&targets, &ca)?;
    // Let the flood reach its full size before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = timed_writes(&*w, 0, FLOOD_WINDOW).await;
    let leader_after = c.leader().await;
    let (opened, ended) = (
        attack.opened.load(std::sync::atomic::Ordering::Relaxed),
        attack.ended.load(std::sync::atomic::Ordering::Relaxed),
    );
    attack.stop().await;
    let loaded = loaded?;
    let p = |lat: &[Duration], q: f64| {
        let mut v = lat.to_vec();
        v.sort();
        as_ms(v[((v.len() as f64 * q) as usize).min(v.len() - 1)])
    };
    let line = format!(
        "write latency p50 {:.2} -> {:.2} ms, p99 {:.2} -> {:.2} ms under the flood \
         ({opened} anonymous TLS sessions opened, {ended} refused or ended); Raft leader \
         {leader_before:?} -> {leader_after:?}",
        p(&quiet, 0.5),
        p(&loaded, 0.5),
        p(&quiet, 0.99),
        p(&loaded, 0.99),
    );
    eprintln!("[{system} {profile}] flood: {line}");
    report.note("flood", system, profile, line);
    for (metric, lat) in [
        ("one client, latency, no flood", &quiet),
        ("one client, latency, under the flood", &loaded),
    ] {
        report.record(
            "flood",
            metric,
            "ms",
            Better::Lower,
            system,
            profile,
            lat.iter().map(|d| as_ms(*d)).enumerate(),
        );
    }
    Ok(())
}

/// Every node's `/metrics` (where the system exports them).
async fn scrape(c: &dyn Cluster) -> anyhow::Result<Vec<Option<String>>> {
    let mut out = Vec::with_capacity(c.len());
    for i in 0..c.len() {
        out.push(c.metrics(i).await?);
    }
    Ok(out)
}

/// What the nodes themselves timed during the single-client writes, from the difference of
/// two scrapes: per node the write-ahead log's fsync (write + fsync per persist), and at
/// the leader the commit latency (propose to apply). Each is the exact mean (the
/// histogram's sum over its count) and the p99 as its bucket's upper bound, one sample per
/// node; the figures are the nodes' own view of the client's round trip above.
fn node_latencies(
    c: &dyn Cluster,
    leader: Option<usize>,
    before: &[Option<String>],
    after: &[Option<String>],
    report: &mut Report,
) -> anyhow::Result<()> {
    use tenure_plan::metrics::{Quantile, COMMIT, FSYNC};
    let (system, profile) = (c.system(), c.profile());
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let (Some(b), Some(a)) = (b, a) else {
            continue;
        };
        let mut families = vec![(FSYNC, "WAL fsync per persist, per node")];
        if leader == Some(i) {
            families.push((COMMIT, "commit latency (propose → apply) at the leader"));
        }
        for (family, what) in families {
            let delta = HistogramDelta::between(b, a, family)
                .with_context(|| format!("{family} of node {i}"))?;
            if delta.count == 0 {
                continue;
            }
            let p99 = match delta.buckets.p99() {
                Quantile::AtMost(d) | Quantile::Above(d) => as_ms(d),
                Quantile::NoSamples => continue,
            };
            eprintln!(
                "[{system} {profile}] node {i} {what}: mean {:.3} ms, p99 ≤ {p99:.3} ms over {}",
                delta.mean_ms(),
                delta.count
            );
            for (stat, value) in [("mean", delta.mean_ms()), ("p99 (bucket bound)", p99)] {
                report.record(
                    "write",
                    &format!("one client: {what}, {stat}"),
                    "ms",
                    Better::Lower,
                    system,
                    profile,
                    [(i, value)],
                );
            }
        }
    }
    Ok(())
}

/// The mean of a labelled series of `tenure_stage_seconds` between two scrapes, and how
/// many samples it had (`None` when the node does not export it).
fn stage_mean(before: &str, after: &str, stage: &str) -> Option<(Duration, u64)> {
    let read = |text: &str, what: &str| -> Option<f64> {
        let key = format!("tenure_stage_seconds_{what}{{stage=\"{stage}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
    };
    let count = read(after, "count")? - read(before, "count")?;
    let sum = read(after, "sum")? - read(before, "sum")?;
    (count >= 1.0).then(|| (Duration::from_secs_f64(sum.max(0.0) / count), count as u64))
}

/// [`stage_mean`]'s mean, zero when the stage had no samples.
fn stage_or_zero(before: &str, after: &str, stage: &str) -> Duration {
    stage_mean(before, after, stage).map_or(Duration::ZERO, |(d, _)| d)
}

/// The mean of a histogram family between two scrapes (zero without samples).
fn family_mean(before: &str, after: &str, family: &str) -> Duration {
    HistogramDelta::between(before, after, family)
        .ok()
        .filter(|d| d.count > 0)
        .map_or(Duration::ZERO, |d| {
            Duration::from_secs_f64(d.sum_seconds / d.count as f64)
        })
}

/// Where one client's write goes, from the nodes' own stage histograms
/// (`tenure_stage_seconds`, `tenure_commit_latency_seconds`) over the timed writes: each
/// stage's mean, printed and recorded beside the client's mean. Means add up where
/// quantiles do not. The client's round trip is what lies outside the server (the client
/// library, the network both ways, TLS, HTTP/2 framing, the answer's encoding) and the
/// server's part from the request's arrival to its answer built; that part is the gRPC
/// layer's (body read, decode, authentication), the handler's, the queue to the driver
/// thread, the driver's stages in order (proposal to log write, log write to commit,
/// commit to answer) and the answer's way back to the handler. The leader's log write and
/// fsync and the followers' fsync run inside "log write to commit", the last two in
/// parallel. False when the leader does not export the stages (another system).
fn write_breakdown(
    system: System,
    profile: Profile,
    client_mean: Duration,
    leader: usize,
    before: &[Option<String>],
    after: &[Option<String>],
    report: &mut Report,
) -> bool {
    let (Some(b), Some(a)) = (&before[leader], &after[leader]) else {
        return false;
    };
    let Some((total, n)) = stage_mean(b, a, "write_total") else {
        return false;
    };
    let stage = |name: &str| stage_or_zero(b, a, name);
    let (unary, unary_in) = (stage("unary_total"), stage("unary_in"));
    let (queue, propose) = (stage("write_queue"), stage("propose"));
    let (replicate, apply) = (stage("replicate"), stage("apply"));
    // The followers' own fsync over the same writes, the mean of their means.
    let followers: Vec<Duration> = before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .filter_map(|(_, pair)| match pair {
            (Some(b), Some(a)) => stage_mean(b, a, "wal_fsync").map(|(d, _)| d),
            _ => None,
        })
        .collect();
    let follower_fsync = followers.iter().sum::<Duration>() / followers.len().max(1) as u32;
    let rows = [
        ("client round trip", client_mean),
        (
            "outside the server (client, network, TLS, HTTP/2, answer encoding)",
            client_mean.saturating_sub(unary),
        ),
        ("in the server, arrival to answer built", unary),
        (
            "  gRPC: body read and decoded, caller authenticated",
            unary_in,
        ),
        (
            "  handler: authorized, charged, answer built",
            unary.saturating_sub(unary_in + total),
        ),
        ("  queue to the driver thread", queue),
        ("  driver: proposal taken to log write", propose),
        (
            "  driver: log write to commit (majority durable)",
            replicate,
        ),
        ("    leader: log write", stage("wal_write")),
        (
            "    leader: fsync (beside the followers')",
            stage("wal_fsync"),
        ),
        (
            "    follower: fsync (mean of the followers)",
            follower_fsync,
        ),
        ("  driver: commit to answer (apply)", apply),
        (
            "  answer back to the handler",
            total.saturating_sub(queue + propose + replicate + apply),
        ),
        (
            "driver's own count: proposal taken to applied",
            family_mean(b, a, tenure_plan::metrics::COMMIT),
        ),
    ];
    print_breakdown(
        system,
        profile,
        "write",
        "one client",
        "one write",
        n,
        &rows,
        report,
    );
    true
}

/// Where one renewal of one session goes (a keepalive stream with one renewal in flight),
/// from the leader's stage histograms over the renewals: the client's mean round trip,
/// what lies outside the server, the queue to the driver thread, the driver's part (the
/// leader confirmed by a majority and the renewal safe for any successor) and the answer's
/// way back to the stream's task. False when the leader does not export the stages.
fn keepalive_breakdown(
    system: System,
    profile: Profile,
    client_mean: Duration,
    before: &str,
    after: &str,
    report: &mut Report,
) -> bool {
    let Some((total, n)) = stage_mean(before, after, "keepalive_total") else {
        return false;
    };
    let queue = stage_or_zero(before, after, "keepalive_queue");
    let driver = family_mean(before, after, tenure_plan::metrics::KEEPALIVE);
    let rows = [
        ("client round trip", client_mean),
        (
            "outside the server (client, network, TLS, HTTP/2, stream)",
            client_mean.saturating_sub(total),
        ),
        ("in the server, handed to the driver to answer back", total),
        ("  queue to the driver thread", queue),
        ("  driver: received to acknowledged", driver),
        (
            "  answer back to the stream's task",
            total.saturating_sub(queue + driver),
        ),
    ];
    let what = "one session";
    print_breakdown(
        system,
        profile,
        "keepalives",
        what,
        "one renewal",
        n,
        &rows,
        report,
    );
    true
}

/// Prints and records the rows of a breakdown (`metric` is the prefix of each row's
/// metric, `each` what the means are over).
#[allow(clippy::too_many_arguments)]
fn print_breakdown(
    system: System,
    profile: Profile,
    scenario: &str,
    metric: &str,
    each: &str,
    n: u64,
    rows: &[(&str, Duration)],
    report: &mut Report,
) {
    let width = rows.iter().map(|(w, _)| w.len()).max().unwrap_or(0);
    eprintln!("[{system} {profile}] {each}, where its time goes (means over {n}):");
    for (what, d) in rows {
        eprintln!(
            "[{system} {profile}]   {what:<width$} {:>8.3} ms",
            as_ms(*d)
        );
        report.record(
            scenario,
            &format!("{metric}, breakdown: {}, mean", what.trim()),
            "ms",
            Better::Lower,
            system,
            profile,
            [(0, as_ms(*d))],
        );
    }
}

/// The machine's floor, measured in the same run: a 64-byte round trip over loopback TCP
/// (no TLS, no HTTP/2; `TCP_NODELAY`), a 4 KiB write plus `fdatasync` in the temporary
/// directory, and the same in three files at once (as the three nodes of a cluster on one
/// disk sync together: their fsyncs share the disk and the filesystem's journal). Medians
/// of 2,000 round trips and 300 syncs (900 at once).
fn floor(system: System, profile: Profile, report: &mut Report) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 64];
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => s.write_all(&buf)?,
                Err(_) => return Ok(()),
            }
        }
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut buf = [7u8; 64];
    let mut rtt = Vec::with_capacity(2_000);
    for _ in 0..2_000 {
        let t = Instant::now();
        s.write_all(&buf)?;
        s.read_exact(&mut buf)?;
        rtt.push(t.elapsed());
    }
    drop(s);
    let _ = echo.join();
    let dir = tempfile::tempdir()?;
    let mut sync = sync_loop(&dir.path().join("floor"))?;
    let mut together = std::thread::scope(|scope| {
        let loops: Vec<_> = (0..3)
            .map(|i| {
                let path = dir.path().join(format!("floor-{i}"));
                scope.spawn(move || sync_loop(&path))
            })
            .collect();
        let mut all = Vec::with_capacity(900);
        for l in loops {
            all.extend(l.join().map_err(|_| anyhow!("an fsync loop panicked"))??);
        }
        anyhow::Ok(all)
    })?;
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    for (what, d) in [
        (
            "floor: loopback TCP round trip (64 B), median",
            median(&mut rtt),
        ),
        ("floor: 4 KiB write + fdatasync, median", median(&mut sync)),
        (
            "floor: 4 KiB write + fdatasync, three files at once, median",
            median(&mut together),
        ),
    ] {
        eprintln!("[{system} {profile}] {what}: {:.3} ms", as_ms(d));
        report.record(
            "write",
            what,
            "ms",
            Better::Lower,
            system,
            profile,
            [(0, as_ms(d))],
        );
    }
    Ok(())
}

/// 300 appends of 4 KiB to a new file at `path`, each followed by `fdatasync`: how long
/// each took.
fn sync_loop(path: &std::path::Path) -> std::io::Result<Vec<Duration>> {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path)?;
    let block = [0u8; 4096];
    let mut took = Vec::with_capacity(300);
    for _ in 0..300 {
        let t = Instant::now();
        f.write_all(&block)?;
        f.sync_data()?;
        took.push(t.elapsed());
    }
    Ok(took)
}

/// One histogram family's samples between two scrapes of a node's `/metrics`.
struct HistogramDelta {
    /// Bucket counts of the samples in between.
    buckets: tenure_plan::metrics::Histogram,
    /// Their number.
    count: u64,
    /// Their sum in seconds (`_sum`; the exact mean, which buckets cannot give).
    sum_seconds: f64,
}

impl HistogramDelta {
    fn between(before: &str, after: &str, family: &str) -> anyhow::Result<HistogramDelta> {
        let read = |text: &str| -> anyhow::Result<(tenure_plan::metrics::Histogram, f64)> {
            let h = tenure_plan::metrics::histograms(text)?
                .remove(family)
                .unwrap_or_default();
            let sum_key = format!("{family}_sum ");
            let sum = text
                .lines()
                .find_map(|l| l.strip_prefix(&sum_key))
                .map(|v| v.trim().parse::<f64>())
                .transpose()
                .with_context(|| format!("{family}_sum is not a number"))?
                .unwrap_or(0.0);
            Ok((h, sum))
        };
        let ((b, b_sum), (a, a_sum)) = (read(before)?, read(after)?);
        let buckets = a
            .buckets
            .iter()
            .map(|(le, n)| {
                let was = b
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0, |(_, m)| *m);
                (*le, n.saturating_sub(was))
            })
            .collect();
        let count = a.count.saturating_sub(b.count);
        Ok(HistogramDelta {
            buckets: tenure_plan::metrics::Histogram { buckets, count },
            count,
            sum_seconds: (a_sum - b_sum).max(0.0),
        })
    }

    fn mean_ms(&self) -> f64 {
        self.sum_seconds / self.count as f64 * 1000.0
    }
}

/// Linearizable reads at the leader, each kind in turn: one client's latency over
/// `read_count` sequential reads, then throughput with 1, 16 and 256 clients, each client a
/// reader of its own (connection, session). tenure reads with `Leader` and `Get`; etcd and
/// ZooKeeper do their one linearizable read for both kinds, measured anew for each, so that
/// every row of the table has its comparison.
async fn read(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let timeout = Duration::from_secs(5);
    // Once per system and profile, not once per round.
    let method = read_method(system);
    if !report
        .notes
        .iter()
        .any(|n| n.0 == "read" && n.1 == system && n.2 == profile && n.3 == method)
    {
        report.note("read", system, profile, method.to_string());
    }
    for kind in ReadKind::ALL {
        let name = kind.name();
        // Every read goes to the leader of the moment, as every write does.
        let mut leader = c.wait_stable(STABLE_WITHIN).await?;
        let r = c.reader(kind, leader).await?;
        let warm_until = Instant::now() + sizes.read_warmup;
        let mut warm = 0;
        while warm < 50 || Instant::now() < warm_until {
            r.read(timeout).await.with_context(|| format!("a {name}"))?;
            warm += 1;
        }
        let mut lat = Vec::with_capacity(sizes.read_count);
        for _ in 0..sizes.read_count {
            let t = Instant::now();
            r.read(timeout)
                .await
                .with_context(|| format!("a timed {name}"))?;
            lat.push(t.elapsed());
        }
        drop(r);
        leader = still_leads(c, leader, &format!("{name}: one client"), report).await?;
        lat.sort();
        let sorted_ms: Vec<f64> = lat.iter().map(|d| as_ms(*d)).collect();
        let at = |q: f64| crate::report::nearest_rank(&sorted_ms, q * 100.0).unwrap_or(f64::NAN);
        eprintln!(
            "[{system} {profile}] {name} latency: p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms over {}",
            at(0.5),
            at(0.99),
            at(0.999),
            lat.len()
        );
        report.record(
            "read",
            &format!("{name}: one client, latency"),
            "ms",
            Better::Lower,
            system,
            profile,
            sorted_ms.iter().copied().enumerate(),
        );
        for &clients in &sizes.throughput_clients {
            let mut ops = Vec::with_capacity(clients);
            for _ in 0..clients {
                let r: Arc<dyn Reader> = Arc::from(c.reader(kind, leader).await?);
                r.read(timeout)
                    .await
                    .with_context(|| format!("a {name} of a new client"))?;
                ops.push(move || {
                    let r = r.clone();
                    async move { r.read(timeout).await }
                });
            }
            let load = run_load(ops, sizes.throughput_window).await?;
            leader = still_leads(c, leader, &format!("{name}: {clients} clients"), report).await?;
            let metric_prefix = format!("{name}: ");
            let what = Throughput {
                scenario: "read",
                metric_prefix: &metric_prefix,
                noun: "read",
                clients,
            };
            what.record(&load, sizes.throughput_window, system, profile, report);
        }
    }
    Ok(())
}

/// Whether node `leader` still leads after a part of the read scenario; if not, a note says
/// so (the part's figures then include a leader change), and the leader of a stable cluster
/// is returned for the next part.
async fn still_leads(
    c: &dyn Cluster,
    leader: usize,
    part: &str,
    report: &mut Report,
) -> anyhow::Result<usize> {
    let now = c.leader().await;
    if now == Some(leader) {
        return Ok(leader);
    }
    let next = c.wait_stable(STABLE_WITHIN).await?;
    let (system, profile) = (c.system(), c.profile());
    let line =
        format!("{part}: node {leader} led at the start, node {next} after (the leader moved)");
    eprintln!("[{system} {profile}] {line}");
    report.note("read", system, profile, line);
    Ok(next)
}

/// What a system's reads are, for the notes under the read table.
fn read_method(system: System) -> &'static str {
    match system {
        System::Tenure | System::TenureTls | System::TenureTimeout => {
            "leader read: Leader of an election that has a leader; key read: Get of a fenced key \
             holding 64 bytes; both sent to the Raft leader"
        }
        System::Etcd | System::EtcdTls => {
            "both reads: a linearizable Range (serializable=false) of one key holding 64 bytes, \
             sent to the Raft leader"
        }
        System::Zookeeper => {
            "both reads: sync then getData of one znode holding 64 bytes, on a session \
             connected to the leader"
        }
        System::Postgres | System::Memory => "not measured: a client backend (takeover only)",
    }
}

/// What every client of a throughput window counted: answers within the window, failures,
/// and the latency of every answer within it.
struct Load {
    done: u64,
    failed: u64,
    /// Why the first failed operation failed, for the note that counts them.
    first_error: Option<String>,
    /// Microseconds.
    hist: hdrhistogram::Histogram<u64>,
}

/// Run every client's operation (`ops`, one per client) back to back, all at once, for
/// `window`: an answer counts if it arrives within the window.
async fn run_load<F, Fut>(ops: Vec<F>, window: Duration) -> anyhow::Result<Load>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let start = Instant::now();
    let end = start + window;
    let mut set = tokio::task::JoinSet::new();
    for mut op in ops {
        let (done, failed, first_error) = (done.clone(), failed.clone(), first_error.clone());
        set.spawn(async move {
            // Latency of every operation answered in the window, in microseconds.
            let mut hist = latency_histogram();
            while Instant::now() < end {
                let t = Instant::now();
                match op().await {
                    Ok(()) if Instant::now() <= end => {
                        done.fetch_add(1, Ordering::Relaxed);
                        hist.saturating_record(t.elapsed().as_micros() as u64);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let mut first = first_error.lock().expect("never poisoned");
                        if first.is_none() {
                            *first = Some(format!("{e:#}"));
                        }
                    }
                }
            }
            hist
        });
    }
    let mut hist = latency_histogram();
    while let Some(h) = set.join_next().await {
        hist.add(h.context("a client task panicked")?)
            .context("merge latency histograms")?;
    }
    let first_error = first_error.lock().expect("never poisoned").take();
    Ok(Load {
        done: done.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        first_error,
        hist,
    })
}

/// How a throughput window is named in the report.
struct Throughput<'a> {
    scenario: &'a str,
    /// Before every metric's name (the read scenario's kind of read).
    metric_prefix: &'a str,
    /// `write`, `read`: what one operation is called.
    noun: &'a str,
    clients: usize,
}

impl Throughput<'_> {
    /// The latency p50 and p99 under the load, and the rate; a note when some failed.
    fn record(
        &self,
        load: &Load,
        window: Duration,
        system: System,
        profile: Profile,
        report: &mut Report,
    ) {
        let (prefix, noun, clients) = (self.metric_prefix, self.noun, self.clients);
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            report.record(
                self.scenario,
                &format!("{prefix}{clients} clients: {noun} latency {name} (HDR)"),
                "ms",
                Better::Lower,
                system,
                profile,
                [(0, load.hist.value_at_quantile(q) as f64 / 1000.0)],
            );
        }
        let rate = load.done as f64 / window.as_secs_f64();
        let failed = load.failed;
        eprintln!(
            "[{system} {profile}] {prefix}throughput with {clients} clients: {rate:.0} {noun}s/s ({failed} failed)"
        );
        if failed > 0 {
            let why = load.first_error.as_deref().unwrap_or("no reason given");
            eprintln!("[{system} {profile}] {prefix}the first failed {noun}: {why}");
            report.note(
                self.scenario,
                system,
                profile,
                format!(
                    "{prefix}{failed} {noun}s failed with {clients} clients (the first: {why})"
                ),
            );
        }
        report.record(
            self.scenario,
            &format!("{prefix}throughput, {clients} clients"),
            &format!("{noun}s/s"),
            Better::Higher,
            system,
            profile,
            [(0, rate)],
        );
    }
}

/// An HDR histogram of latencies in microseconds, 1 µs to 1 min, 3 significant digits.
fn latency_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// Renewals per second of many leases, every lease with one renewal in flight.
async fn keepalives(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    one_session(c, sizes, report).await?;
    let n = sizes.keepalive_leases;
    let t = Instant::now();
    let renewed = c
        .keepalives(KeepaliveLoad {
            leases: n,
            ttl: Duration::from_secs(30),
            concurrency: n,
            window: sizes.keepalive_window,
        })
        .await?;
    let rate = renewed as f64 / sizes.keepalive_window.as_secs_f64();
    eprintln!(
        "[{system} {profile}] keepalives: {rate:.0} renewals/s with {n} leases ({:.1} s in all)",
        t.elapsed().as_secs_f64()
    );
    report.record(
        "keepalives",
        &format!("{n} leases, one renewal in flight each"),
        "renewals/s",
        Better::Higher,
        system,
        profile,
        [(0, rate)],
    );
    Ok(())
}

/// One session renewed over one stream with one renewal in flight for the keepalive
/// window: its mean round trip (the window over the renewals), and where it goes.
async fn one_session(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let leader = c.leader().await;
    let before = scrape(c).await?;
    let renewed = c
        .keepalives(KeepaliveLoad {
            leases: 1,
            ttl: Duration::from_secs(30),
            concurrency: 1,
            window: sizes.keepalive_window,
        })
        .await?;
    let after = scrape(c).await?;
    if renewed == 0 {
        bail!(
            "no renewal of the one session within {:?}",
            sizes.keepalive_window
        );
    }
    let mean = sizes.keepalive_window / renewed as u32;
    eprintln!(
        "[{system} {profile}] keepalives: one session, one renewal in flight: {:.3} ms each ({renewed} renewals)",
        as_ms(mean)
    );
    report.record(
        "keepalives",
        "one session, one renewal in flight: round trip, mean",
        "ms",
        Better::Lower,
        system,
        profile,
        [(0, as_ms(mean))],
    );
    if let Some(l) = leader {
        if let (Some(b), Some(a)) = (&before[l], &after[l]) {
            keepalive_breakdown(system, profile, mean, b, a, report);
        }
    }
    Ok(())
}

fn opts(ttl: Duration) -> CampaignOptions {
    CampaignOptions {
        ttl,
        ..Default::default()
    }
}

/// An election holder stops renewing (as a killed client would: nothing is revoked) → the
/// waiting candidate leads; a holder's process is killed → the candidate leads; and a holder
/// resigns → the candidate leads. Through the `tenure` client library's backend for the
/// system.
async fn takeover(
    system: System,
    profile: Profile,
    env: &Env,
    url: &str,
    sizes: &Sizes,
    report: &mut Report,
) -> anyhow::Result<()> {
    let a = Client::connect(url).await.context("connect the holder")?;
    let b = Client::connect(url)
        .await
        .context("connect the candidate")?;
    let pid = std::process::id();
    for (ttl, trials) in per_ttl(&sizes.takeover_ttls, sizes.takeover_trials) {
        let ttl_name = ttl_label(ttl);
        let ttl_ms = ttl.as_millis();
        for trial in 0..trials {
            let election = format!("takeover-{pid}-{ttl_ms}-{trial}");
            let before = Instant::now();
            let holder = a
                .campaign(&election, b"a", opts(ttl))
                .await
                .context("the holder campaigns")?;
            if trial == 0 {
                note_granted_ttl(report, system, profile, ttl, &holder, before);
            }
            let waiter = wait_to_lead(&b, &election, ttl).await?;
            // Stop right after a renewal was acknowledged, so that every trial starts from
            // the same point of the lease.
            let renewed = holder.valid_until();
            let wait_renewal = Instant::now() + ttl;
            while holder.valid_until() == renewed && Instant::now() < wait_renewal {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let t0 = Instant::now();
            holder.stop_keepalives();
            // The lease as the backend counts it: from the last acknowledged renewal's send.
            let lease_end = holder.valid_until() + client_margin(ttl);
            let (r, at) = tokio::time::timeout(ttl * 10 + Duration::from_secs(30), waiter)
                .await
                .context("the candidate never led")??;
            let next = r.context("the candidate's leadership")?;
            if next.token() <= holder.token() {
                bail!(
                    "the token did not rise: {} then {}",
                    holder.token(),
                    next.token()
                );
            }
            drop(holder);
            let took = at - t0;
            let beyond = as_ms(at.saturating_duration_since(lease_end))
                - as_ms(lease_end.saturating_duration_since(at));
            eprintln!(
                "[{system} {profile}] takeover TTL {ttl_name} {:>2}: {:>8.1} ms after the holder stopped, {beyond:>7.1} ms after its lease",
                trial + 1,
                as_ms(took)
            );
            report.record(
                "takeover",
                &format!("TTL {ttl_name}: holder stops → next leads"),
                "ms",
                Better::Lower,
                system,
                profile,
                [(trial, as_ms(took))],
            );
            report.record(
                "takeover",
                &format!("TTL {ttl_name}: next leads, after the lease's end"),
                "ms",
                Better::Lower,
                system,
                profile,
                [(trial, beyond)],
            );
            next.resign().await.context("the candidate resigns")?;
        }
    }
    killed_holders(system, profile, env, url, &b, sizes, report).await?;
    // Resign → next.
    for trial in 0..sizes.takeover_trials.0 {
        let election = format!("takeover-resign-{pid}-{trial}");
        let ttl = Duration::from_secs(10);
        let holder = a
            .campaign(&election, b"a", opts(ttl))
            .await
            .context("the holder campaigns")?;
        let waiter = wait_to_lead(&b, &election, ttl).await?;
        let t0 = Instant::now();
        holder.resign().await.context("the holder resigns")?;
        let (r, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .context("the candidate never led")??;
        let next = r.context("the candidate's leadership")?;
        report.record(
            "takeover",
            "resign → next leads",
            "ms",
            Better::Lower,
            system,
            profile,
            [(trial, as_ms(at - t0))],
        );
        next.resign().await.context("the candidate resigns")?;
    }
    Ok(())
}

/// The holder is a process of its own, `tenure campaign` (this binary) through the same
/// backend, SIGKILLed while it leads → the waiting candidate (in this process) leads. On a
/// tenure cluster the holder campaigns with `--fate-sharing`: its kernel closes its
/// connections as it dies and the leader releases the session; etcd's lease, ZooKeeper's
/// session and the PostgreSQL lease row wait for their TTL. Not for `memory:` (a process of
/// its own has a world of its own).
async fn killed_holders(
    system: System,
    profile: Profile,
    env: &Env,
    url: &str,
    candidate: &Client,
    sizes: &Sizes,
    report: &mut Report,
) -> anyhow::Result<()> {
    if system == System::Memory {
        report.note(
            "takeover",
            system,
            profile,
            "holder's process killed: not measured (an in-process backend)".to_string(),
        );
        return Ok(());
    }
    let fate_sharing = matches!(system, System::Tenure | System::TenureTls);
    let dir = env.cluster_dir("holders")?;
    let pid = std::process::id();
    for (ttl, trials) in per_ttl(&sizes.takeover_ttls, sizes.killed_trials) {
        let ttl_name = ttl_label(ttl);
        let ttl_ms = ttl.as_millis();
        for trial in 0..trials {
            let election = format!("takeover-killed-{pid}-{ttl_ms}-{trial}");
            let log = dir.path().join(format!("{election}.log"));
            let mut cmd = std::process::Command::new(&env.tenure_bin);
            cmd.args(["campaign", "--election", &election, "--backend", url])
                .args(["--ttl", &format!("{ttl_ms}ms"), "--value", "a"]);
            if fate_sharing {
                cmd.arg("--fate-sharing");
            }
            let holder = tenure_procs::Proc::spawn(cmd, &log)?;
            let token = holder_token(&log, ttl * 10 + Duration::from_secs(30))
                .await
                .with_context(|| {
                    format!("the holder process of {election} (log {})", log.display())
                })?;
            let waiter = wait_to_lead(candidate, &election, ttl).await?;
            let t0 = Instant::now();
            holder.kill();
            let (r, at) = tokio::time::timeout(ttl * 10 + Duration::from_secs(30), waiter)
                .await
                .context("the candidate never led")??;
            let next = r.context("the candidate's leadership")?;
            if next.token() <= token {
                bail!("the token did not rise: {token} then {}", next.token());
            }
            let took = at - t0;
            eprintln!(
                "[{system} {profile}] takeover TTL {ttl_name} {:>2}: {:>8.1} ms after the holder's process was killed",
                trial + 1,
                as_ms(took)
            );
            report.record(
                "takeover",
                &format!("TTL {ttl_name}: holder's process killed → next leads"),
                "ms",
                Better::Lower,
                system,
                profile,
                [(trial, as_ms(took))],
            );
            next.resign().await.context("the candidate resigns")?;
        }
    }
    report.note(
        "takeover",
        system,
        profile,
        if fate_sharing {
            "holder's process killed: `tenure campaign --fate-sharing`; the leader releases the session when the process's connection ends"
        } else {
            "holder's process killed: `tenure campaign` through the backend; the session ends on its TTL"
        }
        .to_string(),
    );
    Ok(())
}

/// The fencing token a `tenure campaign` holder printed (alone on a line of its log) once
/// it leads, within `within`.
async fn holder_token(log: &std::path::Path, within: Duration) -> anyhow::Result<u64> {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(token) = text.lines().find_map(|l| l.trim().parse().ok()) {
            return Ok(token);
        }
        if Instant::now() >= deadline {
            bail!("it did not lead within {within:?}: {}", text.trim());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Each of `ttls` with its number of trials: `first` for the first TTL, `later` for each
/// one after it.
/// The cron scenario's slot command: the slot and when it started, one line each.
const CRON_COMMAND: &str = r#"echo "$TENURE_SLOT $(date +%s%N)" >> "$1""#;
/// Its lease: long enough that a holder's crash without fate-sharing shows as a gap.
const CRON_TTL: &str = "2s";

/// Two `tenure cron` replicas on a one-second schedule at `url`. Each trial lets a few slots
/// run under a stable holder, then SIGKILLs the holder's process (and starts a new replica,
/// so that two run again): the lateness of every slot's start (the command's clock minus
/// the slot) is recorded, stable slots and the first slot due after each kill apart; with
/// fate-sharing off and (tenure) on.
async fn cron(
    system: System,
    profile: Profile,
    env: &Env,
    url: &str,
    sizes: &Sizes,
    report: &mut Report,
) -> anyhow::Result<()> {
    let observer = Client::connect(url).await.context("connect")?;
    let dir = env.cluster_dir("cron")?;
    let modes: &[bool] = if system == System::Tenure {
        &[false, true]
    } else {
        &[false]
    };
    for &fate_sharing in modes {
        let mode = if fate_sharing {
            "fate-sharing"
        } else {
            "plain"
        };
        let election = format!("bench-cron-{}-{mode}", std::process::id());
        let file = dir.path().join(format!("{mode}.slots"));
        let mut next = 0;
        let spawn = |next: &mut usize| -> anyhow::Result<(String, tenure_procs::Proc)> {
            let name = format!("r{next}");
            *next += 1;
            let mut cmd = std::process::Command::new(&env.tenure_bin);
            cmd.args(["cron", "--election", &election, "--backend", url])
                .args([
                    "--schedule",
                    "* * * * * *",
                    "--catch-up",
                    "1m",
                    "--ttl",
                    CRON_TTL,
                ])
                .args(["--grace", "500ms", "--value", &name]);
            if fate_sharing {
                cmd.arg("--fate-sharing");
            }
            cmd.args(["--", "sh", "-c", CRON_COMMAND, "sh"]).arg(&file);
            let log = dir.path().join(format!("{mode}-{name}.log"));
            Ok((name, tenure_procs::Proc::spawn(cmd, &log)?))
        };
        let mut replicas = vec![spawn(&mut next)?, spawn(&mut next)?];
        let mut kills = Vec::new();
        for _ in 0..sizes.cron_kills {
            // The holder settles (after a kill, the next one has taken over) and runs slots.
            tokio::time::sleep(Duration::from_secs(8)).await;
            let holder = observer
                .leader(&election)
                .await
                .context("who holds the cron election")?
                .ok_or_else(|| anyhow!("nobody holds {election}"))?;
            let name = String::from_utf8_lossy(&holder.value).into_owned();
            let i = replicas
                .iter()
                .position(|(n, _)| *n == name)
                .ok_or_else(|| anyhow!("the holder {name:?} is not a replica of the bench"))?;
            let (_, p) = replicas.remove(i);
            kills.push(chrono_now_ns());
            p.kill();
            replicas.push(spawn(&mut next)?);
        }
        // The slots after the last kill.
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(replicas);
        let text = std::fs::read_to_string(&file).context("the slots file")?;
        let starts = cron_starts(&text)?;
        let (stable, after) = split_after_kills(&starts, &kills);
        let mut sorted = stable.clone();
        sorted.sort_by(f64::total_cmp);
        let p50 = crate::report::nearest_rank(&sorted, 50.0).unwrap_or(f64::NAN);
        eprintln!(
            "[{system} {profile}] cron {mode}: {} slots, lateness p50 {:.1} ms; first slot \
             after each of {} kills: {:?} ms",
            starts.len(),
            p50,
            kills.len(),
            after
                .iter()
                .map(|v| (v * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        report.record(
            "cron",
            &format!("slot start lateness, stable holder ({mode})"),
            "ms",
            Better::Lower,
            system,
            profile,
            stable.iter().copied().enumerate(),
        );
        report.record(
            "cron",
            &format!("first slot after the holder's process is killed: lateness ({mode})"),
            "ms",
            Better::Lower,
            system,
            profile,
            after.iter().copied().enumerate(),
        );
    }
    report.note(
        "cron",
        system,
        profile,
        format!(
            "two `tenure cron` replicas, schedule every second, TTL {CRON_TTL}; lateness = the \
             command's `date +%s%N` minus the slot"
        ),
    );
    Ok(())
}

/// Now, in Unix nanoseconds (the clock the commands' `date +%s%N` reads).
fn chrono_now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// `(slot, start)` in Unix nanoseconds from the slots file, in order of start.
fn cron_starts(text: &str) -> anyhow::Result<Vec<(i128, i128)>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let (slot, start) = line
            .split_once(' ')
            .ok_or_else(|| anyhow!("a bad slots line {line:?}"))?;
        let slot = chrono::DateTime::parse_from_rfc3339(slot)
            .with_context(|| format!("the slot of {line:?}"))?;
        let slot_ns = slot.timestamp_nanos_opt().unwrap_or_default() as i128;
        let start: i128 = start.trim().parse().with_context(|| format!("{line:?}"))?;
        out.push((slot_ns, start));
    }
    out.sort_by_key(|&(_, start)| start);
    Ok(out)
}

/// Lateness in milliseconds of the slots due before the first kill or at least 4 s after
/// the last one before them (a stable holder: twice the TTL), and of the first slot due
/// after each kill.
fn split_after_kills(starts: &[(i128, i128)], kills: &[i128]) -> (Vec<f64>, Vec<f64>) {
    let late = |(slot, start): (i128, i128)| (start - slot) as f64 / 1e6;
    let settled = |slot: i128| {
        kills
            .iter()
            .filter(|&&k| k <= slot)
            .max()
            .is_none_or(|&k| slot - k >= 4_000_000_000)
    };
    let stable = starts
        .iter()
        .filter(|(slot, _)| settled(*slot))
        .map(|&s| late(s))
        .collect();
    let after = kills
        .iter()
        .filter_map(|&k| {
            starts
                .iter()
                .filter(|(slot, _)| *slot >= k)
                .min_by_key(|(slot, _)| *slot)
        })
        .map(|&s| late(s))
        .collect();
    (stable, after)
}

fn per_ttl(
    ttls: &[Duration],
    (first, later): (usize, usize),
) -> impl Iterator<Item = (Duration, usize)> + '_ {
    ttls.iter()
        .enumerate()
        .map(move |(k, &ttl)| (ttl, if k == 0 { first } else { later }))
}

/// The outcome of a candidate's wait, and when it ended.
type Waiter = tokio::task::JoinHandle<(tenure::Result<tenure::Leadership>, Instant)>;

/// Join `election` through `client` and wait to lead in a task; returns once the candidate
/// has had 100 ms to reach its wait.
async fn wait_to_lead(client: &Client, election: &str, ttl: Duration) -> anyhow::Result<Waiter> {
    let standby = client
        .join(election, b"b", opts(ttl))
        .await
        .context("the candidate joins")?;
    let waiter = tokio::spawn(async move {
        let r = standby.leadership().await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(waiter)
}

/// A TTL as the takeover metrics name it: `1 s`, `10 s`, `1500 ms`.
fn ttl_label(ttl: Duration) -> String {
    if ttl.subsec_millis() == 0 {
        format!("{} s", ttl.as_secs())
    } else {
        format!("{} ms", ttl.as_millis())
    }
}

/// The client library's margin of DESIGN rule 4 for a session of `ttl`: the one formula, at
/// the documented drift bound and with the library's scheduling allowance.
fn client_margin(ttl: Duration) -> Duration {
    holder_margin(ttl, DriftPpm::DEFAULT, CLIENT_SCHEDULING_ALLOWANCE)
}

/// The TTL a holder was granted, from what the client library made of it: valid_until =
/// grant's send time + granted TTL − margin(granted TTL), so granted = seen + margin(granted),
/// solved by fixed-point iteration (the margin grows by 2 % of the TTL: three rounds are
/// exact to well under a microsecond).
fn granted_ttl(seen: Duration) -> Duration {
    let mut granted = seen;
    for _ in 0..3 {
        granted = seen + client_margin(granted);
    }
    granted
}

/// Say so when the backend granted a longer TTL than asked for (the takeover times then
/// follow the granted one), estimated with [`granted_ttl`].
fn note_granted_ttl(
    report: &mut Report,
    system: System,
    profile: Profile,
    asked: Duration,
    holder: &tenure::Leadership,
    before: Instant,
) {
    let granted = granted_ttl(holder.valid_until().saturating_duration_since(before));
    if granted.as_secs_f64() < asked.as_secs_f64() * 1.2 {
        return;
    }
    let why = match system {
        System::Etcd | System::EtcdTls => {
            "etcd's shortest lease is 1.5 election timeouts, in whole seconds"
        }
        System::Zookeeper => "ZooKeeper's shortest session timeout is 2 tickTimes",
        System::Tenure | System::TenureTls | System::TenureTimeout => "the cluster's --ttl-min-ms",
        System::Postgres | System::Memory => "the backend's own bound",
    };
    report.note(
        "takeover",
        system,
        profile,
        format!(
            "asked for a TTL of {:.0} s, granted about {:.1} s ({why})",
            asked.as_secs_f64(),
            granted.as_secs_f64()
        ),
    );
}

/// 50 waiters queued behind a holder; wake-ups per leader change, counted by the client
/// library (a waiter that re-checks whether it leads counts as woken).
async fn herd(c: &dyn Cluster, sizes: &Sizes, report: &mut Report) -> anyhow::Result<()> {
    const WAITERS: usize = 50;
    let (system, profile) = (c.system(), c.profile());
    let url = c.url();
    let ttl = Duration::from_secs(10);
    let h = Client::connect(&url).await.context("connect")?;
    let w = Client::connect(&url).await.context("connect")?;
    let election = format!("herd-{}", std::process::id());
    let mut holder = h
        .campaign(&election, b"first", opts(ttl))
        .await
        .context("the first holder")?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (w, election, tx) = (w.clone(), election.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let candidate = w
                .join(&election, format!("w{i}").as_bytes(), opts(ttl))
                .await?;
            let l = candidate.leadership().await?;
            let _ = tx.send(l);
            Ok::<_, tenure::Error>(())
        }));
    }
    // Let every waiter join and reach its wait.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for change in 0..sizes.herd_changes.min(WAITERS) {
        let before = w.waiter_wakeups();
        holder.resign().await.context("resign")?;
        let next = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .context("no waiter led within 30 s")?
            .ok_or_else(|| anyhow!("the waiters are gone"))?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let woken = w.waiter_wakeups() - before;
        eprintln!(
            "[{system} {profile}] herd change {}: {woken} wake-ups among {} waiters",
            change + 1,
            WAITERS - change
        );
        report.record(
            "herd",
            "wake-ups per leader change, 50 waiters",
            "wake-ups",
            Better::Lower,
            system,
            profile,
            [(change, woken as f64)],
        );
        holder = next;
    }
    holder.resign().await.context("resign")?;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// `n` elections held by `sizes.election_sessions` sessions (100 unless asked): resident
/// memory of each node and CPU used while idle (only the sessions' renewals), next to the
/// same for the empty cluster. At scale (more than 1,000 sessions or 100,000 elections) also
/// each node's last snapshot and a follower's restart ([`snapshot_and_restart`]).
async fn elections(
    c: &mut dyn Cluster,
    n: usize,
    sizes: &Sizes,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let m = sizes.election_sessions;
    let label = if m == ELECTION_SESSIONS {
        format!("{n} elections")
    } else {
        format!("{n} elections, {m} sessions")
    };
    let pids: Vec<u32> = (0..c.len()).filter_map(|i| c.pid(i)).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let empty_cpu = cpu_share(&pids, sizes.cpu_window).await?;
    let empty_rss = rss_mib(&pids)?;
    let term_before = highest_term(c).await;
    let t = Instant::now();
    let held = c.hold_elections(n, m).await?;
    let took = t.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = cpu_share(&pids, sizes.cpu_window).await?;
    let rss = rss_mib(&pids)?;
    if let (Some(before), Some(after)) = (term_before, highest_term(c).await) {
        // Nothing in this scenario asks for a new Raft leader: every term is a stall.
        let terms = after - before;
        eprintln!(
            "[{system} {profile}] {label}: {terms} new Raft terms while taking them and idling"
        );
        report.record(
            "elections",
            &format!("{label}: new Raft terms while taking them"),
            "terms",
            Better::Lower,
            system,
            profile,
            [(0, terms)],
        );
    }
    eprintln!(
        "[{system} {profile}] {label} held in {:.1} s: rss {rss:.0?} MiB (empty {empty_rss:.0?}), idle cpu {cpu:.2?} % (empty {empty_cpu:.2?})",
        took.as_secs_f64()
    );
    for (suffix, rss, cpu) in [("", &rss, &cpu), (", before", &empty_rss, &empty_cpu)] {
        for (node, (mib, p)) in rss.iter().zip(cpu).enumerate() {
            for (what, unit, value) in [("memory", "MiB", *mib), ("idle CPU", "% of a core", *p)] {
                report.record(
                    "elections",
                    &format!("{label}: {what} per node{suffix}"),
                    unit,
                    Better::Lower,
                    system,
                    profile,
                    [(node, value)],
                );
            }
        }
    }
    report.record(
        "elections",
        &format!("{label}: time to take them all"),
        "ms",
        Better::Lower,
        system,
        profile,
        [(0, as_ms(took))],
    );
    if m > 1_000 || n > 100_000 {
        backup_under_load(c, &label, report).await?;
        snapshot_and_restart(c, &label, report).await?;
    }
    drop(held);
    Ok(())
}

/// How long the writer of [`backup_under_load`] writes before the backup, to compare with.
const BACKUP_BASELINE: Duration = Duration::from_secs(5);

/// A backup of the whole state taken from the running cluster while one client writes
/// sequentially through the leader: the backup's size and time, and the writer's latency
/// during it next to the [`BACKUP_BASELINE`] just before. Where the bench cannot take a
/// backup of the system, a note.
async fn backup_under_load(
    c: &mut dyn Cluster,
    label: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let leader = c.wait_stable(Duration::from_secs(60)).await?;
    let writer = c.writer(&[leader]).await?;
    let write_for = |until: Option<Duration>,
                     stop: std::sync::Arc<std::sync::atomic::AtomicBool>| {
        let writer = &writer;
        async move {
            let (start, mut latencies, mut i) = (Instant::now(), Vec::new(), 0u64);
            while until.is_none_or(|u| start.elapsed() < u)
                && !stop.load(std::sync::atomic::Ordering::SeqCst)
            {
                i += 1;
                let t = Instant::now();
                writer
                    .put(
                        &format!("backup-load/{}", i % 64),
                        b"x",
                        Duration::from_secs(10),
                    )
                    .await?;
                latencies.push(as_ms(t.elapsed()));
            }
            anyhow::Ok(latencies)
        }
    };
    let never = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut before = write_for(Some(BACKUP_BASELINE), never).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = Instant::now();
    let (taken, during) = tokio::join!(
        async {
            let r = c.backup().await;
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        },
        write_for(None, stop.clone())
    );
    let took = t.elapsed();
    let bytes = match taken {
        Ok(b) => b,
        Err(e) if e.is::<Unsupported>() => {
            report.note(
                "elections",
                system,
                profile,
                format!("{label}: backup not measured (the bench takes backups of tenure only)"),
            );
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut during = during?;
    before.sort_by(f64::total_cmp);
    during.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p| crate::report::nearest_rank(v, p).unwrap_or(f64::NAN);
    eprintln!(
        "[{system} {profile}] {label}: backup of {:.1} MiB in {:.2} s; one writer's p50/p99 \
         {:.2}/{:.2} ms during it ({} writes), {:.2}/{:.2} ms before ({} writes)",
        bytes as f64 / (1 << 20) as f64,
        took.as_secs_f64(),
        pct(&during, 50.0),
        pct(&during, 99.0),
        during.len(),
        pct(&before, 50.0),
        pct(&before, 99.0),
        before.len()
    );
    for (what, unit, value) in [
        ("backup size", "MiB", bytes as f64 / (1 << 20) as f64),
        ("backup time", "ms", as_ms(took)),
        (
            "one writer's p50 during the backup",
            "ms",
            pct(&during, 50.0),
        ),
        (
            "one writer's p99 during the backup",
            "ms",
            pct(&during, 99.0),
        ),
        (
            "one writer's p50 before the backup",
            "ms",
            pct(&before, 50.0),
        ),
        (
            "one writer's p99 before the backup",
            "ms",
            pct(&before, 99.0),
        ),
    ] {
        report.record(
            "elections",
            &format!("{label}: {what}"),
            unit,
            Better::Lower,
            system,
            profile,
            [(0, value)],
        );
    }
    Ok(())
}

/// How long a restarted node may take to answer and to catch up.
const RESTART_WITHIN: Duration = Duration::from_secs(600);

/// Each node's last snapshot (size, the index it covers, its write and fsync), then a
/// follower killed and started again: the time until it answers `/metrics` (its recovery:
/// snapshot decoded, log replayed) and until it applied everything the leader had committed
/// when it was killed. Measured where the nodes export metrics (tenure); noted otherwise.
async fn snapshot_and_restart(
    c: &mut dyn Cluster,
    label: &str,
    report: &mut Report,
) -> anyhow::Result<()> {
    let (system, profile) = (c.system(), c.profile());
    let tag = format!("[{system} {profile}]");
    if c.metrics(0).await?.is_none() {
        report.note(
            "elections",
            system,
            profile,
            format!("{label}: snapshot and restart not measured (no metrics to read them from)"),
        );
        return Ok(());
    }
    for i in 0..c.len() {
        let text = c.metrics(i).await?.unwrap_or_default();
        let value = |name| prometheus_value(&text, name).unwrap_or(0.0);
        let (bytes, index, write_s, encode_s) = (
            value("tenure_snapshot_bytes"),
            value("tenure_snapshot_index"),
            value("tenure_snapshot_write_seconds"),
            value("tenure_snapshot_encode_seconds"),
        );
        eprintln!(
            "{tag} {label}: node {i}: last snapshot {:.1} MiB at index {index}, encoded in {:.1} ms, written and fsynced in {:.1} ms (in the background)",
            bytes / (1 << 20) as f64,
            encode_s * 1000.0,
            write_s * 1000.0
        );
        for (what, unit, v) in [
            (
                "last snapshot size per node",
                "MiB",
                bytes / (1 << 20) as f64,
            ),
            ("last snapshot encoding per node", "ms", encode_s * 1000.0),
            (
                "last snapshot write and fsync per node",
                "ms",
                write_s * 1000.0,
            ),
        ] {
            report.record(
                "elections",
                &format!("{label}: {what}"),
                unit,
                Better::Lower,
                system,
                profile,
                [(i, v)],
            );
        }
        report.note(
            "elections",
            system,
            profile,
            format!("{label}: node {i}'s last snapshot covers index {index}"),
        );
    }
    let leader = c
        .leader()
        .await
        .ok_or_else(|| anyhow!("no leader before the restart"))?;
    let follower = (leader + 1) % c.len();
    let leader_text = c.metrics(leader).await?.unwrap_or_default();
    let commit = prometheus_value(&leader_text, "tenure_commit_index").unwrap_or(0.0);
    c.kill(follower)?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    c.restart(follower)?;
    let c: &dyn Cluster = c;
    poll(RESTART_WITHIN, "the restarted follower answers", || async {
        c.metrics(follower).await.ok().flatten()
    })
    .await?;
    let up = t.elapsed();
    poll(
        RESTART_WITHIN,
        "the restarted follower catches up",
        || async {
            let text = c.metrics(follower).await.ok().flatten()?;
            let applied = prometheus_value(&text, "tenure_applied_index")?;
            (applied >= commit).then_some(())
        },
    )
    .await?;
    let caught_up = t.elapsed();
    eprintln!(
        "{tag} {label}: follower {follower} restarted: answers after {:.0} ms, applied the leader's commit index {commit} after {:.0} ms",
        as_ms(up),
        as_ms(caught_up)
    );
    for (what, v) in [
        ("follower restart until it answers", up),
        ("follower restart until it caught up", caught_up),
    ] {
        report.record(
            "elections",
            &format!("{label}: {what}"),
            "ms",
            Better::Lower,
            system,
            profile,
            [(0, as_ms(v))],
        );
    }
    Ok(())
}

fn rss_mib(pids: &[u32]) -> anyhow::Result<Vec<f64>> {
    pids.iter()
        .map(|&p| Ok(tenure_procs::process::rss_bytes(p)? as f64 / (1 << 20) as f64))
        .collect()
}

/// CPU used by each process over `window`, in percent of one core.
async fn cpu_share(pids: &[u32], window: Duration) -> anyhow::Result<Vec<f64>> {
    let before: Vec<Duration> = pids
        .iter()
        .map(|&p| tenure_procs::process::cpu_time(p))
        .collect::<anyhow::Result<_>>()?;
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let after: Vec<Duration> = pids
        .iter()
        .map(|&p| tenure_procs::process::cpu_time(p))
        .collect::<anyhow::Result<_>>()?;
    let wall = t.elapsed().as_secs_f64();
    Ok(before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.saturating_sub(*b)).as_secs_f64() / wall * 100.0)
        .collect())
}

/// Every operation once, with what it took, on stdout.
async fn probe(system: System, profile: Profile, env: &Env) -> anyhow::Result<()> {
    let t = Instant::now();
    let mut c: Box<dyn Cluster> = system::start(system, profile, env).await?;
    println!(
        "[{system} {profile}] started in {:.0} ms",
        as_ms(t.elapsed())
    );
    let t = Instant::now();
    let leader = c.wait_stable(Duration::from_secs(60)).await?;
    println!(
        "[{system} {profile}] stable, leader {leader}, in {:.0} ms",
        as_ms(t.elapsed())
    );
    println!("[{system} {profile}] url {}", c.url());
    let all: Vec<usize> = (0..c.len()).collect();
    let w = c.writer(&all).await?;
    for i in 0..3 {
        let t = Instant::now();
        w.put("probe", format!("v{i}").as_bytes(), Duration::from_secs(5))
            .await?;
        println!("[{system} {profile}] put {:.2} ms", as_ms(t.elapsed()));
    }
    for kind in ReadKind::ALL {
        let r = c.reader(kind, leader).await?;
        for _ in 0..3 {
            let t = Instant::now();
            r.read(Duration::from_secs(5)).await?;
            println!(
                "[{system} {profile}] {} at node {leader}: {:.2} ms",
                kind.name(),
                as_ms(t.elapsed())
            );
        }
    }
    let to = (leader + 1) % c.len();
    let t = Instant::now();
    match c.transfer(to).await {
        Ok(()) => println!(
            "[{system} {profile}] transfer to {to}: {:.1} ms, leader now {:?}",
            as_ms(t.elapsed()),
            c.leader().await
        ),
        Err(e) => println!("[{system} {profile}] transfer: {e:#}"),
    }
    let leader = c.wait_stable(Duration::from_secs(60)).await?;
    let survivors: Vec<usize> = all.iter().copied().filter(|&i| i != leader).collect();
    let w = c.writer(&survivors).await?;
    let t = Instant::now();
    c.kill(leader)?;
    loop {
        if w.put("probe", b"after", Duration::from_secs(1))
            .await
            .is_ok()
        {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!("no write acknowledged by the survivors within 60 s of the kill");
        }
    }
    println!(
        "[{system} {profile}] killed leader {leader}: survivors acknowledged a write after {:.0} ms, leader {:?}",
        as_ms(t.elapsed()),
        c.leader().await
    );
    c.restart(leader)?;
    let l = c.wait_stable(Duration::from_secs(60)).await?;
    println!("[{system} {profile}] restarted {leader}; stable, leader {l}");
    let t = Instant::now();
    let n = c
        .keepalives(KeepaliveLoad {
            leases: 100,
            ttl: Duration::from_secs(10),
            concurrency: 16,
            window: Duration::from_secs(2),
        })
        .await?;
    println!(
        "[{system} {profile}] keepalives: {n} renewals of 100 leases in 2 s (total {:.1} s)",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let held = c.hold_elections(1000, 10).await?;
    println!(
        "[{system} {profile}] 1000 elections held by 10 sessions in {:.1} s; rss {:?}",
        t.elapsed().as_secs_f64(),
        (0..c.len())
            .filter_map(|i| c.pid(i))
            .map(|p| tenure_procs::process::rss_bytes(p)
                .map(|b| b / (1 << 20))
                .unwrap_or(0))
            .collect::<Vec<_>>()
    );
    drop(held);
    let client = tenure::Client::connect(&c.url()).await?;
    let l = client
        .campaign("probe", b"me", tenure::CampaignOptions::default())
        .await?;
    println!(
        "[{system} {profile}] library campaign through {}: token {}",
        c.url(),
        l.token()
    );
    l.resign().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::prometheus_value;

    #[test]
    fn a_counter_is_read_by_its_exact_name_only() {
        let text = "# HELP tenure_elections_started_total Elections.\n\
                    # TYPE tenure_elections_started_total counter\n\
                    tenure_elections_started_total_other 9\n\
                    tenure_elections_started_total 3\n\
                    tenure_pre_votes_lost_total{node=\"1\"} 4\n";
        assert_eq!(
            prometheus_value(text, "tenure_elections_started_total"),
            Some(3.0)
        );
        // Labelled samples are not the unlabelled counter.
        assert_eq!(prometheus_value(text, "tenure_pre_votes_lost_total"), None);
        assert_eq!(prometheus_value(text, "tenure_missing_total"), None);
    }
}
