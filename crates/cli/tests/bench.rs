//! `tenure bench` must keep working: one trial of every scenario against tenure alone, with
//! tiny loads (`--smoke`), and the TLS scenarios (write, keepalives) against tenure and etcd
//! with TLS on and off, and the takeover scenario through the client library's PostgreSQL and
//! in-process backends. The numbers mean nothing here; that the harness starts the clusters,
//! drives every scenario and writes its table, CSV and plots is what is checked. etcd and
//! PostgreSQL come from `scripts/services.sh install-etcd install-postgres`; without them
//! those tests fail, never skip.

use std::ffi::OsString;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// Run `tenure bench ARGS` with its output and clusters in a temporary directory; assert
/// that it succeeded, that no system failed, and that it left no cluster directory behind.
/// Returns the directory (with `results.md`, `samples.csv` and the plots) and the table.
fn bench(args: &[&str], extra: &[OsString]) -> (tempfile::TempDir, String) {
    let out_dir = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new(BIN)
        .arg("bench")
        .args(args)
        .args(extra)
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
    // Every cluster's directory was removed.
    let left: Vec<_> = std::fs::read_dir(out_dir.path())
        .expect("list the directory")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tenure-bench-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    (out_dir, table)
}

/// The section of `table` for `scenario`.
fn section<'a>(table: &'a str, scenario: &str) -> &'a str {
    table
        .split(&format!("### {scenario}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {scenario} section in\n{table}"))
        .split("\n### ")
        .next()
        .unwrap_or_default()
}

#[test]
fn every_scenario_runs_once_against_tenure() {
    let (out_dir, table) = bench(
        &[
            "all",
            "--smoke",
            "--systems",
            "tenure",
            "--profiles",
            "equalized",
        ],
        &[],
    );
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
        "cron",
    ] {
        let section = section(&table, scenario);
        assert!(
            section.contains("| equalized | tenure | "),
            "no tenure row for {scenario}:\n{section}"
        );
        assert!(!section.contains("failed"), "{scenario}:\n{section}");
    }
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
    // The takeover whose holder is a process of its own, killed: tenure's holder runs with
    // --fate-sharing.
    let killed = "| TTL 1 s: holder's process killed → next leads (ms) | equalized | tenure | 1 |";
    assert!(table.contains(killed), "no {killed} in\n{table}");
    assert!(
        table.contains("`tenure campaign --fate-sharing`"),
        "{table}"
    );
    // `tenure cron`: slots ran under a stable holder, and after a killed holder, with and
    // without fate-sharing.
    for metric in [
        "| slot start lateness, stable holder (plain) (ms) | equalized | tenure |",
        "| first slot after the holder's process is killed: lateness (plain) (ms) | equalized | tenure | 1 |",
        "| first slot after the holder's process is killed: lateness (fate-sharing) (ms) | equalized | tenure | 1 |",
    ] {
        assert!(table.contains(metric), "no {metric} in\n{table}");
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
    // The nodes' own timing of the single client's writes: the WAL's fsync on every node,
    // the commit latency at the leader.
    for metric in [
        "| one client: WAL fsync per persist, per node, mean (ms) | equalized | tenure | 3 |",
        "| one client: WAL fsync per persist, per node, p99 (bucket bound) (ms) | equalized | tenure | 3 |",
        "| one client: commit latency (propose → apply) at the leader, mean (ms) | equalized | tenure | 1 |",
    ] {
        assert!(table.contains(metric), "no {metric} in\n{table}");
    }
    // Where a write's and a renewal's time goes, stage by stage, from the leader's own
    // histograms, and the floor beside them.
    for metric in [
        "| one client, breakdown: gRPC: body read and decoded, caller authenticated, mean (ms) | equalized | tenure | 1 |",
        "| one client, breakdown: driver: log write to commit (majority durable), mean (ms) | equalized | tenure | 1 |",
        "| one client, breakdown: follower: fsync (mean of the followers), mean (ms) | equalized | tenure | 1 |",
        "| one client, breakdown: driver: commit to answer (apply), mean (ms) | equalized | tenure | 1 |",
        "| floor: 4 KiB write + fdatasync, median (ms) | equalized | tenure | 1 |",
        "| floor: 4 KiB write + fdatasync, three files at once, median (ms) | equalized | tenure | 1 |",
        "| one session, one renewal in flight: round trip, mean (ms) | equalized | tenure | 1 |",
        "| one session, breakdown: driver: received to acknowledged, mean (ms) | equalized | tenure | 1 |",
    ] {
        assert!(table.contains(metric), "no {metric} in\n{table}");
    }
}

