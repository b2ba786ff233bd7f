//! The dashboard's charts: once a second the server reads a few of its metrics and keeps
//! the differences in a bounded ring ([`SAMPLES_MAX`], ten minutes), whether or not a page
//! is open, so that a page opened after an incident still shows it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::metrics::{Histogram, Metrics};

/// Samples kept: ten minutes at one a second.
pub const SAMPLES_MAX: usize = 600;
/// Time between samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// One second of this node's life.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Wall-clock time in milliseconds since the Unix epoch, for the charts' axis only.
    pub time_ms: u64,
    /// Raft leader changes this node saw during the interval.
    pub leader_changes: u64,
    /// Mean commit latency of this node's proposals applied during the interval (none
    /// when there were none).
    pub commit_ms: Option<f64>,
    /// Mean `persist` (write and fsync) time during the interval.
    pub fsync_ms: Option<f64>,
    /// Keepalives acknowledged per second (only a leader acknowledges them).
    pub keepalives_per_s: f64,
}

/// What the sampler read last time, to take differences from.
#[derive(Clone, Copy, Default)]
struct Reading {
    leader_changes: u64,
    commit: (u64, Duration),
    fsync: (u64, Duration),
    keepalives: u64,
}

impl Reading {
    fn of(m: &Metrics) -> Reading {
        let h = |h: &Histogram| (h.count(), h.sum());
        Reading {
            leader_changes: m.leader_changes.load(std::sync::atomic::Ordering::Relaxed),
            commit: h(&m.commit_latency),
            fsync: h(&m.fsync_latency),
            keepalives: m.lease_renewal.count(),
        }
    }
}

fn mean_ms(now: (u64, Duration), before: (u64, Duration)) -> Option<f64> {
    let n = now.0.checked_sub(before.0).filter(|n| *n > 0)?;
    let sum = now.1.saturating_sub(before.1);
    Some(sum.as_secs_f64() * 1000.0 / n as f64)
}

/// The ring of samples.
#[derive(Clone, Default)]
pub struct Series {
    samples: Arc<Mutex<VecDeque<Sample>>>,
}

impl Series {
    /// Every sample held, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let ring = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }

    fn push(&self, sample: Sample) {
        let mut ring = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() == SAMPLES_MAX {
            ring.pop_front();
        }
        ring.push_back(sample);
    }

    /// Samples `metrics` every [`SAMPLE_INTERVAL`] until `stopped` says the node stopped.
    pub async fn run(self, metrics: Arc<Metrics>, stopped: impl Fn() -> bool) {
        let mut interval = tokio::time::interval(SAMPLE_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        let mut before = Reading::of(&metrics);
        let mut at = tokio::time::Instant::now();
        loop {
            interval.tick().await;
            if stopped() {
                return;
            }
            let now = Reading::of(&metrics);
            let elapsed = at.elapsed().as_secs_f64().max(0.001);
            at = tokio::time::Instant::now();
            self.push(sample(now, before, elapsed));
            before = now;
        }
    }
}

fn sample(now: Reading, before: Reading, elapsed_s: f64) -> Sample {
    Sample {
        time_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        leader_changes: now.leader_changes.saturating_sub(before.leader_changes),
        commit_ms: mean_ms(now.commit, before.commit),
        fsync_ms: mean_ms(now.fsync, before.fsync),
        keepalives_per_s: now.keepalives.saturating_sub(before.keepalives) as f64 / elapsed_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_holds_the_differences_and_the_ring_is_bounded() {
        let metrics = Metrics::default();
        let before = Reading::of(&metrics);
        metrics
            .leader_changes
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        metrics.fsync_latency.observe(Duration::from_millis(2));
        metrics.fsync_latency.observe(Duration::from_millis(4));
        for _ in 0..50 {
            metrics.lease_renewal.observe(Duration::from_micros(300));
        }
        let s = sample(Reading::of(&metrics), before, 0.5);
        assert_eq!(s.leader_changes, 2);
        assert_eq!(s.fsync_ms, Some(3.0));
        assert_eq!(s.commit_ms, None, "no commit, no mean");
        assert_eq!(s.keepalives_per_s, 100.0);

        let series = Series::default();
        for _ in 0..SAMPLES_MAX + 5 {
            series.push(s.clone());
        }
        assert_eq!(series.samples().len(), SAMPLES_MAX);
    }
}
