//! The bounded model checker (`tenure_sim::explore`): every interleaving within the suite's
//! bound passes every check, and the checks catch bugs put back into the core, found by
//! exploring rather than by a scenario written for each.

use tenure_core::bugs::InjectedBugs;
use tenure_sim::explore::{explore, Bounds};

/// Explores `bounds` with no bug switched on: every interleaving passes every check, the
/// bound is explored in full, and it holds more than `states_min` states.
fn explores_clean(bounds: &Bounds, states_min: usize) {
    let report = explore(bounds, InjectedBugs::default());
    println!(
        "{} distinct states, {} transitions, depth {} in {:.1} s",
        report.states,
        report.transitions,
        report.depth,
        report.took.as_secs_f64()
    );
    if let Some((why, path)) = &report.violation {
        panic!("{why}\npath: {}", path.join(" → "));
    }
    assert!(!report.truncated, "the bound is explored in full");
    assert!(
        report.states > states_min,
        "the search covers the space it claims to ({} states)",
        report.states
    );
}

#[test]
fn every_interleaving_within_the_bound_passes_every_check() {
    explores_clean(&Bounds::suite(), 100_000);
}

/// Which bugs the model checker catches within a small bound, each with the check that
/// fired. A switch that the model cannot reach within it (drift, reads, streams: the
/// simulator's) is not listed.
#[test]
fn the_checks_catch_bugs_put_back_into_the_core() {
    // Within the suite's bound. Deeper runs (docs/GUARANTEES.md) reach more of the
    // switches: an unsynced vote lost in a crash, a vote without the log check.
    let cases: [(&str, InjectedBugs); 2] = [
        (
            "double-vote",
            InjectedBugs {
                double_vote: true,
                ..Default::default()
            },
        ),
        (
            "commit-without-majority",
            InjectedBugs {
                commit_without_majority: true,
                ..Default::default()
            },
        ),
    ];
    let mut missed = Vec::new();
    for (name, bugs) in cases {
        // One choice deeper than the clean run: each stops at its first violation.
        let bounds = Bounds {
            depth: 7,
            ..Bounds::suite()
        };
        let report = explore(&bounds, bugs);
        match &report.violation {
            Some((why, path)) => println!("{name}: {why} after {} choices", path.len()),
            None => missed.push(name),
        }
    }
    assert!(missed.is_empty(), "not caught: {missed:?}");
}

/// Fast election's bound: crashes, restarts, a transfer and the connection events around
/// them (a close of a live or dead peer's connection, a refused dial handed over whenever)
/// pass every check, fast election's premise included.
#[test]
fn fast_election_within_its_bound_passes_every_check() {
    explores_clean(&Bounds::fast_election(), 100_000);
}

/// A follower that drops its vote refusal when its connection to the leader closes, without
/// a refused dial, is caught by fast election's premise.
#[test]
fn a_vote_refusal_dropped_on_a_close_alone_is_caught() {
    let bugs = InjectedBugs {
        close_drops_vote_refusal: true,
        ..Default::default()
    };
    let report = explore(&Bounds::fast_election(), bugs);
    let (why, path) = report.violation.expect("caught");
    println!("{why} after {}", path.join(" → "));
    assert!(why.starts_with("fast election:"), "{why}");
}
