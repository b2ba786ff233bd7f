//! The small script commands: `tenure campaign`, `tenure observe`, `tenure leader`.
//!
//! All take `--election NAME` and `--backend URL` (default `$TENURE_BACKEND`, else
//! `tenure://127.0.0.1:8001`), log to stderr with timestamps, and print results to stdout,
//! one line each. A leader is printed as `token=T session=S value=V` (the value escaped:
//! a newline is `\n`, see [`tenure::lines`]), nobody as `none`; with `--json` every line
//! is one JSON object instead (JSON Lines; the value exact, also when it is not UTF-8).
//!
//! Exit codes: 2 for a bad argument (an empty election name, a bad duration, a URL that
//! cannot be understood or names an unknown scheme, a file it names that cannot be read,
//! an argument the backend refuses as invalid), with a message that names it; 69 when the
//! backend fails or cannot be reached, with a hint when an address of the URL looks wrong
//! (nothing listens there, or it is a node's HTTP port: see [`tenure::admin::diagnose`]).
//!
//! - `tenure campaign` waits to lead, prints the fencing token alone on a line (with
//!   `--json`: an object with the election, token, session and value), holds the
//!   election until SIGINT/SIGTERM/SIGHUP, then resigns and exits 0. Exits 75 (and logs "lost
//!   leadership") if leadership is lost while held, 69 if the backend fails.
//! - `tenure observe` prints the current leader, then each change, until interrupted (exit 0);
//!   an election nobody campaigned in yet prints `none` and is waited for.
//! - `tenure leader` prints the current leader, or `none` (also for an election nobody ever
//!   campaigned in), and exits 0.
//!
//! - `tenure resign --pid-file PATH` makes the `tenure campaign --pid-file PATH` process that
//!   holds the election resign, and waits until it has exited. Resigning needs the session,
//!   which lives in that process, so `resign` asks it (SIGTERM) rather than the backend;
//!   this works the same on every backend. Exits 0 once the holder is gone, 1 if the pid
//!   file names no running process, 69 if it did not exit within `--timeout`.

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tenure::{CampaignOptions, Client, Error, LeaderInfo};
use tokio_stream::StreamExt as _;

use crate::common::{
    backend_url, block_on, check_election, default_value, fail, install_signals, log,
    parse_duration, signal_name, Signals, EXIT_BACKEND, EXIT_LOST, EXIT_USAGE,
};
use tenure::lines;

/// Which election, where.
#[derive(Debug, Args)]
pub struct Target {
    /// The election.
    #[arg(long)]
    election: String,
    /// Backend URL (`tenure://h1:p,h2:p,…`); default `$TENURE_BACKEND`, else
    /// `tenure://127.0.0.1:8001`. TLS: `tenure://…?ca=FILE[&cert=FILE&key=FILE]`, or
    /// --ca/--cert/--key (default `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY`) for a
    /// `tenure://` URL without a query.
    #[arg(long)]
    backend: Option<String>,
    #[command(flatten)]
    tls: crate::common::TlsFlags,
    /// Print JSON Lines (one object per line) instead of text.
    #[arg(long)]
    json: bool,
}

/// `tenure campaign`.
#[derive(Debug, Args)]
pub struct CampaignArgs {
    #[command(flatten)]
    target: Target,
    /// Lease TTL (e.g. `10s`, `500ms`).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// The value to campaign with (any bytes); default `HOSTNAME:PID`.
    #[arg(long)]
    value: Option<OsString>,
    /// Write this process's pid here while it campaigns or leads, for `tenure resign`.
    #[arg(long)]
    pid_file: Option<std::path::PathBuf>,
    /// Fate-sharing (`tenure://` only): the session ends as soon as this process exits
    /// (its keepalive stream closes), so the next candidate leads within milliseconds
    /// instead of a TTL later. Only over direct connections (docs/GUARANTEES.md).
    #[arg(long)]
    fate_sharing: bool,
}

/// `tenure resign`.
#[derive(Debug, Args)]
pub struct ResignArgs {
    /// The pid file given to `tenure campaign --pid-file`.
    #[arg(long)]
    pid_file: std::path::PathBuf,
    /// How long to wait for the holder to resign and exit.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
}

