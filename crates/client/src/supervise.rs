//! `tenure run`'s supervisor: run a command only while this process leads an election.
//!
//! The `tenure` binary parses `tenure run`'s flags and calls [`find_command`], then
//! [`run_while_leader`], and exits with [`Outcome::exit_code`]; its hidden `tenure run-guard`
//! subcommand is [`guard`]. A program embedding this library can supervise a command the
//! same way (with the `supervise` feature; Linux only: it relies on `PR_SET_PDEATHSIG` and
//! process groups). What the supervisor logs goes to the function it is given, one line each.
//!
//! ```text
//! tenure run --election NAME [--backend URL] [--ttl 10s] [--grace 2s] [--once] [--value STR] -- CMD ARGS…
//! ```
//!
//! # What it does
//!
//! 0. Checks that `CMD` can be started before anything else: found on `$PATH` (as `execvp`
//!    looks it up; a `CMD` with a `/` is taken as a path) and executable. A command that
//!    is not found exits 127, one that is not executable 126 (as shells do), without
//!    contacting the backend: no session is granted, no fencing token spent.
//! 1. Campaigns in `NAME` (a session with `--ttl`, kept alive every TTL/4) and waits in the
//!    election's queue until it leads. With `--once` it does not wait: see below.
//! 2. Starts `CMD ARGS…` with `TENURE_FENCING_TOKEN` (the leadership's token),
//!    `TENURE_ELECTION` (`NAME`) and `TENURE_SESSION_ID` (this holder's session id: what
//!    `tenure leader` shows as `session=`) in its environment, stdin/stdout/stderr
//!    inherited, in a process group of its own. `TENURE_LEADER_ID` holds the same session
//!    id, under its old name; it is deprecated and will be removed: use `TENURE_SESSION_ID`.
//! 3. Stops the command's whole process group before the lease could pass to anyone else:
//!    SIGTERM at `valid_until − grace` at the latest (at once when leadership is seen lost:
//!    session ended, another leader observed), followed by SIGCONT so that a stopped command
//!    gets it too, then SIGKILL at `valid_until` (or after the grace, whichever comes first). `valid_until` is the client's rule-4 bound (send time of
//!    the last acknowledged keepalive + TTL − drift margin, on this host's monotonic clock);
//!    the cluster never expires the session before receive time + TTL, so the command is
//!    dead at least the drift margin before anyone else can be elected.
//! 4. When the command exits by itself while this process leads, every process left in its
//!    group is killed, leadership is resigned (the next candidate leads at once), and
//!    `tenure run` exits with the command's status.
//!
//! `--grace` must be less than half the TTL: the command is stopped `grace` before the lease
//! runs out, and with renewals every TTL/4 a grace of TTL/2 or more would stop it after one
//! or two slow keepalives.
//!
//! # `--once` (cron-style jobs)
//!
//! Every replica's cron runs `tenure run --once --election nightly -- ./job`. A replica that
//! finds the election led by someone else, or does not lead within a second of joining, does
//! not queue: it withdraws and exits with 76 without running anything. The one that leads
//! runs the command once, then resigns. This prevents *concurrent* runs; it cannot prevent a
//! replica whose cron fires after the first run finished from running the job again — a job
//! that must run once per day should record its completion in a store fenced by
//! `TENURE_FENCING_TOKEN`. Without `--once`, `tenure run` waits in the queue for as long as
//! it takes (a hot standby), runs the command once when it leads, and exits like `--once`.
//! In both modes it never restarts the command: leave that to a supervisor (systemd, k8s).
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | the command's | the command exited while this process led (128+N if killed by signal N) |
//! | 75 | leadership was lost (lease ran out, session ended, replaced); the command was stopped. Logged as "lost leadership" |
//! | 76 | `--once`: another holder leads; the command was not run |
//! | 69 | the backend failed (unreachable, refused) before the command was started |
//! | 126 / 127 | the command cannot be started (not executable / not found); checked before campaigning, so nothing was spent |
//! | 130 / 143 | `tenure run` got SIGINT / SIGTERM (or SIGHUP: 129); the command was stopped and leadership resigned |
//! | 2 | bad arguments: `--grace` ≥ TTL/2, a bad duration, an empty `--election`, a backend URL that cannot be understood or names an unknown scheme, a file it names that cannot be read, a TTL the backend refuses; the message names the flag or value |
//!
//! # What is guaranteed, and what is not
//!
//! - **The runner loses the cluster** (network cut, cluster unavailable): keepalives stop
//!   being acknowledged, the runner stops the command on its own clock as above, before the
//!   session can expire. Tested in `tests/run.rs`.
//! - **The runner is killed** (SIGKILL, crash, OOM): the command is started with
//!   `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it when the runner dies, long before the
//!   session expires (TTL later). Processes the command forked in its group are killed by the
//!   guard (below), which sees the runner's end of a pipe close. Tested in `tests/run.rs`
//!   with a command whose work runs in a grandchild.
//! - **`--fate-sharing`**: the session ends as soon as the runner dies, not a TTL later (its
//!   keepalive stream closes with it): the next holder may start its command within
//!   milliseconds. The kernel sends the command its SIGKILL while the runner exits, right
//!   after it closed the runner's sockets, and a command in uninterruptible sleep (a disk or
//!   NFS write) dies only when that returns: the old command may outlive the release by that
//!   much. Its late writes are what `TENURE_FENCING_TOKEN` is for: the store rejects them
//!   once the next holder wrote. When the runner itself stops the command (lost leadership,
//!   a signal, the command's own exit) it does so before the session is let go.
//! - **The runner alone freezes** (SIGSTOP, stuck): a guard process (`tenure run-guard`,
//!   hidden; its own process group; ignores SIGINT/SIGTERM/SIGHUP) is kept informed of
//!   `valid_until` as an absolute CLOCK_MONOTONIC deadline and SIGKILLs the command's group at
//!   that deadline by itself if the runner has not stopped the command. Tested in
//!   `tests/run.rs` (SIGSTOP of the runner, not of its command).
//! - Not covered: a process that leaves the group (`setsid`, daemonizing), or runner and
//!   guard killed or frozen together (the OOM killer taking both; a cgroup-wide kill such as
//!   systemd's takes the command too).
//! - **The whole host freezes** (VM pause, SIGSTOP of runner and command): nothing running on
//!   the host can act, so the command may resume after the lease passed. No runner can prevent
//!   that; this is what the fencing token is for: send `TENURE_FENCING_TOKEN` with every
//!   write so that the store rejects the stale leader. SIGSTOP of the runner alone (not a
//!   realistic fault: a Rust process has no GC pause) is the same case.
//!
//! `tenure run` logs to stderr, one line each, prefixed with a UTC timestamp.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::exit::{exit_code, Commands, EXIT_LOST, EXIT_SKIPPED};
use crate::{CampaignOptions, Client, Error, Leadership};

