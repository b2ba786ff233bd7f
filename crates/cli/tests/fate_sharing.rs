//! Fate-sharing sessions with real processes (docs/GUARANTEES.md "Fate-sharing sessions"):
//! `tenure campaign --fate-sharing` holders and candidates against a real 3-node cluster of
//! `tenure server` children, from the workspace's test harness (`tenure-testkit`), TLS and
//! client authentication on.
//!
//! - A holder whose process is killed (SIGKILL: its kernel closes its keepalive stream) is
//!   replaced well within its TTL. The bound here (a quarter of the 10 s TTL) is generous
//!   for the measured takeover (milliseconds, `tenure bench takeover`); without
//!   `--fate-sharing` the same test waits out the TTL and fails.
//! - A holder that is frozen (SIGSTOP) closes nothing: the next candidate leads only once
//!   the session expired. The nodes' idle timeout is short, so that the server closes the
//!   frozen holder's connection itself (its pings go unanswered) long before the TTL: a
//!   server that counted its own close as the client's would release the session then.

mod common;

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{leader, stdout, tenure, Campaign, Cluster, Spawned};

/// How long a test waits for the candidate to take over.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);

/// Waits until `election` has `n` candidates waiting behind its leader, as `tenure
/// elections` reads them from a node's applied state.
fn wait_for_candidates(url: &str, election: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = tenure(&["elections", "--json", "--backend", url]);
        let queued = stdout(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|o| o["name"] == election)
            .and_then(|o| o["candidates"].as_array().map(Vec::len));
        if queued == Some(n) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{election} never had {n} candidates waiting (last: {queued:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends `sig` to the holder and waits for the candidate to lead: how long after the signal
/// it did (its token checked to be above the holder's `token`).
fn replaced_after(holder: &Spawned, sig: i32, lines: &Receiver<String>, token: u64) -> Duration {
    holder.signal(sig);
    let since = Instant::now();
    let line = lines
        .recv_timeout(TAKEOVER_WAIT)
        .unwrap_or_else(|_| panic!("the candidate did not lead within {TAKEOVER_WAIT:?}"));
    let took = since.elapsed();
    let next: u64 = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("tenure campaign printed {line:?}, not a token"));
    assert!(next > token, "token {next} after {token}");
    took
}

/// A holder and a queued candidate in `election`, both fate-sharing with `ttl`.
fn holder_and_candidate(
    url: &str,
    election: &str,
    ttl: &str,
) -> (Spawned, u64, Spawned, Receiver<String>) {
    let (holder, token, _) = Campaign::new(url, election, "holder")
        .ttl(ttl)
        .fate_sharing()
        .start();
    let (candidate, lines) = Campaign::new(url, election, "candidate")
        .ttl(ttl)
        .fate_sharing()
        .spawn();
    wait_for_candidates(url, election, 1);
    (holder, token, candidate, lines)
}

#[test]
fn a_killed_holder_is_replaced_well_within_its_ttl() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let ttl = Duration::from_secs(10);
    let (mut holder, token, mut candidate, lines) =
        holder_and_candidate(&url, "fate-killed", "10s");
    let took = replaced_after(&holder, libc::SIGKILL, &lines, token);
    eprintln!("a killed holder was replaced after {took:?} (ttl {ttl:?})");
    assert!(
        took < ttl / 4,
        "the candidate led {took:?} after the holder was killed: its session was not \
         released when its stream closed (ttl {ttl:?})"
    );
    let _ = holder.wait(Duration::from_secs(5));
    let line = leader(&url, "fate-killed");
    assert!(line.contains("value=candidate"), "{line}");
    assert_eq!(candidate.stop(Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn a_frozen_holder_is_replaced_only_after_its_ttl() {
    // Pings every 300 ms, unanswered ones close the connection: the server ends the frozen
    // holder's stream itself within about a second.
    let cluster = Cluster::start_with(
        tenure_testkit::Options::nodes(3)
            .args(&["--idle-timeout-ms", "900"])
            .env("RUST_LOG", "info,tenure_server=debug"),
    );
    let url = cluster.url();
    let ttl = Duration::from_secs(4);
    let (mut holder, token, mut candidate, lines) = holder_and_candidate(&url, "fate-frozen", "4s");
    let took = replaced_after(&holder, libc::SIGSTOP, &lines, token);
    eprintln!("a frozen holder was replaced after {took:?} (ttl {ttl:?})");
    // Its last keepalive went at most a quarter of the TTL before the freeze, and the
    // session expires a TTL after it reached the leader.
    assert!(
        took >= ttl / 2,
        "the candidate led {took:?} after the holder froze: the session ended before its \
         TTL (ttl {ttl:?})"
    );
    holder.signal(libc::SIGCONT);
    // Awake again, it sees its leadership lost.
    assert_eq!(holder.wait(Duration::from_secs(20)).code(), Some(75));
    assert_eq!(candidate.stop(Duration::from_secs(20)).code(), Some(0));
}

/// A backend that cannot end a session with its stream refuses the flag before anything is
/// granted (exit 2, the flag named), instead of quietly waiting out the TTL.
#[test]
fn fate_sharing_on_another_backend_is_refused() {
    let out = tenure(&[
        "campaign",
        "--election",
        "e",
        "--backend",
        "memory:",
        "--fate-sharing",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(err.contains("fate-sharing"), "{err}");
}
