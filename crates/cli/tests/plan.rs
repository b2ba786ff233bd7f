//! `tenure plan` as a user runs it: the worked examples from flags, a TOML file,
//! bad input (exit 2, the flag or key named), a violated rule (exit 1), and `--from` a real
//! 3-node cluster (TLS and client authentication on) whose measured numbers the report
//! uses and names.

mod common;

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use tenure_testkit::{secs, AuthFile, Cluster, Options, ADMIN_CLIENT};

use common::{stderr, stdout, tenure};

fn json_of(out: &Output) -> Value {
    serde_json::from_str(stdout(out).trim()).unwrap_or_else(|e| {
        panic!(
            "tenure plan --json printed no JSON ({e}): {}\n{}",
            stdout(out),
            stderr(out)
        )
    })
}

/// `tenure` with the words of `line` as its arguments.
/// The names of the rules a JSON report says fail.
fn failing_rules(j: &Value) -> Vec<&str> {
    j["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["holds"] == false)
        .map(|r| r["rule"].as_str().expect("name"))
        .collect()
}

fn tenure_words(line: &str) -> Output {
    tenure(&line.split_whitespace().collect::<Vec<_>>())
}

#[test]
fn the_7_3_s_example_from_flags_holds_and_exits_0() {
    let out = tenure_words("plan --heartbeat 1s --missed-beats 5 --campaign 300ms --warm-up 2s");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("rule of thumb  missed beats × heartbeat + campaign + warm-up = 5 × 1 s + 300 ms + 2 s = 7.3 s"),
        "{text}"
    );
    assert!(text.contains("Verdict: every rule holds."), "{text}");
}

/// The application's GC and the server's stalls are separate budgets: a 2.5 s GC pause of
/// the holder fails the lease rule only, and no longer asks for a 2.5 s election timeout;
/// `--pause-budget` sets both, and each budget given on its own wins over it.
#[test]
fn the_app_and_server_pause_budgets_are_checked_by_their_own_rules() {
    let out = tenure_words("plan --ttl 2s --renew-interval 600ms --app-pause-budget 2.5s --json");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let j = json_of(&out);
    let failing = failing_rules(&j);
    assert_eq!(failing, ["lease-pause"], "{j}");
    assert_eq!(j["inputs"]["server_pause_budget"]["source"], "default");
    assert_eq!(j["pause"]["app_pause_budget_us"], 2_500_000);

    let out = tenure_words("plan --pause-budget 200ms --server-pause-budget 20ms --json");
    let j = json_of(&out);
    assert_eq!(j["inputs"]["app_pause_budget"]["value_us"], 200_000, "{j}");
    assert_eq!(
        j["inputs"]["server_pause_budget"]["value_us"], 20_000,
        "{j}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = tenure_words("plan --pause-budget 200ms --json");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a 200 ms server stall fails the 150 ms timeout"
    );
    let j = json_of(&out);
    assert_eq!(
        j["inputs"]["server_pause_budget"]["value_us"], 200_000,
        "{j}"
    );
}

