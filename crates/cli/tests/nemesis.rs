//! `tenure nemesis` against real `tenure server` processes of this very binary.
//!
//! - A short run (3 nodes, under two minutes, every fault kind at least once) that must pass.
//!   Until the server answers a write that was committed behind an InstallSnapshot with its
//!   real outcome, this run can fail on exactly that (the targeted fault provokes it); the
//!   failure prints the checker's explanation and the replay command.
//! - The targeted fault against servers started with
//!   `TENURE_INJECT_BUG=not-leader-after-snapshot`: the nemesis must report a
//!   linearizability violation (the checker is tested against the bug it exists for).

use std::process::Command;
use std::sync::Mutex;

/// One cluster at a time: the runs are timing-sensitive and the machine may be small.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn nemesis(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("nemesis")
        .args(args)
        .output()
        .expect("run tenure nemesis");
    let text = format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The fault kinds named in the report's `faults (N): kind n, …` line.
fn fault_kinds(report: &str) -> Vec<String> {
    report
        .lines()
        .find(|l| l.starts_with("faults ("))
        .and_then(|l| l.split_once("): "))
        .map(|(_, list)| {
            list.split(", ")
                .filter_map(|e| e.split_whitespace().next())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_short_run_with_every_fault_kind_passes_every_checker() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = std::time::Instant::now();
    // With TLS and client authentication, as a cluster should run: the faults then also
    // reach what clients and peers meet first (handshakes, authentication at the headers,
    // the unauthenticated pool, reconnections after kills).
    let (ok, report) = nemesis(&[
        "--seed",
        "7",
        "--nodes",
        "3",
        "--duration",
        "50",
        "--snapshot-threshold-entries",
        "20",
        "--tls",
    ]);
    assert!(report.contains(", TLS"), "{report}");
    let kinds = fault_kinds(&report);
    for k in [
        "pause",
        "kill",
        "kill-all",
        "isolate",
        "bridge",
        "split",
        "one-way",
        "targeted",
        "transfer",
        "membership",
    ] {
        assert!(
            kinds.iter().any(|x| x == k),
            "fault kind {k} never ran (ran: {kinds:?})\n{report}"
        );
    }
    assert!(
        ok,
        "the nemesis found a violation (see the verdicts and the replay command):\n{report}"
    );
    assert!(report.contains("PASSED"), "{report}");
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(120),
        "the short run took {took:?}"
    );
}

#[test]
fn the_targeted_fault_catches_a_write_answered_not_leader_after_it_committed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (ok, report) = nemesis(&[
        "--seed",
        "3",
        "--nodes",
        "3",
        "--duration",
        "30",
        "--faults",
        "targeted",
        "--snapshot-threshold-entries",
        "20",
        "--inject-bug",
        "not-leader-after-snapshot",
    ]);
    assert!(!ok, "the nemesis missed the injected bug:\n{report}");
    assert!(
        report
            .lines()
            .any(|l| l.trim_start().starts_with("linearizability") && l.contains("VIOLATION")),
        "no linearizability violation reported:\n{report}"
    );
    assert!(
        report.contains("was answered `not-leader`"),
        "the explanation does not name the wrong outcome:\n{report}"
    );
    assert!(
        report.contains("replay with: tenure nemesis --seed 3"),
        "{report}"
    );
}

/// Servers whose driver thread dies a few seconds after they start (`driver-dies`, the death
/// a snapshot race once caused): each node exits, and the nemesis's `processes` verdict must
/// report it, since nothing else in the run kills them.
#[test]
fn a_node_whose_driver_dies_is_reported_by_the_processes_verdict() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (ok, report) = nemesis(&[
        "--seed",
        "5",
        "--nodes",
        "3",
        "--duration",
        "10",
        "--faults",
        "pause",
        "--inject-bug",
        "driver-dies",
    ]);
    assert!(!ok, "a run whose servers' drivers die passed:\n{report}");
    let verdict = report
        .lines()
        .find(|l| l.trim_start().starts_with("processes"))
        .unwrap_or_else(|| panic!("no processes verdict:\n{report}"));
    assert!(
        verdict.contains("VIOLATION"),
        "the processes verdict missed the deaths: {verdict}\n{report}"
    );
    assert!(
        report.contains("exited by itself"),
        "the report names the node that exited:\n{report}"
    );
}

/// A number in the report: the first `N` after `before` in the line that contains it.
fn number_after(report: &str, before: &str) -> u64 {
    report
        .lines()
        .find_map(|l| l.split_once(before))
        .and_then(|(_, rest)| {
            rest.split(|c: char| !c.is_ascii_digit())
                .find(|s| !s.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {before:?} in the report:\n{report}"))
}

/// The short form of the hostile-load run: with TLS and no faults, anonymous connection,
/// body and slow-header floods against every node for the whole run, while the workload
/// holds sessions, campaigns, writes and reads. Every checker passes, `/health` answers 200
/// throughout, every unfinished body is answered at its headers, Raft leadership moves at
/// most once during the run (the final phase's own transfers are not counted), and no node
/// grows by 64 MiB or more.
#[test]
fn a_short_hostile_run_keeps_the_leader_health_and_memory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (ok, report) = nemesis(&[
        "--seed",
        "3",
        "--nodes",
        "3",
        "--duration",
        "20",
        "--no-faults",
        "--tls",
        "--hostile",
    ]);
    assert!(ok, "the hostile run failed:\n{report}");
    assert!(
        number_after(&report, "hostile load: ") > 100,
        "the attack barely ran:\n{report}"
    );
    // Each unfinished body is answered at its headers (with credentials checked after the
    // body, none would be).
    assert!(
        number_after(&report, "closed by the nodes; ") > 0,
        "no unfinished body was answered:\n{report}"
    );
    assert_eq!(
        number_after(&report, "/health: "),
        0,
        "/health failed under the flood:\n{report}"
    );
    assert!(
        number_after(&report, "leader changes: Raft ") <= 1,
        "leadership moved under the flood:\n{report}"
    );
    assert_eq!(
        number_after(&report, "leases lost: "),
        0,
        "a legitimate holder lost its lease under the flood:\n{report}"
    );
    assert!(
        number_after(&report, "node memory growth: at most ") < 64,
        "{report}"
    );
}