/// How often the supervision loop re-reads `valid_until` (it moves with each renewal).
const POLL: Duration = Duration::from_millis(20);
/// How long `--once` waits to lead after joining before it gives up.
const ONCE_WAIT: Duration = Duration::from_secs(1);
/// How long a resign at exit may take before the session is left to expire.
const RESIGN_WAIT: Duration = Duration::from_secs(2);

/// Where the supervisor logs: one line per call, without a newline.
pub type Log<'a> = &'a (dyn Fn(&str) + Sync);

/// What to run, in which election, and how to stop it.
#[derive(Clone, Debug)]
pub struct Options {
    /// The election to lead.
    pub election: String,
    /// The value to campaign with (shown as the leader's value).
    pub value: Vec<u8>,
    /// The session's TTL and fate-sharing.
    pub campaign: CampaignOptions,
    /// Time between SIGTERM and SIGKILL: the command gets SIGTERM this long before the lease
    /// could run out. The caller keeps it below TTL/2 (renewals come every TTL/4).
    pub grace: Duration,
    /// Cron-style: lead now or not at all ([`Outcome::Skipped`]).
    pub once: bool,
    /// The command and its arguments (at least the command).
    pub command: Vec<OsString>,
    /// How to start the guard process, which runs [`guard`].
    pub guard: GuardProgram,
}

