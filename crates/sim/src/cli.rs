//! `tenure sim`: runs the deterministic simulator over seeds, in parallel, and reports
//! violations with the exact command that reproduces each. The `tenure` binary parses
//! [`SimArgs`] and calls [`run`]; everything else lives here.
//!
//! Exit status: 0 when no checker fired, 1 when any did, 2 for bad arguments.

use std::collections::BTreeMap;
use std::ops::Range;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;

use crate::{
    parse_seed_range, reproduce_command, run_seed, InjectBug, SeedReport, SimOptions, Stats,
};

/// Exit status when a checker fired.
const EXIT_VIOLATION: u8 = 1;
/// Exit status for bad arguments (clap uses the same for its own parse errors).
const EXIT_USAGE: u8 = 2;
/// Default stop-after count without an injected bug (an injected bug stops at the first).
const MAX_FAILURES_DEFAULT: usize = 20;

/// Arguments of `tenure sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Run this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run a range of seeds: `A..B` runs A up to but not including B (as in Rust, so 1..10000
    /// is 9,999 seeds); `A..=B` includes B.
    #[arg(long, value_parser = parse_seed_range, default_value = "1..101")]
    seeds: Range<u64>,
    /// Voters at bootstrap: 3, 5 or 7.
    #[arg(long, default_value_t = 5, value_parser = parse_nodes)]
    nodes: usize,
    /// Simulated clients.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Simulated seconds of the safety phase (faults on).
    #[arg(long, default_value_t = 30.0)]
    safety_secs: f64,
    /// Simulated seconds of the liveness phase (everything healed); at least 3.
    #[arg(long, default_value_t = 5.0)]
    liveness_secs: f64,
    /// Test the testers: put back a known bug (a wrong name lists them all), e.g. double-vote,
    /// old-term-commit, joint-vote-one-half, not-leader-after-snapshot.
    #[arg(long, value_name = "NAME", value_parser = InjectBug::from_name)]
    inject_bug: Option<InjectBug>,
    /// Inject no faults (debugging the simulator only).
    #[arg(long)]
    no_faults: bool,
    /// Print a readable trace of each seed: faults, role and term changes, election leader
    /// changes, rejected stale writes.
    #[arg(long)]
    trace: bool,
    /// With --trace, also print every Raft message delivered, every append and every commit
    /// advance (very verbose; for debugging the simulator or the core).
    #[arg(long, hide = true)]
    trace_raft: bool,
    /// On resume, deliver a paused node's queued packets *before* the ticks it missed
    /// (reproduces a driver that handles input before catching up with its clock).
    #[arg(long, hide = true)]
    no_pause_catch_up: bool,
    /// Print one line per seed with its fault mix, trace hash and counters.
    #[arg(long)]
    verbose: bool,
    /// Threads running seeds (each seed is single-threaded and deterministic); default: the
    /// number of available cores.
    #[arg(long)]
    jobs: Option<usize>,
    /// Stop after this many violating seeds (default 1 with --inject-bug, else 20).
    #[arg(long)]
    max_failures: Option<usize>,
}

fn parse_nodes(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|e| format!("{text:?} is not a number: {e}"))?;
    crate::validate_nodes(n)?;
    Ok(n)
}

fn secs_to_ms(secs: f64, flag: &str) -> Result<u64, String> {
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!(
            "{flag} must be a positive number of seconds, got {secs}"
        ));
    }
    Ok((secs * 1000.0).round() as u64)
}

impl SimArgs {
    fn options(&self) -> Result<SimOptions, String> {
        let opts = SimOptions {
            nodes: self.nodes,
            clients: self.clients,
            safety_ms: secs_to_ms(self.safety_secs, "--safety-secs")?,
            liveness_ms: secs_to_ms(self.liveness_secs, "--liveness-secs")?,
            faults: !self.no_faults,
            bug: self.inject_bug,
            trace: self.trace,
            trace_raft: self.trace_raft,
            pause_catch_up: !self.no_pause_catch_up,
        };
        opts.validate()?;
        Ok(opts)
    }

