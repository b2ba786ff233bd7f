//! `tenure nemesis`'s flags and the runner behind them: the `tenure` binary parses
//! [`NemesisArgs`] and calls [`run`], which turns them into [`crate::Options`], runs
//! [`crate::run`] until it ends or SIGINT/SIGTERM, and prints the report.

use std::process::ExitCode;
use std::time::Duration;

use crate::faults::FaultKind;
use clap::Args;

/// Drive a local cluster of real `tenure server` processes through faults and check the
/// history (linearizability, fencing, single holder, convergence). Exits 1 on a violation.
#[derive(Debug, Args)]
pub struct NemesisArgs {
    /// Seed of the fault schedule and the clients' choices (default: drawn from the clock,
    /// and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Cluster size (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seconds of faults and workload (healing and checking come after).
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Faults to draw from, comma-separated: pause, kill, kill-all, isolate, bridge, split,
    /// one-way, targeted, transfer, membership (default: all).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<FaultKind>,
    /// The servers' snapshot threshold in entries (default: drawn from the seed among 20,
    /// 50 and 10000, so that some runs compact often).
    #[arg(long)]
    snapshot_threshold_entries: Option<u64>,
    /// Elections, each with its own fenced key.
    #[arg(long, default_value_t = 2)]
    elections: usize,
    /// Candidate clients per election.
    #[arg(long, default_value_t = 3)]
    candidates: usize,
    /// Start the servers with fast election off (`--no-fast-election`): a killed leader is
    /// replaced after the election timeout. By default the servers run with it on, and a
    /// killed leader is replaced as soon as its followers see its port refuse a dial.
    #[arg(long)]
    no_fast_election: bool,
    /// TLS between the nodes and on their client and HTTP ports, with client
    /// authentication (the default policy; the harness is the `admin` client).
    #[arg(long)]
    tls: bool,
    /// With --tls: anonymous connection, body and slow-header floods against every node for
    /// the whole run; the report adds what they did, /health failures and node memory.
    #[arg(long, requires = "tls")]
    hostile: bool,
    /// Session TTLs of 2–5 s instead of 0.6–1.5 s (implied by --hostile; alone, the same
    /// workload without the hostile load, as its baseline).
    #[arg(long)]
    long_ttls: bool,
    /// No faults: the workload alone (with --hostile, the hostile load alone).
    #[arg(long, conflicts_with = "faults")]
    no_faults: bool,
    /// Start the servers with TENURE_INJECT_BUG set to this (test the tester).
    #[arg(long)]
    inject_bug: Option<String>,
    /// Keep the temporary directory (configs, data, server logs).
    #[arg(long)]
    keep_dir: bool,
    /// Write the whole history to this file, one operation per line.
    #[arg(long)]
    history_file: Option<std::path::PathBuf>,
}

/// Runs `tenure nemesis`. The process running this must be the `tenure` binary: the servers
/// it starts are `tenure server` run from [`std::env::current_exe`].
///
/// Exit codes: 0 every check held; 1 a violation (or no binary or runtime); 2 bad arguments
/// or a run that could not be carried out; 130 interrupted.
pub fn run(args: NemesisArgs) -> ExitCode {
    if args.nodes != 3 && args.nodes != 5 {
        eprintln!("tenure nemesis: --nodes must be 3 or 5");
        return ExitCode::from(2);
    }
    let bin = match std::env::current_exe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tenure nemesis: cannot find this binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000)
            .unwrap_or(1)
    });
    let faults = if args.no_faults {
        Vec::new()
    } else if args.faults.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        args.faults
    };
    let options = crate::Options {
        bin,
        seed,
        nodes: args.nodes,
        duration: Duration::from_secs(args.duration),
        faults,
        snapshot_threshold_entries: args
            .snapshot_threshold_entries
            .unwrap_or([20, 50, 10_000][(seed % 3) as usize]),
        elections: args.elections.max(1),
        candidates: args.candidates.max(1),
        fast_election: !args.no_fast_election,
        tls: args.tls,
        hostile: args.hostile,
        long_ttls: args.long_ttls,
        inject_bug: args.inject_bug,
        keep_dir: args.keep_dir,
        history_file: args.history_file,
    };
    eprintln!(
        "tenure nemesis: seed {seed}; replay with: {}",
        options.replay_command()
    );
    // One thread: every server is spawned from it, and PR_SET_PDEATHSIG fires when the
    // spawning *thread* ends, so no server may be spawned from a pool thread that can exit.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure nemesis: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // SIGINT and SIGTERM end the run early; dropping it kills the servers and deletes the
    // directory (SIGKILL of the nemesis itself still kills the servers, by PR_SET_PDEATHSIG,
    // but cannot delete the directory).
    let result = runtime.block_on(async {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            r = crate::run(options) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
            _ = term => None,
        }
    });
    match result {
        Some(Ok(report)) => {
            print!("{}", report.render());
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Some(Err(e)) => {
            eprintln!("tenure nemesis: {e:#}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("tenure nemesis: interrupted; servers stopped, directory removed");
            ExitCode::from(130)
        }
    }
}