/// The program that runs [`guard`]: started as `PROGRAM ARGS… --pgid N --until-ns T`, with
/// the runner's pipe as its stdin.
#[derive(Clone, Debug, Default)]
pub struct GuardProgram {
    /// The executable; `None` is this process's own ([`std::env::current_exe`]), found when
    /// the guard starts.
    pub program: Option<PathBuf>,
    /// The arguments before `--pgid` (for the `tenure` binary: `run-guard`).
    pub args: Vec<OsString>,
}

/// How a supervised run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The command exited by itself while this process led; its group was swept and
    /// leadership resigned.
    Exited(ExitStatus),
    /// Leadership was lost (or the lease was too close to its end to start the command);
    /// the command was stopped.
    Lost,
    /// `once`: another holder leads; nothing was run.
    Skipped,
    /// Signal N (SIGINT, SIGTERM or SIGHUP) arrived: before leading nothing was run; while
    /// running the command was stopped and leadership resigned.
    Signalled(i32),
    /// The command could not be started once leading (leadership was resigned).
    CannotStart(std::io::Error),
    /// Campaigning failed.
    CampaignFailed(Error),
}

impl Outcome {
    /// The exit code `tenure run` exits with (docs/CLI.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Exited(st) => status_code(*st),
            Outcome::Lost => EXIT_LOST,
            Outcome::Skipped => EXIT_SKIPPED,
            Outcome::Signalled(sig) => 128 + *sig as u8,
            Outcome::CannotStart(e) if e.kind() == std::io::ErrorKind::NotFound => 127,
            Outcome::CannotStart(_) => 126,
            Outcome::CampaignFailed(e) => exit_code(e, Commands::Script),
        }
    }
}

/// Why a command cannot be started (see [`find_command`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// Not found (exit 127, as shells do).
    #[error("{0}")]
    NotFound(String),
    /// Found but not executable (exit 126, as shells do).
    #[error("{0}")]
    NotExecutable(String),
}

impl CommandError {
    /// 127 for a command not found, 126 for one that is not executable.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::NotFound(_) => 127,
            CommandError::NotExecutable(_) => 126,
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, as one stream of signal numbers.
#[derive(Debug)]
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// Installs the handlers (the signals no longer kill the process). Needs a tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}

/// A signal's name, for logs.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        n => format!("signal {n}"),
    }
}

/// Campaigns in `options.election` through `client` (with `once`: leads now or not at all),
/// then runs the command while leading and stops it before the lease could pass, as the
/// module docs describe. A signal from `signals` ends the wait or the run. Must run on a
/// current-thread runtime driven by the thread that lives as long as the process: the
/// command is forked from it, and `PR_SET_PDEATHSIG` fires when that thread ends.
pub async fn run_while_leader(
    client: &Client,
    options: &Options,
    signals: &mut Signals,
    log: Log<'_>,
) -> Outcome {
    let won = tokio::select! {
        r = lead(client, options) => r,
        sig = signals.recv() => {
            log(&format!("got {}; not leading, exiting", signal_name(sig)));
            return Outcome::Signalled(sig);
        }
    };
    let leadership = match won {
        Ok(Some(l)) => l,
        Ok(None) => {
            log("another holder leads; not running the command (--once)");
            return Outcome::Skipped;
        }
        Err(e) => return Outcome::CampaignFailed(e),
    };
    log(&format!(
        "leading {:?} with fencing token {} (session {})",
        options.election,
        leadership.token(),
        leadership.session()
    ));
    supervise(options, leadership, signals, log).await
}

/// Wait to lead (or, with `once`, lead now or return `None`).
async fn lead(client: &Client, options: &Options) -> crate::Result<Option<Leadership>> {
    let (election, value) = (&options.election, &options.value);
    if !options.once {
        return client
            .campaign(election, value, options.campaign)
            .await
            .map(Some);
    }
    match client.leader(election).await {
        Ok(Some(_)) => return Ok(None),
        Ok(None) | Err(Error::UnknownElection(_)) => {}
        Err(e) => return Err(e),
    }
    let candidate = client.join(election, value, options.campaign).await?;
    // Dropping the candidate on timeout withdraws it.
    match tokio::time::timeout(ONCE_WAIT, candidate.leadership()).await {
        Ok(r) => r.map(Some),
        Err(_) => Ok(None),
    }
}

