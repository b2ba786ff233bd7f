//! `tenure measure`: figures for the closing note, taken from a real cluster of `tenure server`
//! processes on this machine (loopback, one temporary data directory per node).
//!
//! - `tenure measure failover --trials 20 --mode crash|pause`: repeatedly kill -9 (crash) or
//!   SIGSTOP (pause) the Raft leader while clients write, and time the fault to the first
//!   write acknowledged by a surviving node.
//! - `tenure measure write --count 1000`: one client's durable write latency (fenced Put
//!   round trip), and the nodes' fsync latency from `/metrics`.
//!
//! Not a test: it asserts nothing, it prints numbers. Build with `--release` for figures
//! worth quoting; a debug build says so in its output.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Subcommand, ValueEnum};
use tenure_proto::v1;
use tonic::transport::{Channel, Endpoint};

/// Measure failover and write latency on a local cluster.
#[derive(Debug, Args)]
pub struct MeasureArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Time from a fault of the Raft leader to the first write acknowledged by a survivor.
    Failover(FailoverArgs),
    /// Single-client durable write latency, and fsync latency from the nodes' metrics.
    Write(WriteArgs),
    /// Time for a waiting candidate to lead after the holder crashes or resigns, per backend.
    Takeover(takeover::TakeoverArgs),
}

#[path = "measure_takeover.rs"]
mod takeover;

/// The cluster's timing profile.
#[derive(Clone, Debug, Args)]
struct Timing {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Election timeout T in milliseconds.
    #[arg(long, default_value_t = 150)]
    election_timeout_ms: u64,
    /// Heartbeat interval in milliseconds.
    #[arg(long, default_value_t = 30)]
    heartbeat_ms: u64,
    /// Core tick in milliseconds.
    #[arg(long, default_value_t = 10)]
    tick_ms: u64,
    /// Keep the cluster's directory (data and node logs) instead of deleting it.
    #[arg(long)]
    keep_dir: bool,
}

/// How the leader fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// SIGKILL the leader, then restart it once a survivor has acknowledged a write.
    Crash,
    /// SIGSTOP the leader, then SIGCONT it once a survivor has acknowledged a write.
    Pause,
}

#[derive(Debug, Args)]
struct FailoverArgs {
    /// Number of faults to time.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Kill the leader or freeze it.
    #[arg(long, value_enum, default_value_t = Mode::Crash)]
    mode: Mode,
    /// Steady writing before each fault, in milliseconds.
    #[arg(long, default_value_t = 500)]
    settle_ms: u64,
    #[command(flatten)]
    timing: Timing,
}

#[derive(Debug, Args)]
struct WriteArgs {
    /// Writes to time (after 100 unmeasured warm-up writes).
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Bytes in each written value.
    #[arg(long, default_value_t = 64)]
    value_bytes: usize,
    #[command(flatten)]
    timing: Timing,
}

