//! What scripts read from the CLI: its output lines, its exit codes and its error messages.
//!
//! - A candidate value holding a newline (or bytes that are not UTF-8) stays on one line in
//!   `tenure leader`'s and `tenure observe`'s text, escaped, and round-trips exactly in
//!   their `--json` lines (and in `tenure campaign --json`'s).
//! - Every bad argument exits 2 with a message that names it, without contacting the
//!   backend; durations such as `1m30s` are accepted.
//! - `tenure run` with a command that cannot start exits 127/126 before campaigning: the
//!   election's next fencing token is the one it would have been anyway.
//! - The command's `TENURE_SESSION_ID` is the session `tenure leader` shows.
//! - A URL naming a node's HTTP port instead of its client port fails with a hint that
//!   says so and names the leader's client address.
//!
//! The cluster cases run against one real cluster of the workspace's harness (TLS and
//! client authentication on).

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use common::{next_line, run_sh, stderr, stdout, tenure, Campaign, Cluster, Spawned, BIN};

/// An address where nothing listens: a backend that would fail if it were contacted.
const NOWHERE: &str = "tenure://127.0.0.1:1";

/// `tenure args` must exit `code` before contacting the backend, with a message that says
/// each of `says` and never `never`.
fn fails_without_contacting_the_backend(args: &[&str], code: i32, says: &[&str], never: &str) {
    let started = Instant::now();
    let out = tenure(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?} should say {s:?}: {err}");
    }
    assert!(!err.contains(never), "{args:?}: {err}");
    // Nothing was contacted: an unreachable backend takes seconds of retries to fail.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{args:?}: the backend was contacted (took {:?}): {err}",
        started.elapsed()
    );
}

#[test]
fn every_bad_argument_exits_2_naming_it_without_contacting_the_backend() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let missing_ca = dir.path().join("no-such-ca.pem");
    let missing_ca = missing_ca.to_str().expect("UTF-8");
    let pid_file = dir.path().join("no-such-dir").join("pid");
    let pid_file = pid_file.to_str().expect("UTF-8");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["leader", "--election", "e", "--backend", "foo://x"],
            vec!["\"foo\"", "unknown scheme", "tenure://"],
        ),
        (
            vec!["observe", "--election", "e", "--backend", "foo://x"],
            vec!["\"foo\"", "unknown scheme"],
        ),
        (
            vec!["leader", "--election", "", "--backend", NOWHERE],
            vec!["--election is empty"],
        ),
        (
            vec!["campaign", "--election", "", "--backend", NOWHERE],
            vec!["--election is empty"],
        ),
        (
            vec!["observe", "--election", "", "--backend", NOWHERE],
            vec!["--election is empty"],
        ),
        (
            vec!["run", "--election", "", "--backend", NOWHERE, "--", "true"],
            vec!["--election is empty"],
        ),
        (
            vec!["leader", "--election", "e", "--backend", NOWHERE, "--ca"],
            vec!["no-such-ca.pem", "cannot read"],
        ),
        (
            vec![
                "campaign",
                "--election",
                "e",
                "--ttl",
                "10x",
                "--backend",
                NOWHERE,
            ],
            vec!["--ttl", "10x", "unknown unit"],
        ),
        (
            vec![
                "run",
                "--election",
                "e",
                "--grace",
                "1m30",
                "--backend",
                NOWHERE,
            ],
            vec!["--grace", "1m30", "no unit"],
        ),
        (
            vec!["campaign", "--election", "e", "--backend", "memory:"],
            vec!["--pid-file", "no-such-dir"],
        ),
        (
            // The backend refuses the TTL as invalid: a bad argument too.
            vec![
                "campaign",
                "--election",
                "e",
                "--ttl",
                "0s",
                "--backend",
                "memory:",
            ],
            vec!["invalid argument", "ttl"],
        ),
    ];
    for (mut args, says) in cases {
        // Arguments that need a path from this test.
        match args.last() {
            Some(&"--ca") => args.push(missing_ca),
            _ if says.first() == Some(&"--pid-file") => args.extend(["--pid-file", pid_file]),
            _ => {}
        }
        if args[0] == "run" && !args.contains(&"--") {
            args.extend(["--", "true"]);
        }
        fails_without_contacting_the_backend(&args, 2, &says, "Some(");
    }
}

