//! The ledger of a scheduled job: one JSON document in the fenced key
//! `tenure-cron/ELECTION`, written only with the writing leader's fencing token, so that a
//! replaced leader's late record is refused by the store.
//!
//! It holds how far the schedule has been taken (`through`: every slot at or before it is
//! claimed or decided), the claim without an outcome yet (`open`), the last
//! [`RETAINED`] decided runs, and the counts since the ledger began. [`next`] decides what
//! the leader does, from the ledger, the schedule and the wall clock; it is pure, so the
//! rules are tested here one by one.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use super::slots::Schedule;

/// How many decided runs the ledger keeps (a fenced value is at most 64 KiB).
pub const RETAINED: usize = 64;
/// The ledger's format version.
const VERSION: u32 = 1;

/// Where a slot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Claimed; the command was started (perhaps more than once: `attempt`) and no outcome
    /// is recorded yet.
    Running,
    /// The command ran to its end with status 0.
    Completed,
    /// The command ran to its end with another status (or could not be started).
    Failed,
    /// The command ran longer than `--max-runtime` and was stopped.
    TimedOut,
    /// The holder stopped leading while the command ran, and `--on-interrupt skip` closed
    /// the slot without running it again.
    Interrupted,
    /// Due while nobody led, and older than the catch-up window when leadership returned.
    Missed,
}

impl State {
    /// The name `tenure cron history` prints.
    pub fn name(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Completed => "completed",
            State::Failed => "failed",
            State::TimedOut => "timed-out",
            State::Interrupted => "interrupted",
            State::Missed => "missed",
        }
    }
}

/// One slot's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The scheduled instant.
    pub slot: DateTime<Utc>,
    /// For a `missed` record standing for several slots: the last of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<DateTime<Utc>>,
    /// How many slots this record stands for (1 but for `missed` ranges).
    pub slots: u64,
    /// Where it stands.
    pub state: State,
    /// The job's idempotency key for this slot ([`run_id`]): the same in every attempt.
    pub run_id: String,
    /// The holder that last started it (its campaign value), empty if never started.
    pub holder: String,
    /// The fencing token of that holder's leadership (0 if never started).
    pub token: u64,
    /// How many times the command was started for this slot.
    pub attempt: u32,
    /// When the last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<DateTime<Utc>>,
    /// When the outcome was recorded (or the last attempt was seen stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<DateTime<Utc>>,
    /// The command's exit code (128 + N when killed by signal N).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<u8>,
    /// Why the last attempt stopped without an outcome (lost leadership, a signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// Counts since the ledger began.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Slots decided `completed`.
    pub completed: u64,
    /// Slots decided `failed`.
    pub failed: u64,
    /// Slots decided `timed-out`.
    pub timed_out: u64,
    /// Slots decided `interrupted`.
    pub interrupted: u64,
    /// Slots decided `missed`.
    pub missed: u64,
    /// Attempts after the first (a claim rerun by the next holder).
    pub reruns: u64,
}

/// The ledger (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Format version.
    pub version: u32,
    /// Every slot at or before this instant is claimed or decided; the next slot is the
    /// schedule's first one after it.
    pub through: DateTime<Utc>,
    /// The claim without an outcome, if any.
    pub open: Option<Run>,
    /// Decided runs, oldest first, at most [`RETAINED`].
    pub runs: Vec<Run>,
    /// Counts since the ledger began.
    pub counts: Counts,
}

/// What `--on-interrupt` says to do with a slot whose holder stopped leading while its
/// command ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInterrupt {
    /// Run it again, with the same run id (the default).
    Retry,
    /// Record it `interrupted` and go on to the next slot.
    Skip,
}

