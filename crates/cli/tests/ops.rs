//! The operator commands (`tenure status`, `members`, `transfer-leadership`, `elections`,
//! `sessions`, `get`, `put`) against real 3-node clusters of `tenure server`, started by the
//! workspace's harness with TLS and client authentication on. Every command is given a URL
//! that names one node only: the others are reached through it.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tenure_proto::v1;
use tenure_testkit::{secs, Options};

use common::{query_of, stderr, stdout, BIN};

/// A cluster and a runtime to drive the harness from these synchronous tests.
struct Fixture {
    cluster: tenure_testkit::Cluster,
    runtime: tokio::runtime::Runtime,
}

impl Fixture {
    fn start() -> Fixture {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let cluster = tenure_testkit::Cluster::start(Options::nodes(3));
        let ids = cluster.ids();
        runtime.block_on(cluster.wait_for_leader(&ids, secs(20)));
        Fixture { cluster, runtime }
    }

    /// A URL naming node `id` only, with the harness's TLS files (the admin's certificate).
    fn url_of(&self, id: u64) -> String {
        format!(
            "tenure://{}{}",
            self.cluster.addrs(id).client,
            query_of(&self.cluster.url())
        )
    }

    fn leader(&self) -> u64 {
        let ids = self.cluster.ids();
        self.runtime
            .block_on(self.cluster.wait_for_leader(&ids, secs(20)))
            .0
    }

    /// The leader, a follower, and a URL naming that follower only.
    fn through_a_follower(&self) -> (u64, u64, String) {
        let leader = self.leader();
        let follower = self.cluster.others(&[leader])[0];
        (leader, follower, self.url_of(follower))
    }

    /// The leader among `among`, once one of them leads.
    fn leader_among(&self, among: &[u64]) -> u64 {
        self.runtime
            .block_on(self.cluster.wait_for_leader(among, secs(20)))
            .0
    }
}

