//! `tenure bench` must keep working: one trial of every scenario against tenure alone, with
//! tiny loads (`--smoke`), and the TLS scenarios (write, keepalives) against tenure and etcd
//! with TLS on and off. The numbers mean nothing here; that the harness starts the clusters,
//! drives every scenario and writes its table, CSV and plots is what is checked. etcd comes
//! from `scripts/services.sh install-etcd`; without it the TLS test fails, never skips.

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
        "read",
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
    // Distributions are plotted from 5 samples up: here only the write and read latencies
    // have that.
    for file in ["write-equalized.svg", "read-equalized.svg"] {
        let plot = std::fs::read_to_string(out_dir.path().join(file))
            .unwrap_or_else(|e| panic!("a latency plot {file}: {e}"));
        assert!(plot.contains("<svg") && plot.contains("tenure"), "{file}");
    }
    // Both of tenure's reads were measured, latency and throughput.
    for metric in [
        "| leader read: one client, latency (ms) | equalized | tenure | 20 |",
        "| key read: one client, latency (ms) | equalized | tenure | 20 |",
        "| leader read: throughput, 16 clients (reads/s) | equalized | tenure | 1 |",
        "| key read: throughput, 16 clients (reads/s) | equalized | tenure | 1 |",
    ] {
        assert!(table.contains(metric), "no {metric} in\n{table}");
    }
    // Every cluster's directory was removed.
    let left: Vec<_> = std::fs::read_dir(out_dir.path())
        .expect("list the directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tenure-bench-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// TLS's cost in one run: write and keepalives on tenure and etcd, each with TLS off and on
/// (client and peer traffic), and the table that sets them side by side.
#[test]
fn tls_variants_run_next_to_plaintext() {
    let out_dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new(BIN)
        .args([
            "bench",
            "write,keepalives",
            "--smoke",
            "--systems",
            "tenure,tenure-tls,etcd,etcd-tls",
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
    assert!(!table.contains("### all"), "a system failed:\n{table}");
    assert!(!table.contains("failed"), "{table}");
    for scenario in ["write", "keepalives"] {
        let section = table
            .split(&format!("### {scenario}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {scenario} section in\n{table}"));
        let section = section.split("\n### ").next().unwrap_or_default();
        for system in ["tenure", "tenure-tls", "etcd", "etcd-tls"] {
            assert!(
                section.contains(&format!("| equalized | {system} | ")),
                "no {system} row for {scenario}:\n{section}"
            );
        }
    }
    let tls = table
        .split("### TLS's cost\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no TLS section in\n{table}"));
    for metric in [
        "| write: one client, latency (ms) | equalized |",
        "| write: throughput, 16 clients (writes/s) | equalized |",
        "| keepalives: 100 leases, one renewal in flight each (renewals/s) | equalized |",
    ] {
        let row = tls
            .lines()
            .find(|l| l.starts_with(metric))
            .unwrap_or_else(|| panic!("no row {metric} in\n{tls}"));
        // Every value and every ratio was measured: no dashes.
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 9, "{row}");
        assert!(cells[2..].iter().all(|c| *c != "–"), "{row}");
        assert!(cells[4].ends_with('×') && cells[7].ends_with('×') && cells[8].ends_with('×'));
    }
    let csv = std::fs::read_to_string(out_dir.path().join("samples.csv")).expect("samples.csv");
    for system in ["tenure-tls", "etcd-tls"] {
        assert!(csv.contains(&format!(",{system},equalized,")), "{csv}");
    }
    let left: Vec<_> = std::fs::read_dir(out_dir.path())
        .expect("list the directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tenure-bench-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