#[test]
fn a_2s_ttl_one_2_5s_pause_from_a_false_failover_violates_the_lease_rule_and_exits_1() {
    let out = tenure_words(
        "plan --ttl 2s --renew-interval 600ms --pause-budget 2.5s --election-timeout 6s \
         --heartbeat 1s --json",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let j = json_of(&out);
    assert_eq!(j["ok"], false);
    let failing = failing_rules(&j);
    assert_eq!(failing, ["lease-pause"]);
    assert_eq!(j["pause"]["false_failover_permille"], 1000);
    assert_eq!(j["traffic"]["renewals_per_holder_milli_per_s"], 1667);
}

#[test]
fn a_toml_file_is_read_and_flags_override_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("plan.toml");
    std::fs::write(
        &file,
        "heartbeat = \"1s\"\nmissed_beats = 5\ncampaign = \"300ms\"\nwarm_up = \"2s\"\nttl = \"10s\"\nrenew_interval = \"3s\"\n",
    )
    .expect("write");
    let path = file.to_str().expect("UTF-8 path");
    let out = tenure(&["plan", "--config", path, "--ttl", "12s", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let j = json_of(&out);
    assert_eq!(j["raft_crash"]["rule_of_thumb_us"], 7_300_000);
    assert_eq!(j["inputs"]["heartbeat"]["source"], "file");
    assert_eq!(j["inputs"]["heartbeat"]["from"], format!("file {path}"));
    assert_eq!(j["inputs"]["renew_interval"]["value_us"], 3_000_000);
    assert_eq!(j["inputs"]["ttl"]["source"], "flag");
    assert_eq!(j["inputs"]["ttl"]["value_us"], 12_000_000);
}

fn assert_usage(args: &[&str], names: &str) {
    let out = tenure(args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{args:?} printed a report");
    assert!(
        stderr(&out).contains(names),
        "{args:?}: the message does not name {names:?}: {}",
        stderr(&out)
    );
}

#[test]
fn bad_input_exits_2_and_names_the_flag_or_key() {
    assert_usage(&["plan", "--ttl", "0s"], "--ttl: must be longer than zero");
    assert_usage(&["plan", "--ttl=-1s"], "--ttl");
    assert_usage(&["plan", "--heartbeat", "10x"], "--heartbeat");
    assert_usage(&["plan", "--holders", "0"], "--holders: must be at least 1");
    assert_usage(&["plan", "--missed-beats=-2"], "--missed-beats");
    assert_usage(&["plan", "--cluster-size", "three"], "--cluster-size");
    assert_usage(&["plan", "--heartbeats", "1s"], "--heartbeats");
    assert_usage(&["plan", "--from", "127.0.0.1:9001"], "--from");
    assert_usage(&["plan", "--from", "https://127.0.0.1:9001"], "--ca");

    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("UTF-8").to_string()
    };
    let unknown = write("unknown.toml", "ttl = \"10s\"\nrenew = \"3s\"\n");
    assert_usage(&["plan", "--config", &unknown], "unknown key \"renew\"");
    let zero = write("zero.toml", "heartbeat = \"0ms\"\n");
    assert_usage(
        &["plan", "--config", &zero],
        "heartbeat: must be longer than zero",
    );
    let negative = write("negative.toml", "holders = -1\n");
    assert_usage(&["plan", "--config", &negative], "holders: -1 is negative");
    let missing = dir.path().join("missing.toml");
    assert_usage(
        &["plan", "--config", missing.to_str().expect("UTF-8")],
        "cannot read it",
    );
}

fn tls_files(dir: &Path) -> [String; 3] {
    use tenure_transport::certs::files;
    [
        files::CA.to_string(),
        files::client(ADMIN_CLIENT),
        files::client_key(ADMIN_CLIENT),
    ]
    .map(|f| dir.join(f).to_str().expect("UTF-8").to_string())
}

/// `tenure plan --from URL --ca CA ARGS` with stdin closed and `$TENURE_TOKEN_FILE` set to
/// `token_file` (or unset), run off the test's runtime, which keeps serving the cluster.
async fn plan_from(url: &str, ca: &str, args: &[&str], token_file: Option<&str>) -> Output {
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args(["plan", "--from", url, "--ca", ca])
        .args(args)
        .env_remove("TENURE_TOKEN_FILE")
        .stdin(std::process::Stdio::null());
    if let Some(file) = token_file {
        cmd.env("TENURE_TOKEN_FILE", file);
    }
    tokio::task::spawn_blocking(move || cmd.output().expect("run tenure"))
        .await
        .expect("ran")
}

/// `out` is a backend failure (exit 69) whose stderr says `says`: its stderr.
fn refused(out: &Output, says: &str) -> String {
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}{}",
        stdout(out),
        stderr(out)
    );
    let err = stderr(out);
    assert!(err.contains(says), "{err}");
    err
}