/// Ask the `tenure campaign` process named in the pid file to resign, and wait for it.
pub fn resign(args: ResignArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.pid_file) {
        Ok(t) => t,
        Err(e) => {
            log(&format!(
                "error: --pid-file {}: cannot read it: {e}",
                args.pid_file.display()
            ));
            return ExitCode::from(1);
        }
    };
    let pid: i32 = match text.trim().parse() {
        Ok(p) if p > 0 => p,
        _ => {
            log(&format!(
                "error: --pid-file {} does not hold a pid",
                args.pid_file.display()
            ));
            return ExitCode::from(1);
        }
    };
    // SAFETY: kill(2) with a positive pid and a valid signal number has no memory effects.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        log(&format!("error: no campaign process {pid} is running"));
        return ExitCode::from(1);
    }
    let deadline = std::time::Instant::now() + args.timeout;
    while running(pid) {
        if std::time::Instant::now() >= deadline {
            log(&format!(
                "error: process {pid} did not exit within {:?}",
                args.timeout
            ));
            return ExitCode::from(EXIT_BACKEND);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    log(&format!("process {pid} resigned and exited"));
    ExitCode::SUCCESS
}

/// True while `pid` names a live process. An exited process that its parent has not reaped
/// yet (a zombie) has resigned and is gone as far as leadership goes.
fn running(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; no memory is touched.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

/// Removes the pid file when the campaign ends, however it ends.
struct PidFile(Option<std::path::PathBuf>);

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `tenure observe`.
#[derive(Debug, Args)]
pub struct ObserveArgs {
    #[command(flatten)]
    target: Target,
}

/// `tenure leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    target: Target,
}

/// Signals handled, then [`connect`].
async fn start(target: &Target) -> Result<(Signals, Client, String), u8> {
    let signals = install_signals()?;
    let (client, url) = connect(target).await?;
    Ok((signals, client, url))
}

/// The target's election checked and its backend connected, with the URL (for hints).
async fn connect(target: &Target) -> Result<(Client, String), u8> {
    check_election(&target.election)?;
    let url = backend_url(target.backend.as_deref(), &target.tls);
    match Client::connect(&url).await {
        Ok(c) => Ok((c, url)),
        Err(e) => Err(fail(&format!("backend {}", tenure::redact_url(&url)), &url, &e).await),
    }
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A leader (or nobody) as the target asks: text or JSON.
fn format_leader(target: &Target, l: Option<&LeaderInfo>) -> String {
    if target.json {
        lines::leader_json(&target.election, l)
    } else {
        lines::leader_text(l)
    }
}

/// The bytes of a `--value`, or the default.
fn value_bytes(value: Option<OsString>) -> Vec<u8> {
    use std::os::unix::ffi::OsStringExt as _;
    value.map_or_else(|| default_value().into_bytes(), OsString::into_vec)
}

/// `tenure campaign`.
pub fn campaign(args: CampaignArgs) -> ExitCode {
    block_on(async move {
        let (mut signals, client, url) = match start(&args.target).await {
            Ok(started) => started,
            Err(code) => return code,
        };
        let value = value_bytes(args.value);
        let options = CampaignOptions {
            ttl: args.ttl,
            fate_sharing: args.fate_sharing,
            ..Default::default()
        };
        let _pid_file = match &args.pid_file {
            Some(path) => match std::fs::write(path, format!("{}\n", std::process::id())) {
                Ok(()) => PidFile(Some(path.clone())),
                Err(e) => {
                    log(&format!(
                        "error: --pid-file {}: cannot write it: {e}",
                        path.display()
                    ));
                    return EXIT_USAGE;
                }
            },
            None => PidFile(None),
        };
        let election = &args.target.election;
        log(&format!(
            "campaigning in {election:?} as \"{}\"",
            lines::escape_value(&value)
        ));
        let leadership = tokio::select! {
            r = client.campaign(election, &value, options) => match r {
                Ok(l) => l,
                Err(e) => return fail("campaign failed", &url, &e).await,
            },
            sig = signals.recv() => {
                log(&format!("got {}; not leading, exiting", signal_name(sig)));
                return 0;
            }
        };
        log(&format!(
            "leading {election:?} with fencing token {} (session {}); holding until interrupted",
            leadership.token(),
            leadership.session()
        ));
        if args.target.json {
            print_line(&lines::campaign_json(
                election,
                leadership.token(),
                leadership.session(),
                &value,
            ));
        } else {
            print_line(&leadership.token().to_string());
        }
        tokio::select! {
            why = leadership.lost() => {
                log(&format!("lost leadership ({why}); exit {EXIT_LOST}"));
                EXIT_LOST
            }
            sig = signals.recv() => {
                log(&format!("got {}; resigning", signal_name(sig)));
                match tokio::time::timeout(Duration::from_secs(2), leadership.resign()).await {
                    Ok(Ok(())) => log("resigned"),
                    Ok(Err(e)) => log(&format!("resign failed ({e}); the session will expire")),
                    Err(_) => log("resign timed out; the session will expire"),
                }
                0
            }
        }
    })
}

/// `tenure observe`.
pub fn observe(args: ObserveArgs) -> ExitCode {
    block_on(async move {
        let (mut signals, client, url) = match start(&args.target).await {
            Ok(started) => started,
            Err(code) => return code,
        };
        let target = &args.target;
        let election = &target.election;
        let work = async {
            // Only changes are printed: the same leader twice in a row (as a reopened stream
            // may report) is printed once.
            let mut last = String::new();
            let mut print = |line: String| {
                if line != last {
                    print_line(&line);
                    last = line;
                }
            };
            let mut changes = loop {
                match client.observe(election).await {
                    Ok(o) => break o,
                    Err(Error::UnknownElection(_)) => {
                        print(format_leader(target, None));
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => return fail("observe failed", &url, &e).await,
                }
            };
            while let Some(ev) = changes.next().await {
                match ev {
                    Ok(ev) => print(format_leader(target, ev.leader.as_ref())),
                    Err(e) => return fail("observe failed", &url, &e).await,
                }
            }
            log("error: the stream of changes ended");
            EXIT_BACKEND
        };
        tokio::select! {
            code = work => code,
            _ = signals.recv() => 0,
        }
    })
}

/// `tenure leader`.
pub fn leader(args: LeaderArgs) -> ExitCode {
    block_on(async move {
        let (client, url) = match connect(&args.target).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        match client.leader(&args.target.election).await {
            Ok(l) => {
                print_line(&format_leader(&args.target, l.as_ref()));
                0
            }
            Err(Error::UnknownElection(_)) => {
                print_line(&format_leader(&args.target, None));
                0
            }
            Err(e) => fail("cannot read the leader", &url, &e).await,
        }
    })
}