/// What the leader does next ([`next`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run the open claim's slot again (its holder stopped leading; `retry`).
    Rerun(DateTime<Utc>),
    /// Close the open claim as `interrupted` (`skip`).
    Interrupt,
    /// Record `count` slots from `first` to `last` missed: they are older than the
    /// catch-up window.
    Miss {
        /// The first missed slot.
        first: DateTime<Utc>,
        /// The last missed slot.
        last: DateTime<Utc>,
        /// How many.
        count: u64,
    },
    /// Claim this slot and run it now (it is due, and within the catch-up window).
    Run(DateTime<Utc>),
    /// Nothing is due; the next slot is at this instant.
    Wait(DateTime<Utc>),
    /// The schedule names no more instants.
    Done,
}

/// The run id of `election`'s slot `slot`: `ELECTION/SLOT` with the slot in RFC 3339 UTC.
pub fn run_id(election: &str, slot: DateTime<Utc>) -> String {
    format!("{election}/{}", rfc3339(slot))
}

/// An instant as `TENURE_SLOT` has it: RFC 3339, UTC, whole seconds unless it has a
/// fraction.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The most slots [`next`] counts in one `Miss` (more are recorded by the next call).
const MISS_BATCH: u64 = 100_000;

/// What to do next, given the ledger, the schedule, the wall clock `now`, the catch-up
/// window (`None`: none, a slot runs only when it is due now) and `--on-interrupt`.
///
/// - An open claim comes first: it was started by a holder that no longer leads (the
///   caller leads now, and its own claims are never left open while it leads): `Rerun` or
///   `Interrupt`.
/// - Then slots after `through`, in order: those older than `now − catch_up` are `Miss`ed
///   (as one range), the first one at or before `now` is `Run`, else `Wait` for the next.
///
/// With catch-up `None`, a slot is still run when it is at most [`ON_TIME`] late: a leader
/// that wakes a few milliseconds after the instant has not missed it.
pub fn next(
    ledger: &Ledger,
    schedule: &Schedule,
    now: DateTime<Utc>,
    catch_up: Option<Duration>,
    on_interrupt: OnInterrupt,
) -> Next {
    if let Some(open) = &ledger.open {
        return match on_interrupt {
            OnInterrupt::Retry => Next::Rerun(open.slot),
            OnInterrupt::Skip => Next::Interrupt,
        };
    }
    let window = catch_up.unwrap_or(ON_TIME);
    let oldest = now - chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    let Some(first) = schedule.next_after(ledger.through) else {
        return Next::Done;
    };
    if first > now {
        return Next::Wait(first);
    }
    if first >= oldest {
        return Next::Run(first);
    }
    let (mut last, mut count) = (first, 1);
    while count < MISS_BATCH {
        match schedule.next_after(last) {
            Some(s) if s < oldest => {
                last = s;
                count += 1;
            }
            _ => break,
        }
    }
    Next::Miss { first, last, count }
}

/// How late a slot may start and still count as on time when there is no catch-up window.
pub const ON_TIME: Duration = Duration::from_secs(1);

