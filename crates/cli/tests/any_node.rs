//! The CLI reaches the cluster through any node: `tenure campaign` and `tenure leader`
//! with a `--backend` URL naming only node 1 while node 2 leads, and against a cluster whose
//! `--node` flags and URL name the nodes `localhost`. Real 3-node clusters from the
//! workspace's harness (`tenure-testkit`), TLS and client authentication on.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tenure_testkit::{secs, Cluster, Options};

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// A `tenure://` URL naming only `host` (node 1's client port), with the cluster's TLS files.
fn url_for(c: &Cluster, host: &str) -> String {
    let query = c
        .url()
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("tenure://{host}:{}{query}", c.addrs(1).client.port())
}

/// `tenure campaign` started on `url`: its first stdout line (the token), read within 20 s.
fn campaign(url: &str, election: &str, value: &str) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["campaign", "--election", election, "--value", value])
        .args(["--ttl", "5s", "--backend", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tenure campaign");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(line) if !line.trim().is_empty() => (child, line.trim().to_string()),
        got => {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect tenure campaign");
            panic!(
                "tenure campaign printed no token ({got:?}); status {:?}, stderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// `tenure leader` on `url`: its stdout, asserting exit 0.
fn leader(url: &str, election: &str) -> String {
    let out = Command::new(BIN)
        .args(["leader", "--election", election, "--backend", url])
        .output()
        .expect("run tenure leader");
    assert!(
        out.status.success(),
        "tenure leader exited {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Campaign, read the leader, and stop the holder (SIGTERM: it resigns and exits 0).
fn campaign_and_read_the_leader(url: &str, election: &str) {
    let (mut holder, token) = campaign(url, election, "holder-a");
    token
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("tenure campaign printed {token:?}, not a token"));
    let shown = leader(url, election);
    assert!(
        shown.contains(&format!("token={token}")) && shown.contains("value=holder-a"),
        "tenure leader printed {shown:?}, holder has token {token}"
    );
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe { libc::kill(holder.id() as libc::pid_t, libc::SIGTERM) };
    let status = holder.wait().expect("wait for tenure campaign");
    assert_eq!(status.code(), Some(0), "tenure campaign after SIGTERM");
}

/// The README's setup with node 2 leading: a URL naming only node 1 works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_and_leader_work_with_only_node_1_in_the_url_while_node_2_leads() {
    let mut c = Cluster::start(Options::nodes(3));
    c.move_leadership(2, secs(20)).await;
    let url = url_for(&c, "127.0.0.1");
    tokio::task::spawn_blocking(move || campaign_and_read_the_leader(&url, "only-node-1"))
        .await
        .expect("the CLI checks ran");
    assert!(c.status_of(2).await.is_leader(), "node 2 led throughout");
}

/// `--node ID=localhost:P,localhost:C,localhost:H` on every server, `tenure://localhost:P`
/// in the URL (TLS checks the name `localhost` in the node certificates), node 3 leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_and_leader_work_against_nodes_named_localhost() {
    let mut c = Cluster::start(Options::nodes(3).node_host("localhost"));
    c.move_leadership(3, secs(20)).await;
    let url = url_for(&c, "localhost");
    tokio::task::spawn_blocking(move || campaign_and_read_the_leader(&url, "named"))
        .await
        .expect("the CLI checks ran");
}