#[test]
fn durations_such_as_1m30s_are_accepted() {
    let run = |ttl: &str, grace: &str, command: &[&str]| {
        let mut args = vec!["run", "--election", "e", "--backend", "memory:"];
        args.extend(["--ttl", ttl, "--grace", grace, "--"]);
        args.extend(command);
        tenure(&args)
    };
    let out = run("2m30s", "1m", &["sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("ttl 150s, grace 60s"),
        "{}",
        stderr(&out)
    );
    // And the grace rule still applies to them: 45 s is half of 1m30s.
    let out = run("1m30s", "45s", &["true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--grace"), "{}", stderr(&out));
}

#[test]
fn run_refuses_a_command_that_cannot_start_before_contacting_the_backend() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let not_executable = dir.path().join("job.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").expect("write a script");
    let not_executable = not_executable.to_str().expect("UTF-8");
    for (command, code, says) in [
        ("/nonexistent/job", 127, "does not exist"),
        ("no-such-command-anywhere", 127, "not found in $PATH"),
        (not_executable, 126, "not executable"),
        ("/", 126, "directory"),
    ] {
        fails_without_contacting_the_backend(
            &[
                "run",
                "--election",
                "e",
                "--backend",
                NOWHERE,
                "--",
                command,
            ],
            code,
            &[says],
            "campaigning",
        );
    }
}

#[test]
fn scripts_read_one_line_per_leader_and_exact_values_from_a_cluster() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let dir = tempfile::tempdir().expect("a temporary directory");

    a_forged_newline_stays_on_its_line(&url);
    values_that_are_not_utf8_round_trip_in_json(&url);
    eprintln!("values ok");
    a_command_that_cannot_start_spends_no_token(&url);
    eprintln!("no token spent ok");
    the_session_id_variable_holds_the_session(&url, dir.path());
    eprintln!("session id ok");
    the_http_port_is_named_as_such(&cluster);
    a_plaintext_client_is_told_the_node_speaks_tls(&cluster);
    eprintln!("http port ok");
}

