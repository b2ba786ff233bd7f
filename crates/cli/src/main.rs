//! `tenure`: the command-line tool.
//!
//! Each subcommand lives in its own module with its own argument struct; adding one is a new
//! variant of [`Cmd`] and a new arm in `main`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Sim(args) => sim::run(args),
        Cmd::Server(args) => server::run(args),
    }
}
