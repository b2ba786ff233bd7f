//! `tenure measure takeover`: how long a waiting candidate takes to lead after the holder
//! crashes (keepalives stop, nothing revoked) or resigns, on every client backend.
//!
//! For each backend the servers are started here (`scripts/services.sh start-*` for etcd,
//! PostgreSQL and ZooKeeper; a local cluster of `tenure server` processes, as in
//! `measure failover`, for `tenure`) and stopped at the end.
//!
//! - crash: A leads, B has joined and is awaiting `Candidate::leadership()` in its own task;
//!   t0 = `A.stop_keepalives()`; the time is t0 → B's `leadership()` returns. A is kept (not
//!   dropped) until then, because dropping a `Leadership` revokes its session in the
//!   background, which would be a resign, not a crash. Also shown minus the requested TTL.
//! - resign: same set-up; t0 = the start of `A.resign()`.
//!
//! The herd measurement (waiters woken per change) is not here: the client crate exposes no
//! count of wake-ups.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use tenure::{CampaignOptions, Client};

use super::{as_ms, build_kind, percentile, secs, LocalCluster, Timing};

#[derive(Debug, Args)]
pub(super) struct TakeoverArgs {
    /// memory: | tenure | etcd | postgres | zk | all
    #[arg(long, default_value = "all")]
    backend: String,
    /// Trials per backend and scenario.
    #[arg(long, default_value_t = 10)]
    trials: usize,
    /// Session TTL in milliseconds (etcd rounds up to whole seconds; ZooKeeper negotiates).
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
}

/// A server started by `scripts/services.sh`, stopped when dropped.
struct Service {
    kind: &'static str,
    dir: tempfile::TempDir,
}

fn services() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/services.sh")
}

