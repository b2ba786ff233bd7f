//! Simulated time and the drifting local clocks of nodes and clients.

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

/// A local monotonic clock that runs at a constant rate relative to true time.
///
/// `local = offset + true × rate`, with `rate = 1 + drift` and `drift` uniform in
/// `[-ρ/2, ρ/2]`, so that any two clocks differ in rate by at most ρ (the drift bound).
#[derive(Clone, Copy, Debug)]
pub struct DriftingClock {
    /// Local reading at true time 0 (clocks do not agree on the epoch).
    offset_us: f64,
    /// Local microseconds per true microsecond.
    rate: f64,
}

impl DriftingClock {
    /// A clock with a random rate within the drift bound and a random epoch.
    pub fn random(rng: &mut SimRng, drift_max: f64) -> DriftingClock {
        let drift = rng.uniform(-drift_max / 2.0, drift_max / 2.0);
        let offset_us = rng.below(1_000 * US_PER_SEC) as f64;
        DriftingClock {
            offset_us,
            rate: 1.0 + drift,
        }
    }

    /// The local reading at true time `now_us`.
    pub fn local_us(&self, now_us: SimTimeUs) -> u64 {
        (self.offset_us + now_us as f64 * self.rate).floor() as u64
    }

    /// The first true time at which the local reading is at least `local_us`.
    pub fn true_at(&self, local_us: u64) -> SimTimeUs {
        let t = ((local_us as f64 - self.offset_us) / self.rate).ceil();
        if t <= 0.0 {
            0
        } else {
            t as u64
        }
    }

    /// The true duration of `local_us` local microseconds (rounded up).
    pub fn true_duration(&self, local_us: u64) -> SimTimeUs {
        (local_us as f64 / self.rate).ceil() as u64
    }

    /// The clock's rate relative to true time.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}
