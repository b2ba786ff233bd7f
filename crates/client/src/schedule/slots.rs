//! A schedule: a cron expression read in a time zone, and the instants ("slots") it names.
//!
//! The expression is parsed by `croner` (five fields, minute first, or six with seconds
//! first; `@daily` and the like; `L`, `#` and `W`), the zone is an IANA name from the
//! database `chrono-tz` ships. Slots are UTC instants, strictly increasing.
//!
//! Daylight-saving changes, as croner defines them for a zone that has them:
//! - **a local time that does not exist** (clocks jump from 02:00 to 03:00): a job at a
//!   fixed time (`30 2 * * *`) runs at the first instant after the gap on that day (03:00);
//!   an interval job (`*/15 * * * *`) has no slots inside the gap;
//! - **a local time that occurs twice** (clocks fall back from 03:00 to 02:00): a job at a
//!   fixed time runs once, at the first occurrence; an interval job has a slot at every
//!   matching instant, in both passes.
//!
//! Each slot is a distinct UTC instant, so the ledger never confuses the two passes of a
//! repeated hour.

use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// A cron expression in a time zone.
#[derive(Clone)]
pub struct Schedule {
    cron: Cron,
    expression: String,
    zone: Tz,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schedule({:?} in {})", self.expression, self.zone)
    }
}

impl Schedule {
    /// Parses `expression` (5 fields, or 6 with seconds first) for the IANA zone `zone`
    /// (`UTC`, `Europe/Berlin`, …). The error names what is wrong.
    pub fn new(expression: &str, zone: &str) -> Result<Schedule, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| format!("schedule {expression:?}: {e}"))?;
        let zone: Tz = zone.parse().map_err(|_| {
            format!("time zone {zone:?}: not an IANA zone name (such as UTC or Europe/Berlin)")
        })?;
        let s = Schedule {
            cron,
            expression: expression.trim().to_string(),
            zone,
        };
        // An expression that never matches (`0 0 31 2 *`) is refused here, not at run time.
        s.next_after(Utc::now())
            .ok_or_else(|| format!("schedule {expression:?}: names no instant from now on"))?;
        Ok(s)
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone's IANA name.
    pub fn zone(&self) -> &str {
        self.zone.name()
    }

    /// The first slot strictly after `t`; `None` if there is none (in croner's range).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.find(t, false)
    }

    /// The slot at or after `t`.
    pub fn at_or_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.find(t, true)
    }

    fn find(&self, t: DateTime<Utc>, inclusive: bool) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.zone);
        self.cron
            .find_next_occurrence(&local, inclusive)
            .ok()
            .map(|d| d.with_timezone(&Utc))
    }

    /// The next `n` slots after `t`.
    pub fn upcoming(&self, t: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(n);
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(s) => {
                    out.push(s);
                    at = s;
                }
                None => break,
            }
        }
        out
    }

    /// `t` as wall-clock time in the schedule's zone (for logs and `tenure cron next`).
    pub fn local(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.zone)
            .format("%Y-%m-%d %H:%M:%S %Z")
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn slots(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        Schedule::new(expr, zone)
            .unwrap()
            .upcoming(utc(from), n)
            .into_iter()
            .map(|t| t.to_rfc3339())
            .collect()
    }

    #[test]
    fn nightly_in_berlin_is_01_utc_in_winter_and_00_in_summer() {
        assert_eq!(
            slots("0 2 * * *", "Europe/Berlin", "2026-12-07T12:00:00Z", 2),
            ["2026-12-08T01:00:00+00:00", "2026-12-09T01:00:00+00:00"]
        );
        assert_eq!(
            slots("0 2 * * *", "Europe/Berlin", "2026-07-01T12:00:00Z", 1),
            ["2026-07-02T00:00:00+00:00"]
        );
    }

    #[test]
    fn a_fixed_time_in_the_spring_gap_runs_right_after_it() {
        // 2027-03-28: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 does not exist.
        assert_eq!(
            slots("30 2 * * *", "Europe/Berlin", "2027-03-27T12:00:00Z", 2),
            // 03:00 CEST = 01:00 UTC, then 02:30 CEST the next day.
            ["2027-03-28T01:00:00+00:00", "2027-03-29T00:30:00+00:00"]
        );
    }

    #[test]
    fn a_fixed_time_in_the_autumn_repeat_runs_once() {
        // 2026-10-25: Berlin falls back from 03:00 CEST to 02:00 CET; 02:30 happens twice.
        assert_eq!(
            slots("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
            // The first 02:30 (CEST, 00:30 UTC), then 02:30 CET the next day.
            ["2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
        );
    }

    #[test]
    fn an_interval_job_runs_in_both_passes_of_the_repeated_hour() {
        let s = slots("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 4);
        // 02:00 CEST (00:00 UTC), 02:00 CET (01:00 UTC): two distinct instants.
        assert_eq!(
            s,
            [
                "2026-10-25T00:00:00+00:00",
                "2026-10-25T01:00:00+00:00",
                "2026-10-25T02:00:00+00:00",
                "2026-10-25T03:00:00+00:00"
            ]
        );
    }

    #[test]
    fn seconds_are_optional_and_slots_strictly_increase() {
        let s = Schedule::new("*/1 * * * * *", "UTC").unwrap();
        let t = utc("2026-12-07T12:00:00.500Z");
        let up = s.upcoming(t, 3);
        assert_eq!(up[0], utc("2026-12-07T12:00:01Z"));
        assert!(up.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(s.at_or_after(utc("2026-12-07T12:00:01Z")), Some(up[0]));
    }

    #[test]
    fn bad_input_is_named() {
        let e = Schedule::new("61 * * * *", "UTC").unwrap_err();
        assert!(e.contains("61 * * * *"), "{e}");
        let e = Schedule::new("0 2 * * *", "Mars/Olympus").unwrap_err();
        assert!(e.contains("Mars/Olympus") && e.contains("IANA"), "{e}");
        let e = Schedule::new("0 0 31 2 *", "UTC").unwrap_err();
        assert!(e.contains("no instant"), "{e}");
        assert!(Schedule::new("", "UTC").is_err());
    }
}
