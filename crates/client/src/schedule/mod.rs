//! Scheduled work exactly once per slot: what `tenure cron` does, as a library.
//!
//! ```text
//! tenure cron --election nightly-close --schedule "0 2 * * *" --tz Europe/Berlin \
//!     [--catch-up 6h|none] [--on-interrupt retry|skip] [--max-runtime 1h] -- ./close-books.sh
//! ```
//!
//! Every replica runs the same line. They campaign in the election; the one that leads runs
//! the schedule, under the same supervisor as `tenure run` ([`crate::supervise`]): the
//! command runs in its own process group and is dead before the lease could pass to anyone
//! else, so **two commands of one election never run at once**.
//!
//! # The ledger
//!
//! The leader keeps a ledger of slots ([`ledger::Ledger`]) in the fenced key
//! `tenure-cron/ELECTION` ([`ledger_key`]), written only with its own fencing token. Before
//! a slot's command starts, the leader **claims** the slot (state `running`, its holder,
//! token and start); when the command ends, it **records the outcome** (`completed`,
//! `failed`, `timed-out`; exit status, end) with the same token. A holder that has been
//! replaced (paused past its lease, cut off) cannot write either record: the store refuses
//! its token, and it logs that the ledger refused it. The command gets, besides
//! `TENURE_FENCING_TOKEN`, `TENURE_ELECTION` and `TENURE_SESSION_ID`:
//!
//! | variable | value |
//! |---|---|
//! | `TENURE_SLOT` | the scheduled instant, RFC 3339 UTC (`2026-12-08T01:00:00Z`) |
//! | `TENURE_RUN_ID` | `ELECTION/SLOT`: the same in every attempt of the slot — the job's idempotency key |
//! | `TENURE_ATTEMPT` | 1, then 2, … when the slot is run again after an interruption |
//!
//! # The rules
//!
//! - **A decided slot never runs again.** The ledger says how far the schedule has been
//!   taken; the next slot is always the schedule's first one after that, whatever the
//!   wall clock says (a clock stepped back brings no slot back).
//! - **A claimed slot whose holder stopped leading** before it recorded an outcome (killed,
//!   frozen, cut off, SIGTERMed) is taken up by the next leader first: run again with the
//!   same `TENURE_RUN_ID` and the next `TENURE_ATTEMPT` (`--on-interrupt retry`, the
//!   default), or recorded `interrupted` (`skip`). A command may therefore start more than
//!   once for one slot — never at the same time — and it must make its writes idempotent
//!   with the run id and fence them with the token (docs/CRON.md shows how).
//! - **Slots due while nobody led** run in order when leadership returns, if they are
//!   within `--catch-up` (default 6 h) of the leader's clock; older ones are recorded
//!   `missed`, as one range. With `--catch-up none` only a slot that is due now (at most
//!   [`ledger::ON_TIME`] late) runs.
//! - **Daylight saving** is croner's rule ([`slots`]): a fixed time that does not exist runs
//!   right after the gap; one that occurs twice runs once.
//! - **Clocks.** The schedule reads this host's wall clock: that is what a schedule means.
//!   Safety never does: a leader whose clock is wrong runs a slot early or late, never
//!   twice, because the ledger and the token decide, not the clock.
//! - Nothing is owed before the ledger began: the first leader ever writes it with its clock
//!   as the start.

pub mod events;
pub mod ledger;
pub mod metrics;
pub mod slots;

use std::time::Duration;

use chrono::Utc;

pub use events::{Change, Events};
pub use ledger::{Ledger, Next, OnInterrupt, Run, State};
pub use metrics::Metrics;
pub use slots::Schedule;

use crate::supervise::{self, status_code, Log, Outcome, Ran, RunSpec, Signals};
use crate::{Client, Error, Leadership};

/// The fenced key that holds `election`'s ledger.
pub fn ledger_key(election: &str) -> String {
    format!("tenure-cron/{election}")
}

/// Pause between attempts at a ledger read or write the backend could not answer, and
/// between campaigns after a failure that may pass.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long a holder that stopped leading tries to note that on its claim (the store
/// refuses it if another holder leads).
const LAST_WORD: Duration = Duration::from_secs(2);
/// The longest sleep before the wall clock is read again while waiting for a slot.
const CLOCK_LOOK: Duration = Duration::from_secs(1);