/// TLS's cost in one run: write and keepalives on tenure and etcd, each with TLS off and on
/// (client and peer traffic), and the table that sets them side by side.
#[test]
fn tls_variants_run_next_to_plaintext() {
    let (out_dir, table) = bench(
        &[
            "write,keepalives",
            "--smoke",
            "--systems",
            "tenure,tenure-tls,etcd,etcd-tls",
            "--profiles",
            "equalized",
        ],
        &[],
    );
    assert!(!table.contains("failed"), "{table}");
    for scenario in ["write", "keepalives"] {
        let section = section(&table, scenario);
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
}

/// The project's services script: the tests run from the source tree, so they may name it by
/// path (the shipped binary takes it from `--services-script`).
fn services_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh")
}

/// The client backends that have no cluster of their own here, in the takeover scenario:
/// PostgreSQL started with the services script, and the in-process backend.
#[test]
fn takeover_runs_through_the_postgres_and_memory_backends() {
    let (_out_dir, table) = bench(
        &[
            "takeover",
            "--smoke",
            "--systems",
            "postgres,memory",
            "--takeover-ttl-ms",
            "1500",
        ],
        &["--services-script".into(), services_script().into()],
    );
    for system in ["postgres", "memory"] {
        for metric in [
            "TTL 1500 ms: holder stops → next leads (ms)",
            "TTL 1500 ms: next leads, after the lease's end (ms)",
            "resign → next leads (ms)",
        ] {
            let row = format!("| {metric} | defaults | {system} | 1 |");
            assert!(table.contains(&row), "no {row} in\n{table}");
        }
    }
    // A holder process of its own, killed: through PostgreSQL (on its TTL); not for the
    // in-process backend, which says so.
    let killed =
        "| TTL 1500 ms: holder's process killed → next leads (ms) | defaults | postgres | 1 |";
    assert!(table.contains(killed), "no {killed} in\n{table}");
    assert!(
        table.contains("memory, defaults: holder's process killed: not measured"),
        "{table}"
    );
}

/// Without the services script, or with a path that is not one, a run that needs PostgreSQL
/// is refused before anything is measured or written.
#[test]
fn the_postgres_backend_needs_the_services_script() {
    let out_dir = tempfile::tempdir().expect("a temporary directory");
    let missing = out_dir.path().join("no-such-services.sh");
    for script in [None, Some(missing.as_path())] {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "bench",
            "takeover",
            "--smoke",
            "--systems",
            "tenure,postgres",
        ])
        .arg("--out")
        .arg(out_dir.path().join("results"))
        .arg("--work-dir")
        .arg(out_dir.path())
        .env_remove("TENURE_SERVICES_SCRIPT");
        if let Some(script) = script {
            cmd.arg("--services-script").arg(script);
        }
        let out = cmd.output().expect("run tenure bench");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{script:?} was accepted: {stderr}");
        let why = match script {
            None => "give its path with --services-script or $TENURE_SERVICES_SCRIPT",
            Some(_) => "no-such-services.sh: no such file",
        };
        assert!(stderr.contains(why), "{script:?}: {stderr}");
        assert!(
            !stderr.contains("[tenure"),
            "measured before refusing: {stderr}"
        );
        assert!(!out_dir.path().join("results").exists(), "wrote results");
    }
}
