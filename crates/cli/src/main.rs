//! `tenure`: the command-line tool.
//!
//! Each subcommand lives in its own module with its own argument struct; adding one is a new
//! variant of [`Cmd`] and a new arm in `main`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod demo;
mod measure;
mod server;
mod sim;

/// tenure — leader election with leases and fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "tenure", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the deterministic simulator over a range of seeds and check every invariant.
    Sim(sim::SimArgs),
    /// Run one node of a tenure cluster.
    Server(server::ServerArgs),
    /// Run a local 3-node cluster and three job replicas through a frozen leader and a crash.
    ///
    /// Prints a timeline (who leads, terms, fencing tokens, rejected stale writes) and a
    /// verdict (reports written, duplicates, failover times); exits 0 only if it holds.
    Demo(demo::DemoArgs),
    /// Measure failover (leader crash or pause) and durable write latency on a local cluster.
    Measure(measure::MeasureArgs),
    /// One replica of `tenure demo`'s job (started by `tenure demo`).
    #[command(hide = true)]
    DemoWorker(demo::worker::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim(args) => sim::run(args),
        Cmd::Server(args) => server::run(args),
        Cmd::Demo(args) => demo::run(args),
        Cmd::Measure(args) => measure::run(args),
        Cmd::DemoWorker(args) => demo::worker::run(args),
    }
}