impl Ledger {
    /// A new ledger: nothing owed before `since` (the first leader's clock).
    pub fn new(since: DateTime<Utc>) -> Ledger {
        Ledger {
            version: VERSION,
            through: since,
            open: None,
            runs: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// Parses a stored ledger; the error says what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Ledger, String> {
        let l: Ledger = serde_json::from_slice(bytes).map_err(|e| format!("the ledger: {e}"))?;
        if l.version != VERSION {
            return Err(format!(
                "the ledger has format version {}; this tenure reads {VERSION}",
                l.version
            ));
        }
        Ok(l)
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a ledger serializes")
    }

    /// Claims `slot` for an attempt by `holder` with `token` at `now`: the open claim (a
    /// rerun of the same slot keeps its run id and counts the attempt).
    pub fn claim(
        &mut self,
        election: &str,
        slot: DateTime<Utc>,
        holder: &str,
        token: u64,
        now: DateTime<Utc>,
    ) {
        let attempt = match &self.open {
            Some(o) if o.slot == slot => {
                self.counts.reruns += 1;
                o.attempt + 1
            }
            _ => 1,
        };
        self.through = self.through.max(slot);
        self.open = Some(Run {
            slot,
            through: None,
            slots: 1,
            state: State::Running,
            run_id: run_id(election, slot),
            holder: holder.to_string(),
            token,
            attempt,
            start: Some(now),
            end: None,
            exit: None,
            stopped: None,
        });
    }

    /// Notes on the open claim that its attempt stopped without an outcome (it stays open).
    pub fn note_stopped(&mut self, why: &str, now: DateTime<Utc>) {
        if let Some(o) = &mut self.open {
            o.stopped = Some(why.to_string());
            o.end = Some(now);
        }
    }

    /// Decides the open claim: `state` with the command's `exit`, at `now`.
    pub fn close(&mut self, state: State, exit: Option<u8>, now: DateTime<Utc>) {
        if let Some(mut o) = self.open.take() {
            o.state = state;
            o.exit = exit;
            o.end = Some(now);
            if state == State::Interrupted {
                o.stopped
                    .get_or_insert_with(|| "holder stopped leading".into());
            }
            self.count(state, 1);
            self.push(o);
        }
    }

    /// Records `count` slots from `first` to `last` missed.
    pub fn miss(&mut self, election: &str, first: DateTime<Utc>, last: DateTime<Utc>, count: u64) {
        self.through = self.through.max(last);
        self.count(State::Missed, count);
        self.push(Run {
            slot: first,
            through: (count > 1).then_some(last),
            slots: count,
            state: State::Missed,
            run_id: run_id(election, first),
            holder: String::new(),
            token: 0,
            attempt: 0,
            start: None,
            end: None,
            exit: None,
            stopped: None,
        });
    }

    fn count(&mut self, state: State, n: u64) {
        let c = &mut self.counts;
        match state {
            State::Completed => c.completed += n,
            State::Failed => c.failed += n,
            State::TimedOut => c.timed_out += n,
            State::Interrupted => c.interrupted += n,
            State::Missed => c.missed += n,
            State::Running => {}
        }
    }

    fn push(&mut self, run: Run) {
        self.runs.push(run);
        if self.runs.len() > RETAINED {
            let extra = self.runs.len() - RETAINED;
            self.runs.drain(..extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn hourly() -> Schedule {
        Schedule::new("0 * * * *", "UTC").unwrap()
    }

    const H: Duration = Duration::from_secs(3600);

    #[test]
    fn nothing_is_owed_before_the_ledger_began() {
        let l = Ledger::new(utc("2026-12-07T10:30:00Z"));
        let n = next(
            &l,
            &hourly(),
            utc("2026-12-07T10:30:00Z"),
            Some(6 * H),
            OnInterrupt::Retry,
        );
        assert_eq!(n, Next::Wait(utc("2026-12-07T11:00:00Z")));
    }

    #[test]
    fn a_due_slot_runs_and_a_decided_one_never_again() {
        let mut l = Ledger::new(utc("2026-12-07T10:30:00Z"));
        let now = utc("2026-12-07T11:00:00.020Z");
        let n = next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Retry);
        assert_eq!(n, Next::Run(utc("2026-12-07T11:00:00Z")));
        l.claim("e", utc("2026-12-07T11:00:00Z"), "a", 7, now);
        l.close(State::Completed, Some(0), now);
        // The same wall clock again (a new leader, or this one): the slot is not due again.
        let n = next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Retry);
        assert_eq!(n, Next::Wait(utc("2026-12-07T12:00:00Z")));
        // A clock that went backwards does not bring it back either.
        let n = next(
            &l,
            &hourly(),
            utc("2026-12-07T09:00:00Z"),
            Some(6 * H),
            OnInterrupt::Retry,
        );
        assert_eq!(n, Next::Wait(utc("2026-12-07T12:00:00Z")));
        assert_eq!(l.counts.completed, 1);
        assert_eq!(l.runs[0].run_id, "e/2026-12-07T11:00:00Z");
    }

    #[test]
    fn an_open_claim_is_rerun_with_its_run_id_or_closed_interrupted() {
        let mut l = Ledger::new(utc("2026-12-07T10:30:00Z"));
        let slot = utc("2026-12-07T11:00:00Z");
        l.claim("e", slot, "a", 7, utc("2026-12-07T11:00:00Z"));
        l.note_stopped("lost leadership", utc("2026-12-07T11:00:05Z"));
        let now = utc("2026-12-07T11:30:00Z");
        assert_eq!(
            next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Retry),
            Next::Rerun(slot)
        );
        assert_eq!(
            next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Skip),
            Next::Interrupt
        );
        let mut skipped = l.clone();
        skipped.close(State::Interrupted, None, now);
        assert_eq!(skipped.counts.interrupted, 1);
        assert_eq!(
            next(&skipped, &hourly(), now, Some(6 * H), OnInterrupt::Skip),
            Next::Wait(utc("2026-12-07T12:00:00Z"))
        );
        l.claim("e", slot, "b", 9, now);
        let open = l.open.clone().unwrap();
        assert_eq!(
            (open.attempt, open.token, open.holder.as_str()),
            (2, 9, "b")
        );
        assert_eq!(open.run_id, "e/2026-12-07T11:00:00Z");
        assert_eq!(l.counts.reruns, 1);
    }

