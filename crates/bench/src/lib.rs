//! `tenure bench`: tenure, etcd and ZooKeeper measured side by side, in one invocation, on one
//! machine.
//!
//! Every system runs as a 3-node cluster of real server processes started here, on loopback,
//! with its data in a temporary directory on the same disk and fsync on; nothing is installed
//! (etcd 3.4 and ZooKeeper 3.8 come from Debian's packages; `scripts/services.sh
//! install-etcd install-zookeeper` installs them). Each system is driven by a Rust client of
//! its own protocol: gRPC `tenure.v1`, `etcd-client`, `zookeeper-client`; the election
//! scenarios use the `tenure` client library's backend for each system.
//!
//! Layout: [`system`] (the `Cluster` interface and process helpers), one file per system
//! (`tenure.rs`, `etcd.rs`, `zk.rs`), [`scenarios`] (what is timed), [`report`] (table, CSV,
//! plots). Not a test: it asserts nothing, it prints numbers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

mod backend;
mod etcd;
pub mod report;
pub mod scenarios;
pub mod system;
mod tenure;
mod zk;

pub use scenarios::Scenario;
pub use system::{Profile, System};

/// Run benchmarks on local 3-node clusters of tenure, etcd and ZooKeeper.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure, comma-separated (`all` runs every scenario).
    #[arg(value_enum, value_delimiter = ',', required = true)]
    pub scenario: Vec<Scenario>,
    /// Fewer trials and smaller loads (a few minutes in all).
    #[arg(long)]
    pub quick: bool,
    /// Systems to measure (comma-separated); default every cluster: all but `postgres` and
    /// `memory`. `tenure-tls` and `etcd-tls` are tenure and etcd with TLS on client and peer
    /// traffic, measured in the write and keepalives scenarios (their cost next to the
    /// plaintext runs is tabled in "TLS's cost") and alone in flood. `postgres` and `memory` are the client
    /// library's PostgreSQL and in-process backends, measured in takeover only.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub systems: Vec<System>,
    /// Timing profiles (comma-separated); default both.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub profiles: Vec<Profile>,
    /// One trial of everything with tiny loads (the test suite's check that the harness
    /// still runs; the numbers mean nothing).
    #[arg(long, hide = true)]
    pub smoke: bool,
    /// Trials of each failover scenario per system and profile (default 50, 5 with --quick).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub trials: Option<u64>,
    /// Before each crash, pause or hand-over: how long the cluster runs, stable and with
    /// the writer connected, before the fault.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub settle_ms: u64,
    /// The session TTLs of the takeover scenario (comma-separated, milliseconds): the first
    /// gets the full number of trials, each later one fewer (a long TTL makes a slow trial).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000",
        value_parser = clap::value_parser!(u64).range(1..=3_600_000)
    )]
    pub takeover_ttl_ms: Vec<u64>,
    /// The elections scenario's sizes (comma-separated; default 10000,100000, 10000 with
    /// --quick): each size is measured on a fresh cluster.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = clap::value_parser!(u64).range(1..=10_000_000)
    )]
    pub elections: Vec<u64>,
    /// Sessions (leases) holding the elections scenario's elections, round robin; with more
    /// than 1,000 (or more than 100,000 elections) the scenario also reads each tenure node's
    /// last snapshot and times a follower's restart.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub election_sessions: u64,
    /// The project's `scripts/services.sh`, which starts PostgreSQL for the `postgres`
    /// system (needed only for it).
    #[arg(long, env = "TENURE_SERVICES_SCRIPT", value_name = "PATH")]
    pub services_script: Option<PathBuf>,
    /// Measure everything this many times, the systems taking turns within each round, so
    /// that a change in the machine's load falls on every system alike; the tables pool the
    /// rounds (a throughput's p50 is then the median round).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub rounds: u32,
    /// Where the table, the CSV and the plots go.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// Only draw the plots again from a `samples.csv` of an earlier run (into --out).
    #[arg(long, hide = true, value_name = "CSV")]
    pub replot: Option<PathBuf>,
    /// Parent directory of the clusters' temporary directories (default: the system's
    /// temporary directory). Every system's data is on this one disk.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// Run `tenure bench`; `tenure_bin` is the binary that runs `tenure server`.
pub fn run(args: BenchArgs, tenure_bin: PathBuf) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(scenarios::run(args, tenure_bin)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Milliseconds as a float.
pub fn as_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The work directory, checked.
fn work_dir(arg: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = arg.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok(dir)
}