    fn seed_range(&self) -> Range<u64> {
        match self.seed {
            Some(seed) => seed..seed.saturating_add(1),
            None => self.seeds.clone(),
        }
    }
}

/// What one worker thread did.
#[derive(Default)]
struct WorkerTotals {
    seeds: u64,
    simulated_us: u64,
    busy: Duration,
    stats: Stats,
}

/// Runs `tenure sim`.
pub fn run(args: SimArgs) -> ExitCode {
    let opts = match args.options() {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let seeds = args.seed_range();
    let total_seeds = seeds.end - seeds.start;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, total_seeds.max(1) as usize);
    let max_failures = args.max_failures.unwrap_or(if opts.bug.is_some() {
        1
    } else {
        MAX_FAILURES_DEFAULT
    });
    println!(
        "tenure sim: seeds {}..{} ({} seeds), {} nodes, {} clients, {} s safety + {} s liveness, faults {}, injected bug: {}, {} jobs",
        seeds.start,
        seeds.end,
        total_seeds,
        opts.nodes,
        opts.clients,
        opts.safety_ms as f64 / 1000.0,
        opts.liveness_ms as f64 / 1000.0,
        if opts.faults { "on" } else { "off" },
        opts.bug.map_or("none", |b| b.name()),
        jobs
    );

    // Violations are reported by the workers; silence the default panic message, which
    // would otherwise print for every core panic caught as a `node-invariant` violation.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));

    let next_seed = AtomicU64::new(seeds.start);
    let failures = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed: Mutex<Vec<SeedReport>> = Mutex::new(Vec::new());
    let print_lock = Mutex::new(());
    let single = total_seeds == 1;
    let wall_start = Instant::now();
    let totals: Vec<WorkerTotals> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut totals = WorkerTotals::default();
                    while !stop.load(Ordering::Relaxed) {
                        let seed = next_seed.fetch_add(1, Ordering::Relaxed);
                        if seed >= seeds.end {
                            break;
                        }
                        let started = Instant::now();
                        let report = run_seed(&opts, seed);
                        totals.busy += started.elapsed();
                        totals.seeds += 1;
                        totals.simulated_us += report.simulated_us;
                        totals.stats.add(&report.stats);
                        if args.verbose || single || args.trace || args.trace_raft {
                            let _guard =
                                print_lock.lock().expect("no thread panics while printing");
                            print_seed(&report, args.trace || args.trace_raft);
                        }
                        if !report.passed() {
                            let n = failures.fetch_add(1, Ordering::Relaxed) + 1;
                            if max_failures > 0 && n >= max_failures {
                                stop.store(true, Ordering::Relaxed);
                            }
                            failed
                                .lock()
                                .expect("no thread panics while holding the lock")
                                .push(report);
                        }
                    }
                    totals
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("workers catch panics per seed"))
            .collect()
    });
    let wall = wall_start.elapsed();
    std::panic::set_hook(default_hook);

    let mut failed = failed.into_inner().expect("workers are done");
    failed.sort_by_key(|r| r.seed);
    report(
        &opts,
        &totals,
        &failed,
        total_seeds,
        wall,
        stop.load(Ordering::Relaxed),
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_VIOLATION)
    }
}

fn print_seed(report: &SeedReport, trace: bool) {
    if trace {
        for line in &report.trace {
            println!("  {line}");
        }
    }
    let s = &report.stats;
    println!(
        "seed {}: {} trace hash {:#018x}, {:.1} simulated s, max term {}, raft leaders {}, commit index {}, client ops {}, election leaderships {}, stale writes {}/{} rejected, sessions expired {}, released {}, fast elections {}, faults {:?}",
        report.seed,
        if report.passed() { "ok" } else { "VIOLATION" },
        report.trace_hash,
        report.simulated_us as f64 / 1e6,
        s.max_term,
        s.raft_leaders_elected,
        s.committed_index,
        s.client_ops_completed,
        s.election_leaderships,
        s.stale_writes_rejected,
        s.stale_writes_attempted,
        s.sessions_expired,
        s.sessions_released,
        s.leaders_gone,
        s.faults
    );
    println!("  fault mix: {}", report.fault_mix);
}