fn a_forged_newline_stays_on_its_line(url: &str) {
    let election = "forged";
    let value = "x\ntoken=99 session=1 value=forged";
    let mut observer = Spawned::new(
        Command::new(BIN)
            .args([
                "observe",
                "--json",
                "--election",
                election,
                "--backend",
                url,
            ])
            .stdout(Stdio::piped()),
    );
    let observed = observer.lines();
    let first: Value =
        serde_json::from_str(&next_line(&observed, "observe's first line")).expect("a JSON line");
    assert_eq!(
        first,
        serde_json::json!({"election": election, "leader": null})
    );

    let (holder, token, session) = Campaign::new(url, election, value).json().start();

    let out = tenure(&["leader", "--election", election, "--backend", url]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!("token={token} session={session} value=x\\ntoken=99 session=1 value=forged\n"),
        "one leader, one line"
    );

    let out = tenure(&["leader", "--json", "--election", election, "--backend", url]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: Value = serde_json::from_str(&text).expect("a JSON line");
    assert_eq!(line["election"], election);
    assert_eq!(line["leader"]["token"].as_u64(), Some(token));
    assert_eq!(line["leader"]["session"].as_u64(), Some(session));
    assert_eq!(line["leader"]["value"], value);

    let seen: Value =
        serde_json::from_str(&next_line(&observed, "the holder")).expect("a JSON line");
    assert_eq!(seen, line, "observe --json prints what leader --json does");
    drop(holder);
    let seen: Value =
        serde_json::from_str(&next_line(&observed, "the resignation")).expect("a JSON line");
    assert_eq!(seen["leader"], Value::Null);
}

fn values_that_are_not_utf8_round_trip_in_json(url: &str) {
    let election = "bytes";
    let value: &[u8] = b"\xff\xfe\n\\ end";
    let (_holder, token, _) = Campaign::new(url, election, OsStr::from_bytes(value))
        .json()
        .start();
    let out = tenure(&["leader", "--election", election, "--backend", url]);
    assert_eq!(
        stdout(&out).trim_end_matches('\n'),
        format!(
            "token={token} session={} value=\\xff\\xfe\\n\\\\ end",
            session_of(url, election)
        )
    );
    let out = tenure(&["leader", "--json", "--election", election, "--backend", url]);
    let line: Value = serde_json::from_str(&stdout(&out)).expect("a JSON line");
    assert_eq!(line["leader"]["value"], Value::Null, "not UTF-8: {line}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(
            line["leader"]["value_base64"]
                .as_str()
                .expect("base64 text"),
        )
        .expect("base64");
    assert_eq!(bytes, value);
}

fn session_of(url: &str, election: &str) -> u64 {
    let out = tenure(&["leader", "--json", "--election", election, "--backend", url]);
    let line: Value = serde_json::from_str(&stdout(&out)).expect("a JSON line");
    line["leader"]["session"].as_u64().expect("a leader")
}

/// The first token of an election is the same whether or not `tenure run` was first asked
/// to run a command that does not exist there.
fn a_command_that_cannot_start_spends_no_token(url: &str) {
    let (holder, untouched, _) = Campaign::new(url, "fresh-untouched", "a").start();
    drop(holder);
    let out = tenure(&[
        "run",
        "--election",
        "fresh-tried",
        "--backend",
        url,
        "--",
        "/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    let (holder, tried, _) = Campaign::new(url, "fresh-tried", "a").start();
    drop(holder);
    assert_eq!(
        tried, untouched,
        "the failed run spent a token (first token {tried}, untouched election's {untouched})"
    );
}

fn the_session_id_variable_holds_the_session(url: &str, dir: &std::path::Path) {
    let election = "session-env";
    let file = dir.join("env");
    // The command asks the cluster who leads while it runs: that is itself.
    let script = format!(
        "{BIN} leader --json --election {election} --backend '{url}' > {file}.leader; \
         echo \"$TENURE_SESSION_ID $TENURE_LEADER_ID\" > {file}",
        file = file.display()
    );
    let out = run_sh(url, election, &script);
    assert!(out.status.success(), "{}", stderr(&out));
    let env = std::fs::read_to_string(&file).expect("the command wrote its environment");
    let ids: Vec<&str> = env.split_whitespace().collect();
    let leader = std::fs::read_to_string(format!("{}.leader", file.display()))
        .expect("the command asked who leads");
    let leader: Value = serde_json::from_str(&leader).expect("a JSON line");
    let session = leader["leader"]["session"].as_u64().expect("a leader");
    assert_eq!(
        ids,
        [session.to_string(), session.to_string()],
        "{env:?} {leader}"
    );
}

/// A client without TLS files pointed at a node's client port (which speaks TLS) is told
/// so, and what to give, at once (not after the request budget of retries); and a TLS
/// client pointed at something that does not speak TLS is told that.
fn a_plaintext_client_is_told_the_node_speaks_tls(cluster: &Cluster) {
    let client = cluster.addrs(cluster.leader()).client;
    let url = format!("tenure://{client}");
    for args in [
        &["leader", "--election", "e", "--backend", &url][..],
        &["campaign", "--election", "e", "--backend", &url],
        &["status", "--backend", &url],
    ] {
        let started = Instant::now();
        let out = Command::new(BIN)
            .args(args)
            .env_remove("TENURE_CA")
            .env_remove("TENURE_CERT")
            .env_remove("TENURE_KEY")
            .env_remove("TENURE_TOKEN_FILE")
            .output()
            .expect("run tenure");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(69), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{client} speaks TLS and this URL does not"))
                && err.contains("ca=FILE"),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("speaks TLS").count(), 1, "said once: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{args:?} took {:?} to say so",
            started.elapsed()
        );
    }

    // Something that answers a TLS handshake in plaintext.
    let plain = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = plain.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut s in plain.incoming().map_while(Result::ok) {
            use std::io::Write as _;
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let url = format!("tenure://{addr}{}", cluster.query());
    let started = Instant::now();
    let out = tenure(&["leader", "--election", "e", "--backend", &url]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains(&format!("{addr} does not speak TLS")), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

fn the_http_port_is_named_as_such(cluster: &Cluster) {
    let leader = cluster.leader();
    let client = cluster.addrs(leader).client;
    for id in cluster.ids() {
        let http = cluster.addrs(id).http;
        let url = format!("tenure://{http}{}", cluster.query());
        let out = tenure(&["leader", "--election", "e", "--backend", &url]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(69), "{err}");
        assert!(
            err.contains(&format!("{http} answers HTTP/1.1"))
                && err.contains("looks like the node's HTTP port"),
            "{err}"
        );
        assert!(
            err.contains(&format!("the cluster's leader serves clients on {client}")),
            "{err}"
        );
    }
}