/// Run `tenure measure`.
pub fn run(args: MeasureArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tenure measure: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cfg!(debug_assertions) {
        eprintln!("tenure measure: this is a debug build; build with `cargo build --release -p tenure-cli` for real figures");
    }
    let result = runtime.block_on(async move {
        match args.what {
            What::Failover(a) => failover(a).await,
            What::Write(a) => write(a).await,
            What::Takeover(a) => takeover::takeover(a).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure measure: {e:#}");
            ExitCode::FAILURE
        }
    }
}

// ------------------------------------------------------------------------------------------
// Failover.

/// One acknowledged write: which node acknowledged it, and when the answer arrived.
type AckLog = Arc<Mutex<Vec<(u64, Instant)>>>;

async fn failover(args: FailoverArgs) -> anyhow::Result<()> {
    if args.trials == 0 {
        bail!("--trials must be positive");
    }
    let mut cluster = LocalCluster::start(&args.timing)?;
    let (leader, _) = cluster.wait_for_leader(&cluster.ids(), secs(15)).await?;
    let token = writer_token(&cluster, leader).await?;
    println!(
        "failover ({}): {} trials, {} nodes, election timeout {} ms, heartbeat {} ms, tick {} ms, {} build",
        match args.mode {
            Mode::Crash => "leader crash: SIGKILL, then restart",
            Mode::Pause => "leader pause: SIGSTOP, then SIGCONT",
        },
        args.trials,
        args.timing.nodes,
        args.timing.election_timeout_ms,
        args.timing.heartbeat_ms,
        args.timing.tick_ms,
        build_kind()
    );
    println!("(one writer per node issues fenced Puts to that node back to back; the time is from the signal to the first Put acknowledged by another node)");

    // One writer per node, for the whole run: a follower answers not-leader at once, so the
    // writer of whichever node leads next sees its first acknowledgement within a retry
    // interval of the moment that node can commit.
    let acks: AckLog = Arc::default();
    let mut writers = tokio::task::JoinSet::new();
    for id in cluster.ids() {
        let channel = cluster.channel(id, ms(250));
        let acks = acks.clone();
        writers.spawn(async move {
            let mut client = v1::fenced_keys_client::FencedKeysClient::new(channel);
            let mut n: u64 = 0;
            loop {
                n += 1;
                let req = v1::PutRequest {
                    key: format!("measure-{id}"),
                    value: n.to_le_bytes().to_vec(),
                    election: "measure".into(),
                    token,
                    ..Default::default()
                };
                match client.put(req).await {
                    Ok(_) => acks
                        .lock()
                        .expect("no writer panics holding the lock")
                        .push((id, Instant::now())),
                    Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                        tokio::time::sleep(ms(1)).await
                    }
                    Err(_) => tokio::time::sleep(ms(5)).await,
                }
            }
        });
    }

    let mut samples = Vec::new();
    for trial in 1..=args.trials {
        let all = cluster.ids();
        let (leader, term) = cluster.wait_for_leader(&all, secs(15)).await?;
        // Steady state: the leader's writer is acknowledged continuously.
        tokio::time::sleep(ms(args.settle_ms)).await;
        let before = acks
            .lock()
            .expect("lock")
            .iter()
            .filter(|(n, _)| *n == leader)
            .count();
        if before == 0 {
            bail!("trial {trial}: no write was acknowledged by leader {leader} before the fault");
        }
        let fault = Instant::now();
        match args.mode {
            Mode::Crash => cluster.kill(leader)?,
            Mode::Pause => cluster.signal(leader, libc::SIGSTOP)?,
        }
        let (by, at) = loop {
            let first = acks
                .lock()
                .expect("lock")
                .iter()
                .find(|(n, t)| *n != leader && *t > fault)
                .copied();
            if let Some(found) = first {
                break found;
            }
            if fault.elapsed() > secs(15) {
                bail!("trial {trial}: no survivor acknowledged a write within 15 s of the fault");
            }
            tokio::time::sleep(ms(1)).await;
        };
        let took = at - fault;
        samples.push(took);
        let survivors: Vec<u64> = all.iter().copied().filter(|n| *n != leader).collect();
        let (new_leader, new_term) = cluster.wait_for_leader(&survivors, secs(15)).await?;
        println!(
            "trial {trial:>2}: {} leader {leader} (term {term}); first write acknowledged by node {by} after {:>7.1} ms; new leader {new_leader} (term {new_term})",
            match args.mode {
                Mode::Crash => "killed",
                Mode::Pause => "paused",
            },
            as_ms(took)
        );
        match args.mode {
            Mode::Crash => cluster.start_node(leader)?,
            Mode::Pause => cluster.signal(leader, libc::SIGCONT)?,
        }
        cluster.wait_caught_up(new_leader, leader, secs(15)).await?;
        acks.lock().expect("lock").retain(|(_, t)| *t > fault);
    }
    writers.abort_all();

    println!(
        "failover after leader {}: {}",
        match args.mode {
            Mode::Crash => "crash (SIGKILL)",
            Mode::Pause => "pause (SIGSTOP)",
        },
        summary(&mut samples, &[50.0, 90.0])
    );
    cluster.finish(args.timing.keep_dir);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Write latency.

async fn write(args: WriteArgs) -> anyhow::Result<()> {
    if args.count == 0 {
        bail!("--count must be positive");
    }
    let cluster = LocalCluster::start(&args.timing)?;
    let (leader, _) = cluster.wait_for_leader(&cluster.ids(), secs(15)).await?;
    let token = writer_token(&cluster, leader).await?;
    let mut client =
        v1::fenced_keys_client::FencedKeysClient::new(cluster.channel(leader, secs(5)));
    let value = vec![0x5a; args.value_bytes];
    let put = |i: usize| v1::PutRequest {
        key: format!("write-{i}"),
        value: value.clone(),
        election: "measure".into(),
        token,
        ..Default::default()
    };
    for i in 0..100 {
        client.put(put(i)).await.context("warm-up write")?;
    }
    let mut before = BTreeMap::new();
    for id in cluster.ids() {
        before.insert(id, cluster.metrics(id).await?);
    }
    let mut latencies = Vec::with_capacity(args.count);
    let started = Instant::now();
    for i in 0..args.count {
        let t = Instant::now();
        client
            .put(put(100 + i))
            .await
            .with_context(|| format!("write {i}"))?;
        latencies.push(t.elapsed());
    }
    let total = started.elapsed();

    println!(
        "durable writes: {} fenced Puts of {} bytes, one client, one at a time, to the leader of {} nodes (election timeout {} ms, heartbeat {} ms, tick {} ms), {} build",
        args.count,
        args.value_bytes,
        args.timing.nodes,
        args.timing.election_timeout_ms,
        args.timing.heartbeat_ms,
        args.timing.tick_ms,
        build_kind()
    );
    println!("round trip: {}", summary(&mut latencies, &[50.0, 99.0]));
    println!(
        "throughput: {:.0} writes/s",
        args.count as f64 / total.as_secs_f64()
    );
    println!("fsync (WAL write + fsync per persist, tenure_fsync_seconds, during the timed writes only; the median is estimated from histogram buckets by linear interpolation, the mean is exact):");
    for id in cluster.ids() {
        let after = cluster.metrics(id).await?;
        let role = if id == leader { "leader" } else { "follower" };
        let fsync = Histogram::between(&before[&id], &after, "tenure_fsync_seconds");
        let commit = Histogram::between(&before[&id], &after, "tenure_commit_latency_seconds");
        let mut line = format!("  node {id} ({role}): {}", fsync.describe());
        if id == leader {
            line.push_str(&format!(
                "; commit latency (propose to apply): {}",
                commit.describe()
            ));
        }
        println!("{line}");
    }
    cluster.finish(args.timing.keep_dir);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Statistics.

fn as_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(samples: &mut [Duration], percentiles: &[f64]) -> String {
    samples.sort();
    let mut parts = vec![format!("median {:.2} ms", as_ms(percentile(samples, 50.0)))];
    for p in percentiles.iter().filter(|p| **p != 50.0) {
        parts.push(format!("p{p} {:.2} ms", as_ms(percentile(samples, *p))));
    }
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    parts.push(format!("max {:.2} ms", as_ms(samples[samples.len() - 1])));
    parts.push(format!("min {:.2} ms", as_ms(samples[0])));
    parts.push(format!("mean {:.2} ms", as_ms(mean)));
    parts.push(format!("n = {}", samples.len()));
    parts.join(", ")
}

/// A Prometheus histogram: cumulative counts per upper bound (seconds), sum and count.
struct Histogram {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    fn parse(text: &str, name: &str) -> Histogram {
        let mut h = Histogram {
            buckets: Vec::new(),
            sum: 0.0,
            count: 0.0,
        };
        let bucket_prefix = format!("{name}_bucket{{le=\"");
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if let Some(le) = key
                .strip_prefix(&bucket_prefix)
                .and_then(|r| r.strip_suffix("\"}"))
            {
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::NAN)
                };
                h.buckets.push((le, value));
            } else if key == format!("{name}_sum") {
                h.sum = value;
            } else if key == format!("{name}_count") {
                h.count = value;
            }
        }
        h
    }

    /// The samples recorded between two scrapes.
    fn between(before: &str, after: &str, name: &str) -> Histogram {
        let (b, a) = (
            Histogram::parse(before, name),
            Histogram::parse(after, name),
        );
        Histogram {
            buckets: a
                .buckets
                .iter()
                .map(|(le, n)| {
                    (
                        *le,
                        n - b
                            .buckets
                            .iter()
                            .find(|(l, _)| l == le)
                            .map_or(0.0, |(_, m)| *m),
                    )
                })
                .collect(),
            sum: a.sum - b.sum,
            count: a.count - b.count,
        }
    }

    /// `histogram_quantile`: find the bucket holding the q-th sample and interpolate
    /// linearly inside it (from 0 for the first bucket).
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        let mut lower = (0.0, 0.0);
        for (le, cumulative) in &self.buckets {
            if *cumulative >= rank {
                if le.is_infinite() {
                    return Some(lower.0);
                }
                let in_bucket = cumulative - lower.1;
                let fraction = if in_bucket > 0.0 {
                    (rank - lower.1) / in_bucket
                } else {
                    1.0
                };
                return Some(lower.0 + (le - lower.0) * fraction);
            }
            lower = (*le, *cumulative);
        }
        None
    }

    fn describe(&self) -> String {
        match self.quantile(0.5) {
            None => "no samples".into(),
            Some(median) => {
                // The bucket bounds around the median, to show how coarse the estimate is.
                let rank = 0.5 * self.count;
                let mut low = 0.0;
                let mut high = f64::INFINITY;
                for (le, cumulative) in &self.buckets {
                    if *cumulative >= rank {
                        high = *le;
                        break;
                    }
                    low = *le;
                }
                format!(
                    "median ≈ {:.3} ms (bucket {:.2}–{:.2} ms), mean {:.3} ms, {} samples",
                    median * 1000.0,
                    low * 1000.0,
                    high * 1000.0,
                    self.sum / self.count * 1000.0,
                    self.count
                )
            }
        }
    }
}

