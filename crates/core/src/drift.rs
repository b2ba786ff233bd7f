//! Clock-rate drift, as one integer type, and DESIGN.md rule 4's holder margin.
//!
//! Rule 4: a holder treats its leadership as valid only until `send time of its last
//! acknowledged keepalive + TTL − margin` on its own monotonic clock, while the cluster never
//! expires the session before `receive time + TTL` on its own. If the two clocks' rates
//! differ by less than the drift bound `d`, then over a TTL they disagree by less than
//! `d × TTL` each way; the margin takes twice that (either clock may be the fast one) plus a
//! fixed allowance for the holder's own scheduling (the time between deciding "still valid"
//! and acting on it). Every lease computation in the product — the client library, the demo,
//! the simulator's clients, the nemesis checkers — calls [`holder_margin`], so there is one
//! formula and no floating point in it.

use std::fmt;
// `core::time::Duration` is a plain value (the very same type as `std::time::Duration`); it
// reads no clock, which is what the purity test's ban on `std::time` keeps out of the core.
use core::time::Duration;

/// A bound on the relative rate difference between two clocks, in parts per million
/// (10_000 = 1 %).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct DriftPpm(pub u32);

impl DriftPpm {
    /// The documented default bound: 1 %.
    pub const DEFAULT: DriftPpm = DriftPpm(10_000);
    /// No drift at all (a simulation with perfect clocks).
    pub const ZERO: DriftPpm = DriftPpm(0);
    /// The most this product accepts: 10 %. Beyond that a lease is not a useful promise.
    pub const MAX: DriftPpm = DriftPpm(100_000);

    /// A bound of `percent` per cent.
    pub const fn from_percent(percent: u32) -> DriftPpm {
        DriftPpm(percent * 10_000)
    }

    /// How far two clocks with this bound can move apart over `micros` of one of them,
    /// rounded up: `⌈micros × ppm / 10⁶⌉`.
    pub const fn skew_over_us(self, micros: u64) -> u64 {
        let product = micros as u128 * self.0 as u128;
        product.div_ceil(1_000_000) as u64
    }

    /// [`DriftPpm::skew_over_us`] for a count of ticks, rounded up to whole ticks.
    pub const fn skew_over_ticks(self, ticks: u64) -> u64 {
        self.skew_over_us(ticks)
    }
}

impl Default for DriftPpm {
    fn default() -> DriftPpm {
        DriftPpm::DEFAULT
    }
}

impl fmt::Display for DriftPpm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ppm", self.0)
    }
}

/// The holder's margin of rule 4 in microseconds: `2 × ⌈ttl × drift⌉ + fixed` (saturating).
pub const fn holder_margin_us(ttl_us: u64, drift: DriftPpm, fixed_us: u64) -> u64 {
    drift
        .skew_over_us(ttl_us)
        .saturating_mul(2)
        .saturating_add(fixed_us)
}

/// The fixed part the client library adds for its own scheduling: 10 ms.
pub const CLIENT_SCHEDULING_ALLOWANCE: Duration = Duration::from_millis(10);

/// [`holder_margin_us`] on durations (microsecond resolution, rounded up).
pub fn holder_margin(ttl: Duration, drift: DriftPpm, fixed: Duration) -> Duration {
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    Duration::from_micros(holder_margin_us(us(ttl), drift, us(fixed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_percent_of_ten_seconds_twice_plus_the_allowance() {
        let m = holder_margin(
            Duration::from_secs(10),
            DriftPpm::DEFAULT,
            CLIENT_SCHEDULING_ALLOWANCE,
        );
        assert_eq!(m, Duration::from_millis(210));
    }

    #[test]
    fn skew_rounds_up_and_never_overflows() {
        assert_eq!(DriftPpm(1).skew_over_us(1), 1);
        assert_eq!(DriftPpm(10_000).skew_over_us(100), 1);
        assert_eq!(DriftPpm(10_000).skew_over_us(0), 0);
        assert_eq!(DriftPpm::ZERO.skew_over_us(u64::MAX), 0);
        assert_eq!(
            DriftPpm(1_000_000).skew_over_us(u64::MAX),
            u64::MAX,
            "u128 arithmetic: no overflow at the extremes"
        );
    }

    #[test]
    fn percent_and_ppm_agree() {
        assert_eq!(DriftPpm::from_percent(1), DriftPpm::DEFAULT);
        assert_eq!(DriftPpm::from_percent(10), DriftPpm::MAX);
    }
}
