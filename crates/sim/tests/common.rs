//! Shared settings for the simulator's integration tests.

#![allow(dead_code)]

use tenure_sim::{run_seed, InjectBug, SeedReport, SimOptions};

/// Per-seed safety phase in tests: short, so that thousands of seeds fit in a debug-build
/// test run, but long enough for many elections, crashes and partitions (faults stay on).
pub const TEST_SAFETY_MS: u64 = 5_000;
/// Per-seed liveness phase in tests: the shortest the simulator accepts.
pub const TEST_LIVENESS_MS: u64 = tenure_sim::options::LIVENESS_MIN_MS;

/// Options used by the tests: five nodes, faults on, short phases.
pub fn test_options(bug: Option<InjectBug>) -> SimOptions {
    SimOptions {
        safety_ms: TEST_SAFETY_MS,
        liveness_ms: TEST_LIVENESS_MS,
        bug,
        ..SimOptions::default()
    }
}

/// Runs `seeds` on `threads` threads; returns the reports in seed order.
pub fn run_parallel(
    opts: &SimOptions,
    seeds: std::ops::Range<u64>,
    threads: usize,
) -> Vec<SeedReport> {
    let next = std::sync::atomic::AtomicU64::new(seeds.start);
    let mut reports: Vec<SeedReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed >= seeds.end {
                            break;
                        }
                        mine.push(run_seed(opts, seed));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("run_seed never panics"))
            .collect()
    });
    reports.sort_by_key(|r| r.seed);
    reports
}

/// Describes a failing seed for an assertion message.
pub fn describe(opts: &SimOptions, report: &SeedReport) -> String {
    let violations: Vec<String> = report.violations.iter().map(|v| v.to_string()).collect();
    format!(
        "seed {}: {}\n  fault mix: {}\n  reproduce: {}",
        report.seed,
        violations.join("; "),
        report.fault_mix,
        tenure_sim::reproduce_command(opts, report.seed)
    )
}
