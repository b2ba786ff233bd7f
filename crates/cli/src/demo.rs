//! `tenure demo`: its arguments; the demo itself is the `tenure-demo` crate.

use std::process::ExitCode;

use clap::Args;

/// Run the demo: a 3-node cluster, three worker replicas, a frozen leader and a killed node.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Session TTL of the workers, in milliseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    ttl_ms: u64,
    /// How long a worker computes one report, in milliseconds (the gap between its lease
    /// check and its write).
    #[arg(long, default_value_t = 300)]
    compute_ms: u64,
    /// After the verdict, keep the cluster running this many seconds (to look at /metrics
    /// and /status); Ctrl-C ends it early.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    hold: u64,
    /// Keep the temporary directory (data and logs) after exit; it is always kept when the
    /// demo fails.
    #[arg(long)]
    keep: bool,
}

/// Run `tenure demo` with this very binary as the servers' and workers' executable.
pub fn run(args: DemoArgs) -> ExitCode {
    let bin = match std::env::current_exe() {
        Ok(bin) => bin,
        Err(e) => {
            eprintln!("tenure demo: cannot find this binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = tenure_demo::Options {
        ttl_ms: args.ttl_ms,
        compute_ms: args.compute_ms,
        hold_secs: args.hold,
        keep: args.keep,
    };
    tenure_demo::run(options, bin)
}
