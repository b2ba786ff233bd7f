//! `tenure members add` grows a running 3-node cluster to 5 and `tenure members remove`
//! shrinks it back to 3, without restarting any process, while writers keep writing: no
//! writer sees an error and every acknowledged write is read back. The new nodes are started
//! with `--join` and only the existing nodes' addresses; the running nodes learn theirs from
//! the replicated membership. A real cluster from the workspace's harness, TLS and client
//! authentication on.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tenure_testkit::{missing_keys, secs, Cluster, NodeAddrs, Options, Writers};

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// `tenure members ARGS --backend URL --json` off the runtime's threads, with its duration.
async fn members(url: &str, args: &[&str]) -> (Output, Duration) {
    let mut cmd = Command::new(BIN);
    cmd.arg("members")
        .args(args)
        .args(["--backend", url, "--json"])
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let out = cmd.output().expect("run tenure members");
        (out, start.elapsed())
    })
    .await
    .expect("the command's thread")
}

async fn ok(url: &str, args: &[&str]) -> Duration {
    let (out, took) = members(url, args).await;
    assert!(
        out.status.success(),
        "tenure members {args:?} exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// `(id, voter)` of every member, from `tenure members list --json`.
async fn listed(url: &str) -> Vec<(u64, bool)> {
    let (out, _) = members(url, &["list"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_json::from_str(line.trim()).expect("one JSON line");
    v["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| (m["id"].as_u64().unwrap(), m["voter"].as_bool().unwrap()))
        .collect()
}

fn spec(id: u64, a: NodeAddrs) -> String {
    format!("{id}={},{},{}", a.peer, a.client, a.http)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_add_grows_three_to_five_and_remove_shrinks_it_back_under_writes() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let url = c.url();
    let writers = Writers::start(&mut c, &[1, 2, 3], 2).await;
    writers.go_on("writes before the change").await;
    let mut timings = Vec::new();

    // Node 4 as a learner, caught up, then promoted; node 5 straight in as a voter.
    let four = c.add_joining_node(4);
    timings.push((
        "add 4 --learner",
        ok(&url, &["add", &spec(4, four), "--learner"]).await,
    ));
    assert!(listed(&url).await.contains(&(4, false)));
    c.wait_caught_up(leader, &[4], secs(20)).await;
    timings.push(("promote 4", ok(&url, &["promote", "4"]).await));
    writers.go_on("writes after adding node 4").await;
    let five = c.add_joining_node(5);
    timings.push(("add 5", ok(&url, &["add", &spec(5, five)]).await));
    writers.go_on("writes after adding node 5").await;
    assert_eq!(
        listed(&url).await,
        (1..=5).map(|id| (id, true)).collect::<Vec<_>>()
    );
    c.wait_caught_up(leader, &[4, 5], secs(20)).await;
    for id in 1..=5 {
        assert!(
            c.is_running(id),
            "node {id} runs the process it started with"
        );
    }

    timings.push(("remove 5", ok(&url, &["remove", "5"]).await));
    timings.push(("remove 4", ok(&url, &["remove", "4"]).await));
    writers.go_on("writes after the removals").await;
    assert_eq!(
        listed(&url).await,
        (1..=3).map(|id| (id, true)).collect::<Vec<_>>()
    );

    let (acked, errors) = writers.stop().await;
    assert!(errors.is_empty(), "writers saw errors: {errors:#?}");
    let missing = missing_keys(&c.client_for(&[1, 2, 3]), &acked).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    for (what, took) in timings {
        println!("tenure members {what}: {took:?} (the whole command)");
    }
    println!(
        "{} writes acknowledged during the changes, none failed",
        acked.len()
    );
}
