//! Disaster recovery on real processes (`tenure server` children of the workspace's harness,
//! TLS and client authentication on; the `tenure` binary's `backup`, `restore` and
//! `recover`), with a real PostgreSQL fenced by `tenure::fence::postgres`:
//!
//! - a backup taken while a leader writes, more leaderships after it, the cluster destroyed
//!   and restored from the backup: the restored state is a prefix of the writes (every write
//!   acknowledged before the backup began is in it, none started after it ended), the first
//!   leader of the restored cluster gets a token above every token of the old one, its
//!   writes are accepted by the fenced table and by fenced keys, and the holders from before
//!   and after the backup are refused by both;
//! - a 5-node cluster whose two survivors stopped hearing while the other three (a majority)
//!   handed out one more token, then lost those three: `tenure recover` refuses the survivor
//!   with the shorter log (if they differ) and takes the other; every write the survivors
//!   held is still there, the next token is above the one they never saw, and a returning
//!   old member is refused at the handshake.

use std::process::Command;
use std::time::{Duration, Instant};

use postgres::NoTls;
use tenure::fence::postgres::{self as fence, PgFenceError};
use tenure::{CampaignOptions, Client, Error};
use tenure_testkit::{tenure_binary, Cluster, Options};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

fn opts() -> CampaignOptions {
    CampaignOptions {
        ttl: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Runs the `tenure` binary; its stdout, or a panic with its stderr.
fn tenure(args: &[&str]) -> String {
    let out = Command::new(tenure_binary())
        .args(args)
        .output()
        .expect("run tenure");
    assert!(
        out.status.success(),
        "tenure {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The fenced table's verdict on a write with `token`.
fn pg_write(db: &mut postgres::Client, token: u64, what: &str) -> Result<(), PgFenceError> {
    fence::execute_fenced(
        db,
        "books",
        token,
        "INSERT INTO closed(day, by) VALUES ('2026-12-07', $1) \
         ON CONFLICT (day) DO UPDATE SET by = EXCLUDED.by",
        &[&what],
    )
    .map(|_| ())
}

const ELECTION: &str = "books";
const KEY: &str = "books/closed";

#[test]
fn a_restored_cluster_never_reissues_a_token_and_holds_a_prefix_of_the_writes() {
    let pg = tenure_testkit::services::Service::postgres_with_password("disaster-password");
    let mut db = postgres::Client::connect(&pg.url, NoTls).expect("connect to PostgreSQL");
    fence::install(&mut db).expect("install the fence");
    db.batch_execute("CREATE TABLE closed(day TEXT PRIMARY KEY, by TEXT NOT NULL)")
        .expect("a table");
    let mut cluster = Cluster::start(Options::nodes(3));
    let url = cluster.url();
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("cluster.backup");

    // a leads and writes; a backup is taken while a writes a sequence of keys.
    let (a_token, acked_before, started_before_end) = rt.block_on(async {
        let c = Client::connect(&url).await.expect("connect");
        let a = c.campaign(ELECTION, b"a", opts()).await.expect("a leads");
        a.fenced_put(KEY, b"a").await.expect("a writes the key");
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let started = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (c, acked, started, stop) =
                (c.clone(), acked.clone(), started.clone(), stop.clone());
            let token = a.token();
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    i += 1;
                    started.store(i, std::sync::atomic::Ordering::SeqCst);
                    c.fenced_put(&format!("seq/{i:06}"), b"x", ELECTION, token)
                        .await
                        .expect("a sequential write");
                    acked.store(i, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let lo = acked.load(std::sync::atomic::Ordering::SeqCst);
        let (file, url) = (file.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            tenure(&[
                "backup",
                "--out",
                file.to_str().expect("a path"),
                "--backend",
                &url,
            ])
        })
        .await
        .expect("the backup");
        let hi = started.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        writer.await.expect("the writer");
        (a.token(), lo, hi)
    });
    pg_write(&mut db, a_token, "a").expect("a's write to the table");
    let verified = tenure(&["backup", "verify", file.to_str().expect("a path")]);
    assert!(verified.starts_with("ok: "), "{verified}");

    // After the backup: b leads with a higher token and writes both stores.
    let b_token = rt.block_on(async {
        let c = Client::connect(&url).await.expect("connect");
        let b = c.campaign(ELECTION, b"b", opts());
        let b = tokio::time::timeout(Duration::from_secs(10), b)
            .await
            .expect("b leads in time (a's lease runs out)")
            .expect("b leads");
        b.fenced_put(KEY, b"b").await.expect("b writes the key");
        b.token()
    });
    assert!(b_token > a_token);
    pg_write(&mut db, b_token, "b").expect("b's write to the table");

    // The cluster is destroyed, and restored from the backup into the same places.
    for id in cluster.ids() {
        cluster.kill(id);
        std::fs::remove_dir_all(cluster.data_dir(id)).expect("remove the data directory");
    }
    for id in cluster.ids() {
        let out = tenure(&[
            "restore",
            file.to_str().expect("a path"),
            "--data-dir",
            cluster.data_dir(id).to_str().expect("a path"),
            "--id",
            &id.to_string(),
            "--node",
            "1",
            "--node",
            "2",
            "--node",
            "3",
        ]);
        eprintln!("{}", out.trim());
    }
    for id in cluster.ids() {
        cluster.start_node(id);
    }
    let n_token = rt.block_on(async {
        cluster
            .wait_for_leader(&cluster.ids(), Duration::from_secs(20))
            .await;
        let c = Client::connect(&url).await.expect("connect");
        // A prefix of the writes: every key up to some m, none after, m in [lo, hi].
        let mut m = 0;
        for i in 1..=started_before_end + 5 {
            let present = c.get(&format!("seq/{i:06}")).await.expect("read").is_some();
            if present {
                assert_eq!(m, i - 1, "seq/{i:06} is there but seq/{:06} is not", m + 1);
                m = i;
            }
        }
        assert!(
            (acked_before..=started_before_end).contains(&m),
            "the backup holds writes 1..={m}: acknowledged before it began {acked_before}, \
             started before it ended {started_before_end}"
        );
        eprintln!(
            "the backup holds writes 1..={m} ({acked_before} acknowledged before it began, \
             {started_before_end} started before it ended)"
        );
        // The first leader of the restored cluster: above every old token.
        let n = c.campaign(ELECTION, b"n", opts()).await.expect("n leads");
        assert!(
            n.token() > b_token,
            "the restored cluster's first token {} is not above the old cluster's {b_token}",
            n.token()
        );
        n.fenced_put(KEY, b"n")
            .await
            .expect("n's first write to the key");
        for (who, token) in [("a", a_token), ("b", b_token)] {
            let refused = c.fenced_put(KEY, who.as_bytes(), ELECTION, token).await;
            assert!(
                matches!(refused, Err(Error::StaleToken { .. })),
                "{who}'s write with token {token}: {refused:?}"
            );
        }
        assert_eq!(
            c.get(KEY).await.expect("read").map(|v| v.value),
            Some(b"n".to_vec())
        );
        n.token()
    });
    pg_write(&mut db, n_token, "n").expect("n's first write to the table");
    for (who, token) in [("a", a_token), ("b", b_token)] {
        let refused = pg_write(&mut db, token, who);
        assert!(
            matches!(refused, Err(PgFenceError::StaleToken { .. })),
            "{who}'s write with token {token} to the table: {refused:?}"
        );
    }
}

#[test]
fn recover_from_a_lost_majority_keeps_the_survivors_writes_and_refuses_old_members() {
    let mut cluster = Cluster::start(Options::nodes(5));
    let url = cluster.url();
    let rt = runtime();
    let (leader, _) = rt.block_on(cluster.wait_for_leader(&cluster.ids(), Duration::from_secs(20)));
    // Three members will be lost, the Raft leader among them; two survive.
    let others = cluster.others(&[leader]);
    let lost = [leader, others[0], others[1]];
    let survivors = [others[2], others[3]];
    let written = rt.block_on(async {
        let c = Client::connect(&url).await.expect("connect");
        let a = c.campaign(ELECTION, b"a", opts()).await.expect("a leads");
        let mut written = Vec::new();
        for i in 0..50 {
            let key = format!("acked/{i:03}");
            a.fenced_put(&key, b"x")
                .await
                .expect("an acknowledged write");
            written.push(key);
        }
        // The survivors hold every one of them.
        cluster
            .wait_caught_up(leader, &survivors, Duration::from_secs(20))
            .await;
        a.resign().await.expect("a resigns");
        written
    });
    // The survivors stop hearing (paused) while the lost three, a majority, go on: a new
    // holder gets a token the survivors never learn of.
    for id in survivors {
        cluster.pause(id);
    }
    let unseen_token = rt.block_on(async {
        let c = Client::connect(&url).await.expect("connect");
        let b = c.campaign(ELECTION, b"b", opts()).await.expect("b leads");
        b.fenced_put("unseen", b"b").await.expect("b writes");
        b.token()
    });
    for id in lost {
        cluster.kill(id);
    }
    for id in survivors {
        cluster.resume(id);
        cluster.kill(id);
    }
    let dir = |id: u64| cluster.data_dir(id).to_str().expect("a path").to_string();
    // Recover on the survivor with the longer log: the other is refused if its log is
    // shorter (with equal logs, either one is accepted).
    let attempt = |this: u64, other: u64| {
        Command::new(tenure_binary())
            .args([
                "recover",
                "--data-dir",
                &dir(this),
                "--survivor",
                &dir(other),
            ])
            .output()
            .expect("run tenure recover")
    };
    let first = attempt(survivors[0], survivors[1]);
    let chosen = if first.status.success() {
        survivors[0]
    } else {
        let why = String::from_utf8_lossy(&first.stderr);
        assert!(why.contains("holds a longer log"), "{why}");
        let second = attempt(survivors[1], survivors[0]);
        assert!(
            second.status.success(),
            "{}",
            String::from_utf8_lossy(&second.stderr)
        );
        survivors[1]
    };
    cluster.start_node(chosen);
    let chosen_url = {
        let a = cluster.addrs(chosen);
        let query = url.split_once('?').map_or("", |(_, q)| q);
        format!("tenure://{}?{query}", a.client)
    };
    rt.block_on(async {
        cluster
            .wait_for_leader(&[chosen], Duration::from_secs(20))
            .await;
        let c = Client::connect(&chosen_url).await.expect("connect");
        for key in &written {
            assert!(
                c.get(key).await.expect("read").is_some(),
                "{key} was acknowledged and is gone"
            );
        }
        // Above every token the lost majority handed out, the one the survivor never saw
        // included.
        let n = c.campaign(ELECTION, b"n", opts()).await.expect("n leads");
        assert!(
            n.token() > unseen_token,
            "the recovered cluster's first token {} is not above the lost majority's \
             {unseen_token}",
            n.token()
        );
        let stale = c
            .fenced_put("acked/000", b"late", ELECTION, unseen_token)
            .await;
        assert!(matches!(stale, Err(Error::StaleToken { .. })), "{stale:?}");
    });
    // A lost member comes back with its old data: refused at the handshake.
    let returning = lost[1];
    cluster.start_node(returning);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = format!("{}\n{}", cluster.log(chosen), cluster.log(returning));
        if logs.contains("does not match ours") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no handshake refusal in 10 s:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
