//! `tenure bench` must keep working: one trial of every scenario against tenure alone, with
//! tiny loads (`--smoke`). The numbers mean nothing here; that the harness starts a cluster,
//! drives every scenario and writes its table, CSV and plots is what is checked.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

#[test]
fn every_scenario_runs_once_against_tenure() {
    let out_dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new(BIN)
        .args([
            "bench",
            "all",
            "--smoke",
            "--systems",
            "tenure",
            "--profiles",
            "equalized",
        ])
        .arg("--out")
        .arg(out_dir.path())
        .arg("--work-dir")
        .arg(out_dir.path())
        .output()
        .expect("run tenure bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tenure bench failed\n{stdout}\n{stderr}"
    );
    let table = std::fs::read_to_string(out_dir.path().join("results.md")).expect("results.md");
    for scenario in [
        "crash-failover",
        "pause-failover",
        "handover",
        "takeover",
        "write",
        "keepalives",
        "elections",
        "herd",
    ] {
        let section = table
            .split(&format!("### {scenario}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {scenario} section in\n{table}"));
        let section = section.split("\n### ").next().unwrap_or_default();
        assert!(
            section.contains("| equalized | tenure | "),
            "no tenure row for {scenario}:\n{section}"
        );
        assert!(!section.contains("failed"), "{scenario}:\n{section}");
    }
    assert!(!table.contains("### all"), "a system failed:\n{table}");
    let csv = std::fs::read_to_string(out_dir.path().join("samples.csv")).expect("samples.csv");
    assert!(csv.starts_with("scenario,metric,unit,system,profile,trial,value\n"));
    assert!(csv.lines().count() > 30, "{csv}");
    // Distributions are plotted from 5 samples up: here only the write latencies have that.
    let plot = std::fs::read_to_string(out_dir.path().join("write-equalized.svg"))
        .expect("a latency plot");
    assert!(plot.contains("<svg") && plot.contains("tenure"));
    // Every cluster's directory was removed.
    let left: Vec<_> = std::fs::read_dir(out_dir.path())
        .expect("list the directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tenure-bench-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