impl Service {
    fn start(kind: &'static str) -> anyhow::Result<(Service, String)> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-takeover-{kind}-"))
            .tempdir()
            .context("a temporary directory")?;
        let out = Command::new("bash")
            .arg(services())
            .arg(format!("start-{kind}"))
            .arg(dir.path())
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .output()
            .context("run scripts/services.sh")?;
        if !out.status.success() {
            bail!(
                "could not start {kind}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let url = String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_string();
        Ok((Service { kind, dir }, url))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(services())
            .arg(format!("stop-{}", self.kind))
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status();
    }
}

struct Row {
    backend: String,
    scenario: &'static str,
    samples: Vec<Duration>,
    minus_ttl: bool,
    ttl_est: Option<Duration>,
}

pub(super) async fn takeover(args: TakeoverArgs) -> anyhow::Result<()> {
    if args.trials == 0 {
        bail!("--trials must be positive");
    }
    let all = ["memory", "tenure", "etcd", "postgres", "zk"];
    let chosen: Vec<&str> = match args.backend.trim_end_matches(':') {
        "all" => all.to_vec(),
        b => match all.iter().find(|x| **x == b) {
            Some(x) => vec![*x],
            None => bail!("unknown backend {b:?}: memory: | tenure | etcd | postgres | zk | all"),
        },
    };
    let ttl = Duration::from_millis(args.ttl_ms);
    println!(
        "takeover: {} trials per backend and scenario, requested TTL {} ms, {} build",
        args.trials,
        args.ttl_ms,
        build_kind()
    );
    let mut rows = Vec::new();
    for backend in chosen {
        // Keep whatever serves the backend alive for the backend's trials.
        let mut cluster = None;
        let mut service = None;
        let url = match backend {
            "memory" => format!("memory:takeover-{}", std::process::id()),
            "tenure" => {
                let timing = Timing {
                    nodes: 3,
                    election_timeout_ms: 150,
                    heartbeat_ms: 30,
                    tick_ms: 10,
                    keep_dir: false,
                };
                let c = LocalCluster::start(&timing)?;
                c.wait_for_leader(&c.ids(), secs(15)).await?;
                let url = format!(
                    "tenure://{}",
                    c.ids()
                        .iter()
                        .map(|id| c.addrs[id][1].to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                );
                cluster = Some(c);
                url
            }
            "etcd" | "postgres" | "zk" => {
                let kind = match backend {
                    "etcd" => "etcd",
                    "postgres" => "postgres",
                    _ => "zookeeper",
                };
                match Service::start(kind) {
                    Ok((s, url)) => {
                        service = Some(s);
                        url
                    }
                    Err(e) => {
                        eprintln!("takeover: skipping {backend}: {e:#}");
                        continue;
                    }
                }
            }
            _ => unreachable!(),
        };
        eprintln!("takeover: {backend} at {url}");
        let result = measure_backend(&url, backend, args.trials, ttl).await;
        match result {
            Ok(mut r) => rows.append(&mut r),
            Err(e) => eprintln!("takeover: {backend} failed: {e:#}"),
        }
        if let Some(c) = cluster.take() {
            c.finish(false);
        }
        drop(service);
    }
    print_table(&mut rows, ttl);
    Ok(())
}

fn opts(ttl: Duration) -> CampaignOptions {
    CampaignOptions {
        ttl,
        ..Default::default()
    }
}

async fn measure_backend(
    url: &str,
    backend: &str,
    trials: usize,
    ttl: Duration,
) -> anyhow::Result<Vec<Row>> {
    let pid = std::process::id();
    let a = Client::connect(url).await.context("connect A")?;
    let b = Client::connect(url).await.context("connect B")?;
    let mut crash = Vec::new();
    let mut resign = Vec::new();
    let mut ttl_est = Vec::new();
    let mut lags = Vec::new();
    for trial in 0..trials {
        // Crash.
        let election = format!("takeover-crash-{pid}-{trial}");
        let before = Instant::now();
        let holder = a
            .campaign(&election, b"a", opts(ttl))
            .await
            .context("A campaigns")?;
        // valid_until = grant send time + granted TTL − margin (2 × 1 % × TTL + 10 ms).
        let est = holder.valid_until().saturating_duration_since(before);
        let est = est.mul_f64(1.0 / 0.98) + Duration::from_millis(10);
        ttl_est.push(est);
        let standby = b
            .join(&election, b"b", opts(ttl))
            .await
            .context("B joins")?;
        let waiter = tokio::spawn(async move {
            let r = standby.leadership().await;
            (r, Instant::now())
        });
        // Let B's task start waiting.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        holder.stop_keepalives();
        // The lease's end as the holder sees it: last acknowledged keepalive's send + TTL.
        let lease_end = holder.valid_until() + ttl.mul_f64(0.02) + Duration::from_millis(10);
        let (r, at) = tokio::time::timeout(ttl * 10 + secs(10), waiter)
            .await
            .context("B never led after the crash")??;
        let next = r.context("B's leadership")?;
        let took = at - t0;
        if next.token() <= holder.token() {
            bail!("token did not rise");
        }
        drop(holder);
        crash.push(took);
        let lag = at.saturating_duration_since(lease_end);
        lags.push(lag);
        eprintln!(
            "  {backend} crash  trial {:>2}: {:>8.1} ms, {:>7.1} ms after the holder's lease end (est. granted TTL {:.0} ms)",
            trial + 1,
            as_ms(took),
            as_ms(lag),
            as_ms(est)
        );
        next.resign().await.context("B resigns")?;

        // Resign.
        let election = format!("takeover-resign-{pid}-{trial}");
        let holder = a
            .campaign(&election, b"a", opts(ttl))
            .await
            .context("A campaigns")?;
        let standby = b
            .join(&election, b"b", opts(ttl))
            .await
            .context("B joins")?;
        let waiter = tokio::spawn(async move {
            let r = standby.leadership().await;
            (r, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        holder.resign().await.context("A resigns")?;
        let (r, at) = tokio::time::timeout(ttl * 10 + secs(10), waiter)
            .await
            .context("B never led after the resign")??;
        let next = r.context("B's leadership")?;
        let took = at - t0;
        resign.push(took);
        eprintln!(
            "  {backend} resign trial {:>2}: {:>8.1} ms",
            trial + 1,
            as_ms(took)
        );
        next.resign().await.context("B resigns")?;
    }
    ttl_est.sort();
    let est = Some(ttl_est[ttl_est.len() / 2]);
    let name = if backend == "memory" {
        "memory:"
    } else {
        backend
    };
    Ok(vec![
        Row {
            backend: name.to_string(),
            scenario: "crash",
            samples: crash,
            minus_ttl: true,
            ttl_est: est,
        },
        Row {
            backend: name.to_string(),
            scenario: "crash, from lease end",
            samples: lags,
            minus_ttl: false,
            ttl_est: None,
        },
        Row {
            backend: name.to_string(),
            scenario: "resign",
            samples: resign,
            minus_ttl: false,
            ttl_est: None,
        },
    ])
}

fn print_table(rows: &mut [Row], ttl: Duration) {
    println!();
    println!(
        "{:<9} {:<22} {:>3} {:>10} {:>10} {:>10}   {:>14} {:>14} {:>14}   {:>13}",
        "backend",
        "case",
        "n",
        "median ms",
        "p90 ms",
        "max ms",
        "median-TTL ms",
        "p90-TTL ms",
        "max-TTL ms",
        "granted TTL≈"
    );
    for r in rows.iter_mut() {
        r.samples.sort();
        let s = &r.samples;
        let (m, p, x) = (percentile(s, 50.0), percentile(s, 90.0), s[s.len() - 1]);
        let minus = |d: Duration| as_ms(d) - as_ms(ttl);
        let tail = if r.minus_ttl {
            format!("{:>14.1} {:>14.1} {:>14.1}", minus(m), minus(p), minus(x))
        } else {
            format!("{:>14} {:>14} {:>14}", "-", "-", "-")
        };
        println!(
            "{:<9} {:<22} {:>3} {:>10.1} {:>10.1} {:>10.1}   {}   {:>13}",
            r.backend,
            r.scenario,
            s.len(),
            as_ms(m),
            as_ms(p),
            as_ms(x),
            tail,
            r.ttl_est
                .map(|d| format!("{:.0} ms", as_ms(d)))
                .unwrap_or_else(|| "-".into())
        );
    }
    println!("(TTL subtracted is the requested {} ms, counted from t0 although the lease runs from the last keepalive (renewed every TTL/4), hence negative values; crash, from lease end = B leads minus (last acknowledged keepalive send + TTL) on this process's clock; granted TTL≈ is estimated from the holder's valid_until and may overstate it by the grant round trip; percentiles are nearest-rank)", ttl.as_millis());
}