fn report(
    opts: &SimOptions,
    totals: &[WorkerTotals],
    failed: &[SeedReport],
    total_seeds: u64,
    wall: Duration,
    stopped_early: bool,
) {
    let seeds_run: u64 = totals.iter().map(|t| t.seeds).sum();
    let simulated_s: f64 = totals.iter().map(|t| t.simulated_us).sum::<u64>() as f64 / 1e6;
    let wall_s = wall.as_secs_f64().max(1e-9);
    let mut stats = Stats::default();
    for t in totals {
        stats.add(&t.stats);
    }
    for r in failed {
        let first = &r.violations[0];
        println!("VIOLATION seed {}: {first}", r.seed);
        for other in &r.violations[1..] {
            println!("  also {other}");
        }
        println!("  fault mix: {}", r.fault_mix);
        println!("  reproduce: {}", reproduce_command(opts, r.seed));
    }
    println!(
        "seeds run: {seeds_run} of {total_seeds}{}",
        if stopped_early && seeds_run < total_seeds {
            " (stopped early at --max-failures)"
        } else {
            ""
        }
    );
    let mut by_checker: BTreeMap<&str, usize> = BTreeMap::new();
    for r in failed {
        *by_checker.entry(r.violations[0].checker).or_insert(0) += 1;
    }
    if by_checker.is_empty() {
        println!("violations: 0");
    } else {
        let list: Vec<String> = by_checker
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        println!("violations: {} seeds ({})", failed.len(), list.join(", "));
    }
    let per_thread: Vec<String> = totals
        .iter()
        .filter(|t| t.seeds > 0)
        .map(|t| {
            format!(
                "{:.0}x",
                t.simulated_us as f64 / 1e6 / t.busy.as_secs_f64().max(1e-9)
            )
        })
        .collect();
    println!(
        "simulated {simulated_s:.1} s in {wall_s:.2} s wall: compression {:.0}x overall (all seeds' simulated seconds / the whole run's wall seconds, {} threads); per thread: {}",
        simulated_s / wall_s,
        totals.len(),
        per_thread.join(", ")
    );
    println!(
        "totals: raft leaders elected {}, client ops {}, election leaderships {}, stale writes rejected {} of {}, sessions expired {}, released {}, fast elections {}, messages delivered {} (dropped {}), faults {:?}",
        stats.raft_leaders_elected,
        stats.client_ops_completed,
        stats.election_leaderships,
        stats.stale_writes_rejected,
        stats.stale_writes_attempted,
        stats.sessions_expired,
        stats.sessions_released,
        stats.leaders_gone,
        stats.messages_delivered,
        stats.messages_dropped,
        stats.faults
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        args: SimArgs,
    }

    #[test]
    fn four_nodes_are_rejected() {
        let err = TestCli::try_parse_from(["sim", "--nodes", "4"]).unwrap_err();
        assert!(err.to_string().contains("3, 5 or 7"), "{err}");
        assert!(TestCli::try_parse_from(["sim", "--nodes", "7"]).is_ok());
    }

    #[test]
    fn unknown_bugs_are_rejected_with_the_valid_names() {
        let err = TestCli::try_parse_from(["sim", "--inject-bug", "typo"]).unwrap_err();
        assert!(err.to_string().contains("no-vote-persist"), "{err}");
    }

    #[test]
    fn seed_ranges_exclude_their_end() {
        let cli = TestCli::try_parse_from(["sim", "--seeds", "1..10000"]).expect("valid");
        assert_eq!(cli.args.seed_range(), 1..10000);
        let cli = TestCli::try_parse_from(["sim", "--seed", "8841"]).expect("valid");
        assert_eq!(cli.args.seed_range(), 8841..8842);
    }

    #[test]
    fn short_liveness_phases_are_rejected() {
        let cli = TestCli::try_parse_from(["sim", "--liveness-secs", "1"]).expect("parses");
        assert!(cli.args.options().is_err());
    }
}
