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
    #[command(flatten)]
    pub lead: LeadArgs,
    /// Cron-style: run only if this process can lead now (exit 76 otherwise), once.
    #[arg(long)]
    pub once: bool,
}

/// What `tenure run` and `tenure cron` share: the election, the backend, the lease, the
/// grace and the command.
#[derive(Debug, Args)]
pub struct LeadArgs {
    /// The election to lead. (An `Option` only so that `tenure cron history` can leave
    /// it out: clap requires it wherever these flags are the command's.)
    #[arg(long, required = true)]
    pub election: Option<String>,
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

impl LeadArgs {
    /// The checks made before anything is contacted (the grace against the TTL, the
    /// election's name, a command that can start: one that cannot must not cost a session
    /// or a fencing token); the exit code of the first that fails.
    pub fn check(&self) -> Result<(), u8> {
        if self.grace.saturating_mul(2) >= self.ttl {
            log(&format!(
                "error: --grace {:?} must be less than half of --ttl {:?} (the command is \
                 stopped `grace` before the lease could run out)",
                self.grace, self.ttl
            ));
            return Err(EXIT_USAGE);
        }
        check_election(self.election.as_deref().unwrap_or_default())?;
        if let Err(e) = supervise::find_command(&self.command[0]) {
            let code = e.exit_code();
            log(&format!(
                "error: cannot start {:?}: {e}; nothing was campaigned for, exit {code}",
                self.command[0]
            ));
            return Err(code);
        }
        Ok(())
    }

    /// The backend's URL, a client connected to it and the supervisor's options; logs
    /// what it campaigns with (`extra` is added to that line). The exit code on failure.
    pub async fn connect(
        self,
        once: bool,
        extra: &str,
    ) -> Result<(String, Client, supervise::Options), u8> {
        let url = backend_url(self.backend.as_deref(), &self.tls);
        let client = match Client::connect(&url).await {
            Ok(c) => c,
            Err(e) => {
                return Err(fail(&format!("backend {}", tenure::redact_url(&url)), &url, &e).await)
            }
        };
        let value = {
            use std::os::unix::ffi::OsStrExt as _;
            self.value
                .as_deref()
                .map_or_else(|| default_value().into_bytes(), |v| v.as_bytes().to_vec())
        };
        log(&format!(
            "campaigning in {:?} as \"{}\" on {} (ttl {:?}, grace {:?}{}{}{extra})",
            self.election.as_deref().unwrap_or_default(),
            tenure::lines::escape_value(&value),
            tenure::redact_url(&url),
            self.ttl,
            self.grace,
            if once { ", once" } else { "" },
            if self.fate_sharing {
                ", fate-sharing"
            } else {
                ""
            }
        ));
        let options = supervise::Options {
            election: self.election.unwrap_or_default(),
            value,
            campaign: tenure::CampaignOptions {
                ttl: self.ttl,
                fate_sharing: self.fate_sharing,
                ..Default::default()
            },
            grace: self.grace,
            once,
            command: self.command,
            guard: GuardProgram {
                program: None,
                args: vec!["run-guard".into()],
            },
        };
        Ok((url, client, options))
    }
}

/// `tenure run`.
pub fn run(args: RunArgs) -> ExitCode {
    if let Err(code) = args.lead.check() {
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
    let (url, client, options) = match args.lead.connect(args.once, "").await {
        Ok(c) => c,
        Err(code) => return code,
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
