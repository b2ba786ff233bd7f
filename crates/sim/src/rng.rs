//! The run's single source of randomness.
//!
//! Every random choice of a run (delays, faults, client behaviour, node seeds) is drawn from one
//! `ChaCha8Rng` seeded from the run seed and passed explicitly, so a seed replays exactly.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The run's random generator with the few helpers the simulator needs.
///
/// Only `rand_core` is a dependency, so the helpers are written here; they are exact enough for
/// a simulator (the bias of `below` is below 2^-64 per draw).
pub struct SimRng {
    inner: ChaCha8Rng,
}

impl SimRng {
    /// A generator seeded from the run seed.
    pub fn new(seed: u64) -> SimRng {
        SimRng {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A uniformly random u64.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A uniformly random integer in `[0, n)`; `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no value to return");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniformly random integer in `[lo, hi]`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        if hi - lo == u64::MAX {
            return self.next_u64();
        }
        lo + self.below(hi - lo + 1)
    }

    /// A uniformly random float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        // 53 random bits fill an f64 mantissa exactly.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniformly random float in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A uniformly chosen element, or `None` if `items` is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.below(items.len() as u64) as usize)
        }
    }
}