fn build_kind() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

// ------------------------------------------------------------------------------------------
// The local cluster.

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `tenure server` child processes of this very binary, killed when dropped.
struct LocalCluster {
    dir: Option<tempfile::TempDir>,
    timing: Timing,
    addrs: BTreeMap<u64, [SocketAddr; 3]>,
    children: BTreeMap<u64, Child>,
    bin: PathBuf,
}

/// Ports below Linux's ephemeral range (32768 and up), so that no outgoing connection can
/// take the port of a node that is down for a restart.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let mut state = u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let (mut held, mut ports) = (Vec::new(), Vec::new());
    for _ in 0..10_000 {
        if ports.len() == n {
            return Ok(ports);
        }
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let port = 20_000 + ((state >> 33) % 12_000) as u16;
        if let Ok(l) = StdTcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            ports.push(port);
        }
    }
    bail!("cannot find {n} free loopback ports")
}

impl LocalCluster {
    fn start(timing: &Timing) -> anyhow::Result<LocalCluster> {
        if timing.nodes == 0 {
            bail!("--nodes must be positive");
        }
        let ports = free_ports(timing.nodes * 3)?;
        let addrs = (0..timing.nodes)
            .map(|i| {
                let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
                (
                    i as u64 + 1,
                    [a(ports[3 * i]), a(ports[3 * i + 1]), a(ports[3 * i + 2])],
                )
            })
            .collect();
        let dir = tempfile::Builder::new()
            .prefix("tenure-measure-")
            .tempdir()
            .context("create a temporary directory")?;
        let mut cluster = LocalCluster {
            dir: Some(dir),
            timing: timing.clone(),
            addrs,
            children: BTreeMap::new(),
            bin: std::env::current_exe().context("find this binary")?,
        };
        for id in cluster.ids() {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }

    fn ids(&self) -> Vec<u64> {
        self.addrs.keys().copied().collect()
    }

    fn dir(&self) -> PathBuf {
        self.dir
            .as_ref()
            .expect("the directory lives until finish")
            .path()
            .to_path_buf()
    }

    fn start_node(&mut self, id: u64) -> anyhow::Result<()> {
        let dir = self.dir();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("node-{id}.log")))
            .context("open a node log")?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("server")
            .args(["--id", &id.to_string()])
            .arg("--data-dir")
            .arg(dir.join(format!("node-{id}")))
            .args([
                "--election-timeout-ms",
                &self.timing.election_timeout_ms.to_string(),
            ])
            .args(["--heartbeat-ms", &self.timing.heartbeat_ms.to_string()])
            .args(["--tick-ms", &self.timing.tick_ms.to_string()]);
        for (n, [peer, client, http]) in &self.addrs {
            cmd.arg("--node").arg(format!("{n}={peer},{client},{http}"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().context("clone a log handle")?))
            .stderr(Stdio::from(log))
            .env("NO_COLOR", "1");
        // SAFETY: prctl is async-signal-safe; the nodes die with this process however it ends.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("start node {id}"))?;
        self.children.insert(id, child);
        Ok(())
    }

