//! `tenure demo` end to end: the built binary starts its cluster and workers, injects both
//! faults, and must print a passing verdict with no duplicates and at least one rejected
//! stale write, then exit 0 — within a bounded time, leaving no process behind.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far above the demo's usual run time (under 15 s), for slow and loaded machines.
const DEMO_TIMEOUT: Duration = Duration::from_secs(180);

/// The value after `label` on the verdict line that starts with it.
fn verdict_value<'a>(out: &'a str, label: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .map(str::trim)
}

#[test]
fn demo_prints_a_passing_verdict_and_exits_zero() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("demo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tenure binary starts");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait on the demo") {
            break status;
        }
        if started.elapsed() > DEMO_TIMEOUT {
            // SIGKILL on the controller: its children die with it (PR_SET_PDEATHSIG).
            let _ = child.kill();
            let _ = child.wait();
            let out = reader.join().unwrap_or_default();
            panic!("tenure demo did not finish in {DEMO_TIMEOUT:?}; output so far:\n{out}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = reader
        .join()
        .expect("the reader thread ends with the demo's stdout");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let context = format!("stdout:\n{out}\nstderr:\n{err}");

    assert!(
        status.success(),
        "tenure demo exited with {status}\n{context}"
    );
    assert!(out.contains("── verdict ──"), "no verdict\n{context}");
    assert_eq!(verdict_value(&out, "duplicates"), Some("0"), "{context}");
    let rejected: u64 = verdict_value(&out, "stale writes rejected")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'stale writes rejected' line\n{context}"));
    assert!(rejected >= 1, "no stale write was rejected\n{context}");
    let written: u64 = verdict_value(&out, "reports written")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'reports written' line\n{context}"));
    assert!(
        written >= 5,
        "only {written} reports were written\n{context}"
    );
    assert!(
        out.contains("REJECT"),
        "the timeline shows no rejection\n{context}"
    );
    assert!(
        out.contains("SIGSTOP") && out.contains("SIGKILL"),
        "a fault is missing from the timeline\n{context}"
    );
    assert!(
        verdict_value(&out, "killed node caught up").is_some_and(|v| v.starts_with("yes")),
        "{context}"
    );
    // Every session (the leader's and the standbys') kept renewing through the Raft leader
    // failover: each reported a keepalive sent after the kill and acknowledged.
    assert!(
        verdict_value(&out, "sessions survived").is_some_and(|v| v.starts_with("yes")),
        "{context}"
    );
    assert!(
        verdict_value(&out, "result").is_some_and(|v| v.starts_with("PASS")),
        "{context}"
    );
}