    #[test]
    fn slots_missed_while_nobody_led_run_in_order_within_the_window() {
        let l = Ledger::new(utc("2026-12-07T00:30:00Z"));
        // Nobody led from 00:30 to 09:10; the window is 6 h: 01:00 … 03:00 are missed.
        let now = utc("2026-12-07T09:10:00Z");
        let n = next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Retry);
        assert_eq!(
            n,
            Next::Miss {
                first: utc("2026-12-07T01:00:00Z"),
                last: utc("2026-12-07T03:00:00Z"),
                count: 3
            }
        );
        let mut l = l;
        l.miss(
            "e",
            utc("2026-12-07T01:00:00Z"),
            utc("2026-12-07T03:00:00Z"),
            3,
        );
        // Then 04:00, 05:00, … 09:00 in order.
        let mut ran = Vec::new();
        loop {
            match next(&l, &hourly(), now, Some(6 * H), OnInterrupt::Retry) {
                Next::Run(s) => {
                    l.claim("e", s, "a", 3, now);
                    l.close(State::Completed, Some(0), now);
                    ran.push(s.format("%H").to_string());
                }
                Next::Wait(t) => {
                    assert_eq!(t, utc("2026-12-07T10:00:00Z"));
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ran, ["04", "05", "06", "07", "08", "09"]);
        assert_eq!((l.counts.missed, l.counts.completed), (3, 6));
    }

    #[test]
    fn without_catch_up_only_a_slot_due_now_runs() {
        let l = Ledger::new(utc("2026-12-07T00:30:00Z"));
        let n = next(
            &l,
            &hourly(),
            utc("2026-12-07T01:00:00.500Z"),
            None,
            OnInterrupt::Retry,
        );
        assert_eq!(n, Next::Run(utc("2026-12-07T01:00:00Z")));
        let n = next(
            &l,
            &hourly(),
            utc("2026-12-07T01:00:02Z"),
            None,
            OnInterrupt::Retry,
        );
        assert!(matches!(n, Next::Miss { count: 1, .. }), "{n:?}");
    }

    #[test]
    fn the_ledger_round_trips_and_keeps_only_recent_runs() {
        let mut l = Ledger::new(utc("2026-12-07T00:00:00Z"));
        for h in 1..=(RETAINED as u32 + 5) {
            let slot = utc("2026-12-07T00:00:00Z") + chrono::Duration::hours(h.into());
            l.claim("e", slot, "a", 1, slot);
            l.close(State::Completed, Some(0), slot);
        }
        assert_eq!(l.runs.len(), RETAINED);
        assert_eq!(l.counts.completed, RETAINED as u64 + 5);
        let bytes = l.encode();
        assert!(bytes.len() < 64 * 1024, "{} bytes", bytes.len());
        assert_eq!(Ledger::decode(&bytes).unwrap(), l);
        assert!(Ledger::decode(b"{}").unwrap_err().contains("ledger"));
    }
}
