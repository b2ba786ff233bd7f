//! `tenure cron`: a command on a schedule, exactly once per slot, on whichever replica
//! leads; `tenure cron history` and `tenure cron next`. The rules and the ledger are the
//! client library's [`tenure::schedule`].

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use tenure::schedule::{self, Job, OnInterrupt, Schedule};
use tenure::supervise::Outcome;

use crate::common::{
    backend_url, block_on, fail, install_signals, log, parse_duration, print_lines, table,
    TlsFlags, EXIT_USAGE,
};
use crate::run::LeadArgs;

/// Run a command on a schedule, exactly once per slot, on the replica that leads.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CronArgs {
    #[command(subcommand)]
    pub action: Option<CronAction>,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// How late a slot missed while nobody led may still run, in order, when leadership
    /// returns (`6h`, `30m`), or `none`: only a slot due now runs. Older ones are recorded
    /// `missed`.
    #[arg(long, default_value = "6h", value_parser = parse_catch_up)]
    pub catch_up: CatchUp,
    /// A slot whose holder stopped leading while its command ran: `retry` runs it again
    /// with the same TENURE_RUN_ID, `skip` records it `interrupted`.
    #[arg(long, default_value = "retry", value_parser = ["retry", "skip"])]
    pub on_interrupt: String,
    /// Stop a slot's command after this long (SIGTERM, then SIGKILL after --grace); the
    /// slot is recorded `timed-out`.
    #[arg(long, value_parser = parse_duration)]
    pub max_runtime: Option<Duration>,
    /// Keep this runner's metrics (slots decided by state, reruns, refused records, start
    /// lateness, leading) in this file, in the Prometheus text format, replaced whole after
    /// every change (for node_exporter's textfile collector). No port is opened.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<std::path::PathBuf>,
    /// Append one JSON line per change of a slot to this file (claimed, decided, stopped,
    /// and refused records): the event stream of the job, for a log pipeline or an alert.
    #[arg(long, value_name = "FILE")]
    pub events: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub lead: LeadArgs,
}

/// `--schedule` and `--tz`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week), or 6 with
    /// seconds first; `@daily` and the like.
    #[arg(long)]
    pub schedule: Option<String>,
    /// The IANA time zone the expression is read in.
    #[arg(long, default_value = "UTC")]
    pub tz: String,
}

/// `tenure cron`'s subcommands.
#[derive(Debug, Subcommand)]
pub enum CronAction {
    /// An election's ledger: each recent slot with its state, holder, token, start, end and
    /// exit, and the counts since the ledger began.
    History(HistoryArgs),
    /// The next slots of a schedule, in UTC and in its zone.
    Next(NextArgs),
}

/// `tenure cron history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The election the job runs in.
    pub election: String,
    /// Backend URL; as `tenure cron`.
    #[arg(long)]
    pub backend: Option<String>,
    #[command(flatten)]
    pub tls: TlsFlags,
    /// The ledger as JSON, as it is stored.
    #[arg(long)]
    pub json: bool,
}

/// `tenure cron next`.
#[derive(Debug, Args)]
pub struct NextArgs {
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// How many slots.
    #[arg(short = 'n', long, default_value_t = 5)]
    pub count: usize,
}

/// `--catch-up`: a window, or none.
#[derive(Clone, Copy, Debug)]
pub struct CatchUp(Option<Duration>);

fn parse_catch_up(s: &str) -> Result<CatchUp, String> {
    match s {
        "none" => Ok(CatchUp(None)),
        _ => parse_duration(s)
            .map(|d| CatchUp(Some(d)))
            .map_err(|e| format!("{e}, or `none`")),
    }
}

fn schedule(args: &ScheduleArgs) -> Result<Schedule, u8> {
    let Some(expr) = &args.schedule else {
        log("error: --schedule is required (a cron expression such as \"0 2 * * *\")");
        return Err(EXIT_USAGE);
    };
    Schedule::new(expr, &args.tz).map_err(|e| {
        log(&format!("error: {e}"));
        EXIT_USAGE
    })
}

