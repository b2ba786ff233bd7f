//! `tenure run`: run a command only while this process leads an election.
//!
//! The flags and the log lines are here; the supervisor (campaigning, the command in its
//! own process group, SIGTERM and SIGKILL before the lease could pass, the guard, what is
//! guaranteed and what is not) is the client library's [`tenure::supervise`].

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tenure::supervise::{self, GuardProgram, Outcome};
use tenure::Client;

use crate::common::{
    backend_url, block_on, check_election, default_value, fail, install_signals, log,
    parse_duration, TlsFlags, EXIT_USAGE,
};

/// Run a command only while this process leads an election.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The election to lead.
    #[arg(long)]
    pub election: String,
    /// Backend URL (`tenure://h1:p,h2:p,…`); default `$TENURE_BACKEND`, else
    /// `tenure://127.0.0.1:8001`. TLS: `tenure://…?ca=FILE[&cert=FILE&key=FILE]`, or
    /// --ca/--cert/--key (default `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY`) for a
    /// `tenure://` URL without a query.
    #[arg(long)]
    pub backend: Option<String>,
    #[command(flatten)]
    pub tls: TlsFlags,
    /// Lease TTL (e.g. `10s`, `500ms`, `2m`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub ttl: Duration,
    /// Time between SIGTERM and SIGKILL; the command gets SIGTERM this long before the
    /// lease could run out. Must be less than TTL/2.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Cron-style: run only if this process can lead now (exit 76 otherwise), once.
    #[arg(long)]
    pub once: bool,
    /// The value to campaign with (shown by `tenure leader`; any bytes); default
    /// `HOSTNAME:PID`.
    #[arg(long)]
    pub value: Option<OsString>,
    /// Fate-sharing (`tenure://` only): when this runner dies, its session ends at once
    /// (its keepalive stream closes) and the next candidate leads within milliseconds
    /// instead of a TTL later; the command dies with the runner (PR_SET_PDEATHSIG). Only
    /// over direct connections (docs/GUARANTEES.md, "Fate-sharing sessions").
    #[arg(long)]
    pub fate_sharing: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `tenure run`.
pub fn run(args: RunArgs) -> ExitCode {
    if args.grace.saturating_mul(2) >= args.ttl {
        log(&format!(
            "error: --grace {:?} must be less than half of --ttl {:?} (the command is stopped \
             `grace` before the lease could run out)",
            args.grace, args.ttl
        ));
        return ExitCode::from(EXIT_USAGE);
    }
    if let Err(code) = check_election(&args.election) {
        return ExitCode::from(code);
    }
    // Before the backend is contacted: a command that cannot start must not cost a session
    // or a fencing token.
    if let Err(e) = supervise::find_command(&args.command[0]) {
        let code = e.exit_code();
        log(&format!(
            "error: cannot start {:?}: {e}; nothing was campaigned for, exit {code}",
            args.command[0]
        ));
        return ExitCode::from(code);
    }
    // Current-thread on purpose: the command is forked by this (main) thread, which lives as
    // long as the runner, so PR_SET_PDEATHSIG fires exactly when the runner dies.
    block_on(run_async(args))
}

async fn run_async(args: RunArgs) -> u8 {
    let mut signals = match install_signals() {
        Ok(s) => s,
        Err(code) => return code,
    };
    let url = backend_url(args.backend.as_deref(), &args.tls);
    let client = match Client::connect(&url).await {
        Ok(c) => c,
        Err(e) => return fail(&format!("backend {}", tenure::redact_url(&url)), &url, &e).await,
    };
    let value = {
        use std::os::unix::ffi::OsStrExt as _;
        args.value
            .as_deref()
            .map_or_else(|| default_value().into_bytes(), |v| v.as_bytes().to_vec())
    };
    log(&format!(
        "campaigning in {:?} as \"{}\" on {} (ttl {:?}, grace {:?}{}{})",
        args.election,
        tenure::lines::escape_value(&value),
        tenure::redact_url(&url),
        args.ttl,
        args.grace,
        if args.once { ", once" } else { "" },
        if args.fate_sharing {
            ", fate-sharing"
        } else {
            ""
        }
    ));
    let options = supervise::Options {
        election: args.election,
        value,
        campaign: tenure::CampaignOptions {
            ttl: args.ttl,
            fate_sharing: args.fate_sharing,
            ..Default::default()
        },
        grace: args.grace,
        once: args.once,
        command: args.command,
        guard: GuardProgram {
            program: None,
            args: vec!["run-guard".into()],
        },
    };
    match supervise::run_while_leader(&client, &options, &mut signals, &log).await {
        Outcome::CampaignFailed(e) => fail("campaign failed", &url, &e).await,
        outcome => outcome.exit_code(),
    }
}

/// The guard of a `tenure run` command's process group ([`supervise::guard`]).
#[derive(Debug, Args)]
pub struct GuardArgs {
    /// The process group to kill.
    #[arg(long)]
    pgid: i32,
    /// The first deadline, in CLOCK_MONOTONIC nanoseconds.
    #[arg(long)]
    until_ns: u64,
}

/// `tenure run-guard` (started by `tenure run`; stdin is the runner's pipe).
pub fn guard(args: GuardArgs) -> ExitCode {
    match supervise::guard(args.pgid, args.until_ns) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(EXIT_USAGE),
    }
}