/// `--from` the leader's HTTP port: the network p99 and the campaign come from its commit
/// latency histogram (after some grants were committed), the cluster size from /status;
/// a flag still overrides a measurement; without credentials the node refuses (exit 69).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_a_running_cluster_measures_its_numbers_and_says_so() {
    // Not the defaults, so that the plan can only have them from the node.
    let mut c = Cluster::start(Options::nodes(3).timing(400, 40, 10));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(20)).await;
    let mut client = c.client();
    for _ in 0..20 {
        client.grant(5_000).await.expect("grant");
    }
    let url = format!("https://{}", c.addrs(leader).http);
    let [ca, cert, key] = tls_files(&c.tls().expect("TLS on").dir);

    let with_cert = ["--cert", &cert, "--key", &key];
    let out = plan_from(
        &url,
        &ca,
        &[&with_cert[..], &["--scheduling-jitter", "5ms", "--json"]].concat(),
        None,
    )
    .await;
    let j = json_of(&out);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let inputs = &j["inputs"];
    assert_eq!(inputs["network_p99"]["source"], "measured", "{j}");
    let how = inputs["network_p99"]["from"].as_str().expect("text");
    assert!(
        how.contains("tenure_commit_latency_seconds")
            && how.contains("upper bound from its buckets"),
        "{how}"
    );
    assert!(inputs["network_p99"]["value_us"].as_u64().expect("us") > 0);
    assert_eq!(inputs["campaign"]["source"], "measured");
    assert_eq!(
        inputs["campaign"]["value_us"].as_u64(),
        inputs["network_p99"]["value_us"].as_u64().map(|n| 2 * n),
        "commit p99 is the network p99 here (no keepalives yet): campaign is twice it"
    );
    assert_eq!(inputs["cluster_size"]["value"], 3);
    assert_eq!(inputs["cluster_size"]["source"], "measured");
    assert_eq!(inputs["scheduling_jitter"]["source"], "flag");
    assert_eq!(j["measured"]["from"], url.as_str());
    // The node's own timing, as it was configured.
    assert_eq!(inputs["election_timeout"]["value_us"], 400_000, "{j}");
    assert_eq!(inputs["heartbeat"]["value_us"], 40_000, "{j}");
    let how = inputs["election_timeout"]["from"].as_str().expect("text");
    assert!(how.contains("configured election_timeout_ms"), "{how}");
    assert_eq!(
        inputs["missed_beats"]["value"], 10,
        "derived from the node's timing"
    );

    // The text report says where the numbers came from, and a flag beats a measurement.
    let out = plan_from(
        &url,
        &ca,
        &[&with_cert[..], &["--network-p99", "7ms"]].concat(),
        None,
    )
    .await;
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("Measured from {url}\n")),
        "{text}"
    );
    assert!(text.contains("network p99        7 ms      flag"), "{text}");
    assert!(
        text.contains("cluster size       3         measured: the voters in /status"),
        "{text}"
    );

    // No client certificate and no token: the node's HTTP port refuses.
    let out = plan_from(&url, &ca, &[], None).await;
    let err = refused(&out, "refused (401)");
    assert!(stdout(&out).is_empty());
    assert!(err.contains("--token-file"), "{err}");
}

/// `--from` with a bearer token instead of a client certificate (`--token-file`, then
/// `$TENURE_TOKEN_FILE`): an observer's token is let in, a token of a principal without the
/// observer or admin role is refused (403, exit 69), and no node logs either token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_a_running_cluster_with_a_bearer_token() {
    let auth = AuthFile::new(
        "[principals.admin]\nroles = [\"admin\"]\n\n[principals.ops]\nroles = [\"observer\"]\n\n\
         [principals.writer]\ngrants = [{ prefix = \"w/\", allow = [\"write\"] }]\n",
        &["ops", "writer"],
    );
    let writer = auth.token("writer");
    let observer_file = auth.beside("ops.token", &format!("{}\n", auth.token("ops")));
    // No newline after this one.
    let writer_file = auth.beside("writer.token", writer);
    // Neither token may appear in a node's log (the auth file's tokens never may).
    let c = Cluster::start(Options::nodes(3).auth_file(&auth));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(20)).await;
    let url = format!("https://{}", c.addrs(leader).http);
    let [ca, _, _] = tls_files(&c.tls().expect("TLS on").dir);

    let observer_path = observer_file.display().to_string();
    let writer_path = writer_file.display().to_string();

    let out = plan_from(&url, &ca, &["--json", "--token-file", &observer_path], None).await;
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));
    let j = json_of(&out);
    assert_eq!(j["inputs"]["cluster_size"]["source"], "measured", "{j}");

    let out = plan_from(&url, &ca, &["--json"], Some(&observer_path)).await;
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", stderr(&out));

    let out = plan_from(&url, &ca, &["--json", "--token-file", &writer_path], None).await;
    let err = refused(&out, "refused (403)");
    assert!(!err.contains(writer), "the token is not printed");
}
