//! Reconnect delays: exponential backoff with jitter, as a pure helper.

use std::time::Duration;

use rand_core::RngCore;

/// Exponential backoff between `min` and `max` with "equal jitter": each delay is drawn
/// uniformly from `[base / 2, base]`, where `base` doubles per failure. The jitter keeps the
/// nodes of a cluster that lost a peer at the same moment from reconnecting in lockstep;
/// keeping half of `base` fixed keeps the delay from collapsing to zero.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    base: Duration,
}

impl Backoff {
    /// A backoff starting at `min`. Requires `min <= max` (checked by the config).
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            base: min,
        }
    }

    /// The delay before the next attempt; doubles the base for the one after.
    pub(crate) fn next_delay(&mut self, rng: &mut impl RngCore) -> Duration {
        let base = self.base;
        self.base = base.saturating_mul(2).min(self.max);
        let half = base / 2;
        let half_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = rng.next_u64() % half_nanos.saturating_add(1);
        (base - half) + Duration::from_nanos(jitter)
    }

    /// Back to the minimum, after a connection proved healthy.
    pub(crate) fn reset(&mut self) {
        self.base = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn doubles_within_bounds_and_resets() {
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(100);
        let mut backoff = Backoff::new(min, max);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut base = min;
        for _ in 0..20 {
            let delay = backoff.next_delay(&mut rng);
            assert!(
                delay >= base / 2 && delay <= base,
                "{delay:?} outside [{:?}, {base:?}]",
                base / 2
            );
            base = (base * 2).min(max);
        }
        backoff.reset();
        let delay = backoff.next_delay(&mut rng);
        assert!(delay <= min);
    }

    #[test]
    fn same_seed_same_delays() {
        let delays = |seed| {
            let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..10)
                .map(|_| backoff.next_delay(&mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(delays(7), delays(7));
        assert_ne!(delays(7), delays(8));
    }
}