    fn signal(&self, id: u64, sig: libc::c_int) -> anyhow::Result<()> {
        let child = self
            .children
            .get(&id)
            .ok_or_else(|| anyhow!("node {id} is not running"))?;
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        if unsafe { libc::kill(child.id() as libc::pid_t, sig) } != 0 {
            bail!(
                "signal {sig} to node {id}: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(())
    }

    fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        self.signal(id, libc::SIGKILL)?;
        if let Some(mut child) = self.children.remove(&id) {
            let _ = child.wait();
        }
        Ok(())
    }

    fn channel(&self, id: u64, timeout: Duration) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addrs[&id][1]))
            .expect("a socket address makes a valid URI")
            .connect_timeout(ms(200))
            .timeout(timeout)
            .tcp_nodelay(true)
            .connect_lazy()
    }

    async fn status(&self, id: u64) -> Option<v1::StatusResponse> {
        let mut c = v1::cluster_client::ClusterClient::new(self.channel(id, ms(300)));
        c.status(v1::StatusRequest {})
            .await
            .ok()
            .map(tonic::Response::into_inner)
    }

    /// Wait until the nodes in `among` agree on a leader among them and a term.
    async fn wait_for_leader(&self, among: &[u64], within: Duration) -> anyhow::Result<(u64, u64)> {
        let deadline = Instant::now() + within;
        loop {
            let mut views = Vec::new();
            for id in among {
                views.push(self.status(*id).await);
            }
            if let Some(Some(first)) = views.first() {
                let agree = views.iter().all(|v| {
                    v.as_ref()
                        .is_some_and(|v| v.leader_id == first.leader_id && v.term == first.term)
                });
                let leader_leads = views
                    .iter()
                    .flatten()
                    .any(|v| v.id == first.leader_id && v.role == "leader");
                if agree && leader_leads {
                    return Ok((first.leader_id, first.term));
                }
            }
            if Instant::now() > deadline {
                bail!("nodes {among:?} agree on no leader within {within:?}");
            }
            tokio::time::sleep(ms(10)).await;
        }
    }

    /// Wait until `node` follows `leader` and has applied what the leader had committed.
    async fn wait_caught_up(&self, leader: u64, node: u64, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let target = loop {
            if let Some(s) = self.status(leader).await {
                break s.commit_index;
            }
            if Instant::now() > deadline {
                bail!("leader {leader} does not answer");
            }
            tokio::time::sleep(ms(10)).await;
        };
        loop {
            if let Some(s) = self.status(node).await {
                if s.leader_id == leader && s.applied_index >= target {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("node {node} did not catch up with leader {leader} within {within:?}");
            }
            tokio::time::sleep(ms(10)).await;
        }
    }

    async fn metrics(&self, id: u64) -> anyhow::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.addrs[&id][2];
        let exchange = async {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            s.write_all(
                format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await?;
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        let raw = tokio::time::timeout(secs(5), exchange)
            .await
            .map_err(|_| anyhow!("GET /metrics on node {id} timed out"))?
            .with_context(|| format!("GET /metrics on node {id}"))?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| anyhow!("node {id}: malformed HTTP response"))?;
        if !head.starts_with("HTTP/1.1 200") {
            bail!("node {id}: GET /metrics: {head}");
        }
        Ok(body.to_string())
    }

    /// Stop every node and delete (or keep) the directory.
    fn finish(mut self, keep: bool) {
        self.kill_all();
        if keep {
            if let Some(dir) = self.dir.take() {
                println!(
                    "kept the cluster's directory (data and logs): {}",
                    dir.keep().display()
                );
            }
        }
    }

    fn kill_all(&mut self) {
        for (_, mut child) in std::mem::take(&mut self.children) {
            // SIGKILL also ends a stopped process.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A session and a token for fenced writes to the election `measure`.
async fn writer_token(cluster: &LocalCluster, leader: u64) -> anyhow::Result<u64> {
    let channel = cluster.channel(leader, secs(5));
    let granted = v1::sessions_client::SessionsClient::new(channel.clone())
        .grant(v1::GrantRequest {
            ttl_ms: 3_600_000,
            ..Default::default()
        })
        .await
        .context("grant a session")?
        .into_inner();
    let token = v1::elections_client::ElectionsClient::new(channel)
        .campaign(v1::CampaignRequest {
            election: "measure".into(),
            session_id: granted.session_id,
            value: Vec::new(),
            session_secret: granted.session_secret,
            ..Default::default()
        })
        .await
        .context("campaign")?
        .into_inner()
        .token;
    Ok(token)
}