/// How the command's run ended.
enum End {
    Exited(ExitStatus),
    Lost(String),
    Signal(i32),
    TimedOut(Duration),
}

/// How one run of the command under a leadership ended ([`run_child`]). The leadership is
/// kept: the caller resigns it or runs the next command under it.
#[derive(Debug)]
pub enum Ran {
    /// The command exited by itself while this process led; its group was swept.
    Exited(ExitStatus),
    /// Leadership was lost (or the lease was too close to its end to start the command);
    /// the command was stopped (its status, if it was started and reaped).
    Lost(Option<ExitStatus>),
    /// Signal N arrived; the command was stopped.
    Signalled(i32),
    /// The command ran longer than its limit and was stopped (SIGTERM, then SIGKILL after
    /// the grace); its status, if reaped.
    TimedOut(Option<ExitStatus>),
    /// The command could not be started.
    CannotStart(std::io::Error),
}

/// What one run of the command adds to [`Options`]: more environment, a time limit.
#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    /// Set in the command's environment besides the `TENURE_*` variables of the leadership.
    pub env: Vec<(String, String)>,
    /// Stop the command once it has run this long.
    pub max_runtime: Option<Duration>,
}

async fn supervise(
    options: &Options,
    leadership: Leadership,
    signals: &mut Signals,
    log: Log<'_>,
) -> Outcome {
    let ran = run_child(options, &leadership, &RunSpec::default(), signals, log).await;
    let outcome = match ran {
        Ran::Exited(st) => {
            log(&format!(
                "the command exited ({}); resigning, exit {}",
                describe(st),
                status_code(st)
            ));
            Outcome::Exited(st)
        }
        Ran::Lost(_) | Ran::TimedOut(_) => Outcome::Lost,
        Ran::Signalled(sig) => {
            log(&format!("resigning, exit {}", 128 + sig));
            Outcome::Signalled(sig)
        }
        Ran::CannotStart(e) => Outcome::CannotStart(e),
    };
    resign(leadership, log).await;
    outcome
}