/// `tenure cron`.
pub fn run(args: CronArgs) -> ExitCode {
    match args.action {
        Some(CronAction::History(h)) => return block_on(history(h)),
        Some(CronAction::Next(n)) => return next(n),
        None => {}
    }
    let lead = args.lead;
    let schedule = match schedule(&args.schedule) {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    if let Err(code) = lead.check() {
        return ExitCode::from(code);
    }
    let on_interrupt = match args.on_interrupt.as_str() {
        "skip" => OnInterrupt::Skip,
        _ => OnInterrupt::Retry,
    };
    // Current-thread, as `tenure run`: the command is forked by the main thread.
    block_on(async move {
        let mut signals = match install_signals() {
            Ok(s) => s,
            Err(code) => return code,
        };
        let extra = format!(
            "; schedule {:?} in {}, catch-up {}, on interrupt {}",
            schedule.expression(),
            schedule.zone(),
            args.catch_up.0.map_or("none".into(), |d| format!("{d:?}")),
            args.on_interrupt
        );
        let (url, client, run) = match lead.connect(false, &extra).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        let job = Job {
            schedule,
            catch_up: args.catch_up.0,
            on_interrupt,
            max_runtime: args.max_runtime,
            run,
            metrics_file: args.metrics_file,
            events_file: args.events,
        };
        match schedule::run(&client, &job, &mut signals, &log).await {
            Outcome::CampaignFailed(e) => fail("cron", &url, &e).await,
            outcome => outcome.exit_code(),
        }
    })
}

async fn history(args: HistoryArgs) -> u8 {
    let url = backend_url(args.backend.as_deref(), &args.tls);
    let ledger = match tenure::Client::connect(&url).await {
        Ok(c) => schedule::history(&c, &args.election).await,
        Err(e) => Err(e),
    };
    let ledger = match ledger {
        Ok(Some(l)) => l,
        Ok(None) => {
            // As `tenure get` of a key never written.
            log(&format!(
                "no ledger for {:?}: no `tenure cron` has led it yet",
                args.election
            ));
            print_lines(&["none".to_string()]);
            return 0;
        }
        Err(e) => return fail("cron history", &url, &e).await,
    };
    if args.json {
        print_lines(&[String::from_utf8_lossy(&ledger.encode()).into_owned()]);
        return 0;
    }
    let when =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map_or("-".into(), schedule::ledger::rfc3339);
    let rows: Vec<Vec<String>> = ledger
        .runs
        .iter()
        .chain(&ledger.open)
        .map(|r| {
            let slot = match (r.through, r.slots) {
                (Some(last), n) => format!(
                    "{} … {} ({n})",
                    schedule::ledger::rfc3339(r.slot),
                    schedule::ledger::rfc3339(last)
                ),
                (None, _) => schedule::ledger::rfc3339(r.slot),
            };
            let late = r
                .start
                .filter(|_| r.through.is_none())
                .and_then(|s| (s - r.slot).to_std().ok())
                .map_or("-".into(), |d| format!("{:.3}s", d.as_secs_f64()));
            vec![
                slot,
                r.state.name().into(),
                late,
                r.attempt.to_string(),
                if r.holder.is_empty() {
                    "-".into()
                } else {
                    r.holder.clone()
                },
                if r.token == 0 {
                    "-".into()
                } else {
                    r.token.to_string()
                },
                when(r.start),
                when(r.end),
                r.exit.map_or("-".into(), |c| c.to_string()),
                r.run_id.clone(),
            ]
        })
        .collect();
    let mut lines = table(
        &[
            "SLOT", "STATE", "ATTEMPT", "HOLDER", "TOKEN", "START", "END", "EXIT", "RUN-ID",
        ],
        &rows,
    );
    let c = &ledger.counts;
    lines.push(format!(
        "through {}: {} completed, {} failed, {} timed out, {} interrupted, {} missed, {} rerun(s)",
        schedule::ledger::rfc3339(ledger.through),
        c.completed,
        c.failed,
        c.timed_out,
        c.interrupted,
        c.missed,
        c.reruns
    ));
    print_lines(&lines);
    0
}

fn next(args: NextArgs) -> ExitCode {
    let s = match schedule(&args.schedule) {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let rows: Vec<Vec<String>> = s
        .upcoming(chrono::Utc::now(), args.count)
        .into_iter()
        .map(|t| vec![schedule::ledger::rfc3339(t), s.local(t)])
        .collect();
    print_lines(&table(&["UTC", "LOCAL"], &rows));
    ExitCode::SUCCESS
}
