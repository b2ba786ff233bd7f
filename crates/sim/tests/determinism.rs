//! The same seed twice gives the same run: same trace hash, same counters.

mod common;

use common::test_options;
use tenure_sim::{run_seed, InjectBug};

#[test]
fn the_same_seed_replays_the_same_trace() {
    let opts = test_options(None);
    for seed in [1, 7, 4242] {
        let first = run_seed(&opts, seed);
        let second = run_seed(&opts, seed);
        assert_eq!(
            first.trace_hash, second.trace_hash,
            "seed {seed} replayed differently"
        );
        assert_eq!(
            first.stats, second.stats,
            "seed {seed} replayed differently"
        );
        assert_eq!(first.violations, second.violations);
        assert!(
            first.stats.messages_delivered > 1_000,
            "seed {seed} did almost nothing: {:?}",
            first.stats
        );
    }
}

#[test]
fn different_seeds_give_different_traces() {
    let opts = test_options(None);
    let a = run_seed(&opts, 1);
    let b = run_seed(&opts, 2);
    assert_ne!(a.trace_hash, b.trace_hash);
    assert_ne!(a.fault_mix, b.fault_mix);
}

#[test]
fn a_run_with_an_injected_bug_replays_too() {
    let opts = test_options(Some(InjectBug::DoubleVote));
    let first = run_seed(&opts, 1);
    let second = run_seed(&opts, 1);
    assert_eq!(first.trace_hash, second.trace_hash);
    assert_eq!(first.violations, second.violations);
}
