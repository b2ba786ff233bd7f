//! Simulated time and the drifting local clocks of nodes and clients.

use tenure_core::drift::DriftPpm;

use crate::rng::SimRng;

/// True simulated time, in microseconds since the start of the run.
pub type SimTimeUs = u64;

/// Microseconds per millisecond.
pub const US_PER_MS: u64 = 1_000;
/// Microseconds per second.
pub const US_PER_SEC: u64 = 1_000_000;
/// The nominal length of one node tick (10 ms), as DESIGN's timing assumes.
pub const TICK_NOMINAL_US: u64 = 10 * US_PER_MS;

/// Formats a simulated time as seconds with microsecond precision, e.g. `12.034500s`.
pub fn fmt_time(t: SimTimeUs) -> String {
    format!("{}.{:06}s", t / US_PER_SEC, t % US_PER_SEC)
}

/// Parts per million in one.
const PPM: u128 = 1_000_000;

/// A clock's rate relative to true time, as its offset from 1 in parts per million (the
/// drift bound's unit): `rate = 1 + ppm / 10⁶`. Integer, so that every simulated clock
/// reading is exact and the same on every machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate(i64);

impl Rate {
    /// A rate uniform in `[−ρ/2, ρ/2]` (ρ/2 rounded down), so that any two clocks differ in
    /// rate by at most ρ.
    pub fn uniform(rng: &mut SimRng, drift_max: DriftPpm) -> Rate {
        let half = Rate::half_bound(drift_max);
        Rate(rng.between(0, 2 * half as u64) as i64 - half)
    }

    /// The fastest (`fast`) or slowest rate the bound allows: `±ρ/2`.
    pub fn at_bound(drift_max: DriftPpm, fast: bool) -> Rate {
        let half = Rate::half_bound(drift_max);
        Rate(if fast { half } else { -half })
    }

    /// ρ/2 in ppm, rounded down (never past the bound).
    fn half_bound(drift_max: DriftPpm) -> i64 {
        i64::from(drift_max.0 / 2)
    }

    /// Local units per 10⁶ true ones (`10⁶ + ppm`, positive: ρ is at most 10 %).
    fn per_million(self) -> u128 {
        (PPM as i64 + self.0) as u128
    }

    /// The true length of one tick of a node clock at this rate, rounded to the nearest
    /// microsecond: `10 ms × rate`.
    pub fn tick_period_us(self) -> u64 {
        ((u128::from(TICK_NOMINAL_US) * self.per_million() + PPM / 2) / PPM) as u64
    }
}

/// The longest true tick any node clock within the bound has, rounded up.
pub fn slowest_tick_us(drift_max: DriftPpm) -> u64 {
    let slow = Rate::at_bound(drift_max, true);
    (u128::from(TICK_NOMINAL_US) * slow.per_million()).div_ceil(PPM) as u64
}

/// A local monotonic clock that runs at a constant rate relative to true time.
///
/// `local = offset + ⌊true × rate⌋`, with `rate = 1 + drift` and `drift` uniform in
/// `[-ρ/2, ρ/2]`, so that any two clocks differ in rate by at most ρ (the drift bound).
/// All in integers: `rate` is a [`Rate`].
#[derive(Clone, Copy, Debug)]
pub struct DriftingClock {
    /// Local reading at true time 0 (clocks do not agree on the epoch).
    offset_us: u64,
    /// Its rate.
    rate: Rate,
}

impl DriftingClock {
    /// A clock with a random rate within the drift bound and a random epoch.
    pub fn random(rng: &mut SimRng, drift_max: DriftPpm) -> DriftingClock {
        let rate = Rate::uniform(rng, drift_max);
        let offset_us = rng.below(1_000 * US_PER_SEC);
        DriftingClock { offset_us, rate }
    }

    /// The local reading at true time `now_us`.
    pub fn local_us(&self, now_us: SimTimeUs) -> u64 {
        let elapsed = u128::from(now_us) * self.rate.per_million() / PPM;
        self.offset_us + elapsed as u64
    }

    /// The first true time at which the local reading is at least `local_us`.
    pub fn true_at(&self, local_us: u64) -> SimTimeUs {
        // ⌊t × R / 10⁶⌋ ≥ k exactly when t × R ≥ k × 10⁶.
        let k = u128::from(local_us.saturating_sub(self.offset_us));
        (k * PPM).div_ceil(self.rate.per_million()) as u64
    }

    /// The true duration of `local_us` local microseconds (rounded up).
    pub fn true_duration(&self, local_us: u64) -> SimTimeUs {
        (u128::from(local_us) * PPM).div_ceil(self.rate.per_million()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_at_is_the_first_true_time_reaching_a_local_reading() {
        let mut rng = SimRng::new(7);
        for _ in 0..1_000 {
            let clock = DriftingClock::random(&mut rng, DriftPpm(90_000));
            let local = clock.local_us(rng.below(100 * US_PER_SEC)) + rng.below(1_000);
            let t = clock.true_at(local);
            assert!(
                clock.local_us(t) >= local,
                "{clock:?} at {t} is before {local}"
            );
            assert!(
                t == 0 || clock.local_us(t - 1) < local,
                "{clock:?}: {t} is not the first"
            );
            let d = rng.below(10 * US_PER_SEC);
            let true_d = clock.true_duration(d);
            assert!(
                clock.local_us(t + true_d) >= local + d,
                "{clock:?}: {d} local in {true_d}"
            );
        }
    }

    #[test]
    fn tick_periods_stay_within_the_bound() {
        let bound = DriftPpm(99_000);
        assert_eq!(Rate::at_bound(bound, true).tick_period_us(), 10_495);
        assert_eq!(Rate::at_bound(bound, false).tick_period_us(), 9_505);
        assert_eq!(slowest_tick_us(bound), 10_495);
        assert_eq!(slowest_tick_us(DriftPpm::ZERO), TICK_NOMINAL_US);
        assert_eq!(
            slowest_tick_us(DriftPpm(1)),
            TICK_NOMINAL_US,
            "ρ/2 rounds down"
        );
        assert_eq!(slowest_tick_us(DriftPpm(200)), TICK_NOMINAL_US + 1);
        assert_eq!(
            slowest_tick_us(DriftPpm(202)),
            TICK_NOMINAL_US + 2,
            "rounded up"
        );
        assert_eq!(Rate::uniform(&mut SimRng::new(1), DriftPpm::ZERO), Rate(0));
    }
}