/// `tenure ARGS --backend URL`, with `env` set and no inherited fencing token.
fn ops(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .arg("--backend")
        .arg(url)
        .env_remove("TENURE_FENCING_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    cmd.output().expect("run tenure")
}

/// The one JSON object `out` printed, asserting the exit code.
fn json_of(out: &Output, code: i32) -> Value {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    let text = stdout(out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {text}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every line `out` printed, as JSON, asserting exit 0.
fn json_lines(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        stderr(out)
    );
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn members_of(v: &Value) -> Vec<(u64, bool)> {
    v["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().expect("id"),
                m["voter"].as_bool().expect("voter"),
            )
        })
        .collect()
}

#[test]
fn status_shows_every_member_and_marks_a_stopped_one_unreachable() {
    let mut f = Fixture::start();
    let (leader, follower, url) = f.through_a_follower();

    // Wait until the leader has heard from both followers in its term.
    let deadline = Instant::now() + secs(10);
    let status = loop {
        let v = json_of(&ops(&url, &["status", "--json"], &[]), 0);
        let members = v["members"].as_array().expect("members").clone();
        if members
            .iter()
            .all(|m| m["health"] == "ok" && m["lag"].is_u64())
        {
            break v;
        }
        assert!(Instant::now() < deadline, "never all healthy: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status["leader"].as_u64(), Some(leader), "{status}");
    assert_eq!(status["warnings"], Value::Array(vec![]), "{status}");
    let members = status["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{status}");
    let leaders: Vec<&Value> = members.iter().filter(|m| m["role"] == "leader").collect();
    assert_eq!(leaders.len(), 1, "exactly one leader: {status}");
    let term = leaders[0]["term"].as_u64().expect("term");
    for m in members {
        let id = m["id"].as_u64().expect("id");
        assert_eq!(m["reachable"], true, "{m}");
        assert_eq!(m["term"].as_u64(), Some(term), "{m}");
        assert_eq!(m["leader"].as_u64(), Some(leader), "{m}");
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"), "{m}");
        let addrs = f.cluster.addrs(id);
        assert_eq!(m["client_addr"], addrs.client.to_string(), "{m}");
        assert_eq!(m["peer_addr"], addrs.peer.to_string(), "{m}");
        assert_eq!(m["http_addr"], addrs.http.to_string(), "{m}");
        assert!(m["commit_index"].as_u64() > Some(0), "{m}");
        if id == leader {
            assert_eq!(m["last_contact_ms"], Value::Null, "{m}");
        } else {
            // Heartbeats every 30 ms: the leader heard from it well within a second.
            assert!(m["last_contact_ms"].as_u64() < Some(1000), "{m}");
        }
    }

    // The text table: a header and one row per member, the leader's marked.
    let out = ops(&url, &["status"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("HEALTH"),
        "{text}"
    );
    // Then what the caller's principal holds against its quotas.
    assert!(
        lines[4].starts_with("usage of ") && lines[4].contains("sessions 0/20000"),
        "{text}"
    );
    let lines = &lines[..4];
    assert_eq!(
        lines[1..].iter().filter(|l| l.contains(" leader ")).count(),
        1,
        "{text}"
    );

    // A stopped member: unreachable, warned about, and the command says so in its code.
    let stopped = f.cluster.others(&[leader, follower])[0];
    f.cluster.kill(stopped);
    let out = ops(&url, &["status", "--json"], &[]);
    let v = json_of(&out, 1);
    let m = v["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|m| m["id"].as_u64() == Some(stopped))
        .expect("the stopped member is listed")
        .clone();
    assert_eq!(m["health"], "unreachable", "{v}");
    assert_eq!(m["reachable"], false, "{v}");
    let warnings = v["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .is_some_and(|w| w.contains(&format!("member {stopped} is unreachable")))),
        "{v}"
    );
    let out = ops(&url, &["status"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains(&format!("warning: member {stopped} is unreachable")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn transfer_leadership_moves_the_leader_with_and_without_a_target() {
    let f = Fixture::start();
    // Through a node that does not lead: the command finds the leader.
    let (leader, target, url) = f.through_a_follower();
    let v = json_of(
        &ops(
            &url,
            &["transfer-leadership", "--to", &target.to_string(), "--json"],
            &[],
        ),
        0,
    );
    assert_eq!(v["from"].as_u64(), Some(leader), "{v}");
    assert_eq!(v["leader"].as_u64(), Some(target), "{v}");
    assert_eq!(f.leader_among(&[target]), target);

    // Without --to, the leader hands over to some other voter.
    let out = ops(&url, &["transfer-leadership"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = stdout(&out);
    assert!(line.contains(&format!("from={target}")), "{line}");
    let new = f.leader_among(&f.cluster.others(&[target]));
    assert!(line.starts_with(&format!("leader={new} ")), "{line}");

    // A target that is not a member is refused as a bad argument; nothing moves.
    let out = ops(&url, &["transfer-leadership", "--to", "9"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a voter"), "{}", stderr(&out));
    assert_eq!(f.leader(), new);
}

#[test]
fn members_remove_add_and_promote_a_configured_node() {
    let f = Fixture::start();
    let (leader, other, url) = f.through_a_follower();
    let all: Vec<(u64, bool)> = f.cluster.ids().into_iter().map(|id| (id, true)).collect();
    assert_eq!(
        members_of(&json_of(&ops(&url, &["members", "list", "--json"], &[]), 0)),
        all
    );
    let text = stdout(&ops(&url, &["members", "list"], &[]));
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.contains(&f.cluster.addrs(other).peer.to_string()),
        "{text}"
    );

    // A malformed spec changes nothing and exits 2.
    let out = ops(&url, &["members", "add", "4=nowhere"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("PEER,CLIENT"), "{}", stderr(&out));

    let removed = f.cluster.others(&[leader, other])[0];
    let v = json_of(
        &ops(
            &url,
            &["members", "remove", &removed.to_string(), "--json"],
            &[],
        ),
        0,
    );
    let remaining: Vec<(u64, bool)> = all.iter().copied().filter(|m| m.0 != removed).collect();
    assert_eq!(members_of(&v), remaining, "{v}");
    // Two voters: `status` warns about the even count.
    let v = json_of(&ops(&url, &["status", "--json"], &[]), 1);
    assert!(
        v["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.starts_with("2 voters"))),
        "{v}"
    );

    // Back as a learner, then promoted to a voter.
    let v = json_of(
        &ops(
            &url,
            &[
                "members",
                "add",
                &removed.to_string(),
                "--learner",
                "--json",
            ],
            &[],
        ),
        0,
    );
    let mut with_learner = remaining.clone();
    with_learner.push((removed, false));
    with_learner.sort();
    assert_eq!(members_of(&v), with_learner, "{v}");
    let v = json_of(
        &ops(
            &url,
            &["members", "promote", &removed.to_string(), "--json"],
            &[],
        ),
        0,
    );
    assert_eq!(members_of(&v), all, "{v}");
    assert_eq!(
        members_of(&json_of(&ops(&url, &["members", "list", "--json"], &[]), 0)),
        all
    );
}

#[test]
fn elections_and_sessions_walk_every_page_and_fenced_writes_follow_the_token() {
    const ELECTIONS: usize = 250;
    const SESSIONS: usize = 120;
    let mut f = Fixture::start();
    // The harness's channels spawn their workers on the runtime they are made in.
    let runtime = f.runtime.handle().clone();
    let _entered = runtime.enter();
    let mut client = f.cluster.client();
    let url = f.url_of(f.cluster.ids()[0]);
    let names: Vec<String> = (0..ELECTIONS).map(|i| format!("job-{i:03}")).collect();
    let (sessions, writer, second) = f.runtime.block_on(async {
        let mut sessions = Vec::new();
        for _ in 0..SESSIONS {
            sessions.push(client.grant(600_000).await.expect("grant"));
        }
        let writer = sessions[0];
        for name in &names {
            client
                .campaign_uncontested(name, writer)
                .await
                .expect("campaign");
        }
        // A second candidate queued behind the writer in the first election.
        let second = sessions[1];
        let queued = v1::CampaignRequest {
            election: names[0].clone(),
            session_id: second,
            value: b"second".to_vec(),
            session_secret: tenure_testkit::secret(),
            ..Default::default()
        };
        client.send(queued, secs(10)).await.ok();
        (sessions, writer, second)
    });

    // All 250, in order, no duplicates, 100 per page.
    let lines = json_lines(&ops(&url, &["elections", "--json", "--limit", "100"], &[]));
    let listed: Vec<String> = lines
        .iter()
        .map(|l| l["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(listed, names);
    let first = &lines[0];
    assert_eq!(first["leader"]["session"].as_u64(), Some(writer), "{first}");
    assert_eq!(first["token"].as_u64(), Some(1), "{first}");
    assert_eq!(first["candidates"], serde_json::json!([second]), "{first}");
    assert!(first["since_index"].as_u64() > Some(0), "{first}");
    // One page, and a position that names no election.
    let one = json_lines(&ops(
        &url,
        &["elections", "--json", "--limit", "100", "--one-page"],
        &[],
    ));
    assert_eq!(one.len(), 100);
    let after = json_lines(&ops(
        &url,
        &["elections", "--json", "--after", "job-099x"],
        &[],
    ));
    assert_eq!(after.len(), ELECTIONS - 100);
    assert_eq!(after[0]["name"], "job-100");
    let text = stdout(&ops(&url, &["elections", "--limit", "7"], &[]));
    assert_eq!(
        text.lines().count(),
        ELECTIONS + 1,
        "a header and every election"
    );
    // In one page every row's columns start where the header's do.
    let text = stdout(&ops(&url, &["elections", "--limit", "1000"], &[]));
    let header = text.lines().next().expect("a header");
    let starts = |line: &str| -> Vec<usize> {
        let mut starts = vec![0];
        let b = line.as_bytes();
        for i in 1..b.len() {
            if b[i] != b' ' && b[i - 1] == b' ' && i >= 2 && b[i - 2] == b' ' {
                starts.push(i);
            }
        }
        starts
    };
    for row in text.lines().skip(1) {
        assert_eq!(
            starts(row),
            starts(header),
            "columns out of line:\n{header}\n{row}"
        );
    }
    let text = stdout(&ops(&url, &["sessions", "--limit", "1000"], &[]));
    let header = text.lines().next().expect("a header");
    assert!(header.contains("EXPIRES_IN"), "{header}");
    for row in text.lines().skip(1) {
        // The last column (the elections) is one run of names; the others line up.
        assert_eq!(starts(row)[..4], starts(header)[..4], "{header}\n{row}");
    }

    let lines = json_lines(&ops(&url, &["sessions", "--json", "--limit", "50"], &[]));
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| l["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids, sessions, "every session, in id order");
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), SESSIONS);
    for l in &lines {
        assert_eq!(l["ttl_ms"].as_u64(), Some(600_000), "{l}");
        let remaining = l["remaining_ms"].as_u64().expect("remaining");
        assert!(remaining > 500_000 && remaining <= 700_000, "{l}");
    }
    assert_eq!(
        lines[0]["elections"].as_array().map(Vec::len),
        Some(ELECTIONS)
    );
    let out = ops(&url, &["sessions", "--after", "not-a-number"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // Fenced writes: the token from the environment, as `tenure run` sets it.
    let election = names[0].as_str();
    let env = [("TENURE_FENCING_TOKEN", "1")];
    let out = ops(
        &url,
        &["put", "config", "v1", "--election", election, "--json"],
        &env,
    );
    let v = json_of(&out, 0);
    assert_eq!(v["token"].as_u64(), Some(1), "{v}");
    let v = json_of(&ops(&url, &["get", "config", "--json"], &[]), 0);
    assert_eq!(v["stored"]["value"], "v1", "{v}");
    assert_eq!(v["stored"]["token"].as_u64(), Some(1), "{v}");
    assert_eq!(
        stdout(&ops(&url, &["get", "nothing-here"], &[])).trim(),
        "none"
    );
    // No token at all: a bad argument, nothing contacted.
    let out = ops(&url, &["put", "config", "v0", "--election", election], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TENURE_FENCING_TOKEN"),
        "{}",
        stderr(&out)
    );

    // The writer resigns; the queued candidate leads with token 2 and writes.
    let resign = v1::ResignRequest {
        election: election.to_string(),
        session_id: writer,
        session_secret: tenure_testkit::secret(),
        ..Default::default()
    };
    f.runtime
        .block_on(client.send(resign, secs(10)))
        .expect("resign");
    let out = ops(
        &url,
        &[
            "put",
            "config",
            "v2",
            "--election",
            election,
            "--token",
            "2",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The old writer's late write with token 1 is refused, with its own exit code.
    let out = ops(
        &url,
        &["put", "config", "stale", "--election", election],
        &env,
    );
    assert_eq!(out.status.code(), Some(78), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("stale-token") && err.contains("current token is 2"),
        "{err}"
    );
    let v = json_of(&ops(&url, &["get", "config", "--json"], &[]), 0);
    assert_eq!(
        v["stored"]["value"], "v2",
        "the stale write changed nothing: {v}"
    );
}