/// Runs the command once under `leadership`, as the module docs describe (its own process
/// group, the guard, SIGTERM then SIGKILL before the lease could pass, at once when
/// leadership is seen lost or a signal arrives), with `spec`'s environment and time limit.
/// Leadership is neither resigned nor released: the caller decides. Must run on the thread
/// that lives as long as the process (see [`run_while_leader`]).
pub async fn run_child(
    options: &Options,
    leadership: &Leadership,
    spec: &RunSpec,
    signals: &mut Signals,
    log: Log<'_>,
) -> Ran {
    let grace = options.grace;
    if leadership
        .valid_until()
        .checked_sub(grace)
        .is_none_or(|t| t <= Instant::now())
    {
        log("lost leadership (the lease is too close to running out to start the command)");
        return Ran::Lost(None);
    }
    let mut child = match spawn(options, leadership, &spec.env) {
        Ok(c) => c,
        Err(e) => {
            log(&format!(
                "error: cannot start {:?}: {e}",
                options.command[0]
            ));
            return Ran::CannotStart(e);
        }
    };
    let started = Instant::now();
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    log(&format!(
        "started the command (pid {pgid}, process group {pgid})"
    ));
    let mut guard = match Guard::start(&options.guard, pgid, leadership.valid_until()) {
        Ok(g) => Some(g),
        Err(e) => {
            log(&format!(
                "warning: no guard for group {pgid} ({e}): if this runner is killed, only the \
                 command itself dies with it; if it freezes, nothing stops the command"
            ));
            None
        }
    };

    let end = loop {
        if let Some(g) = guard.as_mut() {
            g.extend(leadership.valid_until());
        }
        let now = Instant::now();
        let stop_at = leadership.valid_until().checked_sub(grace).unwrap_or(now);
        if now >= stop_at {
            break End::Lost(format!(
                "no keepalive acknowledged; the lease runs out in {:?}",
                leadership.valid_until().saturating_duration_since(now)
            ));
        }
        let limit = spec.max_runtime.map(|m| (m, started + m));
        if let Some((m, _)) = limit.filter(|&(_, at)| now >= at) {
            break End::TimedOut(m);
        }
        let wake = limit
            .map_or(stop_at, |(_, at)| at.min(stop_at))
            .min(now + POLL);
        tokio::select! {
            biased;
            st = child.wait() => match st {
                // Exited after the lease ran out (the guard killed it while this runner
                // was frozen): that is a loss of leadership, not the command's own end.
                Ok(st) if !leadership.is_valid() => {
                    break End::Lost(format!("the command ended meanwhile: {}", describe(st)))
                }
                Ok(st) => break End::Exited(st),
                Err(e) => break End::Lost(format!("cannot wait on the command: {e}")),
            },
            why = leadership.lost() => break End::Lost(why.to_string()),
            sig = signals.recv() => break End::Signal(sig),
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
    };

    finish(end, &mut child, pgid, grace, leadership, guard, log).await
}

/// Stop the command (unless it exited) and sweep its group; how the run ended.
async fn finish(
    end: End,
    child: &mut tokio::process::Child,
    pgid: i32,
    grace: Duration,
    leadership: &Leadership,
    guard: Option<Guard>,
    log: Log<'_>,
) -> Ran {
    // Called once the group is empty.
    let disarm = move || {
        if let Some(g) = guard {
            g.disarm();
        }
    };
    let valid_until = leadership.valid_until();
    match end {
        End::Exited(st) => {
            kill_group(pgid, libc::SIGKILL);
            disarm();
            Ran::Exited(st)
        }
        End::Lost(why) => {
            log(&format!(
                "lost leadership ({why}); stopping the command (SIGTERM to group {pgid})"
            ));
            let st = stop(child, pgid, grace, valid_until, log).await;
            disarm();
            log(&format!(
                "lost leadership: the command was stopped ({}); exit {EXIT_LOST}",
                describe_opt(st)
            ));
            Ran::Lost(st)
        }
        End::Signal(sig) => {
            log(&format!(
                "got {}; stopping the command (SIGTERM to group {pgid})",
                signal_name(sig)
            ));
            let st = stop(child, pgid, grace, valid_until, log).await;
            disarm();
            log(&format!("the command was stopped ({})", describe_opt(st)));
            Ran::Signalled(sig)
        }
        End::TimedOut(limit) => {
            log(&format!(
                "the command ran longer than {limit:?}; stopping it (SIGTERM to group {pgid})"
            ));
            let st = stop(child, pgid, grace, valid_until, log).await;
            disarm();
            log(&format!("the command was stopped ({})", describe_opt(st)));
            Ran::TimedOut(st)
        }
    }
}

/// The guard (in `tenure`, the hidden `tenure run-guard`): a second process, in a process group of its own,
/// ignoring SIGINT/SIGTERM/SIGHUP, that SIGKILLs the command's whole process group
/// (grandchildren included) if the runner cannot:
/// - when the runner dies (even by SIGKILL): its end of a pipe closes, the guard reads EOF;
/// - when the runner is frozen (SIGSTOP, stuck): the runner keeps sending the guard its
///   `valid_until` as an absolute CLOCK_MONOTONIC deadline (`until NANOS` lines, shared by
///   all processes of the host); at the deadline the guard kills the group by itself.
///
/// When the runner is done with the group it writes `disarm` and the guard exits quietly.
///
/// Run it with stdin being the runner's pipe: this function only returns when the guard's
/// work is done (its group killed, or disarmed). A `pgid` of 1 or less is refused
/// (`InvalidInput`) after the signals are set to be ignored.
pub fn guard(pgid: i32, until_ns: u64) -> std::io::Result<()> {
    use std::io::BufRead as _;
    // SAFETY: setting signal dispositions to SIG_IGN before any thread starts.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    if pgid <= 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no process group",
        ));
    }
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
        // EOF: the runner is gone; dropping `tx` tells the main loop.
    });
    let mut until = until_ns;
    loop {
        let now = monotonic_ns();
        if now >= until {
            kill_group(pgid, libc::SIGKILL);
            return Ok(());
        }
        match rx.recv_timeout(Duration::from_nanos(until - now)) {
            Ok(l) if l == "disarm" => return Ok(()),
            Ok(l) => {
                if let Some(n) = l.strip_prefix("until ").and_then(|n| n.parse().ok()) {
                    until = n;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                kill_group(pgid, libc::SIGKILL);
                return Ok(());
            }
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (what [`Instant`] reads on Linux, shared by the host's
/// processes).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `at` as CLOCK_MONOTONIC nanoseconds (rounded down: never later than `at`).
fn instant_ns(at: Instant) -> u64 {
    let (now, raw) = (Instant::now(), monotonic_ns());
    match at.checked_duration_since(now) {
        Some(d) => raw + d.as_nanos() as u64,
        None => raw.saturating_sub(now.duration_since(at).as_nanos() as u64),
    }
}

/// The runner's side of a guard.
struct Guard {
    child: std::process::Child,
    pipe: std::fs::File,
    until: Instant,
}

impl Guard {
    fn start(program: &GuardProgram, pgid: i32, until: Instant) -> std::io::Result<Guard> {
        use std::os::fd::{FromRawFd as _, OwnedFd};
        use std::os::unix::process::CommandExt as _;
        if pgid <= 1 {
            return Err(std::io::Error::other("no process group"));
        }
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two new descriptors, owned below exactly once. O_CLOEXEC keeps
        // the write end out of every other child (or the guard would never see EOF).
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: see above.
        let (read, pipe) = unsafe {
            (
                OwnedFd::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        };
        let exe = match &program.program {
            Some(p) => p.clone(),
            None => std::env::current_exe()?,
        };
        let child = std::process::Command::new(exe)
            .args(&program.args)
            .arg("--pgid")
            .arg(pgid.to_string())
            .arg("--until-ns")
            .arg(instant_ns(until).to_string())
            .stdin(std::process::Stdio::from(read))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .process_group(0)
            .spawn()?;
        Ok(Guard { child, pipe, until })
    }

    /// Move the guard's deadline to `until` (the lease's new `valid_until`).
    fn extend(&mut self, until: Instant) {
        use std::io::Write as _;
        if until != self.until {
            self.until = until;
            let _ = writeln!(self.pipe, "until {}", instant_ns(until));
        }
    }

    /// The group is empty: let the guard exit without killing anything.
    fn disarm(mut self) {
        use std::io::Write as _;
        let _ = self.pipe.write_all(b"disarm\n");
        drop(self.pipe);
        let _ = self.child.wait();
    }
}

fn spawn(
    options: &Options,
    leadership: &Leadership,
    env: &[(String, String)],
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&options.command[0]);
    cmd.args(&options.command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("TENURE_FENCING_TOKEN", leadership.token().to_string())
        .env("TENURE_ELECTION", &options.election)
        .env("TENURE_SESSION_ID", leadership.session().to_string())
        // Deprecated: the old name of TENURE_SESSION_ID (it never held anything else).
        .env("TENURE_LEADER_ID", leadership.session().to_string())
        .process_group(0);
    let runner = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The runner may have died between fork and prctl.
            if libc::getppid() != runner {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// SIGTERM the group now, SIGKILL it at `min(now + grace, valid_until)`, reap the command,
/// then SIGKILL whatever is left in its group.
async fn stop(
    child: &mut tokio::process::Child,
    pgid: i32,
    grace: Duration,
    valid_until: Instant,
    log: Log<'_>,
) -> Option<ExitStatus> {
    kill_group(pgid, libc::SIGTERM);
    // A stopped command (SIGSTOP, a debugger, job control) would keep its SIGTERM pending
    // until the SIGKILL: wake it so that it gets the grace it was promised.
    kill_group(pgid, libc::SIGCONT);
    let kill_at = (Instant::now() + grace).min(valid_until);
    let st = match tokio::time::timeout_at(kill_at.into(), child.wait()).await {
        Ok(st) => st.ok(),
        Err(_) => {
            log(&format!(
                "the command outlived its grace; SIGKILL to group {pgid}"
            ));
            kill_group(pgid, libc::SIGKILL);
            child.wait().await.ok()
        }
    };
    kill_group(pgid, libc::SIGKILL);
    st
}

fn kill_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) on a process group we created; ESRCH (already gone) is fine.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Resigns, waiting a bounded time; logs how it went.
pub(crate) async fn resign(leadership: Leadership, log: Log<'_>) {
    match tokio::time::timeout(RESIGN_WAIT, leadership.resign()).await {
        Ok(Ok(())) => log("resigned"),
        Ok(Err(e)) => log(&format!("resign failed ({e}); the session will expire")),
        Err(_) => log("resign timed out; the session will expire"),
    }
}

/// The exit code of a status: its code, or 128 + the signal that killed it.
pub fn status_code(st: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        (None, None) => 1,
    }
}

fn describe(st: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(s)) => format!("killed by {}", signal_name(s)),
        _ => st.to_string(),
    }
}

fn describe_opt(st: Option<ExitStatus>) -> String {
    st.map(describe).unwrap_or_else(|| "status unknown".into())
}

/// Where `command` would be executed from, as `execvp` finds it: a name with a `/` is a
/// path; any other is looked up in each directory of `$PATH` (`/bin:/usr/bin` when unset).
/// The error says why, and which exit code that is ([`CommandError::exit_code`]).
pub fn find_command(command: &OsStr) -> Result<PathBuf, CommandError> {
    use std::os::unix::ffi::OsStrExt as _;
    use std::path::Path;
    if command.is_empty() {
        return Err(CommandError::NotFound("the command is empty".into()));
    }
    let executable = |p: &Path| -> Result<(), String> {
        let meta = std::fs::metadata(p).map_err(|e| e.to_string())?;
        if meta.is_dir() {
            return Err("it is a directory".into());
        }
        let c = std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| "the path holds a NUL byte".to_string())?;
        // SAFETY: access(2) reads the NUL-terminated path and touches no other memory.
        if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
            return Err(format!(
                "not executable ({})",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    };
    if command.as_bytes().contains(&b'/') {
        let p = PathBuf::from(command);
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(_) if std::fs::metadata(&p).is_err() => Err(CommandError::NotFound(format!(
                "{} does not exist",
                p.display()
            ))),
            Err(why) => Err(CommandError::NotExecutable(format!(
                "{}: {why}",
                p.display()
            ))),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let mut not_executable = None;
    for dir in std::env::split_paths(&path) {
        // An empty entry is the current directory, as for execvp.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(command);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if std::fs::metadata(&candidate).is_ok() => {
                not_executable.get_or_insert(format!("{}: {why}", candidate.display()));
            }
            Err(_) => {}
        }
    }
    Err(match not_executable {
        Some(why) => CommandError::NotExecutable(why),
        None => CommandError::NotFound("not found in $PATH".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_as_execvp_finds_them() {
        assert!(find_command(OsStr::new("sh")).is_ok());
        let missing = find_command(OsStr::new("/no/such/tenure-command")).unwrap_err();
        assert_eq!(missing.exit_code(), 127, "{missing}");
        let missing = find_command(OsStr::new("no-such-tenure-command")).unwrap_err();
        assert_eq!(missing.exit_code(), 127, "{missing}");
        assert_eq!(find_command(OsStr::new("")).unwrap_err().exit_code(), 127);
        let dir = std::env::temp_dir();
        let not_executable = find_command(dir.as_os_str()).unwrap_err();
        assert_eq!(not_executable.exit_code(), 126, "{not_executable}");
    }

    #[test]
    fn outcomes_exit_as_documented() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(Outcome::Exited(ExitStatus::from_raw(3 << 8)).exit_code(), 3);
        assert_eq!(
            Outcome::Exited(ExitStatus::from_raw(libc::SIGKILL)).exit_code(),
            137
        );
        assert_eq!(Outcome::Lost.exit_code(), 75);
        assert_eq!(Outcome::Skipped.exit_code(), 76);
        assert_eq!(Outcome::Signalled(libc::SIGTERM).exit_code(), 143);
        let not_found = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(Outcome::CannotStart(not_found).exit_code(), 127);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(Outcome::CannotStart(denied).exit_code(), 126);
        let refused = Error::PermissionDenied("x".into());
        assert_eq!(Outcome::CampaignFailed(refused).exit_code(), 69);
    }
}
