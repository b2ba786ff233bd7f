//! Two thousand seeds with faults on and no injected bug: no checker may fire.
//!
//! Each seed runs a 5 s safety phase (faults on: partitions, crashes, torn writes, pauses,
//! membership changes, transfers, frozen, silent and exiting clients) and a 3 s liveness phase, instead
//! of the CLI's 30 s + 5 s, so that the whole test stays well under two minutes in a debug
//! build. The release-mode CLI runs the long version (`tenure sim --seeds 1..10000`).

mod common;

use common::{describe, run_parallel, test_options};

/// Seeds in this test.
const SEEDS: u64 = 2_000;

#[test]
fn two_thousand_seeds_with_faults_pass_every_checker() {
    let opts = test_options(None);
    assert!(opts.faults);
    let started = std::time::Instant::now();
    let reports = run_parallel(&opts, 1..SEEDS + 1, 2);
    let elapsed = started.elapsed();
    assert_eq!(reports.len() as u64, SEEDS);
    let failures: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .map(|r| describe(&opts, r))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {SEEDS} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // The faults must actually have happened.
    let mut total = tenure_sim::Stats::default();
    for r in &reports {
        total.add(&r.stats);
    }
    for kind in [
        "crash",
        "crash-torn-write",
        "crash-after-vote",
        "partition",
        "pause",
        "membership-change",
        "client-freeze",
        "forged-reset",
        "client-crash",
        "scenario-late-bind",
    ] {
        assert!(
            total.faults.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} fault in {SEEDS} seeds: {:?}",
            total.faults
        );
    }
    assert!(
        total.stale_writes_rejected > 0,
        "no stale write was ever rejected"
    );
    assert!(total.sessions_expired > 0, "no session ever expired");
    assert!(
        total.sessions_released > 0,
        "no fate-sharing session was ever released by its stream's close"
    );
    assert!(
        total.leaders_gone > 0,
        "no follower ever learned that its leader's process was gone (fast election)"
    );
    let simulated_s: u64 = reports.iter().map(|r| r.simulated_us).sum::<u64>() / 1_000_000;
    eprintln!(
        "{SEEDS} seeds, {simulated_s} simulated s in {:.1} s",
        elapsed.as_secs_f64()
    );
}