/// A scheduled job.
#[derive(Clone, Debug)]
pub struct Job {
    /// When it runs.
    pub schedule: Schedule,
    /// How old a slot missed while nobody led may be and still run (`None`: only on time).
    pub catch_up: Option<Duration>,
    /// What to do with a slot whose holder stopped leading while its command ran.
    pub on_interrupt: OnInterrupt,
    /// Stop the command after this long (the slot is recorded `timed-out`).
    pub max_runtime: Option<Duration>,
    /// The election, the campaign value (the ledger's `holder`), the lease, the grace and
    /// the command, as for `tenure run` (`once` is ignored).
    pub run: supervise::Options,
    /// Where to keep this runner's [`Metrics`] (a Prometheus text file), if anywhere.
    pub metrics_file: Option<std::path::PathBuf>,
    /// Where to append this runner's [`Events`] (JSON Lines), if anywhere.
    pub events_file: Option<std::path::PathBuf>,
}

/// The ledger of `election`, if one was ever written.
pub async fn history(client: &Client, election: &str) -> crate::Result<Option<Ledger>> {
    match client.get(&ledger_key(election)).await? {
        None => Ok(None),
        Some(v) => Ledger::decode(&v.value).map(Some).map_err(Error::Backend),
    }
}

/// Runs `job` on this replica for as long as the process lives: campaigns, and while it
/// leads, runs the schedule by the rules of the module docs; when leadership is lost it
/// campaigns again. Returns only on a signal from `signals` ([`Outcome::Signalled`]: a
/// running command was stopped and leadership resigned) or a failure that waiting does not
/// mend ([`Outcome::CampaignFailed`]: refused credentials, a ledger it cannot read). Must
/// run where [`supervise::run_while_leader`] may.
pub async fn run(client: &Client, job: &Job, signals: &mut Signals, log: Log<'_>) -> Outcome {
    let election = &job.run.election;
    let mut metrics = Metrics::new(election, job.metrics_file.as_deref());
    let mut events = match Events::open(election, job.events_file.as_deref()) {
        Ok(e) => e,
        Err(e) => {
            let path = job
                .events_file
                .as_deref()
                .unwrap_or(std::path::Path::new(""));
            return Outcome::CampaignFailed(Error::InvalidArgument(format!(
                "cannot open the events file {}: {e}",
                path.display()
            )));
        }
    };
    loop {
        let won = tokio::select! {
            r = client.campaign(election, &job.run.value, job.run.campaign) => r,
            sig = signals.recv() => {
                log(&format!("got {}; not leading, exiting", supervise::signal_name(sig)));
                return Outcome::Signalled(sig);
            }
        };
        let leadership = match won {
            Ok(l) => l,
            Err(e) if passes(&e) => {
                log(&format!("campaign failed ({e}); trying again"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(e) => return Outcome::CampaignFailed(e),
        };
        log(&format!(
            "leading {election:?} with fencing token {} (session {}); schedule {:?} in {}",
            leadership.token(),
            leadership.session(),
            job.schedule.expression(),
            job.schedule.zone()
        ));
        metrics.leading(true);
        let stop = Lead {
            client,
            job,
            leadership: &leadership,
            key: ledger_key(election),
            holder: String::from_utf8_lossy(&job.run.value).into_owned(),
            log,
            metrics: &mut metrics,
            events: &mut events,
        }
        .run(signals)
        .await;
        metrics.leading(false);
        match stop {
            Stop::Lost(why) => {
                log(&format!("not leading any more ({why}); campaigning again"));
                supervise::resign(leadership, log).await;
            }
            Stop::Signal(sig) => {
                supervise::resign(leadership, log).await;
                return Outcome::Signalled(sig);
            }
            Stop::Failed(e) => {
                supervise::resign(leadership, log).await;
                return Outcome::CampaignFailed(e);
            }
        }
    }
}

/// Whether waiting may mend `e` (the cluster is changing leaders, a session ended).
fn passes(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable(_)
            | Error::NotLeader { .. }
            | Error::Indeterminate(_)
            | Error::SessionEnded(_)
            | Error::SessionLost
    )
}

/// Why [`Lead::run`] returned.
enum Stop {
    /// This process no longer leads (or the store refused its token).
    Lost(String),
    /// A signal arrived.
    Signal(i32),
    /// A failure that waiting does not mend.
    Failed(Error),
}

/// One leadership's run of the schedule.
struct Lead<'a> {
    client: &'a Client,
    job: &'a Job,
    leadership: &'a Leadership,
    /// The ledger's fenced key.
    key: String,
    /// This runner's name in the ledger (its campaign value).
    holder: String,
    log: Log<'a>,
    metrics: &'a mut Metrics,
    events: &'a mut Events,
}

impl Lead<'_> {
    /// Runs the schedule while the leadership lasts.
    async fn run(mut self, signals: &mut Signals) -> Stop {
        let (election, log) = (&self.job.run.election, self.log);
        loop {
            let mut ledger = match self.read().await {
                Ok(Some(l)) => l,
                Ok(None) => {
                    let l = Ledger::new(Utc::now());
                    log(&format!(
                        "no ledger yet: starting one at {} (nothing is owed before it)",
                        ledger::rfc3339(l.through)
                    ));
                    if let Err(stop) = self.write(&l).await {
                        return stop;
                    }
                    l
                }
                Err(stop) => return stop,
            };
            let now = Utc::now();
            let job = self.job;
            match ledger::next(&ledger, &job.schedule, now, job.catch_up, job.on_interrupt) {
                Next::Run(slot) | Next::Rerun(slot) => {
                    if let Err(stop) = self.run_slot(&mut ledger, slot, signals).await {
                        return stop;
                    }
                }
                Next::Interrupt => {
                    let open = ledger
                        .open
                        .clone()
                        .expect("Interrupt comes with an open claim");
                    ledger.close(State::Interrupted, None, now);
                    if let Err(stop) = self.record(&ledger, Change::Decided).await {
                        return stop;
                    }
                    self.metrics.decided(State::Interrupted, 1);
                    log(&format!(
                        "slot {} (run id {}): its holder stopped leading; recorded interrupted \
                         (--on-interrupt skip)",
                        ledger::rfc3339(open.slot),
                        open.run_id
                    ));
                }
                Next::Miss { first, last, count } => {
                    ledger.miss(election, first, last, count);
                    if let Err(stop) = self.record(&ledger, Change::Decided).await {
                        return stop;
                    }
                    self.metrics.decided(State::Missed, count);
                    log(&format!(
                        "{count} slot(s) from {} to {} were due while nobody led and are older \
                         than the catch-up window: recorded missed",
                        ledger::rfc3339(first),
                        ledger::rfc3339(last)
                    ));
                }
                Next::Wait(at) => {
                    if let Some(stop) = wait_until(at, self.leadership, signals).await {
                        return stop;
                    }
                }
                Next::Done => {
                    log("the schedule names no more instants; leading without running anything");
                    let never = chrono::DateTime::<Utc>::MAX_UTC;
                    if let Some(stop) = wait_until(never, self.leadership, signals).await {
                        return stop;
                    }
                }
            }
        }
    }

    /// Claims `slot`, runs the command, records the outcome.
    async fn run_slot(
        &mut self,
        ledger: &mut Ledger,
        slot: chrono::DateTime<Utc>,
        signals: &mut Signals,
    ) -> Result<(), Stop> {
        let (job, leadership, log) = (self.job, self.leadership, self.log);
        let start = Utc::now();
        ledger.claim(
            &job.run.election,
            slot,
            &self.holder,
            leadership.token(),
            start,
        );
        self.record(ledger, Change::Claimed).await?;
        let open = ledger.open.clone().expect("a claim was just made");
        let late = (start - slot).to_std().unwrap_or_default();
        self.metrics
            .started(slot.timestamp(), late, open.attempt > 1);
        log(&format!(
            "slot {} (run id {}, attempt {}): claimed with token {}, starting {:.3} s after \
             the slot",
            ledger::rfc3339(slot),
            open.run_id,
            open.attempt,
            leadership.token(),
            late.as_secs_f64()
        ));
        let spec = RunSpec {
            env: vec![
                ("TENURE_SLOT".into(), ledger::rfc3339(slot)),
                ("TENURE_RUN_ID".into(), open.run_id.clone()),
                ("TENURE_ATTEMPT".into(), open.attempt.to_string()),
            ],
            max_runtime: job.max_runtime,
        };
        let ran = supervise::run_child(&job.run, leadership, &spec, signals, log).await;
        let now = Utc::now();
        let (state, exit) = match ran {
            Ran::Exited(st) => {
                let code = status_code(st);
                let state = if code == 0 {
                    State::Completed
                } else {
                    State::Failed
                };
                (state, Some(code))
            }
            Ran::TimedOut(st) => (State::TimedOut, st.map(status_code)),
            Ran::CannotStart(e) => {
                log(&format!("cannot start the command: {e}"));
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    127
                } else {
                    126
                };
                (State::Failed, Some(code))
            }
            Ran::Lost(_) => {
                self.last_word(ledger, "lost leadership").await;
                return Err(Stop::Lost("lost leadership while the command ran".into()));
            }
            Ran::Signalled(sig) => {
                let why = format!("the runner got {}", supervise::signal_name(sig));
                self.last_word(ledger, &why).await;
                return Err(Stop::Signal(sig));
            }
        };
        ledger.close(state, exit, now);
        self.record(ledger, Change::Decided).await?;
        self.metrics.decided(state, 1);
        log(&format!(
            "slot {} (run id {}): recorded {} (exit {})",
            ledger::rfc3339(slot),
            open.run_id,
            state.name(),
            exit.map_or("-".into(), |c| c.to_string())
        ));
        Ok(())
    }

    /// A holder whose command was stopped without an outcome notes that on its claim (which
    /// stays open for the next leader); the store refuses it if another holder leads by now.
    async fn last_word(&mut self, ledger: &mut Ledger, why: &str) {
        ledger.note_stopped(why, Utc::now());
        let bytes = ledger.encode();
        let put = self.leadership.fenced_put(&self.key, &bytes);
        match tokio::time::timeout(LAST_WORD, put).await {
            Ok(Ok(_)) => {
                self.events.slot(Change::Stopped, ledger);
                (self.log)(
                    "noted on the claim that its command was stopped; the next leader takes it \
                     up",
                )
            }
            Ok(Err(e)) => self.refused(&e),
            Err(_) => (self.log)("no answer from the ledger; the next leader takes the claim up"),
        }
    }

    /// The ledger as the store has it now (a linearizable read), retried while the backend
    /// cannot answer and this process still leads.
    async fn read(&self) -> Result<Option<Ledger>, Stop> {
        let election = &self.job.run.election;
        loop {
            match history(self.client, election).await {
                Ok(l) => return Ok(l),
                Err(Error::Backend(m)) if m.starts_with("the ledger") => {
                    return Err(Stop::Failed(Error::Backend(format!(
                        "{m} (key {})",
                        self.key
                    ))))
                }
                Err(e) if passes(&e) && self.leadership.is_valid() => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) if passes(&e) => return Err(Stop::Lost(e.to_string())),
                Err(e) => return Err(Stop::Failed(e)),
            }
        }
    }

    /// [`Lead::write`], then the event of `change`.
    async fn record(&mut self, ledger: &Ledger, change: Change) -> Result<(), Stop> {
        self.write(ledger).await?;
        self.events.slot(change, ledger);
        Ok(())
    }

    /// The store refused this holder's record: counted, logged, an event.
    fn refused(&mut self, e: &Error) {
        self.metrics.refused();
        self.events
            .refused(&self.holder, self.leadership.token(), &e.to_string());
        (self.log)(&format!("the ledger refused this holder's record ({e})"));
    }

    /// Writes the ledger with this leadership's token, retried while the backend cannot
    /// answer and this process still leads. A refused token means another holder leads.
    async fn write(&mut self, ledger: &Ledger) -> Result<(), Stop> {
        let bytes = ledger.encode();
        loop {
            match self.leadership.fenced_put(&self.key, &bytes).await {
                Ok(_) => return Ok(()),
                Err(e @ (Error::StaleToken { .. } | Error::TokenNotIssued(_))) => {
                    self.refused(&e);
                    return Err(Stop::Lost(format!(
                        "the ledger refused this holder's token: {e}"
                    )));
                }
                Err(e) if passes(&e) && self.leadership.is_valid() => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) if passes(&e) => return Err(Stop::Lost(e.to_string())),
                Err(e) => return Err(Stop::Failed(e)),
            }
        }
    }
}

/// Sleeps until the wall clock reads `at` (looking at it again every second, as it may be
/// stepped), unless leadership is lost or a signal arrives first.
async fn wait_until(
    at: chrono::DateTime<Utc>,
    leadership: &Leadership,
    signals: &mut Signals,
) -> Option<Stop> {
    loop {
        let Ok(left) = (at - Utc::now()).to_std() else {
            return None;
        };
        if left.is_zero() {
            return None;
        }
        tokio::select! {
            _ = tokio::time::sleep(left.min(CLOCK_LOOK)) => {}
            why = leadership.lost() => return Some(Stop::Lost(why.to_string())),
            sig = signals.recv() => return Some(Stop::Signal(sig)),
        }
    }
}

/// docs/CRON.md's example job, compiled with the doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/CRON.md")]
struct CronGuide;
