//! The dashboard in a real browser (headless Debian chromium driven by playwright-core, see
//! tests/browser/lib.mjs): a live 3-node cluster with TLS and an auth file; the page, opened
//! on a follower with an observer's bearer token, shows the leader; this test kills the
//! leader's process; the page shows the new leader and the election in its event log; an
//! election with its holder and token and its session are listed.
//! Screenshots are written to the browser harness's artifact directory and their paths
//! printed. Needs `scripts/services.sh install-browser` (chromium and the npm package).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use tenure_testkit::*;

const AUTH_FILE: &str = r#"
# The harness's own client certificate.
[principals.admin]
roles = ["admin"]

# The browser: an observer, and an operator who may act.
[principals.viewer]
roles = ["observer"]

[principals.operator]
roles = ["admin"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_leader_then_after_it_is_killed_the_new_leader_and_the_election() {
    // No node may log either token (the auth file's tokens are forbidden in logs).
    let auth = AuthFile::new(AUTH_FILE, &["viewer", "operator"]);
    let mut c = Cluster::start(Options::nodes(3).auth_file(&auth));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    // An election with a holder, for the page's tables (the session is not kept alive: it
    // expires after its TTL, long after the page has looked).
    c.client().writer_token("billing/nightly").await;

    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = workspace.join("tests/browser/dashboard.mjs");
    let nodes: Vec<String> = c.ids().iter().map(u64::to_string).collect();
    let mut browser = Command::new("node")
        .arg(&script)
        .arg(format!("https://{}/", c.addrs(follower).http))
        .env("TENURE_TEST_CERTS", &c.tls().expect("TLS is on").dir)
        .env("TENURE_TEST_NODES", nodes.join(","))
        .env("TENURE_VIEWER_TOKEN", auth.token("viewer"))
        .env("TENURE_ADMIN_TOKEN", auth.token("operator"))
        .env("TENURE_EXPECT_LEADER", leader.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node (install it with scripts/services.sh install-browser)");
    let (lines_tx, lines) = mpsc::channel::<String>();
    let stdout = browser.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("browser: {line}");
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = browser.stderr.take().expect("piped stderr");
    let errors = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("browser: {line}");
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let wait_line = |prefix: &str, within: Duration| -> Option<String> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(std::time::Instant::now())?;
            let line = lines.recv_timeout(left).ok()?;
            if let Some(rest) = line.strip_prefix(prefix) {
                return Some(rest.trim().to_string());
            }
        }
    };

    let shown = wait_line("leader: ", secs(90));
    let Some(shown) = shown else {
        let _ = browser.kill();
        let status = browser.wait().expect("wait for node");
        panic!(
            "the page never showed a leader (node exited {status}); stderr:\n{}",
            errors.join().unwrap_or_default()
        );
    };
    assert_eq!(
        shown,
        leader.to_string(),
        "the page shows the cluster's leader"
    );
    c.kill(leader);
    writeln!(browser.stdin.as_mut().expect("piped stdin"), "killed").expect("tell the browser");

    let new_leader = wait_line("new leader: ", secs(90));
    let status = browser.wait().expect("wait for node");
    let stderr = errors.join().unwrap_or_default();
    assert!(
        status.success(),
        "the browser test failed ({status}):\n{stderr}"
    );
    let new_leader: u64 = new_leader
        .expect("the page named the new leader")
        .parse()
        .expect("a node id");
    let (agreed, _) = c.wait_for_leader(&c.others(&[leader]), secs(10)).await;
    assert_eq!(
        agreed, new_leader,
        "the page shows the leader the cluster has"
    );
    c.assert_logs_hold_no_credentials();
}

/// A person's way in: `tenure certs --p12 admin` writes the admin client's bundle, the
/// browser presents it (tests/browser/dashboard_p12.mjs), and the dashboard names the
/// principal; without it the 401 says which command makes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_with_the_admin_bundle_gets_the_dashboard_and_one_without_is_told_how() {
    let c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let certs = &c.tls().expect("TLS is on").dir;
    tenure_transport::certs::bundle_p12(certs, ADMIN_CLIENT).expect("the admin's bundle");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("node")
        .arg(workspace.join("tests/browser/dashboard_p12.mjs"))
        .arg(format!("https://{}/", c.addrs(leader).http))
        .env("TENURE_TEST_CERTS", certs)
        .env("TENURE_TEST_NODE", leader.to_string())
        // The browser's client-certificate proxy checks the node against the test CA.
        .env("NODE_EXTRA_CA_CERTS", certs.join("ca.pem"))
        .output()
        .expect("run node (install it with scripts/services.sh install-browser)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "dashboard_p12.mjs failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
